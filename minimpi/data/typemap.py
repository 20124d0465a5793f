"""Type maps: where the bytes of one item of a datatype lie, and how to gather/scatter them.

A :class:`TypeMap` is computed once, when a datatype is created, and never changes. It holds

* the contiguous byte runs of ONE item (``offsets``/``lengths``, int64, in type-map order,
  adjacent runs merged; offsets are relative to the item's origin and may be negative),
* the bounds (``lb``/``ub``: what MPI calls the lower and upper bound, which set the extent;
  ``true_lb``/``true_ub``: the first and one-past-last byte really holding data),
* the type signature (runs of ``(basic type code, repeat)``) and, when the map holds one basic
  type only, that type's numpy dtype (``element_dtype``),
* the strided pattern, when the runs of one item all have the same length and a constant
  distance (vectors, 2-D subarrays, columns): gather and scatter then go through one strided
  numpy view and one copy, with no index array at all. Other layouts use one fancy-index copy
  over the widest unsigned integer that divides every offset and length.

Nothing here loops over elements in Python: only over the runs of a signature (a struct's
members) when converting to the external32 representation.
"""
from __future__ import annotations

from math import gcd
from typing import Optional, Sequence

import numpy as np

from ..errors import BufferSpecError, DatatypeError

__all__ = ["TypeMap", "predefined_map", "CODE_DTYPES", "dtype_of_code", "expand", "merge_runs", "repeat_signature",
           "concat_signatures"]

Signature = tuple[tuple[str, int], ...]
_EMPTY = np.empty(0, np.int64)


