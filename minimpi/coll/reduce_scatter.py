"""Reduce-scatter: rank r ends with block r of x0 (op) x1 (op) ... (op) x[p-1].

Each schedule takes ``red`` (the :class:`~minimpi.coll.blocks.Operand`: op and datatype),
``send`` (this rank's whole input vector, flat numpy, never modified), ``recv`` (block r of
the result goes here) and ``counts`` (elements of each rank's block; blocks lie back to
back in rank order). ``n`` in the costs is the byte count of the whole vector.

Buffers only: mpi4py has no lowercase (Python-object) reduce_scatter, so every algorithm is
registered ``objects=False``. Operand order: binomial and pairwise keep rank order; ring and
recursive halving combine in a different order and are ``commutative_only``.
"""
from __future__ import annotations

from typing import Any, List, Sequence

import numpy as np

from .blocks import as_bytes, running_sum
from .cost import ceil_log2, floor_log2, halves, not_pow2, tree_volume
from .peers import (
    GROUP_LEADER,
    binomial_children,
    binomial_parent,
    first_real,
    fold_power_of_two,
    ring_neighbours,
    subtree_end,
    unfold_rank,
)
from .reduce import reduce_and_swap, reduce_binomial
from .reduction import Operand, fold_in
from .registry import INTER, algorithm
from .schedule import Channel, Schedule
from .segment import pieces, reduce_slots
from .slots import SEQ_BITS


@algorithm("reduce_scatter", "binomial",
           path=lambda m, p, n: [n] * ceil_log2(p) + halves(n, ceil_log2(p)),
           formula="⌈log2 p⌉·(α + n·β + n·γ) + ⌈log2 p⌉·α + (p-1)/p·n·β + n·γ", objects=False,
           messages=lambda m, p, n: 2 * (p - 1),
           volume=lambda p, n: (p - 1) * n + tree_volume(p) * n / p,
           local=lambda p, n: (p - 1) * n + p * n)
def reduce_scatter_binomial(ch: Channel, red: Operand, send: np.ndarray, recv: np.ndarray,
                            counts: List[int]) -> Schedule:
    """Binomial reduce of the whole vector to rank 0, then binomial scatter of the blocks:
    2·ceil(log2 p) steps; time ceil(log2 p)·(α + nβ + nγ) + ceil(log2 p)·α + ((p-1)/p)·nβ
    + nγ (every rank first copies its input); volume (p-1)·n + T(p)·n/p (T:
    :func:`~minimpi.coll.cost.tree_volume`), (p-1)·n reduced and p·n copied.

    Reduce (:func:`~minimpi.coll.reduce.reduce_binomial` to root 0), step k (mask = 2^k):
    a rank with bit k set sends its partial result (ranks [rank, rank + mask)) to
    rank - mask; the receiver appends it on the right, keeping rank order. Scatter: each
    rank receives the blocks of its subtree from its parent (the rank that differs in its
    lowest set bit) and passes each child the blocks of the child's subtree.
    """
    p, rank = ch.size, ch.rank
    offs = running_sum(counts)
    acc = ch.scratch_copy(send, "acc")
    ch.phase("reduce to rank 0")
    yield from reduce_binomial(ch, red, acc, 0)      # rank 0's acc: the whole result
    ch.phase("scatter from rank 0")
    if rank:                                          # my subtree's blocks from the parent
        yield [ch.irecv(acc[offs[rank]:offs[subtree_end(rank, p)]], binomial_parent(rank))]
    for child in binomial_children(rank, p):          # each child its subtree's blocks
        yield [ch.isend(acc[offs[child]:offs[subtree_end(child, p)]], child)]
    recv[...] = acc[offs[rank]:offs[rank + 1]]


@algorithm("reduce_scatter", "ring", path=lambda m, p, n: [n / p] * (p - 1),
           formula="(p-1)·(α + n/p·(β + γ))", objects=False, commutative_only=True,
           messages=lambda m, p, n: p * (p - 1),
           volume=lambda p, n: (p - 1) * n, local=lambda p, n: (p - 1) * n)
def reduce_scatter_ring(ch: Channel, red: Operand, send: np.ndarray, recv: np.ndarray,
                        counts: List[int]) -> Schedule:
    """Ring: p-1 steps; time (p-1)·(α + (n/p)·(β + γ)); volume (p-1)·n, (p-1)·n reduced.

    Step k = 0..p-2: send the partial result of block (rank-k-1) to the right (at k = 0 our
    own contribution, straight from ``send``), receive the partial of block (rank-k-2) from
    the left into one of two block-sized slots and reduce our contribution into it. The last
    step receives block ``rank`` into ``recv`` itself. Block b is accumulated from rank b+1
    around to b: cyclic order, commutative ops only.
    """
    p, rank = ch.size, ch.rank
    offs = running_sum(counts)
    if p == 1:
        recv[...] = send
        return
    left, right = ring_neighbours(rank, p)
    largest = max(counts)
    slots = (ch.scratch(largest, send.dtype, "slot"), ch.scratch(largest, send.dtype, "slot"))
    outgoing = send[offs[(rank - 1) % p]:offs[(rank - 1) % p + 1]]
    for k in range(p - 1):
        rb = (rank - k - 2) % p
        last = k == p - 2
        into = recv if last else slots[k % 2][:counts[rb]]
        yield [ch.irecv(into, left), ch.isend(outgoing, right)]
        red.lower_into(send[offs[rb]:offs[rb + 1]], into)
        outgoing = into


