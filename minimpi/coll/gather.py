"""Gather: every rank's block ends up, in rank order, on the root.

Three algorithms, each written once for ``Gather``, ``Gatherv`` and the object ``gather``
(the mirror images of the scatter algorithms). Ranks are renumbered relative to the root
(``rel = (rank - root) mod p``); what a message carries - a contiguous run of bytes, or a
list of blocks - is decided by :class:`~minimpi.coll.data.RootedBlocks`.

Costs use ``n`` = bytes of one rank's block (0 for ``Gatherv`` and objects, where only the
root knows every size, so every rank chooses on ``p`` alone).
"""
from __future__ import annotations

from typing import Any

from .cost import ceil_log2, default_model, segments, tree_volume
from .data import RootedBlocks, as_bytes
from .registry import algorithm
from .schedule import Channel, Schedule


@algorithm("gather", "binomial",
           cost=lambda m, p, n: ceil_log2(p) * m.alpha + (p - 1) * n * m.beta,
           messages=lambda m, p, n: p - 1,
           volume=lambda p, n: tree_volume(p) * n)
def gather_binomial(ch: Channel, blocks: RootedBlocks, root: int, segment: int = 0) -> Schedule:
    """Binomial tree: ceil(log2 p) steps, p-1 messages; time ceil(log2 p)·α + (p-1)·nβ;
    volume T(p)·n, T(p) = p/2·log2 p for p a power of two (each block is forwarded up
    the tree: :func:`~minimpi.coll.cost.tree_volume`).

    Step k (mask = 2^k): a rank whose bit k is set sends everything it holds (the blocks of
    its subtree ``[rel, rel + mask)``) to ``rel - mask`` and is done; the others receive
    the subtree of child ``rel + mask``.
    """
    p, rel = ch.size, blocks.me
    low = rel & -rel if rel else p                 # size of my subtree (lowest set bit)
    hi = min(p, rel + low)
    blocks.hold(rel, hi)
    mask = 1
    while mask < p:
        if rel & mask:                             # send my subtree to the parent
            yield [ch.isend(blocks.take(rel, hi, rel - mask), blocks.abs(rel - mask))]
            break
        child = rel + mask
        if child < p:                              # collect the child's subtree
            c_hi = min(p, child + mask)
            req = ch.irecv(blocks.slot(child, c_hi), blocks.abs(child))
            yield [req]
            blocks.put(child, c_hi, req.wait())
        mask <<= 1
    return blocks.gathered() if rel == 0 else None


@algorithm("gather", "ring",
           cost=lambda m, p, n: 0.0 if p == 1 else
           ((p - 1) * segments(n, m.segment) + p - 2) * (m.alpha + min(n, m.segment) * m.beta),
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


@algorithm("gather", "linear",
           cost=lambda m, p, n: 0.0 if p == 1 else
           m.alpha + (p - 1) * m.alpha / 4 + (p - 1) * n * m.beta,
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


class GatherMethods:
    """``Gather``/``Gatherv``/``gather`` and their ``I`` variants."""

    def Gather(self, sendbuf: Any, recvbuf: Any, root: int = 0, algorithm: str = None) -> None:
        """Rank i's ``sendbuf`` lands in block i of the root's ``recvbuf`` (``MPI.IN_PLACE``
        as the root's ``sendbuf``: its block is already in place)."""
        self._gather_buf(sendbuf, recvbuf, root, algorithm, "Gather", False, False)

    def Igather(self, sendbuf: Any, recvbuf: Any, root: int = 0, algorithm: str = None):
        return self._gather_buf(sendbuf, recvbuf, root, algorithm, "Igather", False, True)

    def Gatherv(self, sendbuf: Any, recvbuf: Any, root: int = 0, algorithm: str = None) -> None:
        """Like Gather with per-rank counts: the root passes ``[buf, (counts, displs), TYPE]``."""
        self._gather_buf(sendbuf, recvbuf, root, algorithm, "Gatherv", True, False)

    def Igatherv(self, sendbuf: Any, recvbuf: Any, root: int = 0, algorithm: str = None):
        return self._gather_buf(sendbuf, recvbuf, root, algorithm, "Igatherv", True, True)

    def _gather_buf(self, sendbuf, recvbuf, root, algorithm, call, vector, nonblocking):
        from ..buffers import parse_buffer, parse_vbuffer
        from ..constants import IN_PLACE
        from .common import check_equal_blocks, check_root, execute
        check_root(self, root, call)
        p, at_root = self.size, self.rank == root
        send = parse_buffer(sendbuf, writable=False, call=call, arg="sendbuf", allow_in_place=at_root)
        in_place = send is IN_PLACE
        recv = parse_vbuffer(recvbuf, p, writable=True, call=call, arg="recvbuf") if at_root else None
        if at_root and not vector:
            check_equal_blocks(self, call, recv, "recvbuf", None if in_place else send, "sendbuf",
                               "Gatherv")
        model = default_model()
        if vector:
            known = {a: recv.block(a) for a in range(p)} if at_root else {}
            own = None if in_place else send.array  # the root's own is copied at the end
            nbytes = 0
            make = lambda ch: RootedBlocks.listed(ch, root, known=known, own=own)
        else:
            nbytes = recv.block_nbytes(0) if in_place else send.nbytes
            everything = as_bytes(recv.array)[:p * nbytes] if at_root else None
            src = None if in_place else as_bytes(send.array)
            if at_root and src is not None:         # the root's own block: a local copy
                everything[root * nbytes:(root + 1) * nbytes] = src
            make = lambda ch: RootedBlocks.fixed(ch, root, nbytes, everything=everything, src=src)
        finish = (lambda _: recv.finish()) if at_root else (lambda _: None)
        return execute(self, "gather", call, nbytes,
                       lambda fn, ch: fn(ch, make(ch), root, model.segment),
                       root=root, algorithm=algorithm, nonblocking=nonblocking, finalize=finish)

    def gather(self, sendobj: Any, root: int = 0, algorithm: str = None) -> Any:
        """The root returns the list of every rank's ``sendobj`` in rank order; others None."""
        return self._gather_obj(sendobj, root, algorithm, "gather", False)

    def igather(self, sendobj: Any, root: int = 0, algorithm: str = None):
        return self._gather_obj(sendobj, root, algorithm, "igather", True)

    def _gather_obj(self, sendobj, root, algorithm, call, nonblocking):
        from .common import check_root, execute
        check_root(self, root, call)
        model = default_model()
        return execute(self, "gather", call, 0,
                       lambda fn, ch: fn(ch, RootedBlocks.listed(ch, root, own=sendobj, objects=True),
                                         root, model.segment),
                       root=root, algorithm=algorithm, objects=True, nonblocking=nonblocking)
