"""Scatter: the root's i-th block ends up on rank i.

Three algorithms, each written once for ``Scatter``, ``Scatterv`` and the object
``scatter``. Ranks are renumbered relative to the root (``rel = (rank - root) mod p``) so
the schedule is the same for every root; relative rank ``r`` receives the root's block of
absolute rank ``(r + root) mod p``. What a message between two ranks carries - a contiguous
run of bytes, or a list of blocks - is decided by :class:`~minimpi.coll.data.RootedBlocks`.

Costs use ``n`` = bytes of one rank's block (0 for ``Scatterv`` and objects, where only the
root knows every size, so every rank chooses on ``p`` alone).
"""
from __future__ import annotations

from typing import Any


from .cost import ceil_log2, default_model, segments, tree_volume
from .data import RootedBlocks, as_bytes
from .registry import algorithm
from .schedule import Channel, Schedule


@algorithm("scatter", "binomial",
           cost=lambda m, p, n: ceil_log2(p) * m.alpha + (p - 1) * n * m.beta,
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
    mask = 1
    while mask < p:                            # receive the subtree from the parent
        if rel & mask:
            hi = min(p, rel + mask)
            blocks.hold(rel, hi)
            req = ch.irecv(blocks.slot(rel, hi), blocks.abs(rel - mask))
            yield [req]
            blocks.put(rel, hi, req.wait())
            break
        mask <<= 1
    mask >>= 1
    while mask > 0:                            # hand each child its subtree
        child = rel + mask
        if child < p:
            hi = min(p, child + mask)
            yield [ch.isend(blocks.take(child, hi, child), blocks.abs(child))]
        mask >>= 1
    return blocks.own_block()


@algorithm("scatter", "ring",
           cost=lambda m, p, n: 0.0 if p == 1 else
           ((p - 1) * segments(n, m.segment) + p - 2) * (m.alpha + min(n, m.segment) * m.beta),
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


@algorithm("scatter", "linear",
           cost=lambda m, p, n: 0.0 if p == 1 else
           m.alpha + (p - 1) * m.alpha / 4 + (p - 1) * n * m.beta,
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


class ScatterMethods:
    """``Scatter``/``Scatterv``/``scatter`` and their ``I`` variants."""

    def Scatter(self, sendbuf: Any, recvbuf: Any, root: int = 0, algorithm: str = None) -> None:
        """Send block i of the root's ``sendbuf`` to rank i's ``recvbuf`` (``MPI.IN_PLACE``
        as the root's ``recvbuf`` leaves its block where it is)."""
        self._scatter_buf(sendbuf, recvbuf, root, algorithm, "Scatter", False, False)

    def Iscatter(self, sendbuf: Any, recvbuf: Any, root: int = 0, algorithm: str = None):
        return self._scatter_buf(sendbuf, recvbuf, root, algorithm, "Iscatter", False, True)

    def Scatterv(self, sendbuf: Any, recvbuf: Any, root: int = 0, algorithm: str = None) -> None:
        """Like Scatter with per-rank counts: the root passes ``[buf, (counts, displs), TYPE]``."""
        self._scatter_buf(sendbuf, recvbuf, root, algorithm, "Scatterv", True, False)

    def Iscatterv(self, sendbuf: Any, recvbuf: Any, root: int = 0, algorithm: str = None):
        return self._scatter_buf(sendbuf, recvbuf, root, algorithm, "Iscatterv", True, True)

    def _scatter_buf(self, sendbuf, recvbuf, root, algorithm, call, vector, nonblocking):
        from ..buffers import parse_buffer, parse_vbuffer
        from ..constants import IN_PLACE
        from .common import check_equal_blocks, check_root, execute
        check_root(self, root, call)
        p, at_root = self.size, self.rank == root
        recv = parse_buffer(recvbuf, writable=True, call=call, arg="recvbuf", allow_in_place=at_root)
        in_place = recv is IN_PLACE
        send = parse_vbuffer(sendbuf, p, writable=False, call=call, arg="sendbuf") if at_root else None
        if at_root and not vector:
            check_equal_blocks(self, call, send, "sendbuf", None if in_place else recv, "recvbuf",
                               "Scatterv")
        model = default_model()
        if vector:
            known = {} if in_place else {self.rank: recv.array}
            items = [send.block(a) for a in range(p)] if at_root else None
            if at_root and in_place:
                items[root] = None
            nbytes = 0
            make = lambda ch: RootedBlocks.listed(ch, root, items=items, known=known)
        else:
            nbytes = send.block_nbytes(0) if in_place else recv.nbytes
            everything = as_bytes(send.array)[:p * nbytes] if at_root else None
            dst = None if in_place else as_bytes(recv.array)
            make = lambda ch: RootedBlocks.fixed(ch, root, nbytes, everything=everything, dst=dst)
        finish = (lambda _: None) if in_place else (lambda _: recv.finish())
        return execute(self, "scatter", call, nbytes,
                       lambda fn, ch: fn(ch, make(ch), root, model.segment),
                       root=root, algorithm=algorithm, nonblocking=nonblocking, finalize=finish)

    def scatter(self, sendobj: Any = None, root: int = 0, algorithm: str = None) -> Any:
        """The root's ``sendobj`` is a sequence of p objects; rank i returns item i."""
        return self._scatter_obj(sendobj, root, algorithm, "scatter", False)

    def iscatter(self, sendobj: Any = None, root: int = 0, algorithm: str = None):
        return self._scatter_obj(sendobj, root, algorithm, "iscatter", True)

    def _scatter_obj(self, sendobj, root, algorithm, call, nonblocking):
        from ..errors import ArgumentError
        from .common import check_root, execute
        check_root(self, root, call)
        items = None
        if self.rank == root:
            try:
                items = list(sendobj)
            except TypeError:
                items = None
            if items is None or len(items) != self.size:
                what = (f"{len(items)} items" if items is not None else
                        f"{type(sendobj).__name__}, not a sequence")
                raise ArgumentError(
                    f"rank {self.rank}: {call}(root={root}): sendobj must be a sequence of "
                    f"{self.size} objects (one per rank), got {what}")
        model = default_model()
        return execute(self, "scatter", call, 0,
                       lambda fn, ch: fn(ch, RootedBlocks.listed(ch, root, items=items, objects=True),
                                         root, model.segment),
                       root=root, algorithm=algorithm, objects=True, nonblocking=nonblocking)
