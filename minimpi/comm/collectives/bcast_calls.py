"""The mpi4py-facing bcast methods of ``Intracomm``: arguments, buffers, ``IN_PLACE``.

The algorithms they run are :mod:`minimpi.coll.bcast`'s (chosen by the communicator's plan).
"""
from __future__ import annotations

from typing import Any

from ...bus import Bus
from ...coll.fused import FusedBcast
from ...data.buffers import parse_buffer
from ...errors import MinimpiError
from ...front import hand_written, route
from .common import Prepared, check_root, collective, execute, keep_fused


def _Bcast(comm, buf: Any, root: int = 0, algorithm: str = None) -> None:
    # the general path; the fused form too for a call published to its listeners (the
    # hand-written method tried it already otherwise)
    plan = comm._plan if Bus.call_listeners else None
    fused = plan.fused.get(("bcast", root, algorithm)) if plan is not None else None
    if fused is not None and not comm._freed and fused.run(buf):
        return
    _ibcast(comm, buf, root, algorithm, "Bcast", False)


# a hand-written front method (front.hand_written): the fused call without the front's frame
_Bcast_front, _own_front = hand_written(_Bcast, "Bcast")


@_own_front
def Bcast(comm, buf: Any, root: int = 0, algorithm: str = None) -> None:
    """Broadcast the root's buffer into every rank's ``buf`` (``algorithm``: see registry)."""
    plan = comm._plan             # (a hot path: the fused form is looked up inline)
    fused = plan.fused.get(("bcast", root, algorithm)) if plan is not None else None
    if fused is not None and not comm._freed and not Bus.call_listeners:
        try:
            if fused.run(buf):
                return
        except MinimpiError as exc:
            route(comm, exc)
            raise
    _Bcast_front(comm, buf, root, algorithm)


def Ibcast(comm, buf: Any, root: int = 0, algorithm: str = None):
    return _ibcast(comm, buf, root, algorithm, "Ibcast", True)


@collective
def _ibcast(comm, buf, root, algorithm, call, nonblocking):
    return prepare_bcast(comm, call, buf, root, algorithm).execute(comm, nonblocking)


def prepare_bcast(comm, call: str, buf: Any, root: int = 0, algorithm: str = None) -> Prepared:
    """The call parsed and checked (:class:`~minimpi.comm.collectives.common.Prepared`)."""
    root = check_root(comm, root, call)
    spec = parse_buffer(buf, writable=comm.rank != root, call=call, arg="buf")
    return Prepared("bcast", call, spec.nbytes, lambda alg, ch: alg(ch, spec.array, root),
                    root=root, algorithm=algorithm, finalize=lambda _: spec.finish(),
                    datatype=spec.datatype,
                    fuse=lambda compiled: _fuse(comm, compiled, spec, root, algorithm),
                    specs=((buf, spec),))


def _fuse(comm, compiled, spec, root, algorithm) -> None:
    """After a blocking segment call, keep its fused form (:mod:`minimpi.coll.fused`) when
    the next calls can use it: a plain array of a predefined type fitting a slot."""
    plan = comm._plan
    if (spec.datatype.is_predefined and not spec.is_temporary
            and spec.nbytes <= plan.segment_bytes):
        keep_fused(comm, ("bcast", root, algorithm),
                   FusedBcast(compiled, plan.segment(comm._ep), spec.array.dtype,
                              spec.nbytes, root))


def bcast(comm, obj: Any = None, root: int = 0, algorithm: str = None) -> Any:
    """Broadcast a Python object from ``root``; every rank returns it."""
    return _bcast_obj(comm, obj, root, algorithm, "bcast", False)


def ibcast(comm, obj: Any = None, root: int = 0, algorithm: str = None):
    return _bcast_obj(comm, obj, root, algorithm, "ibcast", True)


@collective
def _bcast_obj(comm, obj, root, algorithm, call, nonblocking):
    root = check_root(comm, root, call)
    return execute(comm, "bcast", call, 0,
                   lambda alg, ch: alg(ch, obj if comm.rank == root else None, root),
                   root=root, algorithm=algorithm, objects=True, nonblocking=nonblocking)
