"""Block containers and buffer slicing for the collective algorithms: never a schedule.

Every algorithm in ``minimpi/coll`` spells out who sends what to whom in which step; how a
buffer is cut, viewed or stored is shared and lives here:

* bytes - :func:`as_bytes`: the bytes of an array as a flat ``uint8`` array (no copy when
  it is contiguous).
* splitting - :func:`running_sum` (offsets of given counts), :func:`even_bounds` (offsets
  of ``parts`` nearly equal blocks; the one way a vector is cut in p blocks) and
  :func:`segment_bounds` (pipeline pieces of at most ``segment`` items).
* block containers, because their jobs differ:

  - :class:`Blocks` - the p blocks of an allgather/alltoall, all laid out on every rank:
    views of a numpy buffer at (counts, displs), or the items of a list of p objects.
    ``pack``/``target``/``unpack`` turn a list of block indices into one message
    (zero-copy when the blocks lie back to back).
  - :class:`RootedBlocks` - the blocks of a scatter/gather, indexed by rank *relative to
    the root*; a rank holds only the range of its subtree or chain tail. Two kinds:
    :class:`EqualBlocks` (``Scatter``/``Gather``: equal blocks of raw bytes, zero-copy
    runs) and :class:`ListedBlocks` (``Scatterv``/``Gatherv``, where only the root knows
    every size, and the object ``scatter``/``gather``: lists of blocks, pickled).

Object messages never need wrapping: a channel in object mode pickles everything, numpy
arrays included (:meth:`~minimpi.coll.schedule.Channel.isend`).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import CollectiveMismatchError
from ..p2p.request import Request

#: a byte range of one block (pipelining cuts a block in parts); None: the whole block
Part = Optional[Tuple[int, int]]


# =================================================================================== bytes
def as_bytes(array: np.ndarray) -> np.ndarray:
    """The bytes of an array as a flat uint8 array: a view when it is contiguous, else a
    contiguous copy."""
    if array.ndim != 1 or not array.flags.c_contiguous:
        array = np.ascontiguousarray(array).reshape(-1)
    if array.dtype == np.uint8:
        return array
    return array.view(np.uint8) if array.size else np.empty(0, np.uint8)


# =============================================================================== splitting
def running_sum(counts: Sequence[int]) -> List[int]:
    """``[0, c0, c0+c1, ...]`` (len(counts) + 1 offsets)."""
    out, acc = [0], 0
    for c in counts:
        acc += c
        out.append(acc)
    return out


def even_bounds(n: int, parts: int, unit: int = 1) -> List[int]:
    """Offsets (``parts + 1`` of them) splitting ``n`` items into ``parts`` blocks whose sizes
    differ by at most one item (the first ``n % parts`` get the extra one), scaled by ``unit``
    elements per item. Block i is ``[bounds[i], bounds[i + 1])``."""
    base, extra = divmod(n, parts)
    return [o * unit for o in running_sum([base + (i < extra) for i in range(parts)])]


def segment_bounds(n: int, segment: int) -> List[Tuple[int, int]]:
    """Cut ``n`` items in pieces of at most ``segment`` (at least one piece, maybe empty)."""
    segment = max(1, segment)
    return [(lo, min(n, lo + segment)) for lo in range(0, n, segment)] or [(0, 0)]


# ================================================================================== Blocks
class Blocks:
    """The p blocks of an allgather/alltoall buffer, or of a list of Python objects.

    Buffer mode: ``array`` (flat numpy) with ``counts``/``displs`` in *elements* of
    ``array``. Object mode: ``items`` (a list of p objects). A message carrying several
    blocks is one numpy array (a view when the blocks are back to back in memory in that
    order, else a packed copy) or a list of the objects.
    """

    __slots__ = ("array", "counts", "displs", "items")

    def __init__(self, array: Optional[np.ndarray] = None, counts: Sequence[int] = (),
                 displs: Sequence[int] = (), items: Optional[List[Any]] = None) -> None:
        self.array = array
        self.counts = list(counts)
        self.displs = list(displs)
        self.items = items

    @classmethod
    def of_vbuffer(cls, spec: Any) -> "Blocks":
        """Blocks over a parsed :class:`~minimpi.data.buffers.VBufSpec` (counts in elements)."""
        k = spec.datatype.base_count
        return cls(spec.array, [c * k for c in spec.counts], [d * k for d in spec.displs])

    @classmethod
    def uniform(cls, array: np.ndarray, p: int) -> "Blocks":
        """p equal blocks back to back over ``array``."""
        b = array.size // p
        return cls(array, [b] * p, [i * b for i in range(p)])

    @property
    def is_object(self) -> bool:
        return self.items is not None

    def __len__(self) -> int:
        return len(self.items) if self.items is not None else len(self.counts)

    def view(self, i: int) -> np.ndarray:
        d = self.displs[i]
        return self.array[d:d + self.counts[i]]

    def get(self, i: int) -> Any:
        return self.items[i] if self.items is not None else self.view(i)

    def put(self, i: int, value: Any) -> None:
        """Store block ``i`` (an object, or a copy of an array's elements)."""
        if self.items is not None:
            self.items[i] = value
        else:
            self.view(i)[...] = value

    def _span(self, indices: Sequence[int]) -> Optional[Tuple[int, int]]:
        """(start, stop) when the blocks lie back to back in this order, else None."""
        start = stop = None
        for i in indices:
            c = self.counts[i]
            if c == 0:
                continue
            d = self.displs[i]
            if start is None:
                start, stop = d, d + c
            elif d == stop:
                stop += c
            else:
                return None
        return (0, 0) if start is None else (start, stop)

    def nelements(self, indices: Sequence[int]) -> int:
        return sum(self.counts[i] for i in indices)

    def pack(self, indices: Sequence[int], copy: bool = False) -> Any:
        """The message carrying these blocks, in this order. ``copy=True`` when the same
        blocks are received into while the message may still be in flight."""
        if self.items is not None:
            return [self.items[i] for i in indices]
        span = self._span(indices)
        if span is not None:
            view = self.array[span[0]:span[1]]
            return view.copy() if copy else view
        return np.concatenate([self.view(i) for i in indices])

    def target(self, indices: Sequence[int]) -> Optional[np.ndarray]:
        """Where to receive a message carrying these blocks (None: as an object)."""
        if self.items is not None:
            return None
        span = self._span(indices)
        if span is not None:
            return self.array[span[0]:span[1]]
        # a landing area for this one message, unpacked as soon as it is in: not a
        # working buffer kept across steps, so not a scratch buffer
        return np.empty(self.nelements(indices), dtype=self.array.dtype)

    def unpack(self, indices: Sequence[int], into: Optional[np.ndarray],
               req: Optional[Request]) -> None:
        """Store a received message (from :meth:`target`'s ``into``) into its blocks."""
        if self.items is not None:
            values = req.wait()
            for i, v in zip(indices, values):
                self.items[i] = v
            return
        if self._span(indices) is not None:
            return  # received in place
        pos = 0
        for i in indices:
            c = self.counts[i]
            self.view(i)[...] = into[pos:pos + c]
            pos += c


# ============================================================================ RootedBlocks
class RootedBlocks:
    """The blocks of one scatter or gather as this rank sees them, by relative rank.

    A message carries the blocks of a range ``[lo, hi)`` of relative ranks
    (``rel = (rank - root) mod p``). An algorithm calls, for a range, :meth:`take` (what to
    send), :meth:`slot` (where to receive) and :meth:`put` (store what arrived), and
    :meth:`hold` once for the range it gathers or forwards; at the end :meth:`own_block`
    (scatter) or :meth:`gathered` (gather).
    """

    def __init__(self, ch: Any, root: int) -> None:
        self.ch = ch
        self.p = ch.size
        self.root = root
        self.me = (ch.rank - root) % ch.size

    def abs(self, rel: int) -> int:
        """Absolute rank of a relative rank."""
        return (rel + self.root) % self.p

    def parts(self, rel: int, segment: int) -> List[Part]:
        """How the block of ``rel`` is cut for pipelining (default: it is not)."""
        return [None]

    def hold(self, lo: int, hi: int) -> None:
        """Make room for the blocks of [lo, hi) (a non-root rank's subtree or chain tail)."""

    def take(self, lo: int, hi: int, dest: int, part: Part = None) -> Any:
        """The message carrying blocks [lo, hi) (or a part of block lo) to relative ``dest``."""
        raise NotImplementedError

    def slot(self, lo: int, hi: int, part: Part = None) -> Optional[np.ndarray]:
        """Where the message carrying [lo, hi) lands (None: as a pickled object)."""
        raise NotImplementedError

    def put(self, lo: int, hi: int, received: Any, part: Part = None) -> None:
        """Store a message that arrived for [lo, hi) (its ``req.wait()`` value)."""
        raise NotImplementedError

    def own_block(self) -> Any:
        """Scatter: this rank's block, in its receive buffer (buffers) or returned (objects)."""
        raise NotImplementedError

    def gathered(self) -> Any:
        """Gather at the root: the list of objects by rank, or (buffers) None once the
        user's receive blocks are filled."""
        raise NotImplementedError


class EqualBlocks(RootedBlocks):
    """``Scatter``/``Gather``: p blocks of ``block_bytes`` raw bytes each.

    A range's blocks travel as one contiguous run, zero-copy (only a root whose range wraps
    past the end of its buffer copies that one message); a single block may be cut in byte
    ``part``\\ s for pipelining. The storage is a :class:`Blocks`: the root's whole user
    buffer by absolute rank (``everything``), or the range a rank holds (:meth:`hold`).
    ``src``/``dst``: this rank's own block to send (gather) or to fill (scatter), uint8.
    """

    def __init__(self, ch: Any, root: int, block_bytes: int, *,
                 everything: Optional[np.ndarray] = None, src: Optional[np.ndarray] = None,
                 dst: Optional[np.ndarray] = None) -> None:
        super().__init__(ch, root)
        self.b = block_bytes
        self.src, self.dst = src, dst
        self.store: Optional[Blocks] = None         # uint8 blocks, indexed by _index(rel)
        self.absolute = everything is not None      # store is the root's buffer, by rank
        self.base = 0                               # first relative rank in a held store
        self._landing: Dict[Tuple[int, int], np.ndarray] = {}
        if everything is not None:
            self.store = Blocks(everything, [block_bytes] * self.p,
                                [a * block_bytes for a in range(self.p)])

    def _index(self, rel: int) -> int:
        """Where the block of ``rel`` sits in the store."""
        return self.abs(rel) if self.absolute else rel - self.base

    def _indices(self, lo: int, hi: int) -> List[int]:
        return [self._index(rel) for rel in range(lo, hi)]

    def parts(self, rel: int, segment: int) -> List[Part]:
        return segment_bounds(self.b, segment)

    def hold(self, lo: int, hi: int) -> None:
        """The rank's own user buffer when the range is its block alone, else a temporary,
        into which a gather copies its own contribution."""
        if self.absolute:
            return
        self.base = lo
        own = self.src if self.src is not None else self.dst
        if hi - lo == 1 and lo == self.me and own is not None:
            self.store = Blocks(own, [self.b], [0])
            return
        self.store = Blocks.uniform(self.ch.scratch((hi - lo) * self.b, np.uint8, "subtree"), hi - lo)
        if self.src is not None and lo <= self.me < hi:
            self.store.put(self._index(self.me), self.src)

    def take(self, lo: int, hi: int, dest: int, part: Part = None) -> Any:
        if part is not None:
            return self.store.view(self._index(lo))[part[0]:part[1]]
        return self.store.pack(self._indices(lo, hi))

    def slot(self, lo: int, hi: int, part: Part = None) -> Optional[np.ndarray]:
        if part is not None:
            return self.store.view(self._index(lo))[part[0]:part[1]]
        into = self.store.target(self._indices(lo, hi))
        self._landing[(lo, hi)] = into
        return into

    def put(self, lo: int, hi: int, received: Any, part: Part = None) -> None:
        into = self._landing.pop((lo, hi), None)
        if part is None and into is not None:       # copies only a range that wrapped
            self.store.unpack(self._indices(lo, hi), into, None)

    def own_block(self) -> Any:
        if self.dst is None:
            return None
        block = self.store.view(self._index(self.me))
        if block is not self.dst and not np.shares_memory(block, self.dst):
            self.dst[...] = block
        return None

    def gathered(self) -> Any:
        return None


class ListedBlocks(RootedBlocks):
    """``Scatterv``/``Gatherv`` and the object ``scatter``/``gather``: a list of blocks.

    A message carries a list of blocks, pickled (numpy blocks travel out of band, not copied
    into the pickle). Exception: a single v-block sent to the one rank that knows its size
    (its owner, or the root) travels as raw bytes, straight into the user's buffer.
    ``items``: the root's blocks by absolute rank (scatter); ``known``: absolute rank ->
    user array of known size (the root's receive blocks in a Gatherv, the owner's receive
    buffer in a Scatterv); ``own``: this rank's contribution (gather).
    """

    def __init__(self, ch: Any, root: int, *, items: Optional[Sequence[Any]] = None,
                 known: Optional[Dict[int, np.ndarray]] = None, own: Any = None,
                 objects: bool = False) -> None:
        super().__init__(ch, root)
        self.objects = objects
        p, r = self.p, root
        self.items: List[Any] = [None] * p
        if items is not None:
            for a in range(p):
                self.items[(a - r) % p] = items[a]
        self.known = {(a - r) % p: arr for a, arr in (known or {}).items()}
        if own is not None or (objects and items is None):
            self.items[self.me] = own

    def _raw(self, lo: int, hi: int, receiver: int) -> bool:
        """A single v-block goes raw when its receiver knows its size."""
        return not self.objects and hi - lo == 1 and (receiver == lo or receiver == 0)

    def take(self, lo: int, hi: int, dest: int, part: Part = None) -> Any:
        if self._raw(lo, hi, dest):
            return self.items[lo]
        return list(self.items[lo:hi])

    def slot(self, lo: int, hi: int, part: Part = None) -> Optional[np.ndarray]:
        if self._raw(lo, hi, self.me):
            return as_bytes(self.known[lo])
        return None

    def put(self, lo: int, hi: int, received: Any, part: Part = None) -> None:
        if self._raw(lo, hi, self.me):
            self.items[lo] = self.known[lo]
            return
        if not isinstance(received, list) or len(received) != hi - lo:
            raise CollectiveMismatchError(
                f"rank {self.ch.rank}: {self.ch.call}: expected the blocks of {hi - lo} ranks "
                f"from a peer, got {type(received).__name__}; every rank must call the same "
                f"collective with the same root")
        self.items[lo:hi] = received

    def own_block(self) -> Any:
        value = self.items[self.me]
        if self.objects:
            return value
        target = self.known.get(self.me)
        if target is not None and value is not target:
            self._copy_into(target, value, self.ch.rank)
        return None

    def gathered(self) -> Any:
        if self.objects:
            return [self.items[(a - self.root) % self.p] for a in range(self.p)]
        for rel, target in self.known.items():
            value = self.items[rel]
            if value is not None and value is not target:
                self._copy_into(target, value, self.abs(rel))
        return None

    def _copy_into(self, target: np.ndarray, value: Any, owner: int) -> None:
        got = as_bytes(np.asarray(value))
        want = as_bytes(target)
        if got.size != want.size:
            raise CollectiveMismatchError(
                f"rank {self.ch.rank}: {self.ch.call}: the block of rank {owner} is {got.size} "
                f"bytes where {want.size} were expected; every rank must pass counts that "
                f"match the root's counts and datatype")
        want[...] = got
