"""The type maps of derived datatypes, one function per MPI type constructor.

Each function takes already validated arguments (the :class:`TypeMap` of the old type(s) and
plain ints) and returns the new :class:`TypeMap`, following the MPI standard's definitions
(chapter "Derived Datatypes"): where each block of old items lies, the resulting bounds,
the signature. :class:`~minimpi.data.datatypes.Datatype` validates the user's arguments,
calls these, and records the constructor call for ``Get_envelope``/``Get_contents``.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .typemap import TypeMap, concat_signatures, expand, merge_runs, repeat_signature

__all__ = ["contiguous", "hvector", "hindexed", "struct", "subarray", "darray", "resized",
           "ORDER_C", "ORDER_FORTRAN", "DISTRIBUTE_NONE", "DISTRIBUTE_BLOCK",
           "DISTRIBUTE_CYCLIC", "DISTRIBUTE_DFLT_DARG"]

# Values as MPICH numbers them (any distinct ints would do: programs use the names).
ORDER_C = 56
ORDER_FORTRAN = 57
DISTRIBUTE_BLOCK = 121
DISTRIBUTE_CYCLIC = 122
DISTRIBUTE_NONE = 123
DISTRIBUTE_DFLT_DARG = -49767


#: below this many byte runs, plain Python lists beat numpy's cost per call (the usual struct
#: of a few members, converted from a numpy dtype: thousands of them in a test loop)
SMALL_RUNS = 64


def _bounds(old: TypeMap, starts: np.ndarray, items: np.ndarray) -> tuple[int, int]:
    """(lb, ub) of pieces of ``items`` consecutive old items at byte offsets ``starts``:
    MPI's lb is the least item lb, ub the greatest item ub (pieces with 0 items count not)."""
    keep = items > 0
    if not keep.any():
        return 0, 0
    starts, items = starts[keep], items[keep]
    last = starts + (items - 1) * old.extent
    lo = np.minimum(starts, last) + old.lb
    hi = np.maximum(starts, last) + old.ub
    return int(lo.min()), int(hi.max())


def _small_pieces(old: TypeMap, starts: list[int], counts: list[int]
                  ) -> "tuple[list[int], list[int], int, int] | None":
    """Runs (touching ones merged) and (lb, ub) of the pieces, computed over Python ints;
    None when there are too many runs for that to pay."""
    runs = old.runs
    if runs is None or len(runs[0]) * sum(counts) > SMALL_RUNS:
        return None
    extent = old.extent
    offs: list[int] = []
    lens: list[int] = []
    lo = hi = None
    for start, count in zip(starts, counts):
        if count <= 0:
            continue
        last = start + (count - 1) * extent
        first_lb, last_ub = min(start, last) + old.lb, max(start, last) + old.ub
        lo = first_lb if lo is None else min(lo, first_lb)
        hi = last_ub if hi is None else max(hi, last_ub)
        for i in range(count):
            base = start + i * extent
            for off, length in zip(*runs):
                if length <= 0:
                    continue
                off += base
                if offs and offs[-1] + lens[-1] == off:
                    lens[-1] += length
                else:
                    offs.append(off)
                    lens.append(length)
    return offs, lens, (lo or 0), (hi or 0)


def _from_pieces(old: TypeMap, starts: Sequence[int], items: "int | Sequence[int]") -> TypeMap:
    """Pieces of consecutive ``old`` items at byte offsets ``starts`` (type-map order)."""
    uniform = np.ndim(items) == 0
    if len(starts) <= SMALL_RUNS and old.runs is not None:
        start_list = [int(x) for x in starts]
        count_list = [int(items)] * len(start_list) if uniform else [int(x) for x in items]
        small = _small_pieces(old, start_list, count_list)
        if small is not None:
            offs, lens, lb, ub = small
            total = sum(count_list)
            return TypeMap(offs, lens, old.size * total, lb, ub,
                           repeat_signature(old.signature, total), old.element_dtype,
                           explicit_bounds=old.explicit_bounds, alignment=old.alignment)
    starts = np.asarray(starts, np.int64).ravel()
    counts = np.full(starts.shape, int(items), np.int64) if uniform \
        else np.asarray(items, np.int64).ravel()
    offs, lens = expand(old, starts, int(items) if uniform else counts)
    lb, ub = _bounds(old, starts, counts)
    total = int(counts.sum())
    return TypeMap(offs, lens, old.size * total, lb, ub, repeat_signature(old.signature, total),
                   old.element_dtype, explicit_bounds=old.explicit_bounds,
                   alignment=old.alignment)


