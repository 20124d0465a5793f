"""Gather: every rank's block ends up, in rank order, on the root.

Three algorithms, each written once for ``Gather``, ``Gatherv`` and the object ``gather``
(the mirror images of the scatter algorithms). Ranks are renumbered relative to the root
(``rel = (rank - root) mod p``); what a message carries - a contiguous run of bytes, or a
list of blocks - is decided by :class:`~minimpi.coll.blocks.RootedBlocks`.

Costs use ``n`` = bytes of one rank's block (0 for ``Gatherv`` and objects, where only the
root knows every size, so every rank chooses on ``p`` alone).
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

from ..constants import PROC_NULL, ROOT
from .blocks import EqualBlocks, RootedBlocks
from .cost import doubling_blocks, segments, tree_volume
from .peers import binomial_children, binomial_parent, subtree_end
from .registry import INTER, algorithm
from .schedule import Channel, Schedule
from .segment import pieces
from .slots import SEQ_BITS


@algorithm("gather", "binomial", path=lambda m, p, n: doubling_blocks(n, p),
           formula="⌈log2 p⌉·α + (p-1)·n·β",
           messages=lambda m, p, n: p - 1,
           volume=lambda p, n: tree_volume(p) * n)
def gather_binomial(ch: Channel, blocks: RootedBlocks, root: int, segment: int = 0) -> Schedule:
    """Binomial tree: ceil(log2 p) steps, p-1 messages; time ceil(log2 p)·α + (p-1)·nβ;
    volume T(p)·n, T(p) = p/2·log2 p for p a power of two (each block is forwarded up
    the tree: :func:`~minimpi.coll.cost.tree_volume`).

    Step k (mask = 2^k): a rank whose bit k is set sends everything it holds (the blocks of
    its subtree ``[rel, rel + mask)``) to its parent ``rel - mask`` and is done; the others
    receive the subtree of child ``rel + mask``.
    """
    p, rel = ch.size, blocks.me
    hi = subtree_end(rel, p)                       # my subtree: [rel, hi)
    blocks.hold(rel, hi)
    for child in reversed(binomial_children(rel, p)):   # nearest child first
        c_hi = subtree_end(child, p)
        req = ch.irecv(blocks.slot(child, c_hi), blocks.abs(child))
        yield [req]
        blocks.put(child, c_hi, req.wait())
    if rel != 0:                                   # send my subtree to the parent
        parent = binomial_parent(rel)
        yield [ch.isend(blocks.take(rel, hi, parent), blocks.abs(parent))]
    return blocks.gathered() if rel == 0 else None


@algorithm("gather", "ring",
           path=lambda m, p, n: [min(n, m.segment)] * ((p - 1) * segments(n, m.segment) + p - 2),
           formula="((p-1)·s + p - 2)·(α + min(n, segment)·β); s = max(1, ⌈n/segment⌉)",
           messages=lambda m, p, n: p * (p - 1) / 2 * segments(n, m.segment),
           volume=lambda p, n: p * (p - 1) / 2 * n)
def gather_ring(ch: Channel, blocks: RootedBlocks, root: int, segment: int = 256 * 1024) -> Schedule:
    """Pipelined chain root-1 -> ... -> root+1 -> root, nearest block first.

    Rel k sends its own block (in s segments of ``segment`` bytes) to k-1, then forwards,
    one step behind, the blocks of k+1..p-1 as they arrive from k+1; the root receives the
    blocks of 1..p-1 in order. Steps: (p-1)·s + p-2; time ((p-1)·s + p-2)·(α + (n/s)β);
    volume p(p-1)/2·n.
    """
    p, rel = ch.size, blocks.me
    if p == 1:
        return blocks.gathered()
    prev, nxt = blocks.abs(rel - 1), blocks.abs(rel + 1)
    if rel == 0:
        for r in range(1, p):
            for part in blocks.parts(r, segment):
                req = ch.irecv(blocks.slot(r, r + 1, part), nxt)
                yield [req]
                blocks.put(r, r + 1, req.wait(), part)
        return blocks.gathered()
    blocks.hold(rel, p)
    outgoing = [(r, part) for r in range(rel, p) for part in blocks.parts(r, segment)]
    incoming = [(r, part) for r, part in outgoing if r != rel]
    for i, (r, part) in enumerate(outgoing):       # send unit i while receiving unit i
        step = [ch.isend(blocks.take(r, r + 1, rel - 1, part), prev)]
        req = None
        if i < len(incoming):
            ir, ipart = incoming[i]
            req = ch.irecv(blocks.slot(ir, ir + 1, ipart), nxt)
            step.append(req)
        yield step
        if req is not None:
            blocks.put(ir, ir + 1, req.wait(), ipart)
    return None


@algorithm("gather", "linear", path=lambda m, p, n: [n],
           formula="α + (p-1)·α/4 + (p-1)·n·β",
           messages=lambda m, p, n: p - 1,
           volume=lambda p, n: (p - 1) * n)
def gather_linear(ch: Channel, blocks: RootedBlocks, root: int, segment: int = 0) -> Schedule:
    """Flat tree: every rank sends its block straight to the root, all in one step.

    1 step, p-1 receives posted at once by the root; time α + (p-1)·α/4 + (p-1)·nβ (the
    latencies overlap; each message still costs the root α/4 of processing, and its bytes
    arrive one after another); volume (p-1)·n. Every block lands straight in the root's
    buffer (also for ``Gatherv``: no block lists are pickled).
    """
    p, rel = ch.size, blocks.me
    if rel == 0:
        reqs = [ch.irecv(blocks.slot(r, r + 1), blocks.abs(r)) for r in range(1, p)]
        if reqs:
            yield reqs
        for r, req in zip(range(1, p), reqs):
            blocks.put(r, r + 1, req.wait())
        return blocks.gathered()
    blocks.hold(rel, rel + 1)
    yield [ch.isend(blocks.take(rel, rel + 1, 0), root)]
    return None


@algorithm("gather", "segment", segment=True, objects=False,
           formula="c·α/2 + (c-1)·o·α/4 + (p-1)·n·β; c = max(1, ⌈n/16384⌉)", messages=lambda m, p, n: p,
           volume=lambda p, n: 0, local=lambda p, n: p * n)
def gather_segment(ch: Channel, blocks: RootedBlocks, root: int, segment: int = 0) -> Schedule:
    """Meet in the communicator's shared segment (ranks on one host): every rank but the
    root copies its block into its slot and publishes the call (and goes on); the root
    waits until all have and copies the p-1 blocks into its receive buffer. One step for
    blocks that fit a slot (larger ones in slot-sized pieces); time α/2 + (p-1)·n·β at
    the root. ``Gatherv`` (blocks of several sizes, which only the root knows) runs the
    binomial tree.
    """
    if not isinstance(blocks, EqualBlocks):
        return (yield from gather_binomial(ch, blocks, root, segment))
    seg = ch.segment()
    p, rank = ch.size, ch.rank
    sig = ch.tag >> SEQ_BITS
    everyone = range(p)
    parts = pieces(blocks.b, seg.slot)
    for k, part in zip(seg.reserve(len(parts)), parts):
        lo, hi = part.start, part.stop
        yield [seg.free_for(ch, k)]              # (the area k uses was read by the root)
        if rank != root:
            seg.area(rank, k, hi - lo)[...] = blocks.src[lo:hi]
            seg.publish(k, sig, call=ch)
            seg.finished(k)
            continue
        seg.publish(k, sig, call=ch)
        yield [seg.wait_for(ch, k, everyone)]
        seg.check(k, sig, everyone, ch)
        for r in everyone:                       # (the root's store: its receive buffer)
            if r != rank:
                blocks.store.view(r)[lo:hi] = seg.area(r, k, hi - lo)
        seg.finished(k)
    return None


# -- intercommunicators (two groups; see minimpi.coll.twogroups) -------------------------
@algorithm("gather", "direct", kinds=(INTER,),
           formula="α + n·β", messages=lambda m, p, n: p, volume=lambda p, n: n)
def gather_direct(remote: Channel, local: Channel, send: Any,
                  blocks: Optional[Sequence[Any]], root: int) -> Schedule:
    """Each rank of the other group sends its block straight to the root (one step, p
    messages): α + n·β for n bytes in all.

    Rank i's ``send`` lands in ``blocks[i]`` at the root. Object mode: the root returns the
    list of objects; others None.
    """
    if root == ROOT:
        if remote.objects:
            reqs = [remote.irecv(None, i) for i in range(remote.size)]
            yield reqs
            return [r.wait() for r in reqs]
        yield [remote.irecv(blocks[i], i) for i in range(remote.size)]
        return None
    if root != PROC_NULL:
        yield [remote.isend(send, root)]
    return None
