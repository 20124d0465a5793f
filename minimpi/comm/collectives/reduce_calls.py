"""The mpi4py-facing reduce methods of ``Intracomm``: arguments, buffers, ``IN_PLACE``.

The algorithms they run are :mod:`minimpi.coll.reduce`'s (chosen by the communicator's plan).
"""
from __future__ import annotations

from typing import Any

from ...coll.reduction import Operand
from ...constants import IN_PLACE
from ...data.buffers import parse_buffer
from ...data.ops import SUM
from .common import (
    Prepared,
    check_op,
    check_root,
    collective,
    execute,
    in_place,
    nothing,
    send_as_recv,
)


def Reduce(comm, sendbuf: Any, recvbuf: Any, op: Any = SUM, root: int = 0,
           algorithm: str = None) -> None:
    """Reduce every rank's ``sendbuf`` with ``op`` (default SUM) into the root's
    ``recvbuf`` (``MPI.IN_PLACE`` as the root's ``sendbuf``: its input is in ``recvbuf``)."""
    _reduce_buf(comm, sendbuf, recvbuf, op, root, algorithm, "Reduce", False)


def Ireduce(comm, sendbuf: Any, recvbuf: Any, op: Any = SUM, root: int = 0,
            algorithm: str = None):
    return _reduce_buf(comm, sendbuf, recvbuf, op, root, algorithm, "Ireduce", True)


@collective
def _reduce_buf(comm, sendbuf, recvbuf, op, root, algorithm, call, nonblocking):
    return prepare_reduce(comm, call, sendbuf, recvbuf, op, root, algorithm).execute(
        comm, nonblocking)


def prepare_reduce(comm, call: str, sendbuf: Any, recvbuf: Any, op: Any = SUM, root: int = 0,
                   algorithm: str = None) -> Prepared:
    """The call parsed and checked (:class:`~minimpi.comm.collectives.common.Prepared`)."""
    root = check_root(comm, root, call)
    op = check_op(comm, op, call)
    at_root = comm.rank == root
    send = parse_buffer(in_place(sendbuf) if at_root else sendbuf, writable=False, call=call,
                        arg="sendbuf", allow_in_place=at_root)
    recv = parse_buffer(recvbuf, writable=True, call=call, arg="recvbuf",
                        keep=send is IN_PLACE) if at_root else None
    # the root reduces into recvbuf, holding its input (copied from sendbuf unless
    # IN_PLACE, which None also means); elsewhere the input is sendbuf itself (read-only)
    acc, datatype = (recv.array, recv.datatype) if at_root else (send.array, send.datatype)
    own = send_as_recv(comm, call, send, recv) if at_root and send is not IN_PLACE else None
    op.check_datatype(datatype, call)

    def invoke(alg, ch):
        red = Operand(op, False, datatype, call)     # (one per call: it tracks the copy
        if own is not None:                          # a read-only input needs)
            acc[...] = own
        return alg(ch, red.on(ch), red.mine(acc, readonly=not at_root), root)
    return Prepared("reduce", call, acc.nbytes, invoke, op=op, root=root, algorithm=algorithm,
                    finalize=(lambda _: recv.finish()) if at_root else nothing,
                    datatype=datatype, specs=((sendbuf, send), (recvbuf, recv)))


def reduce(comm, sendobj: Any, op: Any = SUM, root: int = 0, algorithm: str = None) -> Any:
    """The root returns x0 (op) x1 (op) ... of every rank's ``sendobj``; others None."""
    return _reduce_obj(comm, sendobj, op, root, algorithm, "reduce", False)


def ireduce(comm, sendobj: Any, op: Any = SUM, root: int = 0, algorithm: str = None):
    return _reduce_obj(comm, sendobj, op, root, algorithm, "ireduce", True)


@collective
def _reduce_obj(comm, sendobj, op, root, algorithm, call, nonblocking):
    root = check_root(comm, root, call)
    op = check_op(comm, op, call)
    red = Operand(op, True, None, call)
    return execute(comm, "reduce", call, 0, lambda alg, ch: alg(ch, red.on(ch), sendobj, root),
                   op=op, root=root, algorithm=algorithm, objects=True, nonblocking=nonblocking)

