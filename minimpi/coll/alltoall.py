"""All-to-all: block j of rank i's send data becomes block i of rank j's receive data.

Each schedule takes ``send`` and ``recv`` (:class:`~minimpi.coll.blocks.Blocks`): the p
blocks of the send and receive buffers (counts/displs per rank; uneven counts and zeros
for ``Alltoallv``), or lists of p objects (``alltoall``). ``n`` in the costs is the byte
count one rank sends in all.

Two registry entries: ``alltoall`` (equal blocks: ring, scattered, bruck) and ``alltoallv``
(ring, scattered). Bruck forwards other ranks' blocks, and with uneven counts their sizes
come from the whole count matrix, which no rank knows - so ``Alltoallv`` offers no Bruck.
For the same reason the ``Alltoallv`` byte counts differ per rank, so its choice (which
every rank must make alike) depends on p alone: its costs are given for n = 0.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

from .blocks import Blocks, as_bytes
from .cost import ceil_log2
from .registry import INTER, algorithm
from .schedule import Channel, Schedule
from .segment import pieces
from .slots import SEQ_BITS


def _ring_cost(m, p, n):
    return (p - 1) * (m.alpha + n / p * m.beta)


def _scattered_cost(m, p, n):
    return m.alpha + (p - 1) * m.alpha / 2 + (p - 1) / p * n * m.beta


def _volume(p, n):
    """Bytes all ranks send when every block goes straight to its owner."""
    return (p - 1) * n


def _messages(m, p, n):
    """Messages all ranks send when every block goes straight to its owner."""
    return p * (p - 1)


def _bruck_volume(p, n):
    """Step k sends the blocks whose index has bit k set: popcount(i) sends of block i."""
    return sum(bin(i).count("1") for i in range(p)) * n


@algorithm("alltoallv", "scattered", formula="α + (p-1)·α/2 + (p-1)/p·n·β", messages=_messages,
           path=lambda m, p, n: [n / p],
           volume=_volume)
@algorithm("alltoall", "scattered", formula="α + (p-1)·α/2 + (p-1)/p·n·β", messages=_messages,
           path=lambda m, p, n: [n / p],
           volume=_volume)
def alltoall_scattered(ch: Channel, send: Blocks, recv: Blocks) -> Schedule:
    """Scattered: every receive and send posted at once, one step; time
    α + (p-1)·α/2 + ((p-1)/p)·nβ (the exchanges overlap, so the latency is paid once, but
    each of the 2(p-1) messages still costs α/4 of processing); volume (p-1)·n.

    Sends go to rank+1, rank+2, ... and receives come from rank-1, rank-2, ..., so not
    every rank starts with the same partner. Registered before the ring: where the two
    predictions tie exactly (p = 3: both 2α + (2/3)·nβ), ``auto`` takes the one registered
    first, and the one step with overlapping exchanges measured 1.2-1.65x faster there.
    """
    p, rank = ch.size, ch.rank
    recv.put(rank, send.get(rank))
    if p == 1:
        return recv
    recvs = []
    step = []
    for k in range(1, p):
        src = (rank - k) % p
        into = recv.target([src])
        req = ch.irecv(into, src)
        recvs.append((src, into, req))
        step.append(req)
    for k in range(1, p):
        dst = (rank + k) % p
        step.append(ch.isend(send.pack([dst]), dst))
    yield step
    for src, into, req in recvs:
        recv.unpack([src], into, req)
    return recv


@algorithm("alltoallv", "ring", formula="(p-1)·(α + n/p·β)", messages=_messages,
           path=lambda m, p, n: [n / p] * (p - 1),
           volume=_volume)
@algorithm("alltoall", "ring", formula="(p-1)·(α + n/p·β)", messages=_messages,
           path=lambda m, p, n: [n / p] * (p - 1),
           volume=_volume)
def alltoall_ring(ch: Channel, send: Blocks, recv: Blocks) -> Schedule:
    """Pairwise shift: p-1 steps; time (p-1)·(α + (n/p)·β); volume (p-1)·n.

    Step k = 1..p-1: send our block for rank+k to rank+k, receive rank-k's block for us
    (straight into place). One exchange in flight at a time, so no rank is flooded.
    """
    p, rank = ch.size, ch.rank
    recv.put(rank, send.get(rank))
    for k in range(1, p):
        dst, src = (rank + k) % p, (rank - k) % p
        into = recv.target([src])
        req = ch.irecv(into, src)
        yield [req, ch.isend(send.pack([dst]), dst)]
        recv.unpack([src], into, req)
    return recv


@algorithm("alltoall", "bruck", path=lambda m, p, n: [n / 2] * ceil_log2(p),
           formula="⌈log2 p⌉·(α + n/2·β + n·γ) + 2·n·γ",
           messages=lambda m, p, n: p * ceil_log2(p),
           volume=_bruck_volume, local=lambda p, n: p * (2 + ceil_log2(p)) * n)
def alltoall_bruck(ch: Channel, send: Blocks, recv: Blocks) -> Schedule:
    """Bruck: ceil(log2 p) steps; time ceil(log2 p)·(α + (n/2)·β + nγ) + 2nγ - fewest
    messages, so best for small blocks; each block may be forwarded several times.

    Copies count (at γ a byte): the rotation in and out (2n), and each step packs the n/2
    bytes it sends and unpacks the n/2 it receives (n). Volume Σ popcount(i)·n over
    i < p (p/2·log2 p·n for p a power of two); p(2 + ceil(log2 p))·n copied.

    Rotate: work[i] = our block for rank+i. Step k (d = 2^k): send the blocks work[i] whose
    index has bit k set to rank + d, and receive the same slots from rank - d (so what we
    send is packed as a copy: the receive may land first). Afterwards
    work[i] holds rank-i's block for us: store it as block rank-i.
    """
    p, rank = ch.size, ch.rank
    ch.phase("rotate")
    if send.is_object:
        work = Blocks(items=[send.get((rank + i) % p) for i in range(p)])
    else:
        b = send.counts[0]
        work = Blocks.uniform(ch.scratch(b * p, send.array.dtype, "work"), p)
        for i in range(p):
            work.put(i, send.get((rank + i) % p))
    ch.phase("exchange")
    d = 1
    while d < p:
        idx = [i for i in range(p) if i & d]
        outgoing = work.pack(idx, copy=True)          # before the receive into the same slots
        into = work.target(idx)
        req = ch.irecv(into, (rank - d) % p)
        yield [req, ch.isend(outgoing, (rank + d) % p)]
        work.unpack(idx, into, req)
        d <<= 1
    ch.phase("rotate back")
    for i in range(p):
        recv.put((rank - i) % p, work.get(i))
    return recv


@algorithm("alltoall", "segment", segment=True, objects=False,
           formula="c·α/2 + (c-1)·o·α/4 + (p-1)/p·n·β; c = max(1, ⌈n/16384⌉)", messages=lambda m, p, n: p, volume=lambda p, n: 0,
           local=lambda p, n: n)
def alltoall_segment(ch: Channel, send: Blocks, recv: Blocks) -> Schedule:
    """Meet in the communicator's shared segment (ranks on one host): every rank copies all
    its p blocks into its slot and publishes the call; once all have, rank r copies block
    r of every other rank's slot. One step when a rank's p blocks fit a slot (else
    pieces of every block, a step each); time α/2 + (p-1)/p·n·β (n: a rank's p blocks).
    Equal blocks only (``Alltoall``).
    """
    seg = ch.segment()
    p, rank = ch.size, ch.rank
    sig = ch.tag >> SEQ_BITS
    outgoing = [as_bytes(send.view(j)) for j in range(p)]
    incoming = [as_bytes(recv.view(j)) for j in range(p)]
    b = outgoing[0].nbytes
    q = max(1, seg.slot // p)                    # bytes of each block per call
    everyone = range(p)
    parts = pieces(b, q)
    for k, part in zip(seg.reserve(len(parts)), parts):
        lo, hi = part.start, part.stop
        m = hi - lo
        yield [seg.free_for(ch, k)]              # (the area k uses was read by everyone)
        area = seg.area(rank, k, p * m)
        for j in everyone:
            area[j * m:(j + 1) * m] = outgoing[j][lo:hi]
        seg.publish(k, sig, call=ch)
        yield [seg.wait_for(ch, k, everyone)]
        seg.check(k, sig, everyone, ch)
        for j in everyone:
            incoming[j][lo:hi] = seg.area(j, k, p * m)[rank * m:(rank + 1) * m]
        seg.finished(k)
    return recv


# -- intercommunicators (two groups; see minimpi.coll.twogroups) -------------------------
@algorithm("alltoallv", "direct", kinds=(INTER,),
           formula="α + n·β", messages=lambda m, p, n: 2 * p * p,
           volume=lambda p, n: 2 * p * n)
@algorithm("alltoall", "direct", kinds=(INTER,),
           formula="α + n·β", messages=lambda m, p, n: 2 * p * p,
           volume=lambda p, n: 2 * p * n)
def alltoall_direct(remote: Channel, local: Channel, sends: Sequence[Any],
                    blocks: Optional[Sequence[Any]]) -> Schedule:
    """Block j goes straight to rank j of the other group, pairwise in one step (p·p
    messages each way): α + n·β for n bytes sent.

    Remote rank j's block for this rank lands in ``blocks[j]``. Object mode: returns the
    received list.
    """
    into = [None] * remote.size if remote.objects else blocks
    reqs = [remote.irecv(into[j], j) for j in range(remote.size)]
    yield reqs + [remote.isend(sends[j], j) for j in range(remote.size)]
    return [r.wait() for r in reqs] if remote.objects else None
