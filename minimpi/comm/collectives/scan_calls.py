"""The mpi4py-facing scan methods of ``Intracomm``: arguments, buffers, ``IN_PLACE``.

The algorithms they run are :mod:`minimpi.coll.scan`'s (chosen by the communicator's plan).
"""
from __future__ import annotations

from typing import Any

from ...coll.cost import default_model
from ...coll.reduction import Operand
from ...constants import IN_PLACE
from ...data.buffers import parse_buffer
from ...data.ops import SUM
from .common import Prepared, check_op, collective, execute, in_place, send_as_recv


def Scan(comm, sendbuf: Any, recvbuf: Any, op: Any = SUM, algorithm: str = None) -> None:
    """Rank r's ``recvbuf`` = x0 (op) ... (op) xr (``MPI.IN_PLACE``: input in recvbuf)."""
    _scan_buf(comm, sendbuf, recvbuf, op, algorithm, "scan", "Scan", False)


def Iscan(comm, sendbuf: Any, recvbuf: Any, op: Any = SUM, algorithm: str = None):
    return _scan_buf(comm, sendbuf, recvbuf, op, algorithm, "scan", "Iscan", True)


def Exscan(comm, sendbuf: Any, recvbuf: Any, op: Any = SUM, algorithm: str = None) -> None:
    """Rank r's ``recvbuf`` = x0 (op) ... (op) x[r-1]; rank 0's is left untouched."""
    _scan_buf(comm, sendbuf, recvbuf, op, algorithm, "exscan", "Exscan", False)


def Iexscan(comm, sendbuf: Any, recvbuf: Any, op: Any = SUM, algorithm: str = None):
    return _scan_buf(comm, sendbuf, recvbuf, op, algorithm, "exscan", "Iexscan", True)


@collective
def _scan_buf(comm, sendbuf, recvbuf, op, algorithm, collective, call, nonblocking):
    return prepare_scan(comm, call, sendbuf, recvbuf, op, algorithm, collective).execute(
        comm, nonblocking)


def prepare_scan(comm, call: str, sendbuf: Any, recvbuf: Any, op: Any = SUM,
                 algorithm: str = None, collective: str = "scan") -> Prepared:
    """The call parsed and checked (:class:`~minimpi.comm.collectives.common.Prepared`);
    ``collective``: "scan" or "exscan"."""
    op = check_op(comm, op, call)
    recv = parse_buffer(recvbuf, writable=True, call=call, arg="recvbuf",
                        keep=in_place(sendbuf) is IN_PLACE)
    send = parse_buffer(in_place(sendbuf), writable=False, call=call, arg="sendbuf",
                        allow_in_place=True)
    data = None if send is IN_PLACE else send_as_recv(comm, call, send, recv)
    op.check_datatype(recv.datatype, call)
    segment = default_model().segment

    def invoke(alg, ch):
        red = Operand(op, False, recv.datatype, call).on(ch)
        # IN_PLACE: the input is recvbuf's contents at the start of the call
        return alg(ch, red, recv.array.copy() if data is None else data, recv.array, segment)
    return Prepared(collective, call, recv.nbytes, invoke, op=op, algorithm=algorithm,
                    datatype=recv.datatype, finalize=lambda _: recv.finish(),
                    specs=((sendbuf, send), (recvbuf, recv)))


def scan(comm, sendobj: Any, op: Any = SUM, algorithm: str = None) -> Any:
    """Rank r returns x0 (op) ... (op) xr of the ranks' ``sendobj``."""
    return _scan_obj(comm, sendobj, op, algorithm, "scan", "scan", False)


def iscan(comm, sendobj: Any, op: Any = SUM, algorithm: str = None):
    return _scan_obj(comm, sendobj, op, algorithm, "scan", "iscan", True)


def exscan(comm, sendobj: Any, op: Any = SUM, algorithm: str = None) -> Any:
    """Rank r returns x0 (op) ... (op) x[r-1]; rank 0 returns None."""
    return _scan_obj(comm, sendobj, op, algorithm, "exscan", "exscan", False)


def iexscan(comm, sendobj: Any, op: Any = SUM, algorithm: str = None):
    return _scan_obj(comm, sendobj, op, algorithm, "exscan", "iexscan", True)


@collective
def _scan_obj(comm, sendobj, op, algorithm, collective, call, nonblocking):
    op = check_op(comm, op, call)
    red = Operand(op, True, None, call)
    segment = default_model().segment
    return execute(comm, collective, call, 0,
                   lambda alg, ch: alg(ch, red.on(ch), sendobj, None, segment), op=op,
                   algorithm=algorithm, objects=True, nonblocking=nonblocking)
