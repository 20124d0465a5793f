"""Scatter: the root's i-th block ends up on rank i.

Three algorithms, each written once for ``Scatter``, ``Scatterv`` and the object
``scatter``. Ranks are renumbered relative to the root (``rel = (rank - root) mod p``) so
the schedule is the same for every root; relative rank ``r`` receives the root's block of
absolute rank ``(r + root) mod p``. What a message between two ranks carries - a contiguous
run of bytes, or a list of blocks - is decided by :class:`~minimpi.coll.blocks.RootedBlocks`.

Costs use ``n`` = bytes of one rank's block (0 for ``Scatterv`` and objects, where only the
root knows every size, so every rank chooses on ``p`` alone).
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

from ..constants import PROC_NULL, ROOT
from .blocks import EqualBlocks, RootedBlocks
from .cost import doubling_blocks, segments, tree_volume
from .peers import binomial_children, binomial_parent, subtree_end
from .reduction import received
from .registry import INTER, algorithm
from .schedule import Channel, Schedule
from .segment import pieces
from .slots import SEQ_BITS


@algorithm("scatter", "binomial", path=lambda m, p, n: doubling_blocks(n, p),
           formula="⌈log2 p⌉·α + (p-1)·n·β",
           messages=lambda m, p, n: p - 1,
           volume=lambda p, n: tree_volume(p) * n)
def scatter_binomial(ch: Channel, blocks: RootedBlocks, root: int, segment: int = 0) -> Schedule:
    """Binomial tree: ceil(log2 p) steps, p-1 messages; time ceil(log2 p)·α + (p-1)·nβ;
    volume T(p)·n, T(p) = p/2·log2 p for p a power of two (each block is forwarded down
    the tree: :func:`~minimpi.coll.cost.tree_volume`).

    A rank first receives, from its parent (the rank that differs in its lowest set bit),
    the blocks of its whole subtree ``[rel, rel + lowbit(rel))``; then, for each lower
    mask, largest first, it sends child ``rel + mask`` that child's subtree's blocks.
    """
    p, rel = ch.size, blocks.me
    if rel != 0:                               # receive my subtree from the parent
        hi = subtree_end(rel, p)
        blocks.hold(rel, hi)
        req = ch.irecv(blocks.slot(rel, hi), blocks.abs(binomial_parent(rel)))
        yield [req]
        blocks.put(rel, hi, req.wait())
    for child in binomial_children(rel, p):    # hand each child its subtree, largest first
        hi = subtree_end(child, p)
        yield [ch.isend(blocks.take(child, hi, child), blocks.abs(child))]
    return blocks.own_block()


@algorithm("scatter", "ring",
           path=lambda m, p, n: [min(n, m.segment)] * ((p - 1) * segments(n, m.segment) + p - 2),
           formula="((p-1)·s + p - 2)·(α + min(n, segment)·β); s = max(1, ⌈n/segment⌉)",
           messages=lambda m, p, n: p * (p - 1) / 2 * segments(n, m.segment),
           volume=lambda p, n: p * (p - 1) / 2 * n)
def scatter_ring(ch: Channel, blocks: RootedBlocks, root: int, segment: int = 256 * 1024) -> Schedule:
    """Pipelined chain root -> root+1 -> ... -> root-1, farthest block first.

    The root sends the blocks of relative ranks p-1, p-2, ..., 1 (each cut in segments of
    ``segment`` bytes: s per block) to rel 1; rel k receives the blocks of k..p-1 and, one
    step behind, forwards all but its own to k+1. Steps: (p-1)·s + p-2; time
    ((p-1)·s + p-2)·(α + (n/s)β): every link streams at once; volume p(p-1)/2·n.
    """
    p, rel = ch.size, blocks.me
    if p == 1:
        return blocks.own_block()
    prev, nxt = blocks.abs(rel - 1), blocks.abs(rel + 1)
    if rel == 0:
        for r in range(p - 1, 0, -1):
            for part in blocks.parts(r, segment):
                yield [ch.isend(blocks.take(r, r + 1, 1, part), nxt)]
        return blocks.own_block()
    blocks.hold(rel, p)
    incoming = [(r, part) for r in range(p - 1, rel - 1, -1) for part in blocks.parts(r, segment)]
    forward = [(r, part) for r, part in incoming if r != rel]
    for i, (r, part) in enumerate(incoming):   # receive unit i while forwarding unit i-1
        req = ch.irecv(blocks.slot(r, r + 1, part), prev)
        step = [req]
        if 0 < i <= len(forward):
            fr, fpart = forward[i - 1]
            step.append(ch.isend(blocks.take(fr, fr + 1, rel + 1, fpart), nxt))
        yield step
        blocks.put(r, r + 1, req.wait(), part)
    return blocks.own_block()


@algorithm("scatter", "linear", path=lambda m, p, n: [n],
           formula="α + (p-1)·α/4 + (p-1)·n·β",
           messages=lambda m, p, n: p - 1,
           volume=lambda p, n: (p - 1) * n)
def scatter_linear(ch: Channel, blocks: RootedBlocks, root: int, segment: int = 0) -> Schedule:
    """Flat tree: the root sends every other rank its block directly, all in one step.

    1 step, p-1 messages posted at once by the root; time α + (p-1)·α/4 + (p-1)·nβ (the
    latencies overlap; each message still costs the root α/4 of processing, and its bytes
    leave one after another); volume (p-1)·n. Every block lands straight in its owner's
    buffer (also for ``Scatterv``: no block lists are pickled).
    """
    p, rel = ch.size, blocks.me
    if rel == 0:
        if p > 1:
            yield [ch.isend(blocks.take(r, r + 1, r), blocks.abs(r)) for r in range(1, p)]
        return blocks.own_block()
    blocks.hold(rel, rel + 1)
    req = ch.irecv(blocks.slot(rel, rel + 1), root)
    yield [req]
    blocks.put(rel, rel + 1, req.wait())
    return blocks.own_block()


@algorithm("scatter", "segment", segment=True, objects=False,
           formula="c·α/2 + (c-1)·o·α/4 + (p-1)·n·β; c = max(1, ⌈p·n/16384⌉)", messages=lambda m, p, n: p,
           volume=lambda p, n: 0, local=lambda p, n: p * n)
def scatter_segment(ch: Channel, blocks: RootedBlocks, root: int, segment: int = 0) -> Schedule:
    """Meet in the communicator's shared segment (ranks on one host): the root copies the
    p blocks into its slot and publishes the call; every other rank publishes that it is
    in the call, waits for the root's slot and copies its own block out. One step while
    the p blocks fit a slot (more in slot-sized pieces of the whole); time α/2 + n·β at
    each rank, (p-1)·n·β at the root. ``Scatterv`` (blocks of several sizes) runs the
    binomial tree.
    """
    if not isinstance(blocks, EqualBlocks):
        return (yield from scatter_binomial(ch, blocks, root, segment))
    seg = ch.segment()
    p, rank = ch.size, ch.rank
    sig = ch.tag >> SEQ_BITS
    b = blocks.b
    if rank == root and blocks.dst is not None:   # the root's own block: a local copy
        blocks.dst[...] = blocks.store.view(root)
    parts = pieces(p * b, seg.slot)
    for k, part in zip(seg.reserve(len(parts)), parts):
        lo, hi = part.start, part.stop
        yield [seg.free_for(ch, k)]              # (the area k uses was read by everyone)
        if rank == root:
            area = seg.area(rank, k, hi - lo)
            for r in range(lo // b if b else 0, (hi + b - 1) // b if b else 0):
                first, last = max(lo, r * b), min(hi, (r + 1) * b)
                area[first - lo:last - lo] = blocks.store.view(r)[first - r * b:last - r * b]
            seg.publish(k, sig, root=True, call=ch)   # the others wait for this slot alone
            seg.finished(k)
            continue
        seg.publish(k, sig, call=ch, quiet=True)     # (nobody waits for this slot)
        yield [seg.wait_for(ch, k, (root,))]
        seg.check(k, sig, (root,), ch)
        first, last = max(lo, rank * b), min(hi, (rank + 1) * b)
        if first < last:
            blocks.dst[first - rank * b:last - rank * b] = \
                seg.area(root, k, hi - lo)[first - lo:last - lo]
        seg.finished(k)
    return None


# -- intercommunicators (two groups; see minimpi.coll.twogroups) -------------------------
@algorithm("scatter", "direct", kinds=(INTER,),
           formula="α + n·β", messages=lambda m, p, n: p, volume=lambda p, n: n)
def scatter_direct(remote: Channel, local: Channel, blocks: Optional[Sequence[Any]],
                   recv: Any, root: int) -> Schedule:
    """The root sends block i straight to rank i of the other group (one step, p
    messages): α + n·β for n bytes in all.

    The receiver takes it into ``recv``. Object mode: returns the received object.
    """
    if root == ROOT:
        yield [remote.isend(blocks[i], i) for i in range(remote.size)]
        return None
    if root == PROC_NULL:
        return None
    into = None if remote.objects else recv
    req = remote.irecv(into, root)
    yield [req]
    return received(req, into)
