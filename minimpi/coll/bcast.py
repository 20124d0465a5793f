"""Broadcast: the root's data ends up on every rank.

Three algorithms. In each, ranks are renumbered relative to the root (``rel = (rank - root)
mod p``) so that the root is relative rank 0 and the schedule is the same for every root.

``data`` is a flat numpy array (``Bcast``: every rank passes its buffer, the root's is sent,
the others' are filled) or, for the object ``bcast``, the root's object (``None`` elsewhere).
Each schedule returns the broadcast object in object mode.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .blocks import as_bytes, segment_bounds
from .cost import ceil_log2, default_model, segments, tree_volume
from .peers import (
    absolute,
    binomial_children,
    binomial_parent,
    relative,
    ring_neighbours,
    subtree_end,
)
from .reduction import received
from .registry import algorithm
from .schedule import Channel, Schedule


@algorithm("bcast", "binomial",
           formula="⌈log2 p⌉·(α + n·β)",
           cost=lambda m, p, n: ceil_log2(p) * (m.alpha + n * m.beta),
           messages=lambda m, p, n: p - 1,
           volume=lambda p, n: (p - 1) * n)
def bcast_binomial(ch: Channel, data: Any, root: int) -> Schedule:
    """Binomial tree: ceil(log2 p) steps, p-1 messages; time ceil(log2 p)·(α + nβ);
    volume (p-1)·n.

    Step k (mask = 2^k): every rank that already has the data (rel < mask) sends it to
    rel + mask. So a rank first waits for its parent, the rank that differs in its lowest
    set bit, then sends to its children rel + mask for each lower mask, largest first
    (:mod:`~minimpi.coll.peers` draws the tree).
    """
    p, rel = ch.size, relative(ch.rank, root, ch.size)
    into = None if ch.objects else data   # objects arrive as objects
    if rel != 0:                          # receive from the parent
        req = ch.irecv(into, absolute(binomial_parent(rel), root, p))
        yield [req]
        data = received(req, into)
    for child in binomial_children(rel, p):   # send down, largest subtree first
        yield [ch.isend(data, absolute(child, root, p))]
    return data


@algorithm("bcast", "ring",
           formula="(p + s - 2)·(α + min(n, segment)·β); s = max(1, ⌈n/segment⌉)",
           cost=lambda m, p, n: (p - 1 + segments(n, m.segment) - 1)
           * (m.alpha + min(n, m.segment) * m.beta),
           messages=lambda m, p, n: (p - 1) * segments(n, m.segment),
           volume=lambda p, n: (p - 1) * n)
def bcast_ring(ch: Channel, data: Any, root: int, segment: Optional[int] = None) -> Schedule:
    """Pipelined chain: root -> root+1 -> ... -> root-1, in segments (default: the cost model's).

    With s segments: p-1+s-1 steps; time (p+s-2)·(α + (n/s)β), so for large n every link
    streams at once and the time approaches nβ; volume (p-1)·n. Objects travel as one
    segment.
    """
    p, rel = ch.size, relative(ch.rank, root, ch.size)
    if p == 1:
        return data
    prev, nxt = ring_neighbours(ch.rank, p)
    last = rel == p - 1
    if ch.objects:
        if rel != 0:
            req = ch.irecv(None, prev)
            yield [req]
            data = req.wait()
        if not last:
            yield [ch.isend(data, nxt)]
        return data
    raw = as_bytes(data)
    per = segment or default_model().segment
    pieces = [raw[lo:hi] for lo, hi in segment_bounds(raw.size, per)]
    if rel == 0:
        for piece in pieces:
            yield [ch.isend(piece, nxt)]
        return data
    # receive segment k while forwarding segment k-1: one step per segment
    pending = None
    for piece in pieces:
        step = [ch.irecv(piece, prev)]
        if pending is not None and not last:
            step.append(ch.isend(pending, nxt))
        yield step
        pending = piece
    if not last:
        yield [ch.isend(pending, nxt)]
    return data


@algorithm("bcast", "scatter_allgather",
           formula="(⌈log2 p⌉ + p - 1)·α + 2·(p-1)/p·n·β", objects=False,
           cost=lambda m, p, n: (ceil_log2(p) + p - 1) * m.alpha + 2 * (p - 1) / p * n * m.beta,
           messages=lambda m, p, n: (p - 1) + p * (p - 1),
           volume=lambda p, n: tree_volume(p) * n / p + (p - 1) * n)
def bcast_scatter_allgather(ch: Channel, data: np.ndarray, root: int) -> Schedule:
    """Van de Geijn: binomial scatter of p chunks, then a ring allgather of the chunks.

    Steps: ceil(log2 p) + p-1; time (log2 p + p-1)·α + 2·((p-1)/p)·nβ - about twice the
    bandwidth of the binomial tree for large n, at the price of more messages - but volume
    T(p)·n/p + (p-1)·n (T: :func:`~minimpi.coll.cost.tree_volume`), more than the tree's
    (p-1)·n, so where ranks share cores it loses.
    """
    p, rel = ch.size, relative(ch.rank, root, ch.size)
    raw = as_bytes(data)
    n = raw.size
    if p == 1 or n == 0:
        return data
    chunk = -(-n // p)

    def span(first_rel: int, count: int):
        """Bytes of the chunks of relative ranks first_rel..first_rel+count-1."""
        lo = min(n, first_rel * chunk)
        hi = min(n, (first_rel + count) * chunk)
        return raw[lo:hi]

    # Scatter: each rank receives the chunks of its whole subtree from its parent and hands
    # each child the chunks of the child's subtree.
    ch.phase("binomial scatter")
    if rel != 0:
        piece = span(rel, subtree_end(rel, p) - rel)
        yield [ch.irecv(piece, absolute(binomial_parent(rel), root, p))]
    for child in binomial_children(rel, p):
        piece = span(child, subtree_end(child, p) - child)
        yield [ch.isend(piece, absolute(child, root, p))]
    # Ring allgather of the p chunks: in step k, pass on the chunk received in step k-1.
    ch.phase("ring allgather")
    left, right = ring_neighbours(ch.rank, p)
    for k in range(p - 1):
        send_rel = (rel - k) % p
        recv_rel = (rel - k - 1) % p
        yield [ch.irecv(span(recv_rel, 1), left), ch.isend(span(send_rel, 1), right)]
    return data
