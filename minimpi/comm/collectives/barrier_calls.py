"""The mpi4py-facing barrier methods of ``Intracomm``: arguments, buffers, ``IN_PLACE``.

The algorithms they run are :mod:`minimpi.coll.barrier`'s (chosen by the communicator's plan).
"""
from __future__ import annotations

from typing import Any

from ...bus import Bus
from ...coll.fused import FusedBarrier
from ...errors import MinimpiError
from ...front import hand_written, route
from .common import Prepared, collective, keep_fused


def _Barrier(comm, algorithm: str = None) -> None:
    # the general path; the fused form too for a call published to its listeners (the
    # hand-written method tried it already otherwise)
    plan = comm._plan if Bus.call_listeners else None
    fused = plan.fused.get(("barrier", 0, algorithm)) if plan is not None else None
    if fused is not None and not comm._freed and fused.run():
        return
    _barrier(comm, "Barrier", algorithm, False)


# a hand-written front method (front.hand_written): the fused call without the front's frame
_Barrier_front, _own_front = hand_written(_Barrier, "Barrier")


@_own_front
def Barrier(comm, algorithm: str = None) -> None:
    """Block until every rank of the communicator has called Barrier."""
    plan = comm._plan             # (a hot path: the fused form is looked up inline)
    fused = plan.fused.get(("barrier", 0, algorithm)) if plan is not None else None
    if fused is not None and not comm._freed and not Bus.call_listeners:
        try:
            if fused.run():
                return
        except MinimpiError as exc:
            route(comm, exc)
            raise
    _Barrier_front(comm, algorithm)


def barrier(comm, algorithm: str = None) -> None:
    _barrier(comm, "barrier", algorithm, False)


def Ibarrier(comm, algorithm: str = None):
    return _barrier(comm, "Ibarrier", algorithm, True)


def ibarrier(comm, algorithm: str = None):
    return _barrier(comm, "ibarrier", algorithm, True)


@collective
def _barrier(comm, call: str, algorithm: Any, nonblocking: bool):
    return prepare_barrier(comm, call, algorithm).execute(comm, nonblocking)


def prepare_barrier(comm, call: str, algorithm: str = None) -> Prepared:
    """The call (:class:`~minimpi.comm.collectives.common.Prepared`)."""
    return Prepared("barrier", call, 0, lambda alg, ch: alg(ch), algorithm=algorithm,
                    fuse=lambda compiled: keep_fused(   # the fused form for the next calls
                        comm, ("barrier", 0, algorithm),
                        FusedBarrier(compiled, comm._plan.segment(comm._ep)))
                    if call == "Barrier" else None)
