"""Arithmetic on file byte runs: ``(offsets, lengths)`` pairs of int64 numpy arrays.

A data access is described by the runs of file bytes it touches, in the order its data
is packed (for a file view that is file order: MPI requires a filetype's displacements
to be non-decreasing). These helpers are vectorised: their cost does not grow with a
Python loop per run, except :func:`copy_pieces`, which loops once per *distinct* piece
length (a strided pattern has one or two).
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

Runs = tuple  # (offsets: np.ndarray[int64], lengths: np.ndarray[int64])

EMPTY = (np.zeros(0, np.int64), np.zeros(0, np.int64))


def merge_adjacent(offsets: np.ndarray, lengths: np.ndarray) -> Runs:
    """Join runs where one ends exactly where the next begins (order kept)."""
    keep = lengths > 0
    offsets, lengths = offsets[keep], lengths[keep]
    if len(offsets) <= 1:
        return offsets, lengths
    starts_new = np.empty(len(offsets), bool)
    starts_new[0] = True
    starts_new[1:] = offsets[1:] != offsets[:-1] + lengths[:-1]
    first = np.flatnonzero(starts_new)
    merged_len = np.add.reduceat(lengths, first)
    return offsets[first], merged_len


def trim(offsets: np.ndarray, lengths: np.ndarray, skip: int, nbytes: int) -> Runs:
    """The runs covering data bytes ``[skip, skip + nbytes)`` of the runs' packed data."""
    if nbytes <= 0:
        return EMPTY
    ends = np.cumsum(lengths)
    starts = ends - lengths
    lo = int(np.searchsorted(ends, skip, side="right"))
    hi = int(np.searchsorted(starts, skip + nbytes, side="left"))
    offs = offsets[lo:hi].copy()
    lens = lengths[lo:hi].copy()
    cut_front = skip - int(starts[lo])
    offs[0] += cut_front
    lens[0] -= cut_front
    over = int(ends[hi - 1]) - (skip + nbytes)
    lens[-1] -= over
    return offs, lens


def split_at(offsets: np.ndarray, lengths: np.ndarray, bounds: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Cut sorted runs at the domain boundaries ``bounds`` (sorted; domain d is
    ``[bounds[d], bounds[d+1])``, and every run lies inside ``[bounds[0], bounds[-1])``).

    Returns ``(offsets, lengths, domain, data_pos)`` of the pieces, in order: ``data_pos``
    is where each piece's bytes start in the runs' packed data. Pieces of one domain are
    consecutive, and so is their data.
    """
    if len(offsets) == 0:
        z = np.zeros(0, np.int64)
        return z, z, z, z
    ends = offsets + lengths
    first = np.searchsorted(bounds, offsets, side="right") - 1
    last = np.searchsorted(bounds, ends - 1, side="right") - 1
    pieces = last - first + 1
    run_of = np.repeat(np.arange(len(offsets)), pieces)
    k = np.arange(len(run_of)) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    domain = first[run_of] + k
    p_start = np.maximum(offsets[run_of], bounds[domain])
    p_end = np.minimum(ends[run_of], bounds[domain + 1])
    packed_start = np.cumsum(lengths) - lengths
    data_pos = packed_start[run_of] + (p_start - offsets[run_of])
    return p_start, p_end - p_start, domain, data_pos


def clip_to(offsets: np.ndarray, lengths: np.ndarray, size: int) -> int:
    """How many packed data bytes of these (sorted) runs lie before file byte ``size``:
    what a read gets before the end of the file."""
    inside = np.clip(size - offsets, 0, lengths)
    short = np.flatnonzero(inside < lengths)
    if len(short) == 0:
        return int(lengths.sum())
    i = int(short[0])
    return int(lengths[:i].sum() + inside[i])


# pieces at least this long are copied one by one (a memcpy each beats numpy's
# per-element fancy indexing); shorter ones in one vectorised copy per distinct length
LOOP_MIN = 512


def gather_pieces(src: np.ndarray, src_pos: np.ndarray, lengths: np.ndarray,
                  out: np.ndarray) -> None:
    """``out`` = the pieces ``src[src_pos[i]:+lengths[i]]`` back to back (uint8 arrays)."""
    if len(lengths) == 0:
        return
    out_pos = np.cumsum(lengths) - lengths
    distinct = np.unique(lengths)
    if len(distinct) == 1 and LOOP_MIN > int(distinct[0]) > 0:
        n = int(distinct[0])
        out[:n * len(lengths)].reshape(-1, n)[...] = _rows(src, n)[src_pos]
        return
    for n in distinct.tolist():
        if n <= 0:
            continue
        sel = np.flatnonzero(lengths == n)
        if n >= LOOP_MIN or len(sel) < 16:
            s_mv, o_mv = memoryview(src), memoryview(out)
            for s, d in zip(src_pos[sel].tolist(), out_pos[sel].tolist()):
                o_mv[d:d + n] = s_mv[s:s + n]
        else:
            dst_rows = as_strided(out, shape=(len(out) - n + 1, n), strides=(1, 1))
            dst_rows[out_pos[sel]] = _rows(src, n)[src_pos[sel]]


def _rows(buf: np.ndarray, n: int) -> np.ndarray:
    """Every window of ``n`` bytes of ``buf`` as a read-only (len - n + 1, n) view."""
    return as_strided(buf, shape=(len(buf) - n + 1, n), strides=(1, 1), writeable=False)
