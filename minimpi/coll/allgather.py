"""Allgather: every rank ends with the blocks of all ranks, in rank order.

Each schedule takes ``blocks`` (:class:`~minimpi.coll.blocks.Blocks`): the p blocks of the
receive buffer (``Allgather``/``Allgatherv``: views at counts/displs, this rank's block
already filled; uneven counts and zeros are fine) or a list of p objects (``allgather``:
this rank's item set). A message carrying several blocks is one array (zero-copy when they
lie back to back) or a list of objects. ``n`` in the costs is the byte count of all blocks.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

from .blocks import Blocks, as_bytes
from .cost import Layout, ceil_log2, doubling_blocks, floor_log2, not_pow2, tree_volume
from .groups import GroupBlocks, GroupChannel
from .peers import (
    binomial_children,
    binomial_parent,
    fold_power_of_two,
    host_leaders,
    host_of,
    ring_neighbours,
    subtree_end,
    unfold_rank,
)
from .registry import INTER, algorithm, flat_cost
from .schedule import Channel, Schedule
from .segment import pieces
from .slots import SEQ_BITS


@algorithm("allgather", "binomial",
           path=lambda m, p, n: doubling_blocks(n / p, p) + [n] * ceil_log2(p),
           formula="⌈log2 p⌉·α + (p-1)/p·n·β + ⌈log2 p⌉·(α + n·β)",
           messages=lambda m, p, n: 2 * (p - 1),
           volume=lambda p, n: tree_volume(p) * n / p + (p - 1) * n)
def allgather_binomial(ch: Channel, blocks: Blocks) -> Schedule:
    """Binomial gather to rank 0, then binomial broadcast of everything: 2·ceil(log2 p)
    steps; time ceil(log2 p)·α + ((p-1)/p)·nβ + ceil(log2 p)·(α + nβ); volume
    T(p)·n/p + (p-1)·n (T: :func:`~minimpi.coll.cost.tree_volume`).

    Gather, step k (mask = 2^k): a rank with bit k set sends the blocks of its subtree
    [rank, rank + mask) to rank - mask; the receiver gets [rank + mask, rank + 2·mask).
    Broadcast: rank 0 sends all p blocks down the same tree, largest subtree first.
    """
    p, rank = ch.size, ch.rank
    children = binomial_children(rank, p)
    ch.phase("gather to rank 0")
    for child in reversed(children):                  # gather towards rank 0
        idx = range(child, subtree_end(child, p))     # the child's subtree's blocks
        into = blocks.target(idx)
        req = ch.irecv(into, child)
        yield [req]
        blocks.unpack(idx, into, req)
    everything = range(p)
    if rank:
        parent = binomial_parent(rank)
        yield [ch.isend(blocks.pack(range(rank, subtree_end(rank, p))), parent)]
        ch.phase("broadcast from rank 0")
        into = blocks.target(everything)              # then all blocks from the parent
        req = ch.irecv(into, parent)
        yield [req]
        blocks.unpack(everything, into, req)
    ch.phase("broadcast from rank 0")
    for child in children:                            # broadcast, largest subtree first
        yield [ch.isend(blocks.pack(everything), child)]
    return blocks


@algorithm("allgather", "ring", path=lambda m, p, n: [n / p] * (p - 1),
           formula="(p-1)·(α + n/p·β)",
           messages=lambda m, p, n: p * (p - 1),
           volume=lambda p, n: (p - 1) * n)
def allgather_ring(ch: Channel, blocks: Blocks) -> Schedule:
    """Ring: p-1 steps; time (p-1)·(α + (n/p)·β); volume (p-1)·n.

    Step k: send block (rank - k) to the right neighbour, receive block (rank - k - 1) from
    the left one (straight into place); each block travels p-1 hops.
    """
    p, rank = ch.size, ch.rank
    left, right = ring_neighbours(rank, p)
    for k in range(p - 1):
        send_idx, recv_idx = [(rank - k) % p], [(rank - k - 1) % p]
        into = blocks.target(recv_idx)
        req = ch.irecv(into, left)
        yield [req, ch.isend(blocks.pack(send_idx), right)]
        blocks.unpack(recv_idx, into, req)
    return blocks


@algorithm("allgather", "recursive_doubling",
           path=lambda m, p, n: [n / p * (1 << k) for k in range(floor_log2(p))]
           + [n / p, n] * not_pow2(p),
           formula="(⌊log2 p⌋ + 2·f)·α + ((p-1)/p + f·(1 + 1/p))·n·β",
           messages=lambda m, p, n: (1 << floor_log2(p)) * floor_log2(p) + 2 * (p - (1 << floor_log2(p))),
           volume=lambda p, n: ((1 << floor_log2(p)) - 1) * n
           + (p - (1 << floor_log2(p))) * (1 + 1 / p) * n)
def allgather_recursive_doubling(ch: Channel, blocks: Blocks) -> Schedule:
    """Recursive doubling: log2 p steps (+2 when p is not a power of two); time
    log2 p·α + ((p-1)/p)·nβ, plus α + (n/p)β and α + nβ for the fold and unfold; volume
    (q-1)·n + (p-q)(1 + 1/p)·n (q = 2^floor(log2 p)).

    Step k (mask = 2^k): exchange everything gathered so far - the blocks of the 2^k
    newranks that share our bits above k - with newrank ^ mask; the data doubles each step.
    Any p: the even rank of each of the first ``rem`` pairs first gives its block to the odd
    one (which then stands for both) and at the end receives all p blocks from it.
    """
    p, rank = ch.size, ch.rank
    pof2, rem, newrank = fold_power_of_two(rank, p)

    def real_range(nlo: int, nhi: int) -> range:
        """Real ranks whose blocks newranks [nlo, nhi) hold."""
        lo = 2 * nlo if nlo < rem else nlo + rem
        hi = 2 * nhi if nhi <= rem else nhi + rem
        return range(lo, hi)

    ch.phase("fold")
    if rank < 2 * rem:                                # fold
        if newrank < 0:
            yield [ch.isend(blocks.pack([rank]), rank + 1)]
        else:
            into = blocks.target([rank - 1])
            req = ch.irecv(into, rank - 1)
            yield [req]
            blocks.unpack([rank - 1], into, req)
    ch.phase("recursive doubling")
    if newrank >= 0:
        mask = 1
        while mask < pof2:
            partner_new = newrank ^ mask
            mine_lo = newrank & ~(mask - 1)
            theirs_lo = partner_new & ~(mask - 1)
            mine, theirs = real_range(mine_lo, mine_lo + mask), real_range(theirs_lo, theirs_lo + mask)
            into = blocks.target(theirs)
            req = ch.irecv(into, unfold_rank(partner_new, rem))
            yield [req, ch.isend(blocks.pack(mine), unfold_rank(partner_new, rem))]
            blocks.unpack(theirs, into, req)
            mask <<= 1
    ch.phase("unfold")
    if rank < 2 * rem:                                # unfold
        everything = range(p)
        if newrank >= 0:
            yield [ch.isend(blocks.pack(everything), rank - 1)]
        else:
            into = blocks.target(everything)
            req = ch.irecv(into, rank + 1)
            yield [req]
            blocks.unpack(everything, into, req)
    return blocks


@algorithm("allgather", "bruck", path=lambda m, p, n: doubling_blocks(n / p, p),
           formula="⌈log2 p⌉·α + (p-1)/p·n·β",
           messages=lambda m, p, n: p * ceil_log2(p),
           volume=lambda p, n: (p - 1) * n)
def allgather_bruck(ch: Channel, blocks: Blocks) -> Schedule:
    """Bruck: ceil(log2 p) steps for any p; time ceil(log2 p)·α + ((p-1)/p)·nβ; volume
    (p-1)·n.

    Step k (d = 2^k): send the blocks we hold, those of ranks rank .. rank+d-1 (mod p), to
    rank - d; receive those of ranks rank+d .. rank+2d-1 (mod p) from rank + d. The last
    step carries only the p - d blocks still missing. Blocks go straight to their places
    (no final rotation); a run that wraps past rank p-1 is packed into one message.
    """
    p, rank = ch.size, ch.rank
    d = 1
    while d < p:
        count = min(d, p - d)
        send_idx = [(rank + i) % p for i in range(count)]
        recv_idx = [(rank + d + i) % p for i in range(count)]
        into = blocks.target(recv_idx)
        req = ch.irecv(into, (rank + d) % p)
        yield [req, ch.isend(blocks.pack(send_idx), (rank - d) % p)]
        blocks.unpack(recv_idx, into, req)
        d <<= 1
    return blocks


def _hierarchical_phases(m, p, n, layout=None):
    """Each step of :func:`allgather_hierarchical` and its predicted time."""
    t = layout or Layout.one_host(p)
    L, intra = t.widest, m.intra
    return [(f"inside hosts: binomial gather over {L} ranks",
             ceil_log2(L) * intra.alpha + (L - 1) * n / max(p, 1) * intra.beta),
            (f"between hosts: bruck allgather over {t.hosts} leaders",
             flat_cost("allgather", "bruck", m, m.inter, t.hosts, n)),
            (f"inside hosts: binomial bcast over {L} ranks", ceil_log2(L) * intra.time(n))]


def _hierarchical_volume(p, n, layout=None):
    t = layout or Layout.one_host(p)
    gather = sum(tree_volume(c) for c in t.counts) * n / max(p, 1)
    return gather + (t.hosts - 1) * n + (p - t.hosts) * n


def _hierarchical_messages(m, p, n, layout=None):
    hosts = (layout or Layout.one_host(p)).hosts
    return 2 * (p - hosts) + hosts * ceil_log2(hosts)


@algorithm("allgather", "hierarchical", hierarchical=True, phases=_hierarchical_phases,
           path=lambda m, p, n: doubling_blocks(n / p, p) + [n] * ceil_log2(p),
           cost=lambda m, p, n, layout=None: sum(t for _, t in _hierarchical_phases(m, p, n, layout)),
           messages=_hierarchical_messages, volume=_hierarchical_volume)
def allgather_hierarchical(ch: Channel, blocks: Blocks) -> Schedule:
    """Three steps: gather each host's blocks at its leader, allgather whole hosts' blocks
    among the leaders, broadcast everything inside each host.

    With H hosts and at most L ranks on one: 2·ceil(log2 L) + ceil(log2 H) steps; time
    ceil(log2 L)·α_i + (L-1)·(n/p)·β_i + ceil(log2 H)·α_e + ((H-1)/H)·n·β_e +
    ceil(log2 L)·(α_i + nβ_i) (i: within a host, e: between hosts; hosts of equal size);
    volume sum over hosts of T(ranks there)·n/p + (H-1)·n + (p-H)·n (T:
    :func:`~minimpi.coll.cost.tree_volume`). Every block crosses to each other host once.

    1. Inside each host, over its local ranks (leader: local rank 0, its lowest rank):
       binomial gather, as in :func:`allgather_binomial` - local rank r hands its parent the
       blocks of its subtree, local ranks [r, r + lowest set bit of r).
    2. Between hosts: :func:`allgather_bruck` among the leaders, in which block h is all
       the blocks of host h (:class:`~minimpi.coll.groups.GroupBlocks`), so each message
       carries whole hosts' blocks, wherever in the buffer they lie.
    3. Inside each host: binomial broadcast of all p blocks from the leader.
    """
    groups = ch.host_groups
    home = groups[host_of(ch.rank, groups)]
    host = GroupChannel(ch, home)
    mine = GroupBlocks(blocks, [[rank] for rank in home])    # local block i: home[i]'s
    me, size = host.rank, host.size
    children = binomial_children(me, size)
    ch.phase("1. gather inside each host")
    for child in reversed(children):                  # 1. gather, nearest child first
        idx = range(child, subtree_end(child, size))
        into = mine.target(idx)
        req = host.irecv(into, child)
        yield [req]
        mine.unpack(idx, into, req)
    if me:
        yield [host.isend(mine.pack(range(me, subtree_end(me, size))), binomial_parent(me))]
    else:                                             # 2. between hosts: the leaders
        ch.phase("2. allgather among the host leaders")
        yield from allgather_bruck(GroupChannel(ch, host_leaders(groups)),
                                   GroupBlocks(blocks, groups))
    everything = range(ch.size)                       # 3. broadcast inside the host
    ch.phase("3. broadcast inside each host")
    if me:
        into = blocks.target(everything)
        req = host.irecv(into, binomial_parent(me))
        yield [req]
        blocks.unpack(everything, into, req)
    for child in children:                            # largest subtree first
        yield [host.isend(blocks.pack(everything), child)]
    return blocks


@algorithm("allgather", "segment", segment=True, objects=False,
           formula="c·α/2 + (c-1)·o·α/4 + (p-1)/p·n·β; c = max(1, ⌈n/p/16384⌉)", messages=lambda m, p, n: p, volume=lambda p, n: 0,
           local=lambda p, n: p * n)
def allgather_segment(ch: Channel, blocks: Blocks) -> Schedule:
    """Meet in the communicator's shared segment (ranks on one host): every rank copies its
    own block into its slot and publishes the call; once all have, each copies the other
    ranks' blocks out. One step for blocks that fit a slot (larger ones in slot-sized
    pieces, as many as the largest block needs); time α/2 + (p-1)/p·n·β (n: all p blocks).
    """
    seg = ch.segment()
    p, rank = ch.size, ch.rank
    sig = ch.tag >> SEQ_BITS
    views = [as_bytes(blocks.view(r)) for r in range(p)]
    mine = views[rank]
    everyone = range(p)
    parts = pieces(max(v.nbytes for v in views), seg.slot)
    for k, part in zip(seg.reserve(len(parts)), parts):
        lo, hi = part.start, part.stop
        yield [seg.free_for(ch, k)]              # (the area k uses was read by everyone)
        piece = mine[lo:hi]
        seg.area(rank, k, piece.nbytes)[...] = piece
        seg.publish(k, sig, call=ch)
        yield [seg.wait_for(ch, k, everyone)]
        seg.check(k, sig, everyone, ch)
        for r in everyone:
            if r != rank:
                target = views[r][lo:hi]
                target[...] = seg.area(r, k, target.nbytes)
        seg.finished(k)
    return blocks


# -- intercommunicators (two groups; see minimpi.coll.twogroups) -------------------------
@algorithm("allgather", "direct", kinds=(INTER,),
           formula="α + n·β", messages=lambda m, p, n: 2 * p * p,
           volume=lambda p, n: 2 * p * n)
def allgather_direct(remote: Channel, local: Channel, send: Any,
                     blocks: Optional[Sequence[Any]]) -> Schedule:
    """Every rank sends its block to every rank of the other group and receives theirs, in
    one step (p·p messages each way): α + n·β for n bytes gathered.

    Remote rank j's ``send`` lands in ``blocks[j]``. Object mode: returns the list of the
    remote group's objects.
    """
    into = [None] * remote.size if remote.objects else blocks
    reqs = [remote.irecv(into[j], j) for j in range(remote.size)]
    yield reqs + [remote.isend(send, j) for j in range(remote.size)]
    return [r.wait() for r in reqs] if remote.objects else None