@algorithm("reduce_scatter", "recursive_halving",
           path=lambda m, p, n: halves(n, floor_log2(p)) + [n, n / p] * not_pow2(p),
           formula="(⌊log2 p⌋ + 2·f)·α + ((p-1)/p + f·(1 + 1/p))·n·β + ((p-1)/p + f)·n·γ + n·γ", objects=False, commutative_only=True,
           messages=lambda m, p, n: (1 << floor_log2(p)) * floor_log2(p) + 2 * (p - (1 << floor_log2(p))),
           volume=lambda p, n: ((1 << floor_log2(p)) - 1) * n
           + (p - (1 << floor_log2(p))) * (1 + 1 / p) * n,
           local=lambda p, n: (p - 1) * n + p * n)
def reduce_scatter_recursive_halving(ch: Channel, red: Operand, send: np.ndarray, recv: np.ndarray,
                                     counts: List[int]) -> Schedule:
    """Recursive halving: log2 p steps (+2 when p is not a power of two); time
    log2 p·α + ((p-1)/p)·n(β + γ) + nγ (every rank first copies its input), plus
    α + n(β + γ) and α + (n/p)β for fold and unfold; volume (q-1)·n + (p-q)(1 + 1/p)·n
    (q = 2^floor(log2 p)), (p-1)·n reduced and p·n copied.

    Step (mask = p'/2, p'/4, ..., 1): split the window of newranks in two at mask; keep the
    half holding our newrank, send the other half to newrank ^ mask and reduce the half it
    sends us into ours. The window ends as our own block(s). Any p: the even rank of each
    of the first ``rem`` pairs first hands its whole vector to the odd one, which finally
    returns it its block.
    """
    p, rank = ch.size, ch.rank
    offs = running_sum(counts)
    pof2, rem, newrank = fold_power_of_two(rank, p)
    acc = yield from fold_in(ch, red, ch.scratch_copy(send, "acc"))    # fold (whole vectors)

    def span(nlo: int, nhi: int) -> slice:
        """Elements of the blocks of newranks [nlo, nhi)."""
        return slice(offs[first_real(nlo, rem)], offs[first_real(nhi, rem)] if nhi < pof2 else offs[p])

    ch.phase("recursive halving")
    if newrank >= 0:
        tmp = ch.scratch(acc.size, acc.dtype, "tmp")
        lo, hi = 0, pof2
        mask = pof2 >> 1
        while mask:
            partner = unfold_rank(newrank ^ mask, rem)
            mid = lo + mask
            keep, give = ((lo, mid), (mid, hi)) if newrank & mask == 0 else ((mid, hi), (lo, mid))
            kept = acc[span(*keep)]
            piece = tmp[:kept.size]
            yield [ch.irecv(piece, partner), ch.isend(acc[span(*give)], partner)]
            red.lower_into(piece, kept)
            lo, hi = keep
            mask >>= 1
    ch.phase("unfold")
    if rank < 2 * rem:                                # unfold: the odd rank returns block rank-1
        if newrank >= 0:
            yield [ch.isend(acc[offs[rank - 1]:offs[rank]], rank - 1)]
        else:
            yield [ch.irecv(recv, rank + 1)]
            return
    recv[...] = acc[offs[rank]:offs[rank + 1]]


@algorithm("reduce_scatter", "pairwise", path=lambda m, p, n: [n / p] * (p - 1),
           formula="(p-1)·(α + n/p·(β + γ))", objects=False,
           messages=lambda m, p, n: p * (p - 1),
           volume=lambda p, n: (p - 1) * n, local=lambda p, n: (p - 1) * n)
