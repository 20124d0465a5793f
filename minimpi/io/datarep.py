"""Data representations of file views (``File.Set_view(..., datarep)``) and the user-defined
ones (``MPI.Register_datarep``).

``native`` and ``internal`` store memory bytes as they are, ``external32`` big-endian
(view.py). ``MPI.Register_datarep(name, read_fn, write_fn, extent_fn)`` adds a
representation of this process (register it on every process that opens the file with it,
before ``Set_view``), with mpi4py's callbacks:

* ``write_fn(userbuf, datatype, count, filebuf, position)`` converts ``count`` items of
  ``datatype`` in ``userbuf`` (from item ``position`` on) into ``filebuf``, the bytes that
  go to the file; ``read_fn`` with the same arguments converts ``filebuf`` (what the file
  holds) into ``userbuf``. ``userbuf``/``filebuf`` are ``MPI.buffer`` objects (``userbuf``
  is read-only for a write: the data being written is the program's); ``None`` for either
  function means no conversion in that direction (the bytes move as they are).
* ``extent_fn(datatype)`` gives the size in the file of a basic datatype; MPI calls it for
  the basic types of the view's etype and filetype and of the data accessed.

minimpi hands the data to the functions packed: a non-contiguous memory datatype's items
arrive gathered, as the basic type they consist of (``count`` of those) or, for a type mixing
basic types, as a struct of its type signature with no gaps; a contiguous datatype arrives
as itself. Each access makes one call per direction with ``position`` 0. The file extent of
each basic type must be its native size (as minimpi's ``external32`` requires): a
representation that changes sizes is refused with ``ERR_UNSUPPORTED_DATAREP`` naming the type.
An exception in a function ends the access with ``ERR_CONVERSION`` naming the representation
and the function (a collective access fails on every rank); registering a name twice, or a
predefined one, is ``ERR_DUP_DATAREP``.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Iterable, Optional

import numpy as np

from ..data.datatypes import PREDEFINED, Datatype, dtype_of_code, from_numpy_dtype
from ..data.memory import buffer
from ..errors import (
    ERR_CONVERSION,
    ERR_DUP_DATAREP,
    ERR_UNSUPPORTED_DATAREP,
    ArgumentError,
    FileError,
    MinimpiError,
)
from .view import from_external32, to_external32

__all__ = ["PREDEFINED_DATAREPS", "Register_datarep", "UserDatarep", "lookup", "to_file",
           "from_file", "type_extent"]

PREDEFINED_DATAREPS = ("native", "internal", "external32")
#: MPI.MAX_DATAREP_STRING (MPICH's)
MAX_DATAREP_STRING = 128

_registry: dict[str, "UserDatarep"] = {}
_registry_lock = threading.Lock()


class UserDatarep:
    """One registered representation: its functions and the file extents it gave."""

    def __init__(self, name: str, read_fn: Optional[Callable[..., Any]],
                 write_fn: Optional[Callable[..., Any]], extent_fn: Callable[[Any], int]) -> None:
        self.name = name
        self.read_fn = read_fn
        self.write_fn = write_fn
        self.extent_fn = extent_fn
        self._extents: dict[str, int] = {}      # basic type code -> file extent
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<data representation {self.name!r}>"

    # -- extents ---------------------------------------------------------------------------
    def file_extent(self, code: str, where: str) -> int:
        """The file extent ``extent_fn`` gives the basic type of signature code ``code``."""
        found = self._extents.get(code)
        if found is None:
            basic = _basic_type(code)
            value = self._call("extent_fn", self.extent_fn, where, Datatype(basic))
            try:
                found = int(value)
            except (TypeError, ValueError):
                raise FileError(f"{where}: the extent_fn of data representation "
                                f"{self.name!r} returned {value!r} for {basic.name}; it must "
                                f"return a number of bytes", ERR_CONVERSION) from None
            with self._lock:
                self._extents[code] = found
        return found

    def check_types(self, datatypes: Iterable[Datatype], where: str) -> None:
        """Each basic type in ``datatypes`` must keep its native size in the file."""
        for datatype in datatypes:
            for code, _ in datatype.signature:
                native = dtype_of_code(code).itemsize
                extent = self.file_extent(code, where)
                if extent != native:
                    raise FileError(
                        f"{where}: data representation {self.name!r} gives "
                        f"{_basic_type(code).name} {extent} bytes in the file but it has "
                        f"{native} in memory; minimpi converts only representations that "
                        f"keep each basic type's size", ERR_UNSUPPORTED_DATAREP)

    # -- conversions -----------------------------------------------------------------------
    def to_file(self, data: np.ndarray, datatype: Datatype, where: str) -> np.ndarray:
        self.check_types((datatype,), where)
        if self.write_fn is None or not len(data):
            return data
        shown, count = _packed_type(datatype, len(data))
        filebuf = np.zeros(len(data), np.uint8)
        self._call("write_fn", self.write_fn, where, buffer.frombuffer(data, readonly=True),
                   Datatype(shown), count, buffer.frombuffer(filebuf), 0)
        return filebuf

    def from_file(self, data: np.ndarray, datatype: Datatype, where: str) -> None:
        self.check_types((datatype,), where)
        if self.read_fn is None or not len(data):
            return
        shown, count = _packed_type(datatype, len(data))
        if not count:
            return
        used = count * shown.size
        filebuf = data[:used].copy()
        self._call("read_fn", self.read_fn, where, buffer.frombuffer(data[:used]),
                   Datatype(shown), count, buffer.frombuffer(filebuf), 0)

    def _call(self, which: str, fn: Callable[..., Any], where: str, *args: Any) -> Any:
        try:
            return fn(*args)
        except MinimpiError:
            raise
        except Exception as exc:      # the program's function: anything may come out
            raise FileError(f"{where}: the {which} of data representation {self.name!r} "
                            f"raised {type(exc).__name__}: {exc}", ERR_CONVERSION) from exc


def _basic_type(code: str) -> Datatype:
    """The predefined datatype of a signature code (a pair type's code is its name)."""
    if code in PREDEFINED:
        return PREDEFINED[code]
    return from_numpy_dtype(dtype_of_code(code))


def _packed_type(datatype: Datatype, nbytes: int) -> tuple[Datatype, int]:
    """The datatype and count that describe ``nbytes`` of packed items of ``datatype`` (whole
    ones): itself when it is contiguous, else its basic type, or a gap-free struct of its
    signature when it mixes basic types."""
    if datatype.is_contiguous:
        shown = datatype
    elif datatype.element_dtype is not None:
        shown = from_numpy_dtype(datatype.element_dtype)
    else:
        runs = datatype.signature
        sizes = [dtype_of_code(code).itemsize * n for code, n in runs]
        displs = [int(d) for d in np.cumsum([0] + sizes[:-1])]
        shown = Datatype.Create_struct([n for _, n in runs], displs,
                                       [_basic_type(code) for code, _ in runs]).Commit()
    return shown, (nbytes // shown.size if shown.size else 0)


# ------------------------------------------------------------------------- registration
def Register_datarep(datarep: str, read_fn: Optional[Callable[..., Any]],
                     write_fn: Optional[Callable[..., Any]],
                     extent_fn: Callable[[Any], int]) -> None:
    """``MPI.Register_datarep``: add the data representation ``datarep`` to this process
    (see the module docstring for the functions and what minimpi supports)."""
    call = "MPI.Register_datarep"
    if not isinstance(datarep, str):
        raise TypeError(f"{call}: datarep must be a str, got {type(datarep).__name__}")
    if not datarep or len(datarep) >= MAX_DATAREP_STRING:
        raise ArgumentError(f"{call}: the name must have 1 to {MAX_DATAREP_STRING - 1} "
                            f"characters, got {datarep!r:.40}")
    for what, fn in (("read_fn", read_fn), ("write_fn", write_fn)):
        if fn is not None and not callable(fn):
            raise TypeError(f"{call}({datarep!r}): {what} must be a function or None, got "
                            f"{type(fn).__name__}")
    if not callable(extent_fn):
        raise TypeError(f"{call}({datarep!r}): extent_fn must be a function (datatype -> "
                        f"its extent in the file), got {type(extent_fn).__name__}")
    with _registry_lock:
        if datarep in PREDEFINED_DATAREPS or datarep in _registry:
            raise FileError(f"{call}: data representation {datarep!r} is already defined "
                            f"in this process", ERR_DUP_DATAREP)
        _registry[datarep] = UserDatarep(datarep, read_fn, write_fn, extent_fn)


def lookup(datarep: str) -> Optional[UserDatarep]:
    """The registered representation of that name, or None."""
    return _registry.get(datarep)


# --------------------------------------------------------------- what data accesses call
def to_file(converter: Any, data: np.ndarray, datatype: Datatype, where: str) -> np.ndarray:
    """The packed bytes of a write as the view's representation stores them."""
    if converter is None:
        return data
    if converter == "external32":
        return np.frombuffer(to_external32(memoryview(data), datatype, where), np.uint8)
    return converter.to_file(data, datatype, where)


def from_file(converter: Any, data: np.ndarray, datatype: Datatype, where: str) -> None:
    """Convert the bytes a read got from the file (``data``, in place) to memory's."""
    if converter is None:
        return
    if converter == "external32":
        from_external32(data, datatype, where)
        return
    converter.from_file(data, datatype, where)


def type_extent(converter: Any, datatype: Datatype, where: str) -> int:
    """``File.Get_type_extent``: the extent of ``datatype`` in the view's representation."""
    if isinstance(converter, UserDatarep):
        if datatype.is_predefined and len(datatype.signature) == 1:
            code, n = datatype.signature[0]
            if n == 1:
                return converter.file_extent(code, where)
        converter.check_types((datatype,), where)
    return int(datatype.extent)
