"""File views (``File.Set_view``): which file bytes a stream of etypes lands on.

A view is ``(disp, etype, filetype, datarep)``. The file is seen as the filetype tiled
from byte ``disp`` on (tile ``t`` starts at ``disp + t * filetype.extent``); only the bytes
the filetype's type map covers belong to this process. Positions and offsets in data
calls count etypes of that data stream. :meth:`FileView.runs` turns "``nbytes`` of data
starting at position ``p``" into absolute file byte runs, vectorised with numpy (the
filetype's own runs are computed once, when the view is set).

The filetype's runs come from the datatype seam (``Datatype.blocks(count)``); datatypes
that do not have it yet (plain contiguous ones) are one run of ``size`` bytes.

Data representations: ``native`` and ``internal`` store memory bytes as they are;
``external32`` stores big-endian, IEEE types of the sizes the standard fixes (a type whose
native size differs, such as a C ``long`` on LP64 or ``long double``, is refused, naming it);
representations registered with ``MPI.Register_datarep`` convert through the program's
functions (datarep.py).
"""
from __future__ import annotations

import sys
from typing import Any

import numpy as np

from ..data.datatypes import BYTE, Datatype
from ..errors import ERR_UNSUPPORTED_DATAREP, ArgumentError, DatatypeError, FileError
from . import runs as R

DATAREPS = ("native", "internal", "external32")

# external32 sizes the standard fixes that can differ from this machine's native ones
_EXTERNAL32_SIZES = {"LONG": 4, "UNSIGNED_LONG": 4, "LONG_DOUBLE": 16, "WCHAR": 2,
                     "C_LONG_DOUBLE_COMPLEX": 32, "LONG_INT": 8, "LONG_DOUBLE_INT": 20}


def type_runs(datatype: Datatype) -> tuple[np.ndarray, np.ndarray]:
    """The contiguous byte runs of one item of ``datatype`` (offsets from its origin)."""
    blocks = getattr(datatype, "blocks", None)
    if blocks is not None:
        offs, lens = blocks(1)
        return np.asarray(offs, np.int64), np.asarray(lens, np.int64)
    # Before the general type map: every datatype is contiguous (lb 0, extent == size).
    if not getattr(datatype, "is_contiguous", True):
        raise DatatypeError(f"{datatype.name}: a non-contiguous datatype without blocks()")
    size = int(datatype.size)
    if size == 0:
        return R.EMPTY
    return np.zeros(1, np.int64), np.full(1, size, np.int64)


def external32_check(datatype: Datatype, call: str) -> None:
    """Refuse external32 for types whose external32 size is not the native one."""
    base = getattr(datatype, "base", datatype)
    want = _EXTERNAL32_SIZES.get(base.name)
    native = int(base.size)
    if want is not None and want != native:
        raise FileError(f"{call}: the external32 representation of {base.name} is {want} "
                        f"bytes but {native} natively; minimpi converts only types of equal "
                        f"size", ERR_UNSUPPORTED_DATAREP)


def element_dtype(datatype: Datatype) -> np.dtype | None:
    """numpy dtype of the elements of ``datatype`` when it has one kind only."""
    dt = getattr(datatype, "element_dtype", None)
    if dt is not None:
        return np.dtype(dt)
    try:
        return np.dtype(datatype.dtype)
    except Exception:   # a derived type with mixed elements (after the datatype seam)
        return None


def to_external32(data: memoryview, datatype: Datatype, call: str) -> memoryview:
    """Native bytes of items of ``datatype`` as external32 (big-endian) bytes."""
    if sys.byteorder == "big":
        return data
    dt = element_dtype(datatype)
    if dt is None:
        raise FileError(f"{call}: external32 needs a datatype of one element type, got "
                        f"{datatype.name}", ERR_UNSUPPORTED_DATAREP)
    arr = np.frombuffer(data, dtype=dt)
    return memoryview(arr.astype(dt.newbyteorder(">")).view(np.uint8))


def from_external32(data: np.ndarray, datatype: Datatype, call: str) -> None:
    """Convert external32 bytes (uint8 array) to native in place."""
    if sys.byteorder == "big":
        return
    dt = element_dtype(datatype)
    if dt is None:
        raise FileError(f"{call}: external32 needs a datatype of one element type, got "
                        f"{datatype.name}", ERR_UNSUPPORTED_DATAREP)
    usable = len(data) - len(data) % dt.itemsize
    arr = data[:usable].view(dt.newbyteorder(">"))
    data[:usable].view(dt)[...] = arr.astype(dt)


