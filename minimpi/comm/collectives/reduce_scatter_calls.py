"""The mpi4py-facing reduce_scatter methods of ``Intracomm``: arguments, buffers, ``IN_PLACE``.

The algorithms they run are :mod:`minimpi.coll.reduce_scatter`'s (chosen by the communicator's plan).
"""
from __future__ import annotations

from typing import Any

from ...coll.reduction import Operand
from ...constants import IN_PLACE
from ...data.buffers import int_list, parse_buffer
from ...data.ops import SUM
from ...errors import CountError, DatatypeError
from .common import Prepared, check_op, collective, in_place, same_datatype


def Reduce_scatter(comm, sendbuf: Any, recvbuf: Any, recvcounts: Any = None, op: Any = SUM,
                   algorithm: str = None) -> None:
    """Reduce ``sendbuf`` (sum(recvcounts) items) over all ranks with ``op``; rank r gets
    the ``recvcounts[r]`` items of block r in ``recvbuf``.

    ``recvcounts=None``: each rank's ``recvbuf`` count (gathered from all ranks, as in
    mpi4py). ``sendbuf=MPI.IN_PLACE``: the input is taken from ``recvbuf`` (which must
    then hold the whole vector) and the result is stored at its start.
    """
    _reduce_scatter(comm, sendbuf, recvbuf, recvcounts, op, algorithm, "Reduce_scatter",
                         False, False)


def Ireduce_scatter(comm, sendbuf: Any, recvbuf: Any, recvcounts: Any = None,
                    op: Any = SUM, algorithm: str = None):
    return _reduce_scatter(comm, sendbuf, recvbuf, recvcounts, op, algorithm,
                                "Ireduce_scatter", True, False)


def Reduce_scatter_block(comm, sendbuf: Any, recvbuf: Any, op: Any = SUM,
                         algorithm: str = None) -> None:
    """``Reduce_scatter`` with equal blocks: ``sendbuf`` holds p x ``recvbuf``'s count.

    With ``MPI.IN_PLACE``, ``recvbuf`` holds the whole input (p blocks) and block r of
    the result is stored at its start.
    """
    _reduce_scatter(comm, sendbuf, recvbuf, None, op, algorithm, "Reduce_scatter_block",
                         False, True)


def Ireduce_scatter_block(comm, sendbuf: Any, recvbuf: Any, op: Any = SUM,
                          algorithm: str = None):
    return _reduce_scatter(comm, sendbuf, recvbuf, None, op, algorithm,
                                "Ireduce_scatter_block", True, True)


@collective
def _reduce_scatter(comm, sendbuf, recvbuf, recvcounts, op, algorithm, call, nonblocking,
                    block):
    return prepare_reduce_scatter(comm, call, sendbuf, recvbuf, recvcounts, op, algorithm,
                                  block).execute(comm, nonblocking)


def prepare_reduce_scatter(comm, call: str, sendbuf: Any, recvbuf: Any, recvcounts: Any = None,
                           op: Any = SUM, algorithm: str = None,
                           block: bool = False) -> Prepared:
    """The call parsed and checked (:class:`~minimpi.comm.collectives.common.Prepared`);
    ``block``: ``Reduce_scatter_block``."""
    p, rank = comm.size, comm.rank
    op = check_op(comm, op, call)
    recv = parse_buffer(recvbuf, writable=True, call=call, arg="recvbuf",
                        keep=in_place(sendbuf) is IN_PLACE)
    send = parse_buffer(in_place(sendbuf), writable=False, call=call, arg="sendbuf",
                        allow_in_place=True)
    op.check_datatype(recv.datatype, call)
    inplace = send is IN_PLACE
    if block:
        if inplace:
            if recv.count % p:
                raise CountError(
                    f"rank {rank}: {call}(MPI.IN_PLACE): recvbuf holds the whole input, "
                    f"{recv.count} x {recv.datatype.name}, which does not split into {p} "
                    f"equal blocks")
            counts = [recv.count // p] * p
        else:
            counts = [recv.count] * p
    elif recvcounts is None:
        if inplace:
            raise CountError(f"rank {rank}: {call}(MPI.IN_PLACE) needs explicit recvcounts")
        counts = comm.allgather(recv.count)
    else:
        counts = int_list(recvcounts, "recvcounts", p, call, "recvcounts")
    total = sum(counts)
    if inplace:
        if recv.count != total:
            raise CountError(
                f"rank {rank}: {call}(MPI.IN_PLACE): recvbuf holds the input and must have "
                f"sum(recvcounts) = {total} x {recv.datatype.name}, not {recv.count}")
    else:
        if not same_datatype(send.datatype, recv.datatype):
            raise DatatypeError(
                f"rank {rank}: {call}: sendbuf has datatype {send.datatype.name} but "
                f"recvbuf has {recv.datatype.name}; a reduction needs the same datatype")
        if send.count != total:
            raise CountError(
                f"rank {rank}: {call}: sendbuf has {send.count} x {send.datatype.name} but "
                f"the blocks of all ranks add up to {total}")
        if recv.count < counts[rank]:
            raise CountError(
                f"rank {rank}: {call}: recvbuf has {recv.count} x {recv.datatype.name}, "
                f"fewer than this rank's block (recvcounts[{rank}]) of {counts[rank]}")
    k = recv.datatype.base_count
    elems = [c * k for c in counts]
    out = recv.array[:elems[rank]]

    def invoke(alg, ch):
        # IN_PLACE: the input is a copy of recvbuf (the result overwrites its start)
        vector = recv.array.copy() if inplace else send.array
        return alg(ch, Operand(op, False, recv.datatype, ch.call).on(ch), vector, out, elems)
    return Prepared("reduce_scatter", call, total * recv.datatype.size, invoke,
                    datatype=recv.datatype, op=op, algorithm=algorithm,
                    finalize=lambda _: recv.finish(), specs=((sendbuf, send), (recvbuf, recv)))
