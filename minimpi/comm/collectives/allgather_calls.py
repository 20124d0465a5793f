"""The mpi4py-facing allgather methods of ``Intracomm``: arguments, buffers, ``IN_PLACE``.

The algorithms they run are :mod:`minimpi.coll.allgather`'s (chosen by the communicator's plan).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...coll.blocks import Blocks, as_bytes
from ...coll.fused import FusedAllgather
from ...constants import IN_PLACE
from ...data.buffers import parse_buffer, parse_vbuffer
from ...errors import CountError
from .common import Prepared, collective, execute, in_place, keep_fused


def Allgather(comm, sendbuf: Any, recvbuf: Any, algorithm: str = None) -> None:
    """Gather every rank's ``sendbuf`` into every ``recvbuf`` (p equal blocks, rank order).

    ``sendbuf`` may be ``MPI.IN_PLACE`` (this rank's block is already in ``recvbuf``).
    """
    plan = comm._plan             # (a hot path: the fused form is looked up inline)
    fused = plan.fused.get(("allgather", algorithm)) if plan is not None else None
    if fused is not None and not comm._freed and fused.run(in_place(sendbuf), recvbuf):
        return
    _allgather_buf(comm, sendbuf, recvbuf, algorithm, "Allgather", False, False)


def Iallgather(comm, sendbuf: Any, recvbuf: Any, algorithm: str = None):
    return _allgather_buf(comm, sendbuf, recvbuf, algorithm, "Iallgather", True, False)


def Allgatherv(comm, sendbuf: Any, recvbuf: Any, algorithm: str = None) -> None:
    """``Allgather`` with per-rank counts: ``recvbuf = [buf, (counts, displs), TYPE]``."""
    _allgather_buf(comm, sendbuf, recvbuf, algorithm, "Allgatherv", False, True)


def Iallgatherv(comm, sendbuf: Any, recvbuf: Any, algorithm: str = None):
    return _allgather_buf(comm, sendbuf, recvbuf, algorithm, "Iallgatherv", True, True)


@collective
def _allgather_buf(comm, sendbuf, recvbuf, algorithm, call, nonblocking, vector):
    return prepare_allgather(comm, call, sendbuf, recvbuf, algorithm, vector).execute(
        comm, nonblocking)


def prepare_allgather(comm, call: str, sendbuf: Any, recvbuf: Any, algorithm: str = None,
                      vector: bool = False) -> Prepared:
    """The call parsed and checked (:class:`~minimpi.comm.collectives.common.Prepared`)."""
    p, rank = comm.size, comm.rank
    recv = parse_vbuffer(recvbuf, p, writable=True, call=call, arg="recvbuf",
                         keep=in_place(sendbuf) is IN_PLACE)
    if not vector and len(set(recv.counts)) > 1:
        raise CountError(
            f"rank {rank}: {call}: recvbuf holds {recv.total_count} x {recv.datatype.name}, "
            f"which does not split into {p} equal blocks; give [buf, count, TYPE] with the "
            f"per-rank count, or use Allgatherv")
    send = parse_buffer(in_place(sendbuf), writable=False, call=call, arg="sendbuf",
                        allow_in_place=True)
    if send is not IN_PLACE:
        if send.nbytes != recv.block_nbytes(rank):
            raise CountError(
                f"rank {rank}: {call}: sendbuf has {send.count} x {send.datatype.name} "
                f"({send.nbytes} bytes) but this rank's block of recvbuf is "
                f"{recv.counts[rank]} x {recv.datatype.name} ({recv.block_nbytes(rank)} bytes)")
    own = None if send is IN_PLACE or not send.nbytes else \
        (as_bytes(recv.block(rank)), as_bytes(send.array))
    blocks = Blocks.of_vbuffer(recv)

    def invoke(alg, ch):
        if own is not None:                   # this rank's block: a local copy
            own[0][...] = own[1]
        return alg(ch, blocks)
    return Prepared("allgather", call, recv.total_count * recv.datatype.size, invoke,
                    algorithm=algorithm, finalize=lambda _: recv.finish(),
                    datatype=recv.datatype,
                    fuse=None if vector else (lambda compiled: _fuse(comm, compiled, recv,
                                                                     algorithm)),
                    specs=((sendbuf, send), (recvbuf, recv)))


def _fuse(comm, compiled, recv, algorithm) -> None:
    """After a blocking segment ``Allgather``, keep its fused form (:mod:`minimpi.coll.fused`)
    when the next calls can use it: a plain array of a predefined type, a block fitting a
    slot."""
    plan = comm._plan
    block = recv.counts[0] * recv.datatype.size
    if (recv.datatype.is_predefined and not recv.is_temporary
            and type(recv.array) is np.ndarray and block <= plan.segment_bytes):
        keep_fused(comm, ("allgather", algorithm),
                   FusedAllgather(compiled, plan.segment(comm._ep), recv.array.dtype,
                                  recv.counts[0]))


@collective
def allgather(comm, sendobj: Any, algorithm: str = None) -> list:
    """Gather every rank's Python object; every rank returns the list in rank order."""
    items = [None] * comm.size
    items[comm.rank] = sendobj
    return execute(comm, "allgather", "allgather", 0,
                   lambda alg, ch: alg(ch, Blocks(items=items)), algorithm=algorithm,
                   objects=True, finalize=lambda blocks: blocks.items)
