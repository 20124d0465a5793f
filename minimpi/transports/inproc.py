"""In-process transport: every rank is a thread of one process (tests, notebooks, drawing).

Frames are copied into the receiving rank's inbox, a ``queue.SimpleQueue``; ``progress``
sleeps in its ``get`` (with the engine's lock released: ``FrameSink.sleep``), so an idle
rank costs nothing. The same engine, matching and collective code run as over TCP - only
the wire is different. An optional ``recorder`` sees every frame (used to draw schedules
of the real algorithm code).
"""
from __future__ import annotations

import queue
from typing import Callable, List, Optional, Sequence

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

    def progress(self, timeout: Optional[float]) -> bool:
        inbox = self._inbox
        items = []
        if inbox.empty():
            if timeout == 0:
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

    def wake(self) -> None:
        self._inbox.put(_WAKE)

    def close(self) -> None:
        self.fabric.closed[self.rank] = True
