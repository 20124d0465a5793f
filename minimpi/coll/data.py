"""Data handling for scatter, gather, reduce and scan: one algorithm, buffers or objects.

The algorithms in ``scatter.py``, ``gather.py``, ``reduce.py`` and ``scan.py`` are each
written once and serve both the buffer calls (``Scatter``, ``Reduce``...) and the
Python-object calls (``scatter``, ``reduce``...). The schedule - who sends what to whom in
which step - is spelled out in the algorithm; only *how a message is made and stored*
differs between the two, and that lives in the two small classes here:

:class:`Blocks` - the per-rank blocks of a scatter or gather, indexed by relative rank.
    A message carries the blocks of a range ``[lo, hi)`` of relative ranks:

    * fixed-size buffers (``Scatter``/``Gather``): the range's bytes, contiguous and
      zero-copy (only a root whose range wraps past the end of its buffer copies that one
      message); a single block may be cut in byte ``part``\\ s for pipelining;
    * v-buffers (``Scatterv``/``Gatherv``, where only the root knows every count) and
      Python objects: a list of the blocks, pickled (numpy blocks travel out of band, not
      copied into the pickle). Exception: a single v-block sent to the one rank that knows
      its size (its owner, or the root) travels as raw bytes, straight into the user's
      buffer.

:class:`Operand` - a reduction operand: a numpy array combined in place (buffers), or a
    Python object combined by ``op(a, b)``. ``lower_into(lower, acc)`` gives
    ``lower (op) acc`` and ``into_lower(acc, higher)`` gives ``acc (op) higher`` - the MPI
    order convention of :mod:`minimpi.ops` - so an algorithm states which side is lower.

Object messages are always wrapped in a list or tuple, so that a Python object that happens
to be a numpy array is still pickled (``Channel.isend`` sends bare arrays as raw bytes).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import CollectiveMismatchError

Part = Optional[Tuple[int, int]]


def chunk_bounds(n: int, parts: int) -> List[Tuple[int, int]]:
    """Split ``n`` items into ``parts`` contiguous chunks, the first ``n % parts`` one larger."""
    base, extra = divmod(n, parts)
    out, lo = [], 0
    for i in range(parts):
        hi = lo + base + (1 if i < extra else 0)
        out.append((lo, hi))
        lo = hi
    return out


def segment_bounds(n: int, segment: int) -> List[Tuple[int, int]]:
    """Cut ``n`` items in pieces of at most ``segment`` (at least one piece, maybe empty)."""
    segment = max(1, segment)
    return [(lo, min(n, lo + segment)) for lo in range(0, n, segment)] or [(0, 0)]


def as_bytes(array: np.ndarray) -> np.ndarray:
    """The bytes of a flat contiguous array as uint8 (no copy)."""
    if array.dtype == np.uint8:
        return array
    return array.view(np.uint8) if array.size else np.empty(0, np.uint8)


# ================================================================================== Blocks
class Blocks:
    """The blocks of one scatter or gather as this rank sees them (see the module docstring).

    Build with :meth:`fixed` or :meth:`listed`; then an algorithm calls, for a range
    ``[lo, hi)`` of relative ranks, ``take`` (what to send), ``slot`` (where to receive)
    and ``put`` (store what arrived), and ``hold`` once for the range it gathers or
    forwards.
    """

    def __init__(self, ch: Any, root: int) -> None:
        self.ch = ch
        self.p = ch.size
        self.root = root
        self.me = (ch.rank - root) % ch.size
        self.kind = ""
        # fixed-size buffers
        self.b = 0                                  # bytes per block
        self.raw: Optional[np.ndarray] = None       # storage (uint8)
        self.absolute = False                       # raw is the root's user buffer, by rank
        self.base = 0                               # first relative rank in raw
        self.src: Optional[np.ndarray] = None       # own contribution (gather), uint8
        self.dst: Optional[np.ndarray] = None       # own receive buffer (scatter), uint8
        self._wrapped: Dict[Tuple[int, int], np.ndarray] = {}
        # listed blocks (v-buffers, objects)
        self.items: List[Any] = []
        self.known: Dict[int, np.ndarray] = {}      # rel -> user array whose size we know
        self.objects = False

    # -------------------------------------------------------------- constructors
    @classmethod
    def fixed(cls, ch: Any, root: int, block_bytes: int, *, everything: Optional[np.ndarray] = None,
              src: Optional[np.ndarray] = None, dst: Optional[np.ndarray] = None) -> "Blocks":
        """Equal blocks of ``block_bytes``. ``everything``: the root's whole user buffer
        (uint8, blocks in rank order); ``src``/``dst``: this rank's own block to send
        (gather) or to fill (scatter), uint8."""
        self = cls(ch, root)
        self.kind = "fixed"
        self.b = block_bytes
        self.src, self.dst = src, dst
        if everything is not None:
            self.raw, self.absolute = everything, True
        return self

    @classmethod
    def listed(cls, ch: Any, root: int, *, items: Optional[Sequence[Any]] = None,
               known: Optional[Dict[int, np.ndarray]] = None, own: Any = None,
               objects: bool = False) -> "Blocks":
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

    def _raw_ok(self, lo: int, hi: int, receiver: int) -> bool:
        """A listed single block goes raw when its receiver knows its size."""
        return (self.kind == "list" and not self.objects and hi - lo == 1
                and (receiver == lo or receiver == 0))

    def parts(self, rel: int, segment: int) -> List[Part]:
        """How the block of ``rel`` is cut for pipelining: byte ranges (fixed), else whole."""
        if self.kind == "fixed":
            return segment_bounds(self.b, segment)
        return [None]

    def _span(self, lo: int, hi: int, part: Part) -> Tuple[int, int]:
        """Byte range of [lo, hi) (or of a part of block lo) inside non-absolute raw."""
        start = (lo - self.base) * self.b
        if part is not None:
            return start + part[0], start + part[1]
        return start, start + (hi - lo) * self.b

    def _abs_pieces(self, lo: int, hi: int, part: Part) -> List[Tuple[int, int]]:
        """Byte ranges in the root's absolute buffer holding [lo, hi): one, or two if it wraps."""
        b, p = self.b, self.p
        first = self.abs(lo)
        if part is not None:
            return [(first * b + part[0], first * b + part[1])]
        if first + (hi - lo) <= p:
            return [(first * b, (first + hi - lo) * b)]
        return [(first * b, p * b), (0, (first + hi - lo - p) * b)]

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
            self.raw = own
            return
        self.raw = np.empty((hi - lo) * self.b, np.uint8)
        if self.src is not None and lo <= self.me < hi:
            s, e = self._span(self.me, self.me + 1, None)
            self.raw[s:e] = self.src

    # -------------------------------------------------------------- messages
    def take(self, lo: int, hi: int, dest: int, part: Part = None) -> Any:
        """The message carrying blocks [lo, hi) (or a part of block lo) to relative ``dest``."""
        if self.kind == "fixed":
            if self.absolute:
                pieces = [self.raw[s:e] for s, e in self._abs_pieces(lo, hi, part)]
                return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
            s, e = self._span(lo, hi, part)
            return self.raw[s:e]
        if self._raw_ok(lo, hi, dest):
            return self.items[lo]
        return list(self.items[lo:hi])

    def slot(self, lo: int, hi: int, part: Part = None) -> Optional[np.ndarray]:
        """Where the message carrying [lo, hi) lands (None: a pickled list)."""
        if self.kind == "fixed":
            if self.absolute:
                pieces = self._abs_pieces(lo, hi, part)
                if len(pieces) == 1:
                    s, e = pieces[0]
                    return self.raw[s:e]
                tmp = np.empty((hi - lo) * self.b, np.uint8)
                self._wrapped[(lo, hi)] = tmp
                return tmp
            s, e = self._span(lo, hi, part)
            return self.raw[s:e]
        if self._raw_ok(lo, hi, self.me):
            return as_bytes(self.known[lo])
        return None

    def put(self, lo: int, hi: int, received: Any, part: Part = None) -> None:
        """Store a message that arrived for [lo, hi) (its ``req.wait()`` value)."""
        if self.kind == "fixed":
            tmp = self._wrapped.pop((lo, hi), None)
            if tmp is not None:             # copy a wrapped range into its two places
                at = 0
                for s, e in self._abs_pieces(lo, hi, part):
                    self.raw[s:e] = tmp[at:at + e - s]
                    at += e - s
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
            if self.absolute:
                s, e = self._abs_pieces(self.me, self.me + 1, None)[0]
            else:
                s, e = self._span(self.me, self.me + 1, None)
            block = self.raw[s:e]
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
        got = as_bytes(np.ascontiguousarray(value).reshape(-1))
        want = as_bytes(target)
        if got.size != want.size:
            raise CollectiveMismatchError(
                f"rank {self.ch.rank}: {self.ch.call}: the block of rank {owner} is {got.size} "
                f"bytes where {want.size} were expected; every rank must pass counts that "
                f"match the root's counts and datatype")
        want[...] = got


# ================================================================================= Operand
class Operand:
    """How a reduction combines values: numpy arrays in place, or Python objects.

    ``objects``: Python-object mode; otherwise values are flat numpy arrays of
    ``datatype``'s element dtype.
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

    def box(self, value: Any) -> Any:
        """The message carrying ``value``."""
        return (value,) if self.objects else value

    def slot(self, like: Any) -> Optional[np.ndarray]:
        """Where a value like ``like`` is received (None: a pickled object)."""
        return None if self.objects else np.empty_like(like)

    def unbox(self, req: Any, slot: Optional[np.ndarray]) -> Any:
        """The value a completed receive delivered."""
        if not self.objects:
            return slot
        got = req.wait()
        return got[0]

    def pieces(self, value: Any, segment_bytes: int) -> List[Any]:
        """``value`` cut into pipeline segments (views); an object is one piece."""
        if self.objects:
            return [value]
        per = max(1, segment_bytes // max(1, value.itemsize))
        return [value[lo:hi] for lo, hi in segment_bounds(value.size, per)]
