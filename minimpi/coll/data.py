"""The data layer of the collective algorithms: small named mechanics, never a schedule.

Every algorithm in ``minimpi/coll`` spells out who sends what to whom in which step; how a
buffer is cut, viewed, reduced or stored is shared and lives here:

* bytes - :func:`as_bytes`: the bytes of an array as a flat ``uint8`` array (no copy when
  it is contiguous).
* splitting - :func:`running_sum` (offsets of given counts), :func:`even_bounds` (offsets
  of ``parts`` nearly equal blocks; the one way a vector is cut in p blocks) and
  :func:`segment_bounds` (pipeline pieces of at most ``segment`` items).
* the fold - :func:`fold_power_of_two` / :func:`unfold_rank` / :func:`first_real` let
  power-of-two algorithms (recursive doubling / halving) run on any p: the first ``2*rem``
  ranks pair up, each even one hands its data to the odd one above it and sits out, so
  ``2^k`` ranks remain, each standing for a *contiguous* range of real ranks;
  :func:`fold_in` is that first step for a reduction.
* one algorithm for buffers and objects - :func:`received` (what a receive delivered: the
  buffer it filled, or the object) and :class:`Operand` (a reduction step in MPI operand
  order: in place for numpy arrays, ``op(a, b)`` for Python objects).
* block containers, two because their jobs differ:

  - :class:`Blocks` - the p blocks of an allgather/alltoall, all laid out on every rank:
    views of a numpy buffer at (counts, displs), or the items of a list of p objects.
    ``pack``/``target``/``unpack`` turn a list of block indices into one message
    (zero-copy when the blocks lie back to back).
  - :class:`RootedBlocks` - the blocks of a scatter/gather, indexed by rank *relative to
    the root*; a rank holds only the range of its subtree or chain tail, and for the v
    variants only the root knows every size. Its fixed-size storage is a :class:`Blocks`.

Object messages never need wrapping: a channel in object mode pickles everything, numpy
arrays included (:meth:`~minimpi.coll.schedule.Channel.isend`).
"""
from __future__ import annotations

from typing import Any, Dict, Generator, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import CollectiveMismatchError
from ..p2p.request import Request

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