def contiguous(old: TypeMap, count: int) -> TypeMap:
    return _from_pieces(old, [0], count)


def hvector(old: TypeMap, count: int, blocklength: int, stride_bytes: int) -> TypeMap:
    """``count`` blocks of ``blocklength`` items, block ``i`` at ``i * stride_bytes``
    (``Create_vector`` passes ``stride * old.extent``)."""
    return _from_pieces(old, np.arange(count, dtype=np.int64) * stride_bytes, blocklength)


def hindexed(old: TypeMap, blocklengths: Sequence[int], displs_bytes: Sequence[int]) -> TypeMap:
    """Blocks of ``blocklengths[i]`` items at byte offsets ``displs_bytes[i]``."""
    return _from_pieces(old, displs_bytes, np.asarray(blocklengths, np.int64))


def struct(blocklengths: Sequence[int], displs: Sequence[int], olds: Sequence[TypeMap]) -> TypeMap:
    """Block ``i``: ``blocklengths[i]`` items of ``olds[i]`` at byte ``displs[i]``; the
    extent is rounded up to the strictest member alignment, as C compilers pad structs
    (unless a member's bounds were set explicitly by a resize)."""
    offs_parts, lens_parts, sigs = [], [], []
    lbs, ubs = [], []
    size = 0
    elem = None
    explicit = False
    align = 1
    first = True
    for n, d, old in zip(blocklengths, displs, olds):
        n, d = int(n), int(d)
        part = _from_pieces(old, [d], n)
        offs_parts.append(part.runs[0] if part.runs is not None else part.offsets)
        lens_parts.append(part.runs[1] if part.runs is not None else part.lengths)
        sigs.append(part.signature)
        size += part.size
        if n > 0:
            lbs.append(part.lb)
            ubs.append(part.ub)
            explicit = explicit or old.explicit_bounds
            align = max(align, old.alignment)
        if old.size and n > 0:
            if first:
                elem, first = old.element_dtype, False
            elif elem is not None and old.element_dtype != elem:
                elem = None
    if first:
        elem = olds[0].element_dtype if olds else None
    if sum(len(o) for o in offs_parts) <= SMALL_RUNS:
        offs, lens = _merge_small(offs_parts, lens_parts)
    else:
        offs, lens = merge_runs(np.concatenate(offs_parts) if offs_parts else np.empty(0, np.int64),
                                np.concatenate(lens_parts) if lens_parts else np.empty(0, np.int64))
    lb = min(lbs) if lbs else 0
    ub = max(ubs) if ubs else 0
    if not explicit and align > 1 and (ub - lb) % align:
        ub += align - (ub - lb) % align
    return TypeMap(offs, lens, size, lb, ub, concat_signatures(sigs), elem,
                   explicit_bounds=explicit, alignment=align)


def _merge_small(offs_parts: list, lens_parts: list) -> tuple[list[int], list[int]]:
    """The runs of all parts in order, each merged with the next when they touch."""
    offs: list[int] = []
    lens: list[int] = []
    for part_offs, part_lens in zip(offs_parts, lens_parts):
        for off, length in zip(part_offs, part_lens):
            off, length = int(off), int(length)
            if length <= 0:
                continue
            if offs and offs[-1] + lens[-1] == off:
                lens[-1] += length
            else:
                offs.append(off)
                lens.append(length)
    return offs, lens


