"""MPI datatypes as thin descriptions of numpy dtypes (``MPI.Datatype``).

A :class:`Datatype` answers the questions the rest of minimpi asks about a buffer's
elements: how many bytes one item takes (``size``/``extent``), which numpy dtype its
elements have (``dtype``), and what it is called (``name``, for error messages).

Layout model
------------
* A **predefined** datatype (``INT``, ``DOUBLE``, ``DOUBLE_INT``...) is exactly one numpy
  dtype: ``dtype`` is that dtype and ``base_count == 1``.
* A **derived** datatype made by :meth:`Datatype.Create_contiguous` (or :meth:`Dup`) is
  ``base_count`` consecutive elements of a predefined ``base`` datatype. Its ``dtype`` is
  the base's element dtype, so a buffer of ``count`` items of it is a flat numpy array of
  ``count * base_count`` elements of ``dtype`` - which is exactly what reductions and the
  wire need. :func:`to_numpy_dtype` gives the numpy subarray dtype ``(base, (n,))``
  (as ``mpi4py.util.dtlib`` does).
* numpy dtypes that have no MPI counterpart but are plain bytes (``'S5'``, ``'U3'``, any
  structured dtype that is not a C pair such as ``DOUBLE_INT``, datetimes) map to a
  contiguous type of ``BYTE`` (or ``CHAR``/``WCHAR``) of the dtype's item size, so such
  arrays can still be sent and received (not reduced).

Only contiguous layouts are modelled (no vector/indexed/struct types with holes): every
type here has ``lb == 0`` and ``extent == size``.

Handles compare by identity, as MPI handles do: ``INT != INT32_T`` even though both are
4-byte ints; aliases (``UNSIGNED_INT is UNSIGNED``, ``TWOINT is INT_INT``) are the same
object. Predefined types pickle to the same singleton in the receiving process.
"""
from __future__ import annotations

import numpy as np

from ..errors import DatatypeError, UnknownDatatypeError

__all__ = [
    "Datatype", "DATATYPE_NULL", "PREDEFINED", "TYPECODES",
    "from_numpy_dtype", "to_numpy_dtype", "from_typecode", "resolve_datatype",
    "PAIR_TYPES",
]