# ================================================================================ the fold
def fold_power_of_two(rank: int, p: int) -> Tuple[int, int, int]:
    """``(pof2, rem, newrank)``: the largest power of two <= p, ``rem = p - pof2``, and this
    rank's number among the ``pof2`` ranks that remain after the fold (-1: sits out).

    Ranks below ``2*rem``: the odd one of each pair (2i, 2i+1) stays as newrank i and stands
    for both; ranks from ``2*rem`` on are newrank ``rank - rem``.
    """
    pof2 = 1 << (p.bit_length() - 1)
    rem = p - pof2
    if rank < 2 * rem:
        return pof2, rem, (rank // 2 if rank % 2 else -1)
    return pof2, rem, rank - rem


def unfold_rank(newrank: int, rem: int) -> int:
    """The real rank that plays ``newrank`` after the fold."""
    return 2 * newrank + 1 if newrank < rem else newrank + rem


def first_real(newrank: int, rem: int) -> int:
    """Lowest real rank that ``newrank`` stands for."""
    return 2 * newrank if newrank < rem else newrank + rem


def fold_in(ch: Any, red: "Operand", acc: Any) -> Generator[List[Request], None, Any]:
    """The fold of a reduction, one step for the ranks below ``2*rem`` (none when p is a
    power of two): the even rank of each pair sends its vector to the odd rank above it,
    which combines it on the lower side (``acc = received (op) acc``). Returns the new
    accumulator (the sender's is unchanged); use as ``acc = yield from fold_in(...)``."""
    _, rem, newrank = fold_power_of_two(ch.rank, ch.size)
    if ch.rank < 2 * rem:
        if newrank < 0:
            yield [ch.isend(acc, ch.rank + 1)]
        else:
            tmp = red.slot(acc)
            req = ch.irecv(tmp, ch.rank - 1)
            yield [req]
            acc = red.lower_into(received(req, tmp), acc)
    return acc


# ========================================================================== reductions
def received(req: Request, into: Optional[np.ndarray]) -> Any:
    """What a completed receive delivered: the buffer ``into`` it filled, or (``into`` is
    None) the object."""
    return req.wait() if into is None else into


class Operand:
    """How a reduction combines values: numpy arrays in place, or Python objects.

    ``lower_into(lower, acc)`` gives ``lower (op) acc`` and ``into_lower(acc, higher)`` gives
    ``acc (op) higher`` - the MPI order convention of :mod:`minimpi.ops` - so an algorithm
    states which side holds the lower ranks. ``objects``: Python-object mode; otherwise
    values are flat numpy arrays of ``datatype``'s element dtype.
    """

    def __init__(self, op: Any, objects: bool, datatype: Any = None, call: str = "Reduce") -> None:
        self.op = op
        self.objects = objects
        self.datatype = datatype
        self.call = call
        self._readonly: Optional[int] = None

    def mine(self, value: Any, readonly: bool = True) -> Any:
        """This rank's contribution; a read-only one is copied before it is first changed."""
        if readonly and not self.objects:
            self._readonly = id(value)
        return value

    def _writable(self, acc: Any) -> Any:
        if self._readonly is not None and id(acc) == self._readonly:
            self._readonly = None
            return acc.copy()
        return acc

    def lower_into(self, lower: Any, acc: Any) -> Any:
        """``lower (op) acc``; buffers: stored in ``acc`` (returned)."""
        if self.objects:
            return self.op(lower, acc)
        acc = self._writable(acc)
        self.op.reduce_into(lower, acc, self.datatype, call=self.call)
        return acc

    def into_lower(self, acc: Any, higher: Any) -> Any:
        """``acc (op) higher``; buffers: stored in ``acc`` (returned)."""
        if self.objects:
            return self.op(acc, higher)
        acc = self._writable(acc)
        self.op.reduce_into_lower(acc, higher, self.datatype, call=self.call)
        return acc

    def assign(self, target: Any, value: Any) -> Any:
        """``target = value`` (buffers: copied into ``target``, which is returned)."""
        if self.objects:
            return value
        target[...] = value
        return target

    def copy(self, value: Any) -> Any:
        return value if self.objects else np.array(value, copy=True)

    def slot(self, like: Any) -> Optional[np.ndarray]:
        """Where a value like ``like`` is received (None: as an object, see :func:`received`)."""
        return None if self.objects else np.empty_like(like)

    def pieces(self, value: Any, segment_bytes: int) -> List[Any]:
        """``value`` cut into pipeline segments (views); an object is one piece."""
        if self.objects:
            return [value]
        per = max(1, segment_bytes // max(1, value.itemsize))
        return [value[lo:hi] for lo, hi in segment_bounds(value.size, per)]


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
        """Blocks over a parsed :class:`~minimpi.buffers.VBufSpec` (counts in elements)."""
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
    (``rel = (rank - root) mod p``):

    * fixed-size buffers (``Scatter``/``Gather``, built with :meth:`fixed`): the range's
      bytes, contiguous and zero-copy (only a root whose range wraps past the end of its
      buffer copies that one message); a single block may be cut in byte ``part``\\ s for
      pipelining. The storage is a :class:`Blocks`: the root's whole user buffer by
      absolute rank, or the range a rank holds (:meth:`hold`);
    * v-buffers (``Scatterv``/``Gatherv``, where only the root knows every count) and
      Python objects (built with :meth:`listed`): a list of the blocks, pickled (numpy
      blocks travel out of band, not copied into the pickle). Exception: a single v-block
      sent to the one rank that knows its size (its owner, or the root) travels as raw
      bytes, straight into the user's buffer.

    An algorithm calls, for a range ``[lo, hi)``, ``take`` (what to send), ``slot`` (where
    to receive) and ``put`` (store what arrived), and ``hold`` once for the range it gathers
    or forwards; at the end ``own_block`` (scatter) or ``gathered`` (gather).
    """

    def __init__(self, ch: Any, root: int) -> None:
        self.ch = ch
        self.p = ch.size
        self.root = root
        self.me = (ch.rank - root) % ch.size
        self.kind = ""
        # fixed-size buffers
        self.b = 0                                  # bytes per block
        self.store: Optional[Blocks] = None         # uint8 blocks, indexed by _index(rel)
        self.absolute = False                       # store is the root's user buffer, by rank
        self.base = 0                               # first relative rank in a held store
        self.src: Optional[np.ndarray] = None       # own contribution (gather), uint8
        self.dst: Optional[np.ndarray] = None       # own receive buffer (scatter), uint8
        self._landing: Dict[Tuple[int, int], np.ndarray] = {}
        # listed blocks (v-buffers, objects)
        self.items: List[Any] = []
        self.known: Dict[int, np.ndarray] = {}      # rel -> user array whose size we know
        self.objects = False

    # -------------------------------------------------------------- constructors
    @classmethod
    def fixed(cls, ch: Any, root: int, block_bytes: int, *, everything: Optional[np.ndarray] = None,
              src: Optional[np.ndarray] = None, dst: Optional[np.ndarray] = None) -> "RootedBlocks":
        """Equal blocks of ``block_bytes``. ``everything``: the root's whole user buffer
        (uint8, blocks in rank order); ``src``/``dst``: this rank's own block to send
        (gather) or to fill (scatter), uint8."""
        self = cls(ch, root)
        self.kind = "fixed"
        self.b = block_bytes
        self.src, self.dst = src, dst
        if everything is not None:
            self.absolute = True
            self.store = Blocks(everything, [block_bytes] * self.p,
                                [a * block_bytes for a in range(self.p)])
        return self

    @classmethod
    def listed(cls, ch: Any, root: int, *, items: Optional[Sequence[Any]] = None,
               known: Optional[Dict[int, np.ndarray]] = None, own: Any = None,
               objects: bool = False) -> "RootedBlocks":
        """Blocks as a list. ``items``: the root's blocks by absolute rank (scatter);
        ``known``: absolute rank -> user array of known size (the root's receive blocks
        in a Gatherv, the owner's receive buffer in a Scatterv); ``own``: this rank's
        contribution (gather)."""
        self = cls(ch, root)
        self.kind = "list"
        self.objects = objects
        p, r = self.p, root
        self.items = [None] * p
        if items is not None:
            for a in range(p):
                self.items[(a - r) % p] = items[a]
        self.known = {(a - r) % p: arr for a, arr in (known or {}).items()}
        if own is not None or (objects and items is None):
            self.items[self.me] = own
        return self

    # -------------------------------------------------------------- helpers
    def abs(self, rel: int) -> int:
        """Absolute rank of a relative rank."""
        return (rel + self.root) % self.p

    def _index(self, rel: int) -> int:
        """Where the block of ``rel`` sits in the fixed-size store."""
        return self.abs(rel) if self.absolute else rel - self.base

    def _indices(self, lo: int, hi: int) -> List[int]:
        return [self._index(rel) for rel in range(lo, hi)]

    def _raw_ok(self, lo: int, hi: int, receiver: int) -> bool:
        """A listed single block goes raw when its receiver knows its size."""
        return (self.kind == "list" and not self.objects and hi - lo == 1
                and (receiver == lo or receiver == 0))

    def parts(self, rel: int, segment: int) -> List[Part]:
        """How the block of ``rel`` is cut for pipelining: byte ranges (fixed), else whole."""
        if self.kind == "fixed":
            return segment_bounds(self.b, segment)
        return [None]

    # -------------------------------------------------------------- storage for a range
    def hold(self, lo: int, hi: int) -> None:
        """Make room for the blocks of [lo, hi) (a non-root rank's subtree or chain tail).

        Fixed: the rank's own user buffer when the range is its block alone, else a
        temporary, into which a gather copies its own contribution."""
        if self.kind != "fixed" or self.absolute:
            return
        self.base = lo
        own = self.src if self.src is not None else self.dst
        if hi - lo == 1 and lo == self.me and own is not None:
            self.store = Blocks(own, [self.b], [0])
            return
        self.store = Blocks.uniform(np.empty((hi - lo) * self.b, np.uint8), hi - lo)
        if self.src is not None and lo <= self.me < hi:
            self.store.put(self._index(self.me), self.src)

    # -------------------------------------------------------------- messages
    def take(self, lo: int, hi: int, dest: int, part: Part = None) -> Any:
        """The message carrying blocks [lo, hi) (or a part of block lo) to relative ``dest``."""
        if self.kind == "fixed":
            if part is not None:
                return self.store.view(self._index(lo))[part[0]:part[1]]
            return self.store.pack(self._indices(lo, hi))
        if self._raw_ok(lo, hi, dest):
            return self.items[lo]
        return list(self.items[lo:hi])

    def slot(self, lo: int, hi: int, part: Part = None) -> Optional[np.ndarray]:
        """Where the message carrying [lo, hi) lands (None: a pickled list)."""
        if self.kind == "fixed":
            if part is not None:
                return self.store.view(self._index(lo))[part[0]:part[1]]
            into = self.store.target(self._indices(lo, hi))
            self._landing[(lo, hi)] = into
            return into
        if self._raw_ok(lo, hi, self.me):
            return as_bytes(self.known[lo])
        return None

    def put(self, lo: int, hi: int, received: Any, part: Part = None) -> None:
        """Store a message that arrived for [lo, hi) (its ``req.wait()`` value)."""
        if self.kind == "fixed":
            into = self._landing.pop((lo, hi), None)
            if part is None and into is not None:   # copies only a range that wrapped
                self.store.unpack(self._indices(lo, hi), into, None)
            return
        if self._raw_ok(lo, hi, self.me):
            self.items[lo] = self.known[lo]
            return
        if not isinstance(received, list) or len(received) != hi - lo:
            raise CollectiveMismatchError(
                f"rank {self.ch.rank}: {self.ch.call}: expected the blocks of {hi - lo} ranks "
                f"from a peer, got {type(received).__name__}; every rank must call the same "
                f"collective with the same root")
        self.items[lo:hi] = received

    # -------------------------------------------------------------- results
    def own_block(self) -> Any:
        """Scatter: this rank's block, copied into its receive buffer (buffers) or returned."""
        if self.kind == "fixed":
            if self.dst is None:
                return None
            block = self.store.view(self._index(self.me))
            if block is not self.dst and not np.shares_memory(block, self.dst):
                self.dst[...] = block
            return None
        value = self.items[self.me]
        if self.objects:
            return value
        target = self.known.get(self.me)
        if target is not None and value is not target:
            self._copy_into(target, value, self.ch.rank)
        return None

    def gathered(self) -> Any:
        """Gather at the root: the list of objects by rank (objects), else fills the user's
        receive blocks (buffers) and returns None."""
        if self.kind == "fixed":
            return None
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
