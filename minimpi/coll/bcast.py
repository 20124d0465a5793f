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

from .cost import ceil_log2, default_model, segments, tree_volume
from .data import as_bytes, received, segment_bounds
from .registry import algorithm
from .schedule import Channel, Schedule


@algorithm("bcast", "binomial",
           cost=lambda m, p, n: ceil_log2(p) * (m.alpha + n * m.beta),
           messages=lambda m, p, n: p - 1,
           volume=lambda p, n: (p - 1) * n)
def bcast_binomial(ch: Channel, data: Any, root: int) -> Schedule:
    """Binomial tree: ceil(log2 p) steps, p-1 messages; time ceil(log2 p)·(α + nβ);
    volume (p-1)·n.

    Step k (mask = 2^k): every rank that already has the data (rel < mask) sends it to
    rel + mask. Receiving happens first: a rank waits for its parent, the rank that differs
    in its lowest set bit, then sends to children rel + mask for each lower mask.
    """
    p, rel = ch.size, (ch.rank - root) % ch.size
    into = None if ch.objects else data   # objects arrive as objects
    mask = 1
    while mask < p:                       # find the parent: lowest set bit of rel
        if rel & mask:
            parent = (rel - mask + root) % p
            req = ch.irecv(into, parent)
            yield [req]
            data = received(req, into)
            break
        mask <<= 1
    mask >>= 1
    while mask > 0:                       # send down to children, largest subtree first
        if rel + mask < p:
            yield [ch.isend(data, (rel + mask + root) % p)]
        mask >>= 1
    return data


@algorithm("bcast", "ring",
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
    p, rel = ch.size, (ch.rank - root) % ch.size
    if p == 1:
        return data
    prev, nxt = (ch.rank - 1) % p, (ch.rank + 1) % p
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


@algorithm("bcast", "scatter_allgather", objects=False,
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
    p, rel = ch.size, (ch.rank - root) % ch.size
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

    # Scatter: each rank receives the chunks of its whole subtree from its parent.
    mask = 1
    while mask < p:
        if rel & mask:
            src = (rel - mask + root) % p
            piece = span(rel, min(mask, p - rel))
            yield [ch.irecv(piece, src)]
            break
        mask <<= 1
    mask >>= 1
    while mask > 0:
        if rel + mask < p:
            piece = span(rel + mask, min(mask, p - rel - mask))
            yield [ch.isend(piece, (rel + mask + root) % p)]
        mask >>= 1
    # Ring allgather of the p chunks: in step k, pass on the chunk received in step k-1.
    left, right = (ch.rank - 1) % p, (ch.rank + 1) % p
    for k in range(p - 1):
        send_rel = (rel - k) % p
        recv_rel = (rel - k - 1) % p
        yield [ch.irecv(span(recv_rel, 1), left), ch.isend(span(send_rel, 1), right)]
    return data


class BcastMethods:
    """``Bcast``/``bcast``/``Ibcast`` of ``Intracomm``."""

    def Bcast(self, buf: Any, root: int = 0, algorithm: str = None) -> None:
        """Broadcast the root's buffer into every rank's ``buf`` (``algorithm``: see registry)."""
        self._ibcast(buf, root, algorithm, "Bcast", False)

    def Ibcast(self, buf: Any, root: int = 0, algorithm: str = None):
        return self._ibcast(buf, root, algorithm, "Ibcast", True)

    def _ibcast(self, buf, root, algorithm, call, nonblocking):
        from ..buffers import parse_buffer
        from .common import check_root, execute
        check_root(self, root, call)
        spec = parse_buffer(buf, writable=self.rank != root, call=call, arg="buf")
        return execute(self, "bcast", call, spec.nbytes,
                       lambda fn, ch: fn(ch, spec.array, root), root=root, algorithm=algorithm,
                       nonblocking=nonblocking, finalize=lambda _: spec.finish())

    def bcast(self, obj: Any = None, root: int = 0, algorithm: str = None) -> Any:
        """Broadcast a Python object from ``root``; every rank returns it."""
        return self._bcast_obj(obj, root, algorithm, "bcast", False)

    def ibcast(self, obj: Any = None, root: int = 0, algorithm: str = None):
        return self._bcast_obj(obj, root, algorithm, "ibcast", True)

    def _bcast_obj(self, obj, root, algorithm, call, nonblocking):
        from .common import check_root, execute
        check_root(self, root, call)
        return execute(self, "bcast", call, 0,
                       lambda fn, ch: fn(ch, obj if self.rank == root else None, root),
                       root=root, algorithm=algorithm, objects=True, nonblocking=nonblocking)