class Datatype:
    """An MPI datatype handle (``MPI.Datatype``).

    Users obtain these as the predefined constants or via :meth:`Create_contiguous`;
    the constructor is internal. ``Datatype()`` with no arguments is a null handle,
    equal in meaning to ``DATATYPE_NULL`` (falsy).
    """

    __slots__ = ("_name", "_dtype", "_base", "_base_count", "_predefined", "_freed",
                 "_committed", "__weakref__")

    def __init__(self, name: str = "DATATYPE_NULL", dtype=None, *, base: "Datatype | None" = None,
                 base_count: int = 1, predefined: bool = False) -> None:
        self._name = name
        self._dtype = None if dtype is None else np.dtype(dtype)
        self._base = base if base is not None else (self if dtype is not None else None)
        self._base_count = int(base_count)
        self._predefined = predefined
        self._freed = False
        self._committed = predefined

    # ------------------------------------------------------------------ basic facts
    @property
    def name(self) -> str:
        return self._name

    @property
    def dtype(self) -> np.dtype:
        """numpy dtype of one *element* of a buffer of this type (the base element for
        derived types)."""
        self._check_usable("dtype")
        return self._dtype

    @property
    def base(self) -> "Datatype":
        """The predefined datatype this one is made of (itself when predefined)."""
        self._check_usable("base")
        return self._base

    @property
    def base_count(self) -> int:
        """How many ``dtype`` elements one item of this datatype holds (1 if predefined)."""
        return self._base_count

    @property
    def size(self) -> int:
        self._check_usable("size")
        return self._dtype.itemsize * self._base_count

    @property
    def extent(self) -> int:
        return self.size

    @property
    def lb(self) -> int:
        return 0

    @property
    def ub(self) -> int:
        return self.extent

    @property
    def true_lb(self) -> int:
        return 0

    @property
    def true_extent(self) -> int:
        return self.size

    @property
    def is_predefined(self) -> bool:
        return self._predefined

    @property
    def is_null(self) -> bool:
        return self._dtype is None or self._freed

    def Get_size(self) -> int:
        return self.size

    def Get_extent(self) -> tuple[int, int]:
        return (0, self.extent)

    def Get_true_extent(self) -> tuple[int, int]:
        return (0, self.true_extent)

    def Get_name(self) -> str:
        return self._name

    def Set_name(self, name: str) -> None:
        if self._predefined:
            raise DatatypeError(f"Datatype.Set_name: cannot rename the predefined datatype {self._name}")
        self._name = str(name)

    # ------------------------------------------------------------------ constructors
    def Create_contiguous(self, count: int) -> "Datatype":
        """``count`` consecutive items of this datatype, as one new (uncommitted) type."""
        self._check_usable("Create_contiguous")
        count = int(count)
        if count < 0:
            raise DatatypeError(f"Datatype.Create_contiguous: count must be >= 0, got {count}")
        return Datatype(f"CONTIGUOUS({count}, {self._name})", self._dtype, base=self._base,
                        base_count=self._base_count * count)

    def Dup(self) -> "Datatype":
        """A new handle with the same layout (not predefined, so it can be freed)."""
        self._check_usable("Dup")
        dup = Datatype(self._name, self._dtype, base=self._base, base_count=self._base_count)
        dup._committed = self._committed
        return dup

    def Commit(self) -> "Datatype":
        self._check_usable("Commit")
        self._committed = True
        return self

    def Free(self) -> None:
        if self._predefined or self._dtype is None:
            raise DatatypeError(f"Datatype.Free: cannot free the predefined datatype {self._name}")
        self._freed = True

    # mpi4py 4 conveniences
    def tocode(self) -> str:
        """The typecode of a predefined datatype (``MPI.INT.tocode() == 'i'``)."""
        self._check_usable("tocode")
        if self._base_count != 1:
            raise DatatypeError(f"Datatype.tocode: {self._name} has no typecode (derived datatype)")
        for code, dt in TYPECODES.items():
            if dt is self and len(code) == 1:
                return code
        return self._dtype.str.lstrip("<>=|")

    @classmethod
    def fromcode(cls, code: str) -> "Datatype":
        return from_typecode(code)

    @property
    def typechar(self) -> str:
        return self.tocode()

    # ------------------------------------------------------------------ internals
    def _check_usable(self, what: str) -> None:
        if self._dtype is None:
            raise DatatypeError(f"Datatype.{what}: DATATYPE_NULL is not a usable datatype")
        if self._freed:
            raise DatatypeError(f"Datatype.{what}: datatype {self._name} has been freed")

    def __bool__(self) -> bool:
        return not self.is_null

    def __repr__(self) -> str:
        if self._predefined or self._dtype is None:
            return f"MPI.{self._name}"
        state = " (freed)" if self._freed else ""
        return f"<Datatype {self._name}: {self._base_count} x {self._base._name}{state}>"

    def __reduce__(self):
        if self._predefined or self._dtype is None:
            return (_predefined_by_name, (self._name,))
        return (_rebuild_derived, (self._name, self._base._name, self._base_count))


def _predefined_by_name(name: str) -> Datatype:
    if name == "DATATYPE_NULL":
        return DATATYPE_NULL
    return PREDEFINED[name]


def _rebuild_derived(name: str, base_name: str, base_count: int) -> Datatype:
    base = PREDEFINED[base_name]
    return Datatype(name, base.dtype, base=base, base_count=base_count)


DATATYPE_NULL = Datatype()

#: All predefined datatypes by MPI name (aliases included: UNSIGNED_INT, TWOINT, ...).
PREDEFINED: dict[str, Datatype] = {}


def _def(name: str, dtype, *aliases: str) -> Datatype:
    dt = Datatype(name, dtype, predefined=True)
    PREDEFINED[name] = dt
    for alias in aliases:
        PREDEFINED[alias] = dt
    return dt


