"""In-process transport: every rank is a thread of one process (tests, notebooks, drawing).

Frames are copied into the receiving rank's inbox, a ``queue.SimpleQueue``; ``progress``
sleeps in its ``get`` (with the engine's lock released: ``FrameSink.sleep``), so an idle
rank costs nothing. The same engine, matching and collective code run as over TCP - only
the wire is different. An optional ``recorder`` sees every frame (used to draw schedules
of the real algorithm code).
"""
from __future__ import annotations

import queue
import threading
from typing import Callable, Dict, List, Optional, Sequence

from .base import FrameSink, OnSent, Transport
from .frames import HAS_PAYLOAD, Header, unpack

FrameRecorder = Callable[[int, int, Header], None]  # (source world rank, dest world rank, header)

#: what :meth:`InprocTransport.wake` puts in an inbox: not a frame, only the end of a sleep
_WAKE = None


class InprocFabric:
    """The shared "network" of one in-process job."""

    def __init__(self, size: int, recorder: Optional[FrameRecorder] = None) -> None:
        self.size = size
        self.recorder = recorder
        #: per rank, the frames sent to it: (source, header, payload), or _WAKE
        self.inboxes: List[queue.SimpleQueue] = [queue.SimpleQueue() for _ in range(size)]
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
        self._inbox = fabric.inboxes[rank]
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
        fabric.inboxes[peer].put((self.rank, header, data))
        if on_sent is not None:
            on_sent(None)

    def send_now(self, peer: int, header: bytes, payload: Sequence[memoryview],
                 nbytes: int) -> bool:
        fabric = self.fabric
        if fabric.closed[peer] or fabric.recorder is not None:
            return False         # (the general path says so / records the frame)
        fabric.inboxes[peer].put((self.rank, header, b"".join(payload)))   # (a copy)
        return True

    def progress(self, timeout: Optional[float]) -> bool:
        inbox = self._inbox
        items = []
        if inbox.empty():
            if timeout == 0:
                return False
            check = self._sleep_check
            if check is not None and check():   # (a peer wrote what the wait waits for)
                return False
            try:    # asleep in the queue, with the engine's lock released
                items.append(self._sink.sleep(inbox.get, True, timeout))
            except queue.Empty:
                return False
        while not inbox.empty():
            items.append(inbox.get_nowait())
        sink = self._sink
        moved = False
        for item in items:
            if item is _WAKE:
                continue
            source, raw, data = item
            header = unpack(raw)
            target = sink.frame_arrived(source, header)
            if header.kind in HAS_PAYLOAD:
                if header.length:
                    target[:header.length] = data
                sink.payload_arrived(source, header, target)
            moved = True
        return moved

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

    def host_memory(self) -> "InprocTransport":
        return self

    def wake_peers(self, peers: Sequence[int], fenced: bool = False) -> None:
        # (after the shared memory was written: a peer that looked before sleeps only until
        # this marker, one that looks after sees the memory)
        for peer in peers:
            self.fabric.inboxes[peer].put(_WAKE)

    def wake(self) -> None:
        self._inbox.put(_WAKE)

    def close(self) -> None:
        self.fabric.closed[self.rank] = True