def merge_runs(offsets: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop empty runs and merge each run with the next when they touch (in order)."""
    offsets = np.asarray(offsets, np.int64).ravel()
    lengths = np.asarray(lengths, np.int64).ravel()
    keep = lengths > 0
    if not keep.all():
        offsets, lengths = offsets[keep], lengths[keep]
    if offsets.size <= 1:
        return offsets.copy(), lengths.copy()
    ends = offsets + lengths
    starts_new = np.empty(offsets.size, bool)
    starts_new[0] = True
    np.not_equal(offsets[1:], ends[:-1], out=starts_new[1:])
    first = np.flatnonzero(starts_new)
    if first.size == offsets.size:
        return offsets.copy(), lengths.copy()
    return offsets[first], np.add.reduceat(lengths, first)


def repeat_signature(sig: Signature, n: int) -> Signature:
    """The signature of ``n`` consecutive items of signature ``sig``."""
    if n <= 0 or not sig:
        return ()
    if len(sig) == 1:
        return ((sig[0][0], sig[0][1] * n),)
    return concat_signatures([sig] * n)


def concat_signatures(sigs: Sequence[Signature]) -> Signature:
    """Signatures one after the other, equal neighbouring codes merged."""
    out: list[list] = []
    for sig in sigs:
        for code, k in sig:
            if k <= 0:
                continue
            if out and out[-1][0] == code:
                out[-1][1] += k
            else:
                out.append([code, k])
    return tuple((c, k) for c, k in out)


class TypeMap:
    """The layout of one item of a datatype (see the module docstring). Never changed after
    ``__init__`` (datatypes share maps: a Dup or resize reuses its old type's arrays)."""

    __slots__ = ("offsets", "lengths", "size", "lb", "ub", "signature", "element_dtype",
                 "explicit_bounds", "alignment", "true_lb", "true_ub", "is_contiguous",
                 "pattern", "width", "_first", "_one_item", "runs")

    def __init__(self, offsets: np.ndarray, lengths: np.ndarray, size: int, lb: int, ub: int,
                 signature: Signature, element_dtype: Optional[np.dtype], *,
                 explicit_bounds: bool = False, alignment: int = 1) -> None:
        offs = np.asarray(offsets, np.int64)
        lens = np.asarray(lengths, np.int64)
        offs.flags.writeable = lens.flags.writeable = False
        self.offsets, self.lengths = offs, lens
        self.size, self.lb, self.ub = int(size), int(lb), int(ub)
        self.signature = signature
        self.element_dtype = element_dtype
        #: True once a resize set the bounds explicitly (MPI's "sticky" LB/UB markers): no
        #: alignment padding is then added to structs built from it.
        self.explicit_bounds = explicit_bounds
        #: the strictest alignment of the basic types inside (struct padding rounds to it)
        self.alignment = alignment
        # few runs (the usual struct or small vector): plain ints beat numpy calls
        small = offs.size <= 16
        o = offs.tolist() if small else offs
        n = lens.tolist() if small else lens
        #: (offsets, lengths) as tuples of Python ints when there are few runs (constructors
        #: of small types work on them without numpy's cost per call), else None
        self.runs = (tuple(o), tuple(n)) if small else None
        count = len(o)
        if count == 0:
            self.true_lb = self.true_ub = 0
        elif small:
            self.true_lb = min(o)
            self.true_ub = max(x + y for x, y in zip(o, n))
        else:
            self.true_lb = int(offs.min())
            self.true_ub = int((offs + lens).max())
        #: one item is ``size`` consecutive bytes at the origin and items follow each other
        self.is_contiguous = bool(
            self.lb == 0 and self.ub == self.size
            and (count == 0 or (count == 1 and o[0] == 0 and n[0] == self.size)))
        #: (runs, run length, distance) when every run has one length and one distance
        self.pattern: Optional[tuple[int, int, int]] = None
        if count and (n.count(n[0]) == count if small else bool((lens == lens[0]).all())):
            if small:
                steps = [y - x for x, y in zip(o, o[1:])]
                same = all(st == steps[0] for st in steps)
            else:
                diffs = np.diff(offs)
                same = bool((diffs == diffs[0]).all())
                steps = diffs[:1].tolist()
            if same:
                self.pattern = (count, int(n[0]), int(steps[0]) if steps else 0)
        #: the widest unit (8, 4, 2 or 1 bytes) dividing every offset, length and the extent:
        #: gathers move that many bytes per index
        common = self.ub - self.lb
        if count:
            common = gcd(common, *o, *n) if small else \
                gcd(common, int(np.gcd.reduce(offs)), int(np.gcd.reduce(lens)))
        self.width = next(w for w in (8, 4, 2, 1) if common % w == 0)
        self._first = int(o[0]) if count else 0
        #: the strided view's (shape, strides) for one item, worked out once
        self._one_item = None if self.pattern is None else _squeeze(
            ((self.pattern[0], self.pattern[2]), (self.pattern[1] // self.width, self.width)),
            self.width)

    @property
    def extent(self) -> int:
        return self.ub - self.lb

    @property
    def true_extent(self) -> int:
        return self.true_ub - self.true_lb

    # ------------------------------------------------------------------ byte runs
    def span(self, count: int) -> tuple[int, int]:
        """``(first, end)``: the byte range ``count`` items touch, relative to the origin."""
        if count <= 0 or self.size == 0:
            return (0, 0)
        last = (count - 1) * self.extent
        return (min(self.true_lb, self.true_lb + last), max(self.true_ub, self.true_ub + last))

    def blocks(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        """The byte runs of ``count`` consecutive items (item ``i`` at ``i * extent``),
        in type-map order, touching runs merged."""
        if count <= 0 or self.offsets.size == 0:
            return _EMPTY.copy(), _EMPTY.copy()
        if self.is_contiguous:          # one run, whatever the count: O(1), not O(count)
            return np.zeros(1, np.int64), np.array([count * self.size], np.int64)
        if count == 1:
            return self.offsets.copy(), self.lengths.copy()
        base = np.arange(count, dtype=np.int64)[:, None] * self.extent
        offs = base + self.offsets[None, :]
        lens = np.broadcast_to(self.lengths[None, :], offs.shape)
        return merge_runs(offs, lens)

    # ------------------------------------------------------------------ pack / unpack
    def _check_bounds(self, raw: np.ndarray, count: int, origin: int, call: str) -> None:
        first, end = self.span(count)
        if origin + first < 0 or origin + end > raw.size:
            raise BufferSpecError(
                f"{call}: {count} item(s) of the datatype at byte {origin} touch bytes "
                f"{origin + first} to {origin + end}, but the buffer has {raw.size} bytes "
                f"(true lb {self.true_lb}, true extent {self.true_extent}, extent {self.extent})")

    def _strided(self, raw: np.ndarray, count: int, origin: int) -> Optional[np.ndarray]:
        """``count`` items of ``raw`` as one strided view (count, runs, units) over the
        user's memory, when the runs have one length and one distance (bounds checked by
        the caller)."""
        if self.pattern is None:
            return None
        nblocks, length, step = self.pattern
        w = self.width
        if count == 1 and self._one_item is not None:
            shape, strides = self._one_item
        else:
            shape, strides = _squeeze(((count, self.extent), (nblocks, step), (length // w, w)), w)
        return np.ndarray(shape, _UNITS[w], buffer=raw, offset=origin + self._first,
                          strides=strides)

    def _index(self, count: int, origin: int, w: int) -> np.ndarray:
        """Index (in units of ``w`` bytes) of every packed unit of ``count`` items."""
        offs, lens = self.blocks(count)
        offs = offs + origin
        units = lens // w
        run_first = np.concatenate(([0], np.cumsum(units)[:-1]))
        return np.repeat(offs // w - run_first, units) + np.arange(int(units.sum()), dtype=np.int64)

    def pack(self, raw: np.ndarray, count: int, *, origin: int = 0,
             call: str = "pack", checked: bool = False) -> np.ndarray:
        """``count`` items gathered from ``raw`` (flat contiguous uint8; the first item's
        origin at byte ``origin``) into contiguous bytes: a view of ``raw`` (no copy) for
        contiguous types, else one copy through a strided view or one fancy-index gather."""
        if count <= 0 or self.size == 0:
            return np.empty(0, np.uint8)
        if not checked:
            self._check_bounds(raw, count, origin, call)
        if self.is_contiguous:
            return raw[origin:origin + count * self.size]
        strided = self._strided(raw, count, origin)
        if strided is not None:
            return np.ascontiguousarray(strided).reshape(-1).view(np.uint8)
        w = self.width if origin % self.width == 0 else 1
        return _as_units(raw, w)[self._index(count, origin, w)].view(np.uint8)

    def unpack(self, data: np.ndarray, raw: np.ndarray, count: int, *, origin: int = 0,
               call: str = "unpack", checked: bool = False) -> None:
        """Scatter ``count`` packed items from ``data`` (contiguous uint8) into ``raw``,
        the first item's origin at byte ``origin``."""
        if count <= 0 or self.size == 0:
            return
        nbytes = count * self.size
        if data.size < nbytes:
            raise BufferSpecError(f"{call}: {data.size} packed bytes are fewer than the "
                                  f"{nbytes} that {count} item(s) of the datatype hold")
        if not checked:
            self._check_bounds(raw, count, origin, call)
        data = data[:nbytes]
        if self.is_contiguous:
            raw[origin:origin + nbytes] = data
            return
        strided = self._strided(raw, count, origin)
        if strided is not None:
            strided[...] = _as_units(data, self.width).reshape(strided.shape)
        else:
            w = self.width if origin % self.width == 0 else 1
            _as_units(raw, w)[self._index(count, origin, w)] = _as_units(data, w)


_UNITS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _squeeze(dims, width: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(shape, strides) of a strided view without its dimensions of length 1 (numpy copies
    much faster without them)."""
    kept = [(n, st) for n, st in dims if n != 1] or [(1, width)]
    return tuple(n for n, _ in kept), tuple(st for _, st in kept)


def _as_units(arr: np.ndarray, width: int) -> np.ndarray:
    """A flat contiguous uint8 array seen as unsigned ints of ``width`` bytes (same memory;
    a trailing partial unit is left out)."""
    if width == 1:
        return arr
    return arr[:arr.size - arr.size % width].view(_UNITS[width])


#: signature code -> numpy dtype of that basic type (filled as predefined types are made)
CODE_DTYPES: dict[str, np.dtype] = {}


def dtype_of_code(code: str) -> np.dtype:
    """The numpy dtype of a basic type code found in a ``signature``."""
    try:
        return CODE_DTYPES[code]
    except KeyError:
        raise DatatypeError(f"no basic datatype has the signature code {code!r}") from None


def predefined_map(dtype: np.dtype, code: str) -> TypeMap:
    """The map of a predefined type: one run of ``dtype.itemsize`` bytes."""
    n = dtype.itemsize
    if dtype.fields is not None:   # pair types: aligned like their strictest member
        align = max(f[0].alignment for f in dtype.fields.values())
    else:
        align = dtype.alignment
    return TypeMap(np.array([0], np.int64), np.array([n], np.int64), n, 0, n,
                   ((code, 1),), dtype, alignment=max(1, align))


def expand(old: TypeMap, starts: np.ndarray, items: "int | np.ndarray") -> tuple[np.ndarray, np.ndarray]:
    """The byte runs of pieces of ``items`` consecutive ``old`` items starting at byte
    offsets ``starts`` (in order). ``items`` is one count for every piece, or one per piece."""
    starts = np.asarray(starts, np.int64).ravel()
    if old.offsets.size == 0 or starts.size == 0:
        return _EMPTY.copy(), _EMPTY.copy()
    uniform = np.ndim(items) == 0
    counts = None if uniform else np.asarray(items, np.int64).ravel()
    if old.offsets.size == 1 and old.offsets[0] == 0 and old.lengths[0] == old.extent:
        # each piece of consecutive items is one run
        lens = (int(items) if uniform else counts) * old.extent
        return merge_runs(starts + old.offsets[0], np.broadcast_to(lens, starts.shape))
    if uniform:
        item_starts = (starts[:, None] + np.arange(int(items), dtype=np.int64)[None, :] * old.extent)
    else:
        total = int(counts.sum())
        piece_first = np.concatenate(([0], np.cumsum(counts)[:-1]))
        within = np.arange(total, dtype=np.int64) - np.repeat(piece_first, counts)
        item_starts = np.repeat(starts, counts) + within * old.extent
    offs = item_starts.reshape(-1)[:, None] + old.offsets[None, :]
    lens = np.broadcast_to(old.lengths[None, :], offs.shape)
    return merge_runs(offs, lens)