def _pair(value_dtype) -> np.dtype:
    # A C struct { value; int index; } with the platform's alignment and padding.
    return np.dtype([("value", value_dtype), ("index", np.intc)], align=True)


CHAR = _def("CHAR", "c")
SIGNED_CHAR = _def("SIGNED_CHAR", np.byte)
UNSIGNED_CHAR = _def("UNSIGNED_CHAR", np.ubyte)
BYTE = _def("BYTE", np.uint8)
PACKED = _def("PACKED", np.uint8)
SHORT = _def("SHORT", np.short)
UNSIGNED_SHORT = _def("UNSIGNED_SHORT", np.ushort)
INT = _def("INT", np.intc)
UNSIGNED = _def("UNSIGNED", np.uintc, "UNSIGNED_INT")
LONG = _def("LONG", np.dtype("l"))
UNSIGNED_LONG = _def("UNSIGNED_LONG", np.dtype("L"))
LONG_LONG = _def("LONG_LONG", np.longlong, "LONG_LONG_INT")
UNSIGNED_LONG_LONG = _def("UNSIGNED_LONG_LONG", np.ulonglong)
FLOAT = _def("FLOAT", np.single)
DOUBLE = _def("DOUBLE", np.double)
LONG_DOUBLE = _def("LONG_DOUBLE", np.longdouble)
C_BOOL = _def("C_BOOL", np.bool_)
BOOL = _def("BOOL", np.bool_, "CXX_BOOL")
INT8_T = _def("INT8_T", np.int8)
INT16_T = _def("INT16_T", np.int16)
INT32_T = _def("INT32_T", np.int32)
INT64_T = _def("INT64_T", np.int64)
UINT8_T = _def("UINT8_T", np.uint8)
UINT16_T = _def("UINT16_T", np.uint16)
UINT32_T = _def("UINT32_T", np.uint32)
UINT64_T = _def("UINT64_T", np.uint64)
WCHAR = _def("WCHAR", "U1")
C_FLOAT_COMPLEX = _def("C_FLOAT_COMPLEX", np.csingle, "C_COMPLEX", "CXX_FLOAT_COMPLEX")
C_DOUBLE_COMPLEX = _def("C_DOUBLE_COMPLEX", np.cdouble, "CXX_DOUBLE_COMPLEX")
C_LONG_DOUBLE_COMPLEX = _def("C_LONG_DOUBLE_COMPLEX", np.clongdouble, "CXX_LONG_DOUBLE_COMPLEX")
AINT = _def("AINT", np.intp)
OFFSET = _def("OFFSET", np.int64)
COUNT = _def("COUNT", np.int64)
# Fortran types, as mpi4py exports them (sizes of the usual gfortran defaults).
CHARACTER = _def("CHARACTER", "c")
LOGICAL = _def("LOGICAL", np.int32)
INTEGER = _def("INTEGER", np.int32)
REAL = _def("REAL", np.float32)
DOUBLE_PRECISION = _def("DOUBLE_PRECISION", np.float64)
COMPLEX = _def("COMPLEX", np.complex64)
DOUBLE_COMPLEX = _def("DOUBLE_COMPLEX", np.complex128)
# Pair types for MAXLOC/MINLOC: aligned C structs {value; int index;}.
FLOAT_INT = _def("FLOAT_INT", _pair(np.single))
DOUBLE_INT = _def("DOUBLE_INT", _pair(np.double))
LONG_INT = _def("LONG_INT", _pair(np.dtype("l")))
TWOINT = _def("2INT", _pair(np.intc), "TWOINT", "INT_INT")
SHORT_INT = _def("SHORT_INT", _pair(np.short))
LONG_DOUBLE_INT = _def("LONG_DOUBLE_INT", _pair(np.longdouble))

#: The MAXLOC/MINLOC pair types.
PAIR_TYPES: tuple[Datatype, ...] = (FLOAT_INT, DOUBLE_INT, LONG_INT, TWOINT, SHORT_INT,
                                     LONG_DOUBLE_INT)

