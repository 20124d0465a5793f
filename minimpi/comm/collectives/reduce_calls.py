"""The mpi4py-facing reduce methods of ``Intracomm``: arguments, buffers, ``IN_PLACE``.

The algorithms they run are :mod:`minimpi.coll.reduce`'s (chosen by the communicator's plan).
"""
from __future__ import annotations

from typing import Any

from ...coll.reduction import Operand
from ...constants import IN_PLACE
from ...data.buffers import parse_buffer
from ...data.ops import SUM
from .common import check_op, check_root, collective, execute, in_place, send_as_recv


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
    root = check_root(comm, root, call)
    op = check_op(comm, op, call)
    at_root = comm.rank == root
    acc, datatype, finish = _reduce_operands(comm, sendbuf, recvbuf, call, use_recv=at_root)
    op.check_datatype(datatype, call)
    red = Operand(op, False, datatype, call)
    acc = red.mine(acc, readonly=not at_root)
    return execute(comm, "reduce", call, acc.nbytes,
                   lambda alg, ch: alg(ch, red.on(ch), acc, root), op=op, root=root, algorithm=algorithm,
                   nonblocking=nonblocking, finalize=lambda _: finish(), datatype=datatype)


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


def _reduce_operands(comm: Any, sendbuf: Any, recvbuf: Any, call: str, *, use_recv: bool):
    """(accumulator, datatype, finish): with ``use_recv`` (the root) the accumulator is the receive
    buffer holding this rank's input (copied from ``sendbuf`` unless ``IN_PLACE``, which
    ``None`` also means); elsewhere, the send buffer itself (read-only; ``recvbuf`` is
    ignored)."""
    send = parse_buffer(in_place(sendbuf) if use_recv else sendbuf, writable=False, call=call, arg="sendbuf",
                        allow_in_place=use_recv)
    if not use_recv:
        return send.array, send.datatype, lambda: None
    recv = parse_buffer(recvbuf, writable=True, call=call, arg="recvbuf", keep=send is IN_PLACE)
    if send is not IN_PLACE:
        recv.array[...] = send_as_recv(comm, call, send, recv)
    return recv.array, recv.datatype, recv.finish
