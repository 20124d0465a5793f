"""The mpi4py-facing alltoall methods of ``Intracomm``: arguments, buffers, ``IN_PLACE``.

The algorithms they run are :mod:`minimpi.coll.alltoall`'s (chosen by the communicator's plan).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...coll.blocks import Blocks, as_bytes, running_sum
from ...coll.fused import FusedAlltoall
from ...constants import IN_PLACE
from ...data.buffers import parse_vbuffer, parse_wbuffer
from ...errors import CountError
from .common import Prepared, collective, execute, in_place, keep_fused, nothing


def _packed(blocks: Any, counts: Any) -> Blocks:
    """Byte blocks copied back to back into one array."""
    array = np.concatenate([np.asarray(b, np.uint8).reshape(-1) for b in blocks]) \
        if blocks else np.empty(0, np.uint8)
    return Blocks(array, counts, running_sum(counts)[:-1])


def Alltoall(comm, sendbuf: Any, recvbuf: Any, algorithm: str = None) -> None:
    """Send block j of ``sendbuf`` to rank j; receive rank i's block into block i of
    ``recvbuf`` (p equal blocks each). ``sendbuf`` may be ``MPI.IN_PLACE``."""
    plan = comm._plan             # (a hot path: the fused form is looked up inline)
    fused = plan.fused.get(("alltoall", algorithm)) if plan is not None else None
    if fused is not None and not comm._freed and fused.run(sendbuf, recvbuf):
        return
    _alltoall_buf(comm, sendbuf, recvbuf, algorithm, "Alltoall", False, False)


def Ialltoall(comm, sendbuf: Any, recvbuf: Any, algorithm: str = None):
    return _alltoall_buf(comm, sendbuf, recvbuf, algorithm, "Ialltoall", True, False)


def Alltoallv(comm, sendbuf: Any, recvbuf: Any, algorithm: str = None) -> None:
    """``Alltoall`` with per-rank counts: ``[buf, (counts, displs), TYPE]`` on both sides;
    ``sendcounts[j]`` here must equal ``recvcounts[i]`` on rank j."""
    _alltoall_buf(comm, sendbuf, recvbuf, algorithm, "Alltoallv", False, True)


def Ialltoallv(comm, sendbuf: Any, recvbuf: Any, algorithm: str = None):
    return _alltoall_buf(comm, sendbuf, recvbuf, algorithm, "Ialltoallv", True, True)


@collective
def _alltoall_buf(comm, sendbuf, recvbuf, algorithm, call, nonblocking, vector):
    return prepare_alltoall(comm, call, sendbuf, recvbuf, algorithm, vector).execute(
        comm, nonblocking)


def prepare_alltoall(comm, call: str, sendbuf: Any, recvbuf: Any, algorithm: str = None,
                     vector: bool = False) -> Prepared:
    """The call parsed and checked (:class:`~minimpi.comm.collectives.common.Prepared`)."""
    p, rank = comm.size, comm.rank
    recv = parse_vbuffer(recvbuf, p, writable=True, call=call, arg="recvbuf",
                         keep=in_place(sendbuf) is IN_PLACE)
    send = parse_vbuffer(in_place(sendbuf), p, writable=False, call=call, arg="sendbuf",
                         allow_in_place=True)
    rblocks = Blocks.of_vbuffer(recv)
    if send is IN_PLACE:      # sends from a copy of recvbuf's data, taken by each call
        sblocks = Blocks(recv.array, rblocks.counts, rblocks.displs)
    else:
        sblocks = Blocks.of_vbuffer(send)
        if send.array.dtype != recv.array.dtype:  # different datatypes: move bytes
            sblocks = Blocks(as_bytes(send.array), [c * send.datatype.size for c in send.counts],
                             [d * send.datatype.size for d in send.displs])
            rblocks = Blocks(as_bytes(recv.array), [c * recv.datatype.size for c in recv.counts],
                             [d * recv.datatype.size for d in recv.displs])
    if not vector:
        for name, b in (("sendbuf", sblocks), ("recvbuf", rblocks)):
            if len(set(b.counts)) > 1:
                raise CountError(
                    f"rank {rank}: {call}: {name} does not split into {p} equal blocks "
                    f"({sum(b.counts)} elements); give [buf, count, TYPE] with the per-rank "
                    f"count, or use Alltoallv")
        if sblocks.counts[0] * sblocks.array.itemsize != rblocks.counts[0] * rblocks.array.itemsize:
            raise CountError(
                f"rank {rank}: {call}: sendbuf blocks are {sblocks.counts[0] * sblocks.array.itemsize} "
                f"bytes but recvbuf blocks are {rblocks.counts[0] * rblocks.array.itemsize} bytes; "
                f"they must match")
        nbytes = sum(sblocks.counts) * sblocks.array.itemsize
    else:
        mine = sblocks.counts[rank] * sblocks.array.itemsize
        if mine != rblocks.counts[rank] * rblocks.array.itemsize:
            raise CountError(
                f"rank {rank}: {call}: sendcounts[{rank}] and recvcounts[{rank}] (this rank's "
                f"block to itself) differ: {mine} vs "
                f"{rblocks.counts[rank] * rblocks.array.itemsize} bytes")
        nbytes = 0                                # counts differ per rank: choose by p alone
    fuse = None if vector or send is IN_PLACE else \
        (lambda compiled: _fuse(comm, compiled, send, recv, algorithm))

    def invoke(alg, ch):
        if send is IN_PLACE:
            return alg(ch, Blocks(recv.array.copy(), sblocks.counts, sblocks.displs), rblocks)
        return alg(ch, sblocks, rblocks)
    return Prepared("alltoallv" if vector else "alltoall", call, nbytes, invoke,
                    algorithm=algorithm, finalize=lambda _: recv.finish(), fuse=fuse,
                    specs=((sendbuf, send), (recvbuf, recv)))


def _fuse(comm, compiled, send, recv, algorithm) -> None:
    """After a blocking segment ``Alltoall``, keep its fused form (:mod:`minimpi.coll.fused`)
    when the next calls can use it: plain arrays of one predefined type, a rank's p blocks
    fitting a slot."""
    plan = comm._plan
    if (recv.datatype.is_predefined and send.datatype is recv.datatype
            and not recv.is_temporary and not send.is_temporary
            and type(recv.array) is np.ndarray and send.array.dtype == recv.array.dtype
            and sum(send.counts) * send.datatype.size <= plan.segment_bytes):
        keep_fused(comm, ("alltoall", algorithm),
                   FusedAlltoall(compiled, plan.segment(comm._ep), recv.array.dtype,
                                 recv.counts[0]))


@collective
def Alltoallw(comm, sendbuf: Any, recvbuf: Any, algorithm: str = None) -> None:
    """``Alltoall`` with a count, a **byte** displacement and a datatype per rank:
    ``[buf, (counts, displs), TYPES]`` or ``[buf, counts, displs, TYPES]`` on both sides
    (contiguous datatypes; ``MPI.BOTTOM`` with absolute addresses; ``sendbuf`` may be
    ``MPI.IN_PLACE``)."""
    _alltoallw(comm, sendbuf, recvbuf, algorithm, "Alltoallw", False)


def Ialltoallw(comm, sendbuf: Any, recvbuf: Any, algorithm: str = None):
    return _alltoallw(comm, sendbuf, recvbuf, algorithm, "Ialltoallw", True)


@collective
def _alltoallw(comm, sendbuf, recvbuf, algorithm, call, nonblocking):
    return prepare_alltoallw(comm, call, sendbuf, recvbuf, algorithm).execute(comm, nonblocking)


def prepare_alltoallw(comm, call: str, sendbuf: Any, recvbuf: Any,
                      algorithm: str = None) -> Prepared:
    """The call parsed and checked (:class:`~minimpi.comm.collectives.common.Prepared`).
    Its blocks are packed here (a W buffer is not the user's memory as a whole: a
    persistent call prepares it anew at each Start)."""
    p, rank = comm.size, comm.rank
    recv = parse_wbuffer(recvbuf, p, writable=True, call=call, arg="recvbuf")
    rcounts = [recv.block_nbytes(i) for i in range(p)]
    sendbuf = in_place(sendbuf)
    if sendbuf is IN_PLACE:        # the data to send is recvbuf's, taken before it changes
        scounts = rcounts
        # (blocks of non-contiguous datatypes are receive temporaries: pack the data)
        source = parse_wbuffer(recvbuf, p, writable=False, call=call, arg="recvbuf") \
            if recv.scatters else recv
        sblocks = _packed(source.blocks, rcounts)
    else:
        send = parse_wbuffer(sendbuf, p, writable=False, call=call, arg="sendbuf")
        scounts = [send.block_nbytes(i) for i in range(p)]
        sblocks = Blocks(send.array, scounts, send.displs) if send.array is not None \
            else _packed(send.blocks, scounts)
    if scounts[rank] != rcounts[rank]:
        raise CountError(
            f"rank {rank}: {call}: this rank's block to itself is {scounts[rank]} bytes in "
            f"sendbuf but {rcounts[rank]} bytes in recvbuf; they must match")
    if recv.array is not None:
        rblocks = Blocks(recv.array, rcounts, recv.displs)
        finish = nothing
    else:                          # absolute addresses: receive packed, then place
        rblocks = _packed([np.empty(c, np.uint8) for c in rcounts], rcounts)

        def finish(_result: Any) -> None:
            for i, block in enumerate(recv.blocks):
                block[...] = rblocks.view(i)
            recv.finish()    # blocks of non-contiguous datatypes: into their layouts
    return Prepared("alltoallv", call, 0, lambda alg, ch: alg(ch, sblocks, rblocks),
                    algorithm=algorithm, finalize=finish,
                    specs=((sendbuf, None if sendbuf is IN_PLACE else send), (recvbuf, recv)))


def alltoall(comm, sendobj: Any, algorithm: str = None) -> list:
    """Send ``sendobj[j]`` to rank j; return the list of what each rank sent us."""
    p = comm.size
    try:
        # As in mpi4py, None stands for a None to every rank.
        items = [None] * p if sendobj is None else list(sendobj)
    except TypeError:
        items = None
    if items is None or len(items) != p:
        what = f"{len(items)} items" if items is not None else type(sendobj).__name__
        raise CountError(f"rank {comm.rank}: alltoall: sendobj must be a sequence of "
                         f"{p} objects (one per rank), got {what}")
    return execute(comm, "alltoall", "alltoall", 0,
                   lambda alg, ch: alg(ch, Blocks(items=items), Blocks(items=[None] * p)),
                   algorithm=algorithm, objects=True, finalize=lambda blocks: blocks.items)
