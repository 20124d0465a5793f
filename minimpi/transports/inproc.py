"""In-process transport: every rank is a thread of one process (tests, notebooks, drawing).

Frames are copied into the receiving rank's inbox under a condition variable; ``progress``
sleeps on that condition, so an idle rank costs nothing. The same engine, matching and
collective code run as over TCP - only the wire is different. An optional ``recorder``
sees every frame (used to draw schedules of the real algorithm code).
"""
from __future__ import annotations

import collections
import threading
from typing import Callable, Deque, Dict, List, Optional, Sequence, Tuple

from .base import FrameSink, OnSent, Transport
from .frames import HAS_PAYLOAD, Header, unpack

FrameRecorder = Callable[[int, int, Header], None]  # (source world rank, dest world rank, header)


class InprocFabric:
    """The shared "network" of one in-process job."""

    def __init__(self, size: int, recorder: Optional[FrameRecorder] = None) -> None:
        self.size = size
        self.recorder = recorder
        self.inboxes: List[Deque[Tuple[int, bytes, bytes]]] = [collections.deque() for _ in range(size)]
        self.conditions = [threading.Condition() for _ in range(size)]
        self.closed = [False] * size
        #: segments the ranks share (:meth:`InprocTransport.shared_segment`), by key
        self.segments: Dict[str, bytearray] = {}
        self._segments_lock = threading.Lock()

    def transport(self, rank: int) -> "InprocTransport":
        return InprocTransport(self, rank)


class InprocTransport(Transport):
    name = "inproc"

    def __init__(self, fabric: InprocFabric, rank: int) -> None:
        self.fabric = fabric
        self.rank = rank
        self.size = fabric.size
        self._sink: Optional[FrameSink] = None
        self._sleep_check: Optional[Callable[[], bool]] = None

    def attach(self, sink: FrameSink) -> None:
        self._sink = sink

    def listen(self) -> str:
        return f"inproc:{self.rank}"

    def set_peers(self, addresses: Sequence[str]) -> None:
        pass

    def send(self, peer: int, header: bytes, payload: Sequence[memoryview], on_sent: OnSent) -> None:
        fabric = self.fabric
        if fabric.closed[peer]:
            if on_sent is not None:
                on_sent(f"rank {peer} has finished")
            return
        data = b"".join(payload)  # copy: the sender may reuse its buffer once on_sent ran
        if fabric.recorder is not None:
            fabric.recorder(self.rank, peer, unpack(header))
        cond = fabric.conditions[peer]
        with cond:
            fabric.inboxes[peer].append((self.rank, header, data))
            cond.notify()
        if on_sent is not None:
            on_sent(None)

    def progress(self, timeout: Optional[float]) -> bool:
        fabric = self.fabric
        inbox = fabric.inboxes[self.rank]
        cond = fabric.conditions[self.rank]
        check = self._sleep_check
        with cond:     # (a peer that wrote shared memory notifies under this condition)
            if not inbox and timeout != 0 and not (check is not None and check()):
                cond.wait(timeout)
            items = list(inbox)
            inbox.clear()
        sink = self._sink
        for source, raw, data in items:
            header = unpack(raw)
            target = sink.frame_arrived(source, header)
            if header.kind in HAS_PAYLOAD:
                if header.length:
                    target[:header.length] = data
                sink.payload_arrived(source, header, target)
        return bool(items)

    # -- memory the ranks share (a communicator's collective segment) -----------------------
    def set_sleep_check(self, check: Optional[Callable[[], bool]]) -> None:
        self._sleep_check = check

    def shared_segment(self, key: str, nbytes: int) -> Optional[memoryview]:
        fabric = self.fabric
        with fabric._segments_lock:
            seg = fabric.segments.get(key)
            if seg is None or len(seg) < nbytes:
                seg = fabric.segments[key] = bytearray(nbytes)
        return memoryview(seg)

    def release_segment(self, key: str) -> None:
        pass      # (process memory: it goes with the last reference)

    def forget_segment(self, key: str, mem: memoryview) -> None:
        fabric = self.fabric
        with fabric._segments_lock:
            if fabric.segments.get(key) is mem.obj:   # not a new communicator's already
                del fabric.segments[key]

    def wake_peers(self, peers: Sequence[int]) -> None:
        for peer in peers:
            cond = self.fabric.conditions[peer]
            with cond:
                cond.notify_all()

    def wake(self) -> None:
        cond = self.fabric.conditions[self.rank]
        with cond:
            cond.notify_all()

    def close(self) -> None:
        self.fabric.closed[self.rank] = True
