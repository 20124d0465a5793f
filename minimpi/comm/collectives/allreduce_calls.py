"""The mpi4py-facing allreduce methods of ``Intracomm``: arguments, buffers, ``IN_PLACE``.

The algorithms they run are :mod:`minimpi.coll.allreduce`'s (chosen by the communicator's plan).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...bus import Bus
from ...coll.fused import FusedAllreduce
from ...coll.reduction import Operand
from ...constants import IN_PLACE
from ...data.buffers import parse_buffer
from ...data.ops import SUM
from ...errors import MinimpiError
from ...front import hand_written, route
from .common import (
    Prepared,
    check_op,
    check_reduction,
    collective,
    execute,
    keep_fused,
)


def _Allreduce(comm, sendbuf: Any, recvbuf: Any, op: Any = SUM, algorithm: str = None) -> None:
    # the general path; the fused form too for a call published to its listeners (the
    # hand-written method tried it already otherwise)
    plan = comm._plan if Bus.call_listeners else None
    fused = plan.fused.get(("allreduce", id(op), algorithm)) if plan is not None else None
    if fused is not None and not comm._freed and fused.run(sendbuf, recvbuf):
        return
    _allreduce_buf(comm, sendbuf, recvbuf, op, algorithm, "Allreduce", False)


# a hand-written front method (front.hand_written): the fused call without the front's frame
_Allreduce_front, _own_front = hand_written(_Allreduce, "Allreduce")


@_own_front
def Allreduce(comm, sendbuf: Any, recvbuf: Any, op: Any = SUM, algorithm: str = None) -> None:
    """Reduce every rank's ``sendbuf`` with ``op`` (default SUM) into every ``recvbuf``.

    ``sendbuf`` may be ``MPI.IN_PLACE`` (the input is taken from ``recvbuf``).
    """
    plan = comm._plan             # (a hot path: the fused form is looked up inline)
    fused = plan.fused.get(("allreduce", id(op), algorithm)) if plan is not None else None
    if fused is not None and not comm._freed and not Bus.call_listeners:
        try:
            if fused.run(sendbuf, recvbuf):
                return
        except MinimpiError as exc:
            route(comm, exc)
            raise
    _Allreduce_front(comm, sendbuf, recvbuf, op, algorithm)


def Iallreduce(comm, sendbuf: Any, recvbuf: Any, op: Any = SUM, algorithm: str = None):
    return _allreduce_buf(comm, sendbuf, recvbuf, op, algorithm, "Iallreduce", True)


@collective
def _allreduce_buf(comm, sendbuf, recvbuf, op, algorithm, call, nonblocking):
    return prepare_allreduce(comm, call, sendbuf, recvbuf, op, algorithm).execute(
        comm, nonblocking)


def prepare_allreduce(comm, call: str, sendbuf: Any, recvbuf: Any, op: Any = SUM,
                      algorithm: str = None) -> Prepared:
    """The call parsed and checked (:class:`~minimpi.comm.collectives.common.Prepared`)."""
    op = check_op(comm, op, call)
    if sendbuf is None:                           # mpi4py: None means IN_PLACE here
        sendbuf = IN_PLACE
    recv = parse_buffer(recvbuf, writable=True, call=call, arg="recvbuf",
                        keep=sendbuf is IN_PLACE)
    send = parse_buffer(sendbuf, writable=False, call=call, arg="sendbuf",
                        allow_in_place=True)
    mine = check_reduction(comm, call, op, send, recv)
    nbytes = recv.nbytes

    def invoke(alg, ch):
        red = Operand(op, False, recv.datatype, ch.call).on(ch)
        if mine is None:
            return alg(ch, red, recv.array)
        if alg.reads_sendbuf:                     # no copy of the input into recvbuf
            return alg(ch, red, recv.array, contribution=mine)
        if nbytes:
            recv.array[...] = mine
        return alg(ch, red, recv.array)

    return Prepared("allreduce", call, nbytes, invoke, op=op, algorithm=algorithm,
                    datatype=recv.datatype, finalize=lambda _: recv.finish(),
                    fuse=lambda compiled: _fuse(comm, compiled, op, algorithm, recv),
                    specs=((recvbuf, recv), (sendbuf, send)))


def _fuse(comm, compiled, op, algorithm, recv) -> None:
    """After a blocking call whose compiled algorithm meets in the shared segment, keep its
    fused form (:mod:`minimpi.coll.fused`) when the next calls can use it: a plain array
    of a predefined type fitting a slot, an op numpy applies elementwise."""
    ufunc = op.elementwise_ufunc
    array = recv.array
    plan = comm._plan
    if (ufunc is not None and recv.datatype.is_predefined and not recv.is_temporary
            and type(array) is np.ndarray and compiled.nbytes <= plan.segment_bytes):
        keep_fused(comm, ("allreduce", id(op), algorithm),
                   FusedAllreduce(compiled, plan.segment(comm._ep), array.dtype, array.size,
                                  ufunc))


@collective
def allreduce(comm, sendobj: Any, op: Any = SUM, algorithm: str = None) -> Any:
    """Reduce every rank's Python object with ``op`` (default SUM); every rank returns it."""
    op = check_op(comm, op, "allreduce")
    return execute(comm, "allreduce", "allreduce", 0,
                   lambda alg, ch: alg(ch, Operand(op, True, None, ch.call).on(ch), sendobj), op=op,
                   algorithm=algorithm, objects=True)