class FileView:
    """One process's view of a file (see the module docstring)."""

    __slots__ = ("disp", "etype", "filetype", "datarep", "converter", "esize", "_tile_offs",
                 "_tile_lens", "_tile_data_start", "_tile_size", "_tile_extent", "_contiguous")

    def __init__(self, disp: int, etype: Datatype, filetype: Datatype, datarep: str,
                 call: str = "File.Set_view", user: Any = None) -> None:
        """``user``: the registered representation named ``datarep`` (io/datarep.py), if
        it is not a predefined one."""
        # (File.Set_view resolved both to datatypes; anything answering the datatype seam
        # - size, extent, blocks() - works here)
        if not etype or not filetype:
            raise DatatypeError(f"{call}: etype and filetype must not be null datatypes")
        if datarep not in DATAREPS and user is None:
            raise FileError(f"{call}: data representation {datarep!r} is not one of "
                            f"{', '.join(DATAREPS)} nor one registered with "
                            f"MPI.Register_datarep in this process", ERR_UNSUPPORTED_DATAREP)
        if int(disp) < 0:
            raise ArgumentError(f"{call}: disp must be >= 0 bytes, got {disp}")
        esize = int(etype.size)
        if esize <= 0:
            raise DatatypeError(f"{call}: etype {etype.name} has size {esize}; it must "
                                "hold data")
        offs, lens = R.merge_adjacent(*type_runs(filetype))
        size = int(lens.sum())
        if size % esize:
            raise DatatypeError(f"{call}: filetype {filetype.name} holds {size} bytes, not a "
                                f"whole number of etype {etype.name} ({esize} bytes)")
        extent = int(filetype.extent)
        if len(offs) and (np.any(offs[1:] < offs[:-1] + lens[:-1]) or int(offs[0]) + disp < 0
                          or int(offs[-1] + lens[-1]) > int(offs[0]) + extent):
            raise DatatypeError(f"{call}: filetype {filetype.name} must cover increasing, "
                                "non-overlapping, non-negative byte ranges (also from one "
                                "tile to the next), as MPI requires")
        if datarep == "external32":
            external32_check(etype, call)
        if user is not None:
            user.check_types((etype, filetype), call)
        self.disp, self.etype, self.filetype, self.datarep = int(disp), etype, filetype, datarep
        #: what converts the bytes of data accesses: None (native, internal), "external32"
        #: or the registered representation (io/datarep.py: to_file, from_file)
        self.converter = user if user is not None else (
            "external32" if datarep == "external32" else None)
        self.esize = esize
        self._tile_offs, self._tile_lens = offs, lens
        self._tile_data_start = np.cumsum(lens) - lens
        self._tile_size = size
        self._tile_extent = extent
        self._contiguous = len(offs) == 1 and int(offs[0]) == 0 and extent == size

    @classmethod
    def default(cls) -> "FileView":
        """The view every file starts with: bytes from byte 0."""
        return cls(0, BYTE, BYTE, "native")

    def runs(self, position: int, nbytes: int) -> tuple[np.ndarray, np.ndarray]:
        """Absolute file runs of ``nbytes`` data bytes starting at view ``position`` (etypes)."""
        if nbytes <= 0:
            return R.EMPTY
        start = position * self.esize
        if self._contiguous:
            return (np.array([self.disp + start], np.int64), np.array([nbytes], np.int64))
        S, E = self._tile_size, self._tile_extent
        if S == 0:
            raise DatatypeError(f"filetype {self.filetype.name} holds no data; cannot access "
                                f"{nbytes} bytes through this view")
        first, last = start // S, (start + nbytes - 1) // S
        tiles = np.arange(first, last + 1, dtype=np.int64)
        offs = (self.disp + tiles[:, None] * E + self._tile_offs[None, :]).ravel()
        lens = np.broadcast_to(self._tile_lens, (len(tiles), len(self._tile_lens))).ravel()
        offs, lens = R.trim(offs, lens, start - first * S, nbytes)
        return R.merge_adjacent(offs, lens)

    def byte_offset(self, position: int) -> int:
        """Absolute file byte of view position ``position`` (``File.Get_byte_offset``)."""
        start = position * self.esize
        S, E = self._tile_size, self._tile_extent
        if S == 0:
            return self.disp
        tile, inside = divmod(start, S)
        b = int(np.searchsorted(self._tile_data_start, inside, side="right")) - 1
        return (self.disp + tile * E + int(self._tile_offs[b])
                + inside - int(self._tile_data_start[b]))

    def position_of_end(self, file_size: int) -> int:
        """The first view position (etypes) whose byte is at or past ``file_size`` (for
        ``SEEK_END`` and ``MODE_APPEND``): the number of whole etypes the view sees before
        the end of the file."""
        if file_size <= self.disp:
            return 0
        S, E = self._tile_size, self._tile_extent
        if S == 0:
            return 0
        tiles, rest = divmod(file_size - self.disp, E)
        inside = np.clip(rest - self._tile_offs, 0, self._tile_lens).sum()
        return int((tiles * S + int(inside)) // self.esize)
