"""Where an operation's bytes live: target layouts from datatypes, origin bytes from buffers.

A **target layout** is the byte runs one operation touches in the target's window: a start
(``target_disp * disp_unit``) plus ``(offsets, lengths)`` from the target datatype's
``blocks(count)`` (the datatype seam: every datatype answers it, derived ones included).
Until every datatype has ``blocks``, a contiguous datatype (predefined, ``Create_contiguous``)
is one run of ``count * size`` bytes - the private fallback below.

The target applies a layout with :func:`gather` / :func:`scatter` (one numpy fancy-index copy,
never a loop per element), or straight on a slice when the layout is one run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Tuple

import numpy as np

from ..data.buffers import BufSpec
from ..data.datatypes import Datatype
from ..errors import DatatypeError

_EMPTY = np.zeros(0, np.int64)


def datatype_blocks(datatype: Datatype, count: int) -> Tuple[np.ndarray, np.ndarray]:
    """The contiguous byte runs of ``count`` items of ``datatype`` (offsets from the first
    item's origin, lengths), adjacent runs merged."""
    blocks = getattr(datatype, "blocks", None)
    if blocks is not None:
        offsets, lengths = blocks(count)
        return np.asarray(offsets, np.int64), np.asarray(lengths, np.int64)
    # fallback for datatypes without a type map: contiguous ones only
    if not getattr(datatype, "is_contiguous", True):
        raise DatatypeError(f"{datatype.name}: this datatype describes no byte runs "
                            f"(Datatype.blocks is missing)")
    n = count * datatype.size
    if n == 0:
        return _EMPTY, _EMPTY
    return np.array([0], np.int64), np.array([n], np.int64)


def element_dtype(datatype: Datatype) -> Optional[np.dtype]:
    """The numpy dtype of the elements when the type holds one basic type (else None)."""
    known = getattr(datatype, "element_dtype", None)
    if known is not None or hasattr(type(datatype), "element_dtype"):
        return known
    return datatype.dtype          # predefined and contiguous types: their base dtype


@dataclass(frozen=True)
class Layout:
    """Byte runs in a target window: ``start + offsets[i]`` for ``lengths[i]`` bytes.

    ``single`` is set when the runs are one contiguous range (then ``offsets``/``lengths``
    are not needed and the target works on a slice).
    """

    start: int
    nbytes: int
    offsets: np.ndarray
    lengths: np.ndarray
    single: bool

    @classmethod
    def of(cls, start: int, datatype: Datatype, count: int) -> "Layout":
        if getattr(datatype, "is_contiguous", False):     # one run: no arrays to build
            return cls(start, count * datatype.size, _EMPTY, _EMPTY, True)
        offsets, lengths = datatype_blocks(datatype, count)
        nbytes = int(lengths.sum()) if lengths.size else 0
        if lengths.size <= 1:
            first = int(offsets[0]) if offsets.size else 0
            return cls(start + first, nbytes, _EMPTY, _EMPTY, True)
        return cls(start, nbytes, offsets, lengths, False)

    @property
    def low(self) -> int:
        """The lowest byte touched (relative to the window)."""
        if self.single:
            return self.start
        return self.start + int(self.offsets.min())

    @property
    def high(self) -> int:
        """One past the highest byte touched."""
        if self.single:
            return self.start + self.nbytes
        return self.start + int((self.offsets + self.lengths).max())

    def wire(self) -> tuple:
        """A picklable form (what travels in a request)."""
        if self.single:
            return (self.start, self.nbytes)
        return (self.start, self.nbytes, self.offsets, self.lengths)

    @classmethod
    def from_wire(cls, w: tuple) -> "Layout":
        if len(w) == 2:
            return cls(w[0], w[1], _EMPTY, _EMPTY, True)
        return cls(w[0], w[1], w[2], w[3], False)

    def shifted(self, base: int) -> "Layout":
        """The same runs ``base`` bytes further (a dynamic window's region offset)."""
        return Layout(self.start - base, self.nbytes, self.offsets, self.lengths, self.single)


def byte_index(layout: Layout) -> np.ndarray:
    """Every byte position of a multi-run layout, in order (vectorised)."""
    lengths = layout.lengths
    out_starts = np.cumsum(lengths) - lengths
    return (np.arange(layout.nbytes, dtype=np.int64)
            - np.repeat(out_starts - layout.offsets - layout.start, lengths))


def gather(memory: np.ndarray, layout: Layout) -> np.ndarray:
    """The layout's bytes as one contiguous uint8 array (a view when it is one run)."""
    if layout.single:
        return memory[layout.start:layout.start + layout.nbytes]
    return memory[byte_index(layout)]


def scatter(memory: np.ndarray, layout: Layout, data: Any) -> None:
    """Write contiguous ``data`` (layout.nbytes bytes) into the layout's runs."""
    src = np.frombuffer(data, np.uint8) if not isinstance(data, np.ndarray) else data
    if layout.single:
        memory[layout.start:layout.start + layout.nbytes] = src
    else:
        memory[byte_index(layout)] = src


# ----------------------------------------------------------------------------- origin side
# parse_buffer already gives the origin's items as contiguous bytes: for a derived datatype
# a send's spec holds them packed, a receive's spec a temporary that finish() scatters.
def origin_bytes(spec: BufSpec) -> memoryview:
    """The origin buffer's data as contiguous bytes (zero-copy for contiguous types)."""
    return spec.view


def store_into_origin(spec: BufSpec, data: Any) -> None:
    """Put contiguous ``data`` (a reply) into the origin buffer ``spec`` describes."""
    n = len(data)
    if n:
        spec.view[:n] = data
    spec.finish()