def reduce_scatter_pairwise(ch: Channel, red: Operand, send: np.ndarray, recv: np.ndarray,
                            counts: List[int]) -> Schedule:
    """Pairwise exchange: p-1 steps; time (p-1)·(α + (n/p)·(β + γ)); volume (p-1)·n,
    (p-1)·n reduced.

    The same steps, bytes and reductions as the ring (each step sends one block's worth
    and reduces one into ours), so the model predicts the same time: on the tie ``auto``
    takes the ring, registered first, for commutative ops (measured, the two are within
    about 15% of each other either way), and pairwise, which keeps rank order, for
    non-commutative ones.

    Step k = 1..p-1: send our contribution to block (rank+k) to rank+k, receive rank-k's
    contribution to our block and reduce it in. Contributions arrive from rank-1, rank-2,
    ..., 0, then p-1, ..., rank+1; a non-commutative op prepends the lower ones to the
    result and collects the higher ones in a second accumulator, appended at the end, so
    the order is x0 (op) ... (op) x[p-1].
    """
    p, rank = ch.size, ch.rank
    offs = running_sum(counts)
    recv[...] = send[offs[rank]:offs[rank + 1]]
    tmp = ch.scratch(counts[rank], send.dtype, "tmp")
    ordered = not red.op.Is_commutative()
    higher = None
    for k in range(1, p):
        dst, src = (rank + k) % p, (rank - k) % p
        yield [ch.irecv(tmp, src), ch.isend(send[offs[dst]:offs[dst + 1]], dst)]
        if not ordered or src < rank:
            red.lower_into(tmp, recv)     # recv = x_src (op) recv
        elif higher is None:
            higher = ch.scratch_copy(tmp, "higher")                                   # x[p-1]
        else:
            red.lower_into(tmp, higher)   # higher = x_src (op) higher
    if higher is not None:
        red.lower_into(recv, higher)      # lower part (op) higher part
        recv[...] = higher


@algorithm("reduce_scatter", "segment", segment=True, objects=False,
           formula="c·α/2 + (c-1)·o·α/4 + (p-1)·n/p·(β + γ) + n·β; c = max(1, ⌈n/16384⌉)",
           messages=lambda m, p, n: p, volume=lambda p, n: 0, local=lambda p, n: p * n)
def reduce_scatter_segment(ch: Channel, red: Operand, send: np.ndarray, recv: np.ndarray,
                           counts: List[int]) -> Schedule:
    """Meet in the communicator's shared segment (ranks on one host): every rank copies its
    whole vector into its slot and publishes the call; once all have, rank r reduces block
    r of the p slots in rank order (any op). One step for a vector that fits a slot
    (larger ones in slot-sized pieces); time α/2 + n·β + (p-1)·n/p·(β + γ).
    """
    seg = ch.segment()
    p, rank = ch.size, ch.rank
    sig = ch.tag >> SEQ_BITS
    mine, result = as_bytes(send), as_bytes(recv)
    dtype, size = send.dtype, send.itemsize
    offs = running_sum(counts)
    block_lo, block_hi = offs[rank] * size, offs[rank + 1] * size
    unit = (red.datatype.base_count if red.datatype is not None else 1) * size
    everyone = range(p)
    parts = pieces(mine.nbytes, seg.slot, unit)
    for k, part in zip(seg.reserve(len(parts)), parts):
        lo, hi = part.start, part.stop
        yield [seg.free_for(ch, k)]              # (the area k uses was read by everyone)
        seg.area(rank, k, hi - lo)[...] = mine[lo:hi]
        seg.publish(k, sig, call=ch)
        yield [seg.wait_for(ch, k, everyone)]
        seg.check(k, sig, everyone, ch)
        first, last = max(lo, block_lo), min(hi, block_hi)
        if first < last:                         # my block's part in this piece
            reduce_slots(seg, k, hi - lo, everyone, red,
                         result[first - block_lo:last - block_lo].view(dtype),
                         slice(first - lo, last - lo))
        seg.finished(k)
    return recv


# -- intercommunicators (two groups; see minimpi.coll.twogroups) -------------------------
@algorithm("reduce_scatter", "leaders_swap", kinds=(INTER,), objects=False,
           formula="(⌈log2 p⌉ + 2)·α + (⌈log2 p⌉ + 2)·n·β + ⌈log2 p⌉·n·γ",
           messages=lambda m, p, n: 4 * p - 2, volume=lambda p, n: (2 * p + 2) * n,
           local=lambda p, n: 2 * (p - 1) * n)
def reduce_scatter_leaders_swap(remote: Channel, local: Channel, red: Operand,
                                data: np.ndarray, out: np.ndarray,
                                elems: Sequence[int]) -> Schedule:
    """Each group reduces to its leader, the leaders swap their results, each leader sends
    block i to its rank i: (⌈log2 p⌉ + 2)·(α + n·β) + ⌈log2 p⌉·n·γ.

    So rank i of each group gets ``elems[i]`` items (block i) of the reduction of the other
    group's vectors, in ``out``.
    """
    whole: Any = red.slot(data, "remote result") if local.rank == GROUP_LEADER else None
    yield from reduce_and_swap(remote, local, red, data, whole)
    local.phase("3. scatter in each group")
    if local.rank != GROUP_LEADER:
        yield [local.irecv(out, GROUP_LEADER)]
        return None
    starts = np.concatenate(([0], np.cumsum(elems))).astype(int)
    out[...] = whole[:elems[GROUP_LEADER]]
    yield [local.isend(whole[starts[i]:starts[i + 1]], i) for i in range(local.size)
           if i != GROUP_LEADER]
    return None
