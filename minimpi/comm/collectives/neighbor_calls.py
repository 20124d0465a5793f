"""The mpi4py-facing neighbourhood collectives of ``Topocomm`` (Cartcomm, Graphcomm,
Distgraphcomm): ``Neighbor_allgather(v)``, ``Neighbor_alltoall(v/w)``, their ``I`` forms
and the lowercase object forms. The schedules are in :mod:`minimpi.coll.neighbor`.

Every block is moved as bytes, so send and receive datatypes may differ as long as the
byte counts of matching blocks agree (which the receives check). Byte counts differ from
rank to rank (degrees differ), so the call's signature carries none.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...coll.blocks import Blocks, as_bytes, running_sum
from ...data.buffers import parse_buffer, parse_vbuffer, parse_wbuffer
from ...errors import CountError
from .common import Prepared, collective, execute, nothing


def _byte_blocks(spec: Any) -> Blocks:
    """The blocks of a parsed v-buffer as byte ranges of its flat array."""
    size = spec.datatype.size
    return Blocks(as_bytes(spec.array), [c * size for c in spec.counts],
                  [d * size for d in spec.displs])


def _vbuffer(spec: Any, n: int, writable: bool, call: str, arg: str) -> Any:
    """``parse_vbuffer`` for ``n`` neighbours (``n`` may be 0: a rank with no neighbours)."""
    if n == 0:      # no blocks: any buffer will do, nothing is read or written
        return None
    return parse_vbuffer(spec, n, writable=writable, call=call, arg=arg)


def _empty() -> Blocks:
    return Blocks(np.empty(0, np.uint8), [], [])


# -- allgather -------------------------------------------------------------------------
def Neighbor_allgather(comm, sendbuf: Any, recvbuf: Any, algorithm: str = None) -> None:
    """Send ``sendbuf`` to every out-neighbour; receive in-neighbour k's block into block k
    of ``recvbuf`` (indegree equal blocks)."""
    _neighbor_allgather(comm, sendbuf, recvbuf, algorithm, "Neighbor_allgather", False, False)


def Ineighbor_allgather(comm, sendbuf: Any, recvbuf: Any, algorithm: str = None):
    return _neighbor_allgather(comm, sendbuf, recvbuf, algorithm, "Ineighbor_allgather",
                                    True, False)


def Neighbor_allgatherv(comm, sendbuf: Any, recvbuf: Any, algorithm: str = None) -> None:
    """``Neighbor_allgather`` with per-neighbour counts: ``[buf, (counts, displs), TYPE]``."""
    _neighbor_allgather(comm, sendbuf, recvbuf, algorithm, "Neighbor_allgatherv", False, True)


def Ineighbor_allgatherv(comm, sendbuf: Any, recvbuf: Any, algorithm: str = None):
    return _neighbor_allgather(comm, sendbuf, recvbuf, algorithm, "Ineighbor_allgatherv",
                                    True, True)


@collective
def _neighbor_allgather(comm, sendbuf, recvbuf, algorithm, call, nonblocking, vector):
    return prepare_neighbor_allgather(comm, call, sendbuf, recvbuf, algorithm,
                                      vector).execute(comm, nonblocking)


def prepare_neighbor_allgather(comm, call: str, sendbuf: Any, recvbuf: Any,
                               algorithm: str = None, vector: bool = False) -> Prepared:
    """The call parsed and checked (:class:`~minimpi.comm.collectives.common.Prepared`)."""
    sources, destinations, order = comm._neighbours()
    send = parse_buffer(sendbuf, writable=False, call=call, arg="sendbuf")
    recv = _vbuffer(recvbuf, len(sources), True, call, "recvbuf")
    rblocks = _byte_blocks(recv) if recv is not None else _empty()
    if not vector and len(set(rblocks.counts)) > 1:
        raise CountError(
            f"rank {comm.rank}: {call}: recvbuf does not split into {len(sources)} equal "
            f"blocks (one per in-neighbour); give [buf, count, TYPE] or use "
            f"Neighbor_allgatherv")
    if not vector and rblocks.counts and rblocks.counts[0] != send.nbytes:
        raise CountError(
            f"rank {comm.rank}: {call}: sendbuf has {send.nbytes} bytes but recvbuf's "
            f"blocks are {rblocks.counts[0]} bytes; they must match")
    sblocks = Blocks(as_bytes(send.array), [send.nbytes], [0])
    return Prepared("neighbor_allgather", call, 0,
                    lambda alg, ch: alg(ch, sources, destinations, order, sblocks, rblocks),
                    algorithm=algorithm,
                    finalize=(lambda _: recv.finish()) if recv is not None else nothing,
                    specs=((sendbuf, send), (recvbuf, recv)))


@collective
def neighbor_allgather(comm, sendobj: Any, algorithm: str = None) -> list:
    """Send ``sendobj`` to every out-neighbour; return the list of what each
    in-neighbour sent (``None`` for ``MPI.PROC_NULL`` neighbours)."""
    sources, destinations, order = comm._neighbours()
    return execute(comm, "neighbor_allgather", "neighbor_allgather", 0,
                   lambda alg, ch: alg(ch, sources, destinations, order,
                                       Blocks(items=[sendobj]),
                                       Blocks(items=[None] * len(sources))),
                   algorithm=algorithm, objects=True, finalize=lambda blocks: blocks.items)


# -- alltoall --------------------------------------------------------------------------
def Neighbor_alltoall(comm, sendbuf: Any, recvbuf: Any, algorithm: str = None) -> None:
    """Send block k of ``sendbuf`` to out-neighbour k; receive in-neighbour k's block into
    block k of ``recvbuf``."""
    _neighbor_alltoall(comm, sendbuf, recvbuf, algorithm, "Neighbor_alltoall", False, False)


def Ineighbor_alltoall(comm, sendbuf: Any, recvbuf: Any, algorithm: str = None):
    return _neighbor_alltoall(comm, sendbuf, recvbuf, algorithm, "Ineighbor_alltoall",
                                   True, False)


def Neighbor_alltoallv(comm, sendbuf: Any, recvbuf: Any, algorithm: str = None) -> None:
    """``Neighbor_alltoall`` with per-neighbour counts and displacements."""
    _neighbor_alltoall(comm, sendbuf, recvbuf, algorithm, "Neighbor_alltoallv", False, True)


def Ineighbor_alltoallv(comm, sendbuf: Any, recvbuf: Any, algorithm: str = None):
    return _neighbor_alltoall(comm, sendbuf, recvbuf, algorithm, "Ineighbor_alltoallv",
                                   True, True)


@collective
def _neighbor_alltoall(comm, sendbuf, recvbuf, algorithm, call, nonblocking, vector):
    return prepare_neighbor_alltoall(comm, call, sendbuf, recvbuf, algorithm,
                                     vector).execute(comm, nonblocking)


def prepare_neighbor_alltoall(comm, call: str, sendbuf: Any, recvbuf: Any,
                              algorithm: str = None, vector: bool = False) -> Prepared:
    """The call parsed and checked (:class:`~minimpi.comm.collectives.common.Prepared`)."""
    sources, destinations, order = comm._neighbours()
    recv = _vbuffer(recvbuf, len(sources), True, call, "recvbuf")
    send = _vbuffer(sendbuf, len(destinations), False, call, "sendbuf")
    rblocks = _byte_blocks(recv) if recv is not None else _empty()
    sblocks = _byte_blocks(send) if send is not None else _empty()
    if not vector:
        for name, b, what in (("sendbuf", sblocks, "out"), ("recvbuf", rblocks, "in")):
            if len(set(b.counts)) > 1:
                raise CountError(
                    f"rank {comm.rank}: {call}: {name} does not split into {len(b.counts)} "
                    f"equal blocks (one per {what}-neighbour); give [buf, count, TYPE] or "
                    f"use Neighbor_alltoallv")
    return Prepared("neighbor_alltoall", call, 0,
                    lambda alg, ch: alg(ch, sources, destinations, order, sblocks, rblocks),
                    algorithm=algorithm,
                    finalize=(lambda _: recv.finish()) if recv is not None else nothing,
                    specs=((sendbuf, send), (recvbuf, recv)))


def Neighbor_alltoallw(comm, sendbuf: Any, recvbuf: Any, algorithm: str = None) -> None:
    """``Neighbor_alltoall`` with a count, a **byte** displacement and a datatype per
    neighbour: ``[buf, (counts, displs), TYPES]`` or ``[buf, counts, displs, TYPES]``."""
    _neighbor_alltoallw(comm, sendbuf, recvbuf, algorithm, "Neighbor_alltoallw", False)


def Ineighbor_alltoallw(comm, sendbuf: Any, recvbuf: Any, algorithm: str = None):
    return _neighbor_alltoallw(comm, sendbuf, recvbuf, algorithm, "Ineighbor_alltoallw", True)


@collective
def _neighbor_alltoallw(comm, sendbuf, recvbuf, algorithm, call, nonblocking):
    return prepare_neighbor_alltoallw(comm, call, sendbuf, recvbuf, algorithm).execute(
        comm, nonblocking)


def prepare_neighbor_alltoallw(comm, call: str, sendbuf: Any, recvbuf: Any,
                               algorithm: str = None) -> Prepared:
    """The call parsed and checked (:class:`~minimpi.comm.collectives.common.Prepared`).
    Its blocks are packed here (a W buffer is not the user's memory as a whole: a
    persistent call prepares it anew at each Start)."""
    sources, destinations, order = comm._neighbours()
    finish = nothing
    if sources:
        recv = parse_wbuffer(recvbuf, len(sources), writable=True, call=call, arg="recvbuf")
        rcounts = [recv.block_nbytes(i) for i in range(len(sources))]
        if recv.array is not None:
            rblocks = Blocks(recv.array, rcounts, recv.displs)

            def finish(_result: Any) -> None:
                recv.finish()
        else:                      # absolute addresses: receive packed, then place
            rblocks = Blocks(np.empty(sum(rcounts), np.uint8), rcounts,
                             running_sum(rcounts)[:-1])

            def finish(_result: Any) -> None:
                for i, block in enumerate(recv.blocks):
                    block[...] = rblocks.view(i)
                recv.finish()
    else:
        rblocks = _empty()
    if destinations:
        send = parse_wbuffer(sendbuf, len(destinations), writable=False, call=call,
                             arg="sendbuf")
        scounts = [send.block_nbytes(i) for i in range(len(destinations))]
        if send.array is not None:
            sblocks = Blocks(send.array, scounts, send.displs)
        else:
            sblocks = Blocks(np.concatenate([np.asarray(b, np.uint8).reshape(-1)
                                             for b in send.blocks]),
                             scounts, running_sum(scounts)[:-1])
    else:
        sblocks = _empty()
    return Prepared("neighbor_alltoall", call, 0,
                    lambda alg, ch: alg(ch, sources, destinations, order, sblocks, rblocks),
                    algorithm=algorithm, finalize=finish,
                    specs=((sendbuf, None if not destinations else send),
                           (recvbuf, None if not sources else recv)))


@collective
def neighbor_alltoall(comm, sendobj: Any, algorithm: str = None) -> list:
    """Send ``sendobj[k]`` to out-neighbour k; return the list of what each in-neighbour
    sent us (``None`` for ``MPI.PROC_NULL`` neighbours)."""
    sources, destinations, order = comm._neighbours()
    try:
        items = list(sendobj)
    except TypeError:
        items = None
    if items is None or len(items) != len(destinations):
        what = f"{len(items)} items" if items is not None else type(sendobj).__name__
        raise CountError(f"rank {comm.rank}: neighbor_alltoall: sendobj must be a sequence "
                         f"of {len(destinations)} objects (one per out-neighbour), got "
                         f"{what}")
    return execute(comm, "neighbor_alltoall", "neighbor_alltoall", 0,
                   lambda alg, ch: alg(ch, sources, destinations, order,
                                       Blocks(items=items),
                                       Blocks(items=[None] * len(sources))),
                   algorithm=algorithm, objects=True, finalize=lambda blocks: blocks.items)