#: Typecode strings accepted in buffer specs (``[buf, 'd']``) and by ``Datatype.fromcode``.
TYPECODES: dict[str, Datatype] = {
    "c": CHAR, "S1": CHAR, "b": SIGNED_CHAR, "B": UNSIGNED_CHAR,
    "h": SHORT, "H": UNSIGNED_SHORT, "i": INT, "I": UNSIGNED,
    "l": LONG, "L": UNSIGNED_LONG, "q": LONG_LONG, "Q": UNSIGNED_LONG_LONG,
    "f": FLOAT, "d": DOUBLE, "g": LONG_DOUBLE,
    "F": C_FLOAT_COMPLEX, "D": C_DOUBLE_COMPLEX, "G": C_LONG_DOUBLE_COMPLEX,
    "?": C_BOOL, "b1": C_BOOL, "p": AINT, "U1": WCHAR,
    "i1": INT8_T, "i2": INT16_T, "i4": INT32_T, "i8": INT64_T,
    "u1": UINT8_T, "u2": UINT16_T, "u4": UINT32_T, "u8": UINT64_T,
    "f4": FLOAT, "f8": DOUBLE, "c8": C_FLOAT_COMPLEX, "c16": C_DOUBLE_COMPLEX,
}
if np.dtype(np.longdouble).itemsize == 16:
    TYPECODES["f16"] = LONG_DOUBLE
    TYPECODES["c32"] = C_LONG_DOUBLE_COMPLEX

# numpy dtype.char -> predefined datatype, for from_numpy_dtype.
_BY_CHAR: dict[str, Datatype] = {
    "c": CHAR, "b": SIGNED_CHAR, "B": UNSIGNED_CHAR, "h": SHORT, "H": UNSIGNED_SHORT,
    "i": INT, "I": UNSIGNED, "l": LONG, "L": UNSIGNED_LONG, "q": LONG_LONG,
    "Q": UNSIGNED_LONG_LONG, "f": FLOAT, "d": DOUBLE, "g": LONG_DOUBLE,
    "F": C_FLOAT_COMPLEX, "D": C_DOUBLE_COMPLEX, "G": C_LONG_DOUBLE_COMPLEX, "?": C_BOOL,
}
# numpy may report the platform's int64 as 'l' or 'q' and int32 as 'i' or 'l'; the table
# above uses whatever np.dtype(char) reports, so a lookup by char is always consistent.