def _index_grid(indices: Sequence[np.ndarray], sizes: Sequence[int], order: int) -> np.ndarray:
    """Linear element indices (in ``order``) of the cartesian product of per-dimension index
    lists, listed in the same order (C: last dimension fastest; Fortran: first fastest)."""
    dims = list(range(len(sizes)))
    if order == ORDER_FORTRAN:
        dims.reverse()                      # walk the dimensions slowest first
    linear = np.zeros(1, np.int64)
    for k in dims:
        stride = 1
        for j in dims[dims.index(k) + 1:]:
            stride *= int(sizes[j])
        linear = (linear[:, None] + np.asarray(indices[k], np.int64)[None, :] * stride).ravel()
    return linear


def _grid_map(old: TypeMap, indices: Sequence[np.ndarray], sizes: Sequence[int],
              order: int) -> TypeMap:
    """Items of ``old`` at the given per-dimension indices of a ``sizes`` array, with
    ``lb == 0`` and ``extent`` the whole array's (subarray and darray types)."""
    ndim = len(sizes)
    fast = ndim - 1 if order == ORDER_C else 0
    # Runs along the fastest dimension are consecutive items when its indices are.
    fast_idx = np.asarray(indices[fast], np.int64)
    consecutive = fast_idx.size > 0 and bool((np.diff(fast_idx) == 1).all())
    if consecutive:
        rest = [np.array([0], np.int64) if k == fast else indices[k] for k in range(ndim)]
        starts = (_index_grid(rest, sizes, order) + int(fast_idx[0])) * old.extent
        pieces = _from_pieces(old, starts, int(fast_idx.size))
    else:
        pieces = _from_pieces(old, _index_grid(indices, sizes, order) * old.extent, 1)
    total = int(np.prod([int(s) for s in sizes], dtype=np.int64))
    return TypeMap(pieces.offsets, pieces.lengths, pieces.size, 0, total * old.extent,
                   pieces.signature, pieces.element_dtype, explicit_bounds=True,
                   alignment=old.alignment)


def subarray(old: TypeMap, sizes: Sequence[int], subsizes: Sequence[int],
             starts: Sequence[int], order: int) -> TypeMap:
    indices = [np.arange(int(s), int(s) + int(n), dtype=np.int64) for s, n in zip(starts, subsizes)]
    return _grid_map(old, indices, sizes, order)


def darray_indices(gsize: int, distrib: int, darg: int, psize: int, coord: int) -> np.ndarray:
    """The global indices of one dimension that process coordinate ``coord`` holds."""
    if distrib == DISTRIBUTE_NONE:
        return np.arange(gsize, dtype=np.int64)
    if distrib == DISTRIBUTE_BLOCK:
        block = -(-gsize // psize) if darg == DISTRIBUTE_DFLT_DARG else darg
        lo = min(coord * block, gsize)
        return np.arange(lo, min(lo + block, gsize), dtype=np.int64)
    block = 1 if darg == DISTRIBUTE_DFLT_DARG else darg
    idx = np.arange(gsize, dtype=np.int64)
    return idx[(idx // block) % psize == coord]


def darray(old: TypeMap, size: int, rank: int, gsizes: Sequence[int], distribs: Sequence[int],
           dargs: Sequence[int], psizes: Sequence[int], order: int) -> TypeMap:
    # process coordinates are row-major over psizes whatever the array order
    coords, rest = [], rank
    for p in reversed(list(psizes)):
        coords.append(rest % int(p))
        rest //= int(p)
    coords.reverse()
    indices = [darray_indices(int(g), int(d), int(a), int(p), c)
               for g, d, a, p, c in zip(gsizes, distribs, dargs, psizes, coords)]
    return _grid_map(old, indices, gsizes, order)


def resized(old: TypeMap, lb: int, extent: int) -> TypeMap:
    return TypeMap(old.offsets, old.lengths, old.size, lb, lb + extent, old.signature,
                   old.element_dtype, explicit_bounds=True, alignment=old.alignment)
