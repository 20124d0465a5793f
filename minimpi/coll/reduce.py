"""Reduce: the root gets x0 (op) x1 (op) ... (op) x[p-1] of every rank's data.

Three flat algorithms and a hierarchical one. The binomial tree is written once for buffers
and Python objects and keeps rank order, so it serves every op; the ring and Rabenseifner
algorithms cut the buffer in chunks and reorder operands, so they need a commutative op and
buffers. The hierarchical one (trees inside hosts, then among hosts) keeps rank order when
each host's ranks are contiguous. How two values are combined (in place for buffers,
``op(a, b)`` for objects) is :class:`~minimpi.coll.blocks.Operand`; which side is the lower
ranks is always stated.

``data`` is this rank's contribution, as a writable accumulator at the root (its receive
buffer, already holding its own contribution) and read-only elsewhere. Costs use ``n`` =
bytes of one rank's buffer.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..constants import PROC_NULL, ROOT
from .blocks import as_bytes, even_bounds
from .cost import Layout, ceil_log2, floor_log2, halving_path, tree_volume
from .groups import GroupChannel
from .peers import (
    GROUP_LEADER,
    absolute,
    binomial_children,
    binomial_parent,
    fold_power_of_two,
    host_leaders,
    host_of,
    relative,
    ring_neighbours,
    subtree_end,
    unfold_rank,
)
from .reduction import Operand, fold_in, received
from .registry import INTER, algorithm, flat_cost
from .schedule import Channel, Schedule
from .segment import pieces, reduce_slots
from .slots import SEQ_BITS


@algorithm("reduce", "binomial", path=lambda m, p, n: [n] * ceil_log2(p),
           formula="⌈log2 p⌉·(α + n·β + n·γ)",
           messages=lambda m, p, n: p - 1,
           volume=lambda p, n: (p - 1) * n, local=lambda p, n: (p - 1) * n)
def reduce_binomial(ch: Channel, red: Operand, data: Any, root: int) -> Schedule:
    """Binomial tree: ceil(log2 p) steps; time ceil(log2 p)·(α + nβ + nγ); volume (p-1)·n,
    (p-1)·n reduced.

    Step k (mask = 2^k): a rank whose bit k is set sends its partial result to ``rel - mask``
    (its parent) and is done; the others receive the partial result of child ``rel + mask``
    - the next higher ranks - and combine ``acc = acc (op) child``. A commutative op uses
    ranks relative to the root; a non-commutative one needs the plain rank order, so the
    tree is rooted at rank 0, which then sends the result to the root (one more step).
    """
    p = ch.size
    tree_root = root if red.op.Is_commutative() else 0
    rel = relative(ch.rank, tree_root, p)
    acc = data
    tmp = red.slot(data)
    for child in reversed(binomial_children(rel, p)):  # nearest child first: rel+1, rel+2, ..
        req = ch.irecv(tmp, absolute(child, tree_root, p))
        yield [req]
        acc = red.into_lower(acc, received(req, tmp))  # the child holds the higher ranks
    if rel != 0:                                        # hand my partial result up
        yield [ch.isend(acc, absolute(binomial_parent(rel), tree_root, p))]
    if tree_root != root:                               # non-commutative: 0 -> root
        if ch.rank == tree_root:
            yield [ch.isend(acc, root)]
        elif ch.rank == root:
            slot = None if red.objects else data        # the root's receive buffer
            req = ch.irecv(slot, tree_root)
            yield [req]
            acc = received(req, slot)
    return acc if ch.rank == root else None


@algorithm("reduce", "ring", path=lambda m, p, n: [n / p] * p,
           formula="2·(p-1)·α + (p-1)/p·n·(2·β + γ) + n·γ", commutative_only=True, objects=False,
           messages=lambda m, p, n: p * (p - 1) + p - 1,
           volume=lambda p, n: (p - 1) * n * (1 + 1 / p), local=lambda p, n: 2 * (p - 1) * n)
def reduce_ring(ch: Channel, red: Operand, data: np.ndarray, root: int) -> Schedule:
    """Ring reduce-scatter, then every rank sends its finished chunk to the root.

    The buffer is cut in p chunks. Step s (s = 0..p-2): rank r sends chunk (r-s) mod p to
    r+1 and receives chunk (r-s-1) mod p from r-1, which it combines into its own. After
    p-1 steps rank r holds chunk (r+1) mod p fully reduced; one more step sends it to the
    root. p steps; time 2(p-1)·α + ((p-1)/p)·n·(2β + γ) + nγ (a rank other than the root
    first copies its vector); volume (p-1)(1 + 1/p)·n, (p-1)·n reduced and (p-1)·n copied.
    Chunks are combined in ring order, not rank order: commutative ops only.
    """
    p, r = ch.size, ch.rank
    acc = data if r == root else ch.scratch_copy(data, "acc")
    if p == 1:
        return acc
    bounds = even_bounds(acc.size, p)                   # chunk c = [bounds[c], bounds[c+1])
    chunk = lambda c: acc[bounds[c]:bounds[c + 1]]
    tmp = ch.scratch(bounds[1], acc.dtype, "tmp")
    left, right = ring_neighbours(r, p)
    ch.phase("reduce-scatter")
    for s in range(p - 1):                              # reduce-scatter round the ring
        send_c, recv_c = (r - s) % p, (r - s - 1) % p
        into = tmp[:bounds[recv_c + 1] - bounds[recv_c]]
        yield [ch.irecv(into, left), ch.isend(chunk(send_c), right)]
        red.lower_into(into, chunk(recv_c))
    mine = (r + 1) % p                                  # gather the chunks at the root
    ch.phase("gather at the root")
    if r != root:
        yield [ch.isend(chunk(mine), root)]
        return None
    reqs = [ch.irecv(chunk((q + 1) % p), q) for q in range(p) if q != root]
    yield reqs
    return acc


def _rabenseifner_cost(m, p, n):
    pof2 = 1 << floor_log2(p)
    extra = 0.0 if pof2 == p else 2 * (m.alpha + n * m.beta) + n * m.gamma
    return (2 * floor_log2(p) * m.alpha + 2 * (pof2 - 1) / pof2 * n * m.beta
            + (pof2 - 1) / pof2 * n * m.gamma + n * m.gamma + extra)


def _rabenseifner_volume(p, n):
    q = 1 << floor_log2(p)
    return (p - q) * n + (q - 1) * n + tree_volume(q) * n / q


def _rabenseifner_messages(m, p, n):
    q = 1 << floor_log2(p)
    return (p - q) + q * floor_log2(q) + (q - 1) + 1


def _rabenseifner_local(p, n):
    q = 1 << floor_log2(p)
    return (p - q) * n + (q - 1) * n + (p - 1) * n


@algorithm("reduce", "rabenseifner", path=lambda m, p, n: halving_path(p, n),
           formula="2·⌊log2 p⌋·α + 2·(q-1)/q·n·β + (q-1)/q·n·γ + n·γ + f·(2·(α + n·β) + n·γ)", commutative_only=True, objects=False,
           messages=_rabenseifner_messages,
           volume=_rabenseifner_volume, local=_rabenseifner_local)
def reduce_rabenseifner(ch: Channel, red: Operand, data: np.ndarray, root: int) -> Schedule:
    """Rabenseifner: reduce-scatter by recursive halving, then a binomial gather.

    With q = 2^floor(log2 p): first the 2(p-q) lowest ranks pair up and the even one of each
    pair hands its data to the odd one (1 step), leaving q ranks. Halving: at distance
    q/2, q/4, ..., 1 each rank swaps half of its current chunk range with its partner and
    combines the half it keeps (log2 q steps); then each holds one of q chunks, and a
    binomial gather (log2 q steps) brings them to new rank 0, which sends the result to the
    root if that is another rank. Time about 2·log2 q·α + 2((q-1)/q)·nβ + ((q-1)/q)·nγ
    + nγ (a rank other than the root first copies its vector), plus α + nβ + nγ and α + nβ
    when p is not a power of two. Volume (p-q)·n + (q-1)·n + T(q)·n/q (fold, halving,
    gather; T: :func:`~minimpi.coll.cost.tree_volume`), (p-1)·n reduced and (p-1)·n copied.
    Commutative ops only.
    """
    p, r = ch.size, ch.rank
    acc = data if r == root else ch.scratch_copy(data, "acc")
    if p == 1:
        return acc
    q, rem, new = fold_power_of_two(r, p)
    acc = yield from fold_in(ch, red, acc)              # fold (whole vectors)
    tmp = ch.scratch_like(acc, "tmp")
    real = lambda v: unfold_rank(v, rem)                # new rank -> rank
    bounds = even_bounds(acc.size, q)
    span = lambda lo, hi: (bounds[lo], bounds[hi])
    ch.phase("reduce-scatter (recursive halving)")
    if new >= 0:
        lo, hi = 0, q                                   # my chunk range
        mask = q >> 1
        while mask > 0:                                 # recursive halving
            partner = new ^ mask
            mid = (lo + hi) // 2
            if new & mask:
                keep, give = (mid, hi), (lo, mid)
            else:
                keep, give = (lo, mid), (mid, hi)
            ks, ke = span(*keep)
            gs, ge = span(*give)
            yield [ch.irecv(tmp[ks:ke], real(partner)), ch.isend(acc[gs:ge], real(partner))]
            red.lower_into(tmp[ks:ke], acc[ks:ke])
            lo, hi = keep
            mask >>= 1
        # binomial gather to new rank 0: each child brings its subtree's chunks
        ch.phase("binomial gather")
        for child in reversed(binomial_children(new, q)):
            hi = subtree_end(child, q)
            s, e = span(child, hi)
            yield [ch.irecv(acc[s:e], real(child))]
        if new != 0:
            s, e = span(lo, hi)
            yield [ch.isend(acc[s:e], real(binomial_parent(new)))]
    first = real(0)
    if first != root:
        if r == first:
            yield [ch.isend(acc, root)]
        elif r == root:
            yield [ch.irecv(acc, first)]
    return acc if r == root else None


def _hierarchical_phases(m, p, n, layout=None):
    """Each step of :func:`reduce_hierarchical` and its predicted time."""
    t = layout or Layout.one_host(p)
    return [(f"inside hosts: binomial reduce over {t.widest} ranks",
             flat_cost("reduce", "binomial", m, m.intra, t.widest, n)),
            (f"between hosts: binomial reduce over {t.hosts} leaders",
             flat_cost("reduce", "binomial", m, m.inter, t.hosts, n))]


@algorithm("reduce", "hierarchical", hierarchical=True, order_needs_contiguous_hosts=True,
           path=lambda m, p, n: [n] * ceil_log2(p),
           phases=_hierarchical_phases,
           cost=lambda m, p, n, layout=None: sum(t for _, t in _hierarchical_phases(m, p, n, layout)),
           messages=lambda m, p, n, layout=None: p - 1,
           volume=lambda p, n, layout=None: (p - 1) * n,
           local=lambda p, n, layout=None: (p - 1) * n)
def reduce_hierarchical(ch: Channel, red: Operand, data: Any, root: int) -> Schedule:
    """Two levels: a binomial reduce inside each host to its leader, then one among the leaders.

    With H hosts and at most L ranks on one: ceil(log2 L) + ceil(log2 H) steps; time
    ceil(log2 L)·(α_i + nβ_i + nγ) + ceil(log2 H)·(α_e + nβ_e + nγ) (i: within a host, e:
    between hosts); volume (p-1)·n, (p-1)·n reduced; only (H-1)·n crosses hosts.

    1. Inside each host: :func:`reduce_binomial` over the host's ranks to its leader (the
       root on its host, the lowest rank on each other host).
    2. Between hosts: :func:`reduce_binomial` over the leaders, in host order, to the root.

    Operand order: step 1 combines each host's ranks in rank order and step 2 the hosts in
    the order of their lowest ranks, so when every host's ranks are contiguous the result is
    x0 (op) x1 (op) ... in rank order; when hosts interleave (hosts a,b,a), it is not, and
    the registry refuses a non-commutative op.
    """
    groups = ch.host_groups
    leaders = host_leaders(groups, root)
    mine = host_of(ch.rank, groups)
    home = groups[mine]                                       # 1. inside my host
    ch.phase("1. reduce inside each host")
    acc = yield from reduce_binomial(GroupChannel(ch, home), red, data, home.index(leaders[mine]))
    ch.phase("2. reduce among the host leaders")
    if ch.rank == leaders[mine]:                              # 2. between hosts
        acc = yield from reduce_binomial(GroupChannel(ch, leaders), red, acc, host_of(root, groups))
    return acc if ch.rank == root else None


@algorithm("reduce", "segment", segment=True, objects=False,
           formula="c·α/2 + (c-1)·o·α/4 + (p-1)·n·(β + γ); c = max(1, ⌈n/16384⌉)", messages=lambda m, p, n: p,
           volume=lambda p, n: 0, local=lambda p, n: p * n)
def reduce_segment(ch: Channel, red: Operand, data: np.ndarray, root: int) -> Schedule:
    """Meet in the communicator's shared segment (ranks on one host): every rank copies
    its vector into its slot and publishes the call; the root waits until all have and
    reduces the p slots in rank order (any op). One step for a vector that fits a slot
    (larger ones in slot-sized pieces); time α/2 + (p-1)·n·(β + γ) at the root; the others
    go on once their slot is written.
    """
    seg = ch.segment()
    p, rank = ch.size, ch.rank
    sig = ch.tag >> SEQ_BITS
    mine = as_bytes(data)
    dtype = data.dtype
    unit = (red.datatype.base_count if red.datatype is not None else 1) * data.itemsize
    everyone = range(p)
    parts = pieces(mine.nbytes, seg.slot, unit)
    for k, part in zip(seg.reserve(len(parts)), parts):
        lo, hi = part.start, part.stop
        yield [seg.free_for(ch, k)]              # (the area k uses was read by the root)
        seg.area(rank, k, hi - lo)[...] = mine[lo:hi]
        seg.publish(k, sig, call=ch)
        if rank != root:
            seg.finished(k)
            continue
        yield [seg.wait_for(ch, k, everyone)]
        seg.check(k, sig, everyone, ch)
        reduce_slots(seg, k, hi - lo, everyone, red, mine[lo:hi].view(dtype))
        seg.finished(k)
    return data


# -- intercommunicators (two groups; see minimpi.coll.twogroups) -------------------------
@algorithm("reduce", "via_leader", kinds=(INTER,),
           formula="(⌈log2 p⌉ + 1)·(α + n·β) + ⌈log2 p⌉·n·γ",
           messages=lambda m, p, n: p, volume=lambda p, n: p * n,
           local=lambda p, n: (p - 1) * n)
def reduce_via_leader(remote: Channel, local: Channel, red: Operand, data: Any, out: Any,
                      root: int) -> Schedule:
    """The other group reduces to its leader, which sends the result to the root:
    (⌈log2 p⌉ + 1)·(α + n·β) + ⌈log2 p⌉·n·γ for a sending group of p.

    The reduction is :func:`reduce_binomial` rooted at the leader (rank 0, so a
    non-commutative op keeps rank order); the root receives it into ``out``. Object mode:
    the root returns the reduced object.
    """
    if root == ROOT:
        into = None if remote.objects else out
        req = remote.irecv(into, GROUP_LEADER)
        yield [req]
        return received(req, into)
    if root == PROC_NULL:
        return None
    local.phase("1. reduce to the leader")
    acc = yield from reduce_binomial(local, red, red.mine(data), GROUP_LEADER)
    if local.rank == GROUP_LEADER:
        local.phase("2. the leader sends to the root")
        yield [remote.isend(acc, root)]
    return None


def reduce_and_swap(remote: Channel, local: Channel, red: Operand, data: Any,
                    into: Any) -> Schedule:
    """Reduce each group's data to its leader; the two leaders swap their results. Returns
    what the leader received (None on other ranks): the first half of the
    intercommunicator reductions that every group receives."""
    local.phase("1. reduce to each leader")
    acc = yield from reduce_binomial(local, red, red.mine(data), GROUP_LEADER)
    if local.rank != GROUP_LEADER:
        return None
    local.phase("2. the leaders swap")
    req = remote.irecv(into, GROUP_LEADER)
    yield [req, remote.isend(acc, GROUP_LEADER)]
    return received(req, into)