def from_numpy_dtype(dtype) -> Datatype:
    """The datatype for a numpy dtype-like (``mpi4py.util.dtlib.from_numpy_dtype``).

    Scalars map to the C-named predefined type with the same ``dtype.char`` (int32 ->
    ``INT``, float64 -> ``DOUBLE``...), C-layout (value, int) structs to the pair types,
    subarray dtypes to contiguous types, and other fixed-size dtypes (strings, records,
    datetimes) to contiguous byte/char types. Object and non-native byte orders raise
    :class:`DatatypeError`.
    """
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise DatatypeError(f"from_numpy_dtype: {dtype!r} is not a numpy dtype ({exc})") from None
    if dt.hasobject:
        raise DatatypeError(
            f"numpy dtype {dt} holds Python object pointers, which cannot be sent as a buffer; "
            "use the lowercase methods (send, recv, bcast...) for Python objects")
    if dt.subdtype is not None:
        sub, shape = dt.subdtype
        base = from_numpy_dtype(sub)
        return base.Create_contiguous(int(np.prod(shape))).Commit()
    if dt.fields is not None:
        pair = _match_pair(dt)
        if pair is not None:
            return pair
        return _bytes_type(dt)
    if dt.byteorder == ">" or (dt.byteorder == "<" and not _little()):
        raise DatatypeError(
            f"numpy dtype {dt.str} is not in native byte order; convert it with "
            "arr.astype(arr.dtype.newbyteorder('='))")
    found = _BY_CHAR.get(dt.char)
    if found is not None:
        return found
    if dt.kind == "S" and dt.itemsize == 1:
        return CHAR
    if dt.kind == "U" and dt.itemsize == WCHAR.size:
        return WCHAR
    if dt.kind == "S":
        return CHAR.Create_contiguous(dt.itemsize).Commit()
    if dt.kind == "U":
        return WCHAR.Create_contiguous(dt.itemsize // 4).Commit()
    if dt.itemsize == 0:
        raise DatatypeError(f"numpy dtype {dt} has no fixed size")
    return _bytes_type(dt)


def _little() -> bool:
    import sys
    return sys.byteorder == "little"


def _bytes_type(dt: np.dtype) -> Datatype:
    t = BYTE.Create_contiguous(dt.itemsize).Commit()
    t._name = f"BYTE[{dt.itemsize}] (numpy {dt})"
    return t


def _match_pair(dt: np.dtype) -> Datatype | None:
    if dt.names is None or len(dt.names) != 2:
        return None
    for pair in PAIR_TYPES:
        ref = pair.dtype
        if dt.itemsize != ref.itemsize:
            continue
        ok = True
        for name, ref_name in zip(dt.names, ref.names):
            (ft, off), (rt, roff) = dt.fields[name][:2], ref.fields[ref_name][:2]
            if off != roff or ft != rt:
                ok = False
                break
        if ok:
            return pair
    return None


def to_numpy_dtype(datatype: Datatype) -> np.dtype:
    """The numpy dtype of one item of ``datatype`` (``mpi4py.util.dtlib.to_numpy_dtype``).

    Predefined types give their dtype; contiguous types the subarray dtype ``(base, (n,))``.
    """
    datatype = resolve_datatype(datatype)
    if datatype.base_count == 1:
        return datatype.dtype
    return np.dtype((datatype.dtype, (datatype.base_count,)))


def from_typecode(code: str) -> Datatype:
    """The datatype for a typecode string as mpi4py accepts them (``'i'``, ``'d'``, ``'f8'``)."""
    key = code.lstrip("=|<") if len(code) > 1 else code
    if key in TYPECODES:
        return TYPECODES[key]
    try:   # other numpy type strings ('int32', '<f8'...), not control characters
        dt = np.dtype(code) if code.isprintable() and code.strip() else None
    except TypeError:
        dt = None
    if dt is not None:
        try:
            return from_numpy_dtype(dt)
        except DatatypeError:
            pass
    raise DatatypeError(
        f"unknown typecode {code!r}; use an MPI datatype (MPI.INT, MPI.DOUBLE...) or one of "
        + ", ".join(repr(c) for c in sorted(TYPECODES, key=lambda c: (len(c), c))))


def resolve_datatype(obj, *, call: str = "", arg: str = "datatype") -> Datatype:
    """Turn what a user wrote as a TYPE (Datatype, typecode string, numpy dtype or scalar
    type) into a usable :class:`Datatype`, or raise :class:`DatatypeError`."""
    prefix = f"{call}: " if call else ""
    if isinstance(obj, Datatype):
        if obj._dtype is None:
            raise DatatypeError(f"{prefix}{arg} is MPI.DATATYPE_NULL; pass a real datatype such as MPI.INT")
        if obj._freed:
            raise DatatypeError(f"{prefix}{arg} {obj.name} has been freed")
        return obj
    if isinstance(obj, str):
        try:
            return from_typecode(obj)
        except DatatypeError as exc:   # mpi4py: KeyError "cannot map ... to MPI datatype"
            raise UnknownDatatypeError(f"{prefix}{arg}: {exc}") from None
    if isinstance(obj, np.dtype) or (isinstance(obj, type) and issubclass(obj, np.generic)):
        try:
            return from_numpy_dtype(obj)
        except DatatypeError as exc:
            raise DatatypeError(f"{prefix}{arg}: {exc}") from None
    raise DatatypeError(
        f"{prefix}{arg} is {type(obj).__name__} {obj!r:.60}, not a datatype; expected an MPI "
        "datatype such as MPI.INT or MPI.DOUBLE, or a typecode string such as 'i' or 'd'")
