"""``Put``/``Get`` as RDMA writes and reads into a peer's registered window (verbs).

When a window is made, every rank whose transport reaches some peer over verbs registers its
window memory for remote reads and writes (``VerbsTransport.expose``) and the window's
``allgather`` of facts carries each rank's ``(address, rkey)``. A contiguous ``Put`` (``Get``)
to such a peer is then one RDMA_WRITE (RDMA_READ) work request: the target's CPU takes no part.
Its request completes when the device reports the work completion - for a write, the bytes
are in the target's memory - so a flush, ``Unlock``, ``Fence`` or ``Complete`` just waits for
it, and no acknowledgement message is needed.

Everything else stays a request served by the target (:mod:`.am`): accumulates (their
atomicity against other accumulates is the target server's), non-contiguous target layouts,
dynamic windows, peers reached by another transport, and memory the device would not
register. Passive target: the lock is still a message to the target's server, and an
operation waits for its grant before it is posted (as straight copies do).

Cost: one work request and one registration-cache lookup per operation (the origin buffer is
registered once and reused while the cache keeps it); the bytes move without a copy.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from ..p2p.request import Request, TransportRequest, set_finish

#: a rank's window as its peers reach it: (address, rkey), or None
Remote = Optional[Tuple[int, int]]


def transport_of(endpoint: Any) -> Optional[Any]:
    """The verbs transport under ``endpoint`` (alone, or a member of a router), or None."""
    transport = endpoint.engine.transport
    member = getattr(transport, "member", None)
    if member is not None:          # a router (even one of verbs alone, also named "verbs")
        return member("verbs")
    return transport if getattr(transport, "name", None) == "verbs" else None


class RdmaRequest(TransportRequest):
    """The request of one RDMA write or read: complete when its work completion is in (the
    transport calls ``transport_done``)."""

    __slots__ = ("_reply",)

    def __init__(self, engine: Any, description: tuple) -> None:
        super().__init__(engine, description)
        self._reply = None           # (what Origin's bookkeeping asks of every tracked request)


class Windows:
    """This rank's side of one window's RDMA: its own exposed memory and its peers'."""

    def __init__(self, transport: Optional[Any], exposure: Optional[Any]) -> None:
        self.transport = transport
        self.exposure = exposure
        #: window rank -> (world rank, address, rkey) of the peers reached by RDMA
        self.targets: Dict[int, Tuple[int, int, int]] = {}

    @classmethod
    def expose(cls, endpoint: Any, memory: np.ndarray, wanted: bool) -> "Windows":
        """Register ``memory`` (this rank's window) when ``wanted`` and some peer of the
        window is reached over verbs."""
        transport = transport_of(endpoint) if wanted else None
        if transport is None or not memory.size or not any(
                transport.reaches(w) for r, w in enumerate(endpoint.group) if r != endpoint.rank):
            return cls(transport, None)
        return cls(transport, transport.expose(memoryview(memory)))

    @property
    def remote(self) -> Remote:
        """What this rank's peers need to reach its window (the allgathered fact)."""
        e = self.exposure
        return (int(e.addr), int(e.rkey)) if e is not None else None

    def connect(self, endpoint: Any, remotes: Sequence[Remote]) -> None:
        """Note the peers to reach by RDMA: those of every rank's fact (``remotes``) that
        exposed a window and that this rank reaches over verbs."""
        t = self.transport
        if t is None:
            return
        for r, remote in enumerate(remotes):
            world = endpoint.group[r]
            if remote is not None and r != endpoint.rank and t.reaches(world):
                self.targets[r] = (world, remote[0], remote[1])

    def post(self, s: Any, rank: int, start: int, local: memoryview, write: bool,
             call: str, finish: Any = None) -> Optional[Request]:
        """Post a write of ``local`` to byte ``start`` of ``rank``'s window (or a read from
        there into ``local``); its request, tracked for the flushes, or None when the
        transport declined (the caller sends a request instead). ``finish``: run when the
        request is completed (a read's scatter into a non-contiguous origin)."""
        world, addr, rkey = self.targets[rank]
        s.wait_for_grant(rank, call)           # a lock asked of it must be ours first
        req = RdmaRequest(s.endpoint.engine, (f"Win.{call}", "target", rank, 0,
                                              f"window {s.label} (RDMA)"))
        if finish is not None:
            set_finish(req, finish)
        if not self.transport.reaches(world) or not self.transport.rdma(
                world, write, local, addr + start, rkey, req.transport_done):
            return None
        return s.origin.track(rank, req)

    def close(self) -> None:
        """Deregister this rank's window (after the window's final barrier)."""
        if self.exposure is not None and self.transport is not None:
            self.transport.unexpose(self.exposure)
        self.exposure = None
        self.targets = {}
