"""MPI datatypes (``MPI.Datatype``): predefined ones and every derived constructor.

A :class:`Datatype` answers the questions the rest of minimpi asks about a buffer's items.
The agreed seam (``docs/architecture.md``) is a general type map, computed once when the
type is made (:mod:`minimpi.data.typemap`, constructors in :mod:`minimpi.data.constructors`):

* ``size``, ``lb``, ``ub``, ``extent``, ``true_lb``, ``true_extent``;
* ``is_contiguous``: one item is ``size`` consecutive bytes at the origin and items follow
  each other. Predefined and contiguous types are, and every zero-copy path applies to them;
* ``blocks(count)``: the byte runs of ``count`` items (RMA target layouts, MPI-IO views);
* ``pack(buf, count)`` / ``unpack(data, buf, count)``: gather ``count`` items into
  contiguous bytes and scatter them back, vectorised (one strided copy or one gather);
* ``signature``: the type signature of one item as ``((code, repeat), ...)``;
* ``element_dtype``: the numpy dtype when the map holds one basic type, else None.

Array views of packed data use ``dtype`` (``element_dtype``, or ``uint8`` for mixed maps) and
``base_count`` (``dtype`` elements per item): a buffer of ``count`` items is a flat numpy
array of ``count * base_count`` elements, which is what reductions and the wire need.

numpy dtypes that have no MPI counterpart but are plain bytes (``'S5'``, ``'U3'``, records
that are not a C pair such as ``DOUBLE_INT``, datetimes) map to a contiguous type of
``BYTE`` (or ``CHAR``/``WCHAR``) of the dtype's item size, so such arrays can still be sent
and received (not reduced).

Handles compare by identity, as MPI handles do: ``INT != INT32_T`` even though both are
4-byte ints; aliases (``UNSIGNED_INT is UNSIGNED``, ``TWOINT is INT_INT``) are the same
object. Predefined types pickle to the same singleton in the receiving process; derived
types pickle as the constructor calls that made them.
"""
from __future__ import annotations

import operator
from typing import Any, Optional, Sequence

import numpy as np

from ..errors import (
    ArgumentError,
    BufferSpecError,
    CountError,
    DatatypeError,
    UnknownDatatypeError,
)
from ..handles import IntConversions, object_of, point, register
from . import constructors as _make
from .attributes import DATATYPE_KEYVALS, Attributed, AttributeStore
from .constructors import (
    DISTRIBUTE_BLOCK,
    DISTRIBUTE_CYCLIC,
    DISTRIBUTE_DFLT_DARG,
    DISTRIBUTE_NONE,
    ORDER_C,
    ORDER_FORTRAN,
)
from .typemap import CODE_DTYPES, Signature, TypeMap, dtype_of_code, predefined_map

__all__ = [
    "Datatype", "DATATYPE_NULL", "PREDEFINED", "TYPECODES",
    "from_numpy_dtype", "to_numpy_dtype", "from_typecode", "resolve_datatype",
    "PAIR_TYPES", "dtype_of_code", "count_elements", "elements_nbytes",
    "ORDER_C", "ORDER_FORTRAN", "ORDER_F", "DISTRIBUTE_NONE", "DISTRIBUTE_BLOCK",
    "DISTRIBUTE_CYCLIC", "DISTRIBUTE_DFLT_DARG", "TYPECLASS_INTEGER", "TYPECLASS_REAL",
    "TYPECLASS_COMPLEX", "TYPECLASS_LOGICAL",
    "COMBINER_NAMED", "COMBINER_DUP", "COMBINER_CONTIGUOUS", "COMBINER_VECTOR",
    "COMBINER_HVECTOR", "COMBINER_INDEXED", "COMBINER_HINDEXED", "COMBINER_INDEXED_BLOCK",
    "COMBINER_HINDEXED_BLOCK", "COMBINER_STRUCT", "COMBINER_SUBARRAY", "COMBINER_DARRAY",
    "COMBINER_RESIZED", "COMBINER_VALUE_INDEX", "COMBINER_F90_INTEGER", "COMBINER_F90_REAL",
    "COMBINER_F90_COMPLEX",
]

ORDER_F = ORDER_FORTRAN
TYPECLASS_INTEGER = 1
TYPECLASS_REAL = 2
TYPECLASS_COMPLEX = 3
TYPECLASS_LOGICAL = -32766    # MPI 5's logical class: UNDEFINED here, as in mpi4py on MPI 4

# Combiners (MPICH's numbering).
COMBINER_NAMED = 1
COMBINER_DUP = 2
COMBINER_CONTIGUOUS = 3
COMBINER_VECTOR = 4
COMBINER_HVECTOR = 6
COMBINER_INDEXED = 7
COMBINER_HINDEXED = 9
COMBINER_INDEXED_BLOCK = 10
COMBINER_STRUCT = 12
COMBINER_SUBARRAY = 13
COMBINER_DARRAY = 14
COMBINER_F90_REAL = 15
COMBINER_F90_COMPLEX = 16
COMBINER_F90_INTEGER = 17
COMBINER_RESIZED = 18
COMBINER_HINDEXED_BLOCK = 19
COMBINER_VALUE_INDEX = 20

_COMBINER_NAMES = {
    COMBINER_NAMED: "NAMED", COMBINER_DUP: "DUP", COMBINER_CONTIGUOUS: "CONTIGUOUS",
    COMBINER_VECTOR: "VECTOR", COMBINER_HVECTOR: "HVECTOR", COMBINER_INDEXED: "INDEXED",
    COMBINER_HINDEXED: "HINDEXED", COMBINER_INDEXED_BLOCK: "INDEXED_BLOCK",
    COMBINER_HINDEXED_BLOCK: "HINDEXED_BLOCK", COMBINER_STRUCT: "STRUCT",
    COMBINER_SUBARRAY: "SUBARRAY", COMBINER_DARRAY: "DARRAY", COMBINER_RESIZED: "RESIZED",
    COMBINER_VALUE_INDEX: "VALUE_INDEX", COMBINER_F90_INTEGER: "F90_INTEGER",
    COMBINER_F90_REAL: "F90_REAL", COMBINER_F90_COMPLEX: "F90_COMPLEX",
}


def _int(value: Any, what: str, call: str, *, minimum: Optional[int] = 0) -> int:
    """An integer argument (ints, numpy integers; not floats or bools)."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"Datatype.{call}: {what} must be an integer, got {value!r}")
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError(f"Datatype.{call}: {what} must be an integer, got "
                        f"{type(value).__name__} {value!r:.40}") from None
    if minimum is not None and n < minimum:
        raise DatatypeError(f"Datatype.{call}: {what} must be >= {minimum}, got {n}")
    return n


def _ints(values: Any, what: str, call: str, *, minimum: Optional[int] = 0,
          length: Optional[int] = None) -> list[int]:
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise TypeError(f"Datatype.{call}: {what} must be a sequence of integers, got "
                        f"{type(values).__name__} {values!r:.40}")
    out = [_int(v, f"{what}[{i}]", call, minimum=minimum) for i, v in enumerate(values)]
    if length is not None and len(out) != length:
        raise CountError(f"Datatype.{call}: {what} has {len(out)} items, expected {length} "
                         "(one per block or dimension)")
    return out


class Datatype(Attributed, IntConversions):
    """An MPI datatype handle (``MPI.Datatype``).

    Users obtain these as the predefined constants or from the ``Create_*`` constructors;
    ``Datatype()`` with no arguments is a null handle, equal in meaning to
    ``DATATYPE_NULL`` (falsy); ``Datatype(other)`` is another handle to ``other``'s type.
    """

    __slots__ = ("_name", "_map", "_dtype", "_base_count", "_predefined", "_freed",
                 "_combiner", "_ints", "_addrs", "_types", "_handle", "_key", "__weakref__")

    def __init__(self, datatype: "Datatype | None" = None) -> None:
        if isinstance(datatype, Datatype):        # MPI.Datatype(other): another handle object
            other = datatype                      # for the same MPI datatype (compares equal)
            for slot in Datatype.__slots__[:-1]:
                object.__setattr__(self, slot, getattr(other, slot))
            return
        if datatype is not None:
            raise TypeError(f"MPI.{type(self).__name__}({datatype!r:.40}): expected an "
                            f"MPI.Datatype to make another handle of, or nothing")
        self._setup("MPI_DATATYPE_NULL")

    @classmethod
    def _make(cls, name: str, dtype: Any = None, *, predefined: bool = False,
              code: str = "") -> "Datatype":
        """A new datatype called ``name`` (numpy ``dtype``: a predefined type's map)."""
        new = cls.__new__(cls)
        new._setup(name, dtype, predefined=predefined, code=code)
        return new

    def _setup(self, name: str, dtype: Any = None, *, predefined: bool = False,
               code: str = "") -> None:
        self._name = name
        # what == compares (the MPI handle), and the state every handle on the type shares
        self._handle = _HandleToken(committed=predefined)
        self._key = name                          # predefined: the name it pickles by
        self._predefined = predefined
        # per handle, as mpi4py's: Free makes *this* handle null; the constructors keep
        # handles of their own on their old types, which the user's Free leaves whole
        self._freed = False
        self._combiner = COMBINER_NAMED
        self._ints: tuple = ()
        self._addrs: tuple = ()
        self._types: tuple = ()
        self._map: Optional[TypeMap] = None
        self._dtype: Optional[np.dtype] = None
        self._base_count = 1
        if dtype is not None:
            dt = np.dtype(dtype)
            self._set_map(predefined_map(dt, code or _signature_code(name, dt)))
            self._dtype = dt                  # pair types keep their record dtype

    def _set_map(self, tmap: TypeMap) -> None:
        self._map = tmap
        elem = tmap.element_dtype
        self._dtype = elem if elem is not None else np.dtype(np.uint8)
        self._base_count = tmap.size // self._dtype.itemsize if self._dtype.itemsize else 0

    @classmethod
    def _derived(cls, name: str, tmap: TypeMap, combiner: int, ints: Sequence[int] = (),
                 addrs: Sequence[int] = (), types: Sequence["Datatype"] = ()) -> "Datatype":
        new = cls._make(name)
        new._set_map(tmap)
        new._combiner = combiner
        # the old types are kept through handles of our own: freeing the user's handle
        # after the constructor call leaves this type whole (MPI's reference counting)
        new._ints, new._addrs = tuple(ints), tuple(addrs)
        new._types = tuple(t if t._predefined else Datatype(t) for t in types)
        return new

    def _copy_construction(self) -> "Datatype":
        """A new datatype made by the same constructor call as this one (same combiner,
        contents, type map and name; not committed, no attributes): what calling that
        constructor again would give, without working the type map out again."""
        self._check_usable("_copy_construction")
        if self._predefined or self._combiner == COMBINER_NAMED:
            return self
        return Datatype._derived(self._name, self._map, self._combiner, self._ints,
                                 self._addrs, self._types)

    def _identity(self) -> object:
        """What every handle object on this MPI datatype shares (a weak-referenceable
        key for facts about the type that never change, such as its numpy dtype)."""
        return self._handle

    # What MPI keeps per datatype, not per handle: every handle object on the type
    # (``Datatype(t)``, ``fromhandle``) sees one Commit and one set of attributes.
    @property
    def _committed(self) -> bool:
        return self._handle.committed

    @_committed.setter
    def _committed(self, value: bool) -> None:
        self._handle.committed = value

    @property
    def _attrs(self) -> Optional[AttributeStore]:
        return self._handle.attrs

    @_attrs.setter
    def _attrs(self, value: Optional[AttributeStore]) -> None:
        self._handle.attrs = value

    # ------------------------------------------------------------------ the seam
    @property
    def name(self) -> str:
        return self._name

    @name.setter
    def name(self, value: str) -> None:
        self.Set_name(value)

    @property
    def typemap(self) -> TypeMap:
        """The type map of one item (see :mod:`minimpi.data.typemap`)."""
        self._check_usable("typemap")
        return self._map

    @property
    def dtype(self) -> np.dtype:
        """numpy dtype of the elements of a packed buffer of this type: ``element_dtype``,
        or ``uint8`` when the type map mixes basic types."""
        self._check_usable("dtype")
        return self._dtype

    @property
    def element_dtype(self) -> Optional[np.dtype]:
        """The numpy dtype of the elements when the type map holds one basic type only."""
        self._check_usable("element_dtype")
        return self._map.element_dtype

    @property
    def base_count(self) -> int:
        """How many ``dtype`` elements one item of this datatype holds."""
        return self._base_count

    @property
    def signature(self) -> Signature:
        """The type signature of one item: runs of ``(basic type code, repeat)``."""
        self._check_usable("signature")
        return self._map.signature

    @property
    def is_contiguous(self) -> bool:
        """One item is ``size`` consecutive bytes at the origin and items follow each other
        (``lb == 0``, ``extent == size``): the zero-copy paths apply."""
        self._check_usable("is_contiguous")
        return self._map.is_contiguous

    def blocks(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        """``(offsets, lengths)`` (int64) of the contiguous byte runs of ``count``
        consecutive items, in type-map order, relative to the buffer start."""
        self._check_usable("blocks")
        return self._map.blocks(int(count))

    def pack(self, buf: Any, count: int) -> np.ndarray:
        """``count`` items of this type gathered from ``buf`` (a byte memoryview or numpy
        array starting at the buffer origin) into contiguous bytes (a uint8 array; a view,
        not a copy, when the type is contiguous)."""
        self._check_usable("pack")
        return self._map.pack(_raw(buf, False), int(count), call=f"pack ({self._name})")

    def unpack(self, data: Any, buf: Any, count: int) -> None:
        """Scatter ``count`` packed items from ``data`` into ``buf`` (writable)."""
        self._check_usable("unpack")
        self._map.unpack(_raw(data, False), _raw(buf, True), int(count),
                         call=f"unpack ({self._name})")

    # ------------------------------------------------------------------ basic facts
    @property
    def base(self) -> "Datatype":
        """The predefined datatype all elements of this one are (itself when predefined);
        None when the type map mixes predefined types."""
        self._check_usable("base")
        if self._combiner == COMBINER_NAMED or not self._types:
            return self
        bases = {id(t.base): t.base for t in self._types}
        return next(iter(bases.values())) if len(bases) == 1 else None

    @property
    def size(self) -> int:
        self._check_usable("size")
        return self._map.size

    @property
    def extent(self) -> int:
        self._check_usable("extent")
        return self._map.extent

    @property
    def lb(self) -> int:
        self._check_usable("lb")
        return self._map.lb

    @property
    def ub(self) -> int:
        self._check_usable("ub")
        return self._map.ub

    @property
    def true_lb(self) -> int:
        self._check_usable("true_lb")
        return self._map.true_lb

    @property
    def true_ub(self) -> int:
        self._check_usable("true_ub")
        return self._map.true_ub

    @property
    def true_extent(self) -> int:
        self._check_usable("true_extent")
        return self._map.true_extent

    @property
    def is_predefined(self) -> bool:
        return self._predefined or self._map is None or self._combiner in _PREDEFINED_COMBINERS

    @property
    def is_named(self) -> bool:
        return self._combiner == COMBINER_NAMED and self._map is not None

    @property
    def is_null(self) -> bool:
        return self._map is None or self._freed

    def Get_size(self) -> int:
        return self.size

    def Get_extent(self) -> tuple[int, int]:
        self._check_usable("Get_extent")
        return (self._map.lb, self._map.extent)

    def Get_true_extent(self) -> tuple[int, int]:
        self._check_usable("Get_true_extent")
        return (self._map.true_lb, self._map.true_extent)

    def Get_name(self) -> str:
        return self._name

    def Set_name(self, name: str) -> None:
        self._check_usable("Set_name")
        self._name = str(name)

    # ------------------------------------------------------------------ constructors
    def _new(self, call: str, label: str, tmap: TypeMap, combiner: int, ints=(), addrs=(),
             types=None) -> "Datatype":
        return Datatype._derived(f"{label}({self._name})" if types is None else label, tmap,
                                 combiner, ints, addrs, (self,) if types is None else types)

    def Create_contiguous(self, count: int) -> "Datatype":
        """``count`` consecutive items of this datatype, as one new (uncommitted) type."""
        self._check_usable("Create_contiguous")
        count = _int(count, "count", "Create_contiguous")
        return self._new("Create_contiguous", f"CONTIGUOUS[{count}]",
                         _make.contiguous(self._map, count), COMBINER_CONTIGUOUS, (count,))

    def Create_vector(self, count: int, blocklength: int, stride: int) -> "Datatype":
        """``count`` blocks of ``blocklength`` items, ``stride`` items apart."""
        self._check_usable("Create_vector")
        count = _int(count, "count", "Create_vector")
        blocklength = _int(blocklength, "blocklength", "Create_vector")
        stride = _int(stride, "stride", "Create_vector", minimum=None)
        tmap = _make.hvector(self._map, count, blocklength, stride * self._map.extent)
        return self._new("Create_vector", f"VECTOR[{count},{blocklength},{stride}]", tmap,
                         COMBINER_VECTOR, (count, blocklength, stride))

    def Create_hvector(self, count: int, blocklength: int, stride: int) -> "Datatype":
        """``count`` blocks of ``blocklength`` items, ``stride`` bytes apart."""
        self._check_usable("Create_hvector")
        count = _int(count, "count", "Create_hvector")
        blocklength = _int(blocklength, "blocklength", "Create_hvector")
        stride = _int(stride, "stride", "Create_hvector", minimum=None)
        tmap = _make.hvector(self._map, count, blocklength, stride)
        return self._new("Create_hvector", f"HVECTOR[{count},{blocklength},{stride}]", tmap,
                         COMBINER_HVECTOR, (count, blocklength), (stride,))

    def Create_indexed(self, blocklengths: Sequence[int], displacements: Sequence[int]) -> "Datatype":
        """Blocks of ``blocklengths[i]`` items at ``displacements[i]`` items (in extents)."""
        self._check_usable("Create_indexed")
        bl = _ints(blocklengths, "blocklengths", "Create_indexed")
        dp = _ints(displacements, "displacements", "Create_indexed", minimum=None, length=len(bl))
        tmap = _make.hindexed(self._map, bl, [d * self._map.extent for d in dp])
        return self._new("Create_indexed", f"INDEXED[{len(bl)}]", tmap, COMBINER_INDEXED,
                         [len(bl)] + bl + dp)

    def Create_hindexed(self, blocklengths: Sequence[int], displacements: Sequence[int]) -> "Datatype":
        """Blocks of ``blocklengths[i]`` items at byte displacements ``displacements[i]``."""
        self._check_usable("Create_hindexed")
        bl = _ints(blocklengths, "blocklengths", "Create_hindexed")
        dp = _ints(displacements, "displacements", "Create_hindexed", minimum=None, length=len(bl))
        return self._new("Create_hindexed", f"HINDEXED[{len(bl)}]",
                         _make.hindexed(self._map, bl, dp), COMBINER_HINDEXED,
                         [len(bl)] + bl, dp)

    def Create_indexed_block(self, blocklength: int, displacements: Sequence[int]) -> "Datatype":
        """Blocks of ``blocklength`` items at ``displacements[i]`` items (in extents)."""
        self._check_usable("Create_indexed_block")
        n = _int(blocklength, "blocklength", "Create_indexed_block")
        dp = _ints(displacements, "displacements", "Create_indexed_block", minimum=None)
        tmap = _make.hindexed(self._map, [n] * len(dp), [d * self._map.extent for d in dp])
        return self._new("Create_indexed_block", f"INDEXED_BLOCK[{len(dp)}x{n}]", tmap,
                         COMBINER_INDEXED_BLOCK, [len(dp), n] + dp)

    def Create_hindexed_block(self, blocklength: int, displacements: Sequence[int]) -> "Datatype":
        """Blocks of ``blocklength`` items at byte displacements ``displacements[i]``."""
        self._check_usable("Create_hindexed_block")
        n = _int(blocklength, "blocklength", "Create_hindexed_block")
        dp = _ints(displacements, "displacements", "Create_hindexed_block", minimum=None)
        return self._new("Create_hindexed_block", f"HINDEXED_BLOCK[{len(dp)}x{n}]",
                         _make.hindexed(self._map, [n] * len(dp), dp),
                         COMBINER_HINDEXED_BLOCK, (len(dp), n), dp)

    @classmethod
    def Create_struct(cls, blocklengths: Sequence[int], displacements: Sequence[int],
                      datatypes: Sequence["Datatype"]) -> "Datatype":
        """Block ``i``: ``blocklengths[i]`` items of ``datatypes[i]`` at byte
        displacement ``displacements[i]``."""
        bl = _ints(blocklengths, "blocklengths", "Create_struct")
        dp = _ints(displacements, "displacements", "Create_struct", minimum=None, length=len(bl))
        if isinstance(datatypes, Datatype) or not hasattr(datatypes, "__len__"):
            raise TypeError("Datatype.Create_struct: datatypes must be a sequence of datatypes")
        if len(datatypes) != len(bl):
            raise CountError(f"Datatype.Create_struct: datatypes has {len(datatypes)} "
                                f"items, expected {len(bl)}")
        types = [resolve_datatype(t, call="Datatype.Create_struct", arg=f"datatypes[{i}]")
                 for i, t in enumerate(datatypes)]
        tmap = _make.struct(bl, dp, [t._map for t in types])
        return Datatype._derived(f"STRUCT[{len(bl)}]", tmap, COMBINER_STRUCT,
                                 [len(bl)] + bl, dp, types)

    def Create_subarray(self, sizes: Sequence[int], subsizes: Sequence[int],
                        starts: Sequence[int], order: int = ORDER_C) -> "Datatype":
        """The ``subsizes`` block starting at ``starts`` of an array of ``sizes`` items
        stored in ``order`` (``ORDER_C`` or ``ORDER_FORTRAN``); extent: the whole array."""
        call = "Create_subarray"
        self._check_usable(call)
        sz = _ints(sizes, "sizes", call, minimum=1)
        sub = _ints(subsizes, "subsizes", call, minimum=1, length=len(sz))
        st = _ints(starts, "starts", call, length=len(sz))
        if not sz:
            raise ArgumentError(f"Datatype.{call}: sizes must have at least one dimension")
        for k, (n, m, s) in enumerate(zip(sz, sub, st)):
            if m > n or s + m > n:
                raise ArgumentError(
                    f"Datatype.{call}: dimension {k}: subsize {m} at start {s} does not fit "
                    f"in size {n}")
        order = _order(order, call)
        tmap = _make.subarray(self._map, sz, sub, st, order)
        return self._new(call, f"SUBARRAY[{sz}:{sub}@{st}]", tmap, COMBINER_SUBARRAY,
                         [len(sz)] + sz + sub + st + [order])

    def Create_darray(self, size: int, rank: int, gsizes: Sequence[int], distribs: Sequence[int],
                      dargs: Sequence[int], psizes: Sequence[int], order: int = ORDER_C) -> "Datatype":
        """The part of a ``gsizes`` array that process ``rank`` of ``size`` holds under an
        HPF-like distribution over a ``psizes`` process grid."""
        call = "Create_darray"
        self._check_usable(call)
        size = _int(size, "size", call, minimum=1)
        rank = _int(rank, "rank", call)
        if rank >= size:
            raise ArgumentError(f"Datatype.{call}: rank {rank} is not below size {size}")
        gs = _ints(gsizes, "gsizes", call, minimum=1)
        nd = len(gs)
        dist = _ints(distribs, "distribs", call, length=nd)
        dargs_l = _ints(dargs, "dargs", call, minimum=None, length=nd)
        ps = _ints(psizes, "psizes", call, minimum=1, length=nd)
        if int(np.prod(ps)) != size:
            raise ArgumentError(f"Datatype.{call}: psizes {ps} multiply to {int(np.prod(ps))}, "
                                f"not the {size} processes")
        for k in range(nd):
            d, a = dist[k], dargs_l[k]
            if d not in (DISTRIBUTE_NONE, DISTRIBUTE_BLOCK, DISTRIBUTE_CYCLIC):
                raise ArgumentError(f"Datatype.{call}: distribs[{k}] = {d} is not a DISTRIBUTE_* value")
            if d == DISTRIBUTE_NONE and ps[k] != 1:
                raise ArgumentError(f"Datatype.{call}: dimension {k} is DISTRIBUTE_NONE but "
                                    f"psizes[{k}] is {ps[k]}, not 1")
            if a != DISTRIBUTE_DFLT_DARG and a < 1:
                raise ArgumentError(f"Datatype.{call}: dargs[{k}] = {a} must be >= 1 or "
                                    "DISTRIBUTE_DFLT_DARG")
            if d == DISTRIBUTE_BLOCK and a != DISTRIBUTE_DFLT_DARG and a * ps[k] < gs[k]:
                raise ArgumentError(f"Datatype.{call}: dimension {k}: block size {a} x "
                                    f"{ps[k]} processes does not cover {gs[k]} elements")
        order = _order(order, call)
        tmap = _make.darray(self._map, size, rank, gs, dist, dargs_l, ps, order)
        return self._new(call, f"DARRAY[rank {rank} of {size}]", tmap, COMBINER_DARRAY,
                         [size, rank, nd] + gs + dist + dargs_l + ps + [order])

    def Create_resized(self, lb: int, extent: int) -> "Datatype":
        """The same data with lower bound ``lb`` and extent ``extent`` (bytes)."""
        self._check_usable("Create_resized")
        lb = _int(lb, "lb", "Create_resized", minimum=None)
        extent = _int(extent, "extent", "Create_resized", minimum=None)
        return self._new("Create_resized", f"RESIZED[{lb},{extent}]",
                         _make.resized(self._map, lb, extent), COMBINER_RESIZED, (), (lb, extent))

    Resized = Create_resized

    def Dup(self) -> "Datatype":
        """A new handle with the same layout (not predefined, so it can be freed)."""
        self._check_usable("Dup")
        dup = Datatype._derived(self._name, self._map, COMBINER_DUP, (), (), (self,))
        dup._dtype, dup._base_count = self._dtype, self._base_count
        dup._committed = self._committed
        if self._attrs:
            self._attrs.copy_into(self, dup._attribute_store("Dup"))
        return dup

    Create_dup = Dup

    def Commit(self) -> "Datatype":
        self._check_usable("Commit")
        self._committed = True
        return self

    def Free(self) -> None:
        if self._map is None:
            raise DatatypeError("Datatype.Free: DATATYPE_NULL cannot be freed")
        if self._predefined or self._combiner in _PREDEFINED_COMBINERS:
            raise DatatypeError(f"Datatype.Free: cannot free the predefined datatype {self._name}")
        if self._freed:
            raise DatatypeError(f"Datatype.Free: datatype {self._name} was already freed")
        try:
            if self._attrs:       # the attributes go first (their delete_fn see the type)
                self._attrs.clear(self)
        finally:
            self._freed = True

    def free(self) -> None:
        """``Free`` unless null or predefined (mpi4py 4): the module's constants
        (``MPI.INT``) stay as they are; another handle on a predefined type
        (``Datatype(MPI.INT)``, an F90 type) becomes a null handle, the type stays."""
        if self.is_null or PREDEFINED.get(self._key) is self:
            return
        if self._predefined or self._combiner in _PREDEFINED_COMBINERS:
            Datatype.__init__(self)             # this handle only: now DATATYPE_NULL
            return
        self.Free()

    # ------------------------------------------------------------------ decoding
    def Get_envelope(self) -> tuple[int, int, int, int, int]:
        """``(num_integers, num_addresses, num_large_counts, num_datatypes, combiner)``."""
        self._check_usable("Get_envelope")
        if self._combiner == COMBINER_NAMED:
            return (0, 0, 0, 0, COMBINER_NAMED)
        return (len(self._ints), len(self._addrs), 0, len(self._types), self._combiner)

    @property
    def envelope(self) -> tuple[int, int, int, int, int]:
        return self.Get_envelope()

    @property
    def combiner(self) -> int:
        return self.Get_envelope()[-1]

    def Get_contents(self) -> tuple[list[int], list[int], list[int], list["Datatype"]]:
        """``(integers, addresses, large_counts, datatypes)`` of the constructor call."""
        self._check_usable("Get_contents")
        if self._combiner == COMBINER_NAMED:
            raise DatatypeError(f"Datatype.Get_contents: {self._name} is a named predefined "
                                "datatype, which has no contents")
        return (list(self._ints), list(self._addrs), [], [_handle_of(t) for t in self._types])

    @property
    def contents(self) -> tuple[list[int], list[int], list[int], list["Datatype"]]:
        return self.Get_contents()

    def decode(self) -> tuple["Datatype", str, dict[str, Any]]:
        """``(basetype, combiner name, parameters)`` as mpi4py's ``Datatype.decode``."""
        self._check_usable("decode")
        c = self._combiner
        name = _COMBINER_NAMES[c]
        if c == COMBINER_NAMED:
            return (self, name, {})
        i, a, t = list(self._ints), list(self._addrs), list(self._types)
        t = [_handle_of(x) for x in t]
        if c == COMBINER_STRUCT:
            n = i[0]
            return (Datatype(), name, {"blocklengths": i[1:1 + n], "displacements": a,
                                       "datatypes": t})
        base = t[0] if t else None
        if c == COMBINER_F90_INTEGER:
            return (Datatype(), name, {"r": i[0]})
        if c in (COMBINER_F90_REAL, COMBINER_F90_COMPLEX):
            return (Datatype(), name, {"p": i[0], "r": i[1]})
        if c == COMBINER_DUP:
            return (base, name, {})
        if c == COMBINER_CONTIGUOUS:
            return (base, name, {"count": i[0]})
        if c == COMBINER_VECTOR:
            return (base, name, {"count": i[0], "blocklength": i[1], "stride": i[2]})
        if c == COMBINER_HVECTOR:
            return (base, name, {"count": i[0], "blocklength": i[1], "stride": a[0]})
        if c == COMBINER_INDEXED:
            n = i[0]
            return (base, name, {"blocklengths": i[1:1 + n], "displacements": i[1 + n:]})
        if c == COMBINER_HINDEXED:
            return (base, name, {"blocklengths": i[1:], "displacements": a})
        if c == COMBINER_INDEXED_BLOCK:
            return (base, name, {"blocklength": i[1], "displacements": i[2:]})
        if c == COMBINER_HINDEXED_BLOCK:
            return (base, name, {"blocklength": i[1], "displacements": a})
        if c == COMBINER_SUBARRAY:
            n = i[0]
            return (base, name, {"sizes": i[1:1 + n], "subsizes": i[1 + n:1 + 2 * n],
                                 "starts": i[1 + 2 * n:1 + 3 * n], "order": i[-1]})
        if c == COMBINER_DARRAY:
            n = i[2]
            return (base, name, {"size": i[0], "rank": i[1], "gsizes": i[3:3 + n],
                                 "distribs": i[3 + n:3 + 2 * n], "dargs": i[3 + 2 * n:3 + 3 * n],
                                 "psizes": i[3 + 3 * n:3 + 4 * n], "order": i[-1]})
        if c == COMBINER_RESIZED:
            return (base, name, {"lb": a[0], "extent": a[1]})
        raise DatatypeError(f"Datatype.decode: unknown combiner {c}")  # pragma: no cover

    # ------------------------------------------------------------------ pack / unpack
    def Pack(self, inbuf: Any, outbuf: Any, position: int, comm: Any = None) -> int:
        """Pack as many whole items of this type as ``inbuf`` holds (its length // extent)
        into ``outbuf`` at byte ``position``; returns the new position."""
        from .packing import pack_into
        self._check_usable("Pack")
        return pack_into(self, inbuf, outbuf, position, call="Datatype.Pack")

    def Unpack(self, inbuf: Any, position: int, outbuf: Any, comm: Any = None) -> int:
        """Unpack items of this type from ``inbuf`` at byte ``position`` into ``outbuf``
        (as many as it holds: its length // extent); returns the new position."""
        from .packing import unpack_from
        self._check_usable("Unpack")
        return unpack_from(self, inbuf, position, outbuf, call="Datatype.Unpack")

    def Pack_size(self, count: int, comm: Any = None) -> int:
        """Bytes that ``Pack`` needs for ``count`` items (exactly ``count * size``)."""
        self._check_usable("Pack_size")
        return _int(count, "count", "Pack_size") * self._map.size

    def Pack_external(self, datarep: str, inbuf: Any, outbuf: Any, position: int) -> int:
        """``Pack`` in the portable ``external32`` representation (big-endian)."""
        from .packing import pack_into
        self._check_usable("Pack_external")
        return pack_into(self, inbuf, outbuf, position, call="Datatype.Pack_external",
                         datarep=datarep)

    def Unpack_external(self, datarep: str, inbuf: Any, position: int, outbuf: Any) -> int:
        """``Unpack`` from the ``external32`` representation."""
        from .packing import unpack_from
        self._check_usable("Unpack_external")
        return unpack_from(self, inbuf, position, outbuf, call="Datatype.Unpack_external",
                           datarep=datarep)

    def Pack_external_size(self, datarep: str, count: int) -> int:
        """Bytes that ``Pack_external`` needs for ``count`` items."""
        from .packing import external_size
        self._check_usable("Pack_external_size")
        return external_size(self, datarep, _int(count, "count", "Pack_external_size"))

    # ------------------------------------------------------------------ lookups
    @classmethod
    def Match_size(cls, typeclass: int, size: int) -> "Datatype":
        """The Fortran type of ``typeclass`` (``TYPECLASS_INTEGER/REAL/COMPLEX``) and
        ``size`` bytes (``INTEGER4``, ``REAL8``..., as MPICH answers); a size with no such
        type is ``ERR_ARG``."""
        kinds = {TYPECLASS_INTEGER: "INTEGER", TYPECLASS_REAL: "REAL",
                 TYPECLASS_COMPLEX: "COMPLEX"}
        if typeclass not in kinds:
            raise ArgumentError(f"Datatype.Match_size: typeclass {typeclass!r} is not "
                                "TYPECLASS_INTEGER, TYPECLASS_REAL or TYPECLASS_COMPLEX")
        size = _int(size, "size", "Match_size", minimum=None)
        found = FORTRAN_SIZED.get(f"{kinds[typeclass]}{size}")
        if found is None or found.is_null:
            have = [t.size for n, t in FORTRAN_SIZED.items()
                    if n.startswith(kinds[typeclass]) and not t.is_null]
            raise ArgumentError(f"Datatype.Match_size: no {kinds[typeclass]} type has {size} "
                                f"bytes here (sizes: {', '.join(map(str, have))})")
        return found

    @classmethod
    def Create_f90_integer(cls, r: int) -> "Datatype":
        """The smallest integer type holding ``r`` decimal digits."""
        r = _int(r, "r", "Create_f90_integer")
        for t, digits in ((INT8_T, 2), (INT16_T, 4), (INT32_T, 9), (INT64_T, 18)):
            if r <= digits:
                return Datatype._derived(f"F90_INTEGER[{r}]", t._map, COMBINER_F90_INTEGER,
                                         (r,), (), ())
        raise DatatypeError(f"Datatype.Create_f90_integer: no integer type has {r} digits")

    @classmethod
    def Create_f90_real(cls, p: int, r: int) -> "Datatype":
        """The smallest real type with ``p`` decimal digits and exponent range ``r``."""
        t = _f90_float("Create_f90_real", p, r, (FLOAT, DOUBLE))
        return Datatype._derived(f"F90_REAL[{p},{r}]", t._map, COMBINER_F90_REAL, (p, r))

    @classmethod
    def Create_f90_complex(cls, p: int, r: int) -> "Datatype":
        """The smallest complex type with ``p`` decimal digits and exponent range ``r``."""
        t = _f90_float("Create_f90_complex", p, r, (C_FLOAT_COMPLEX, C_DOUBLE_COMPLEX))
        return Datatype._derived(f"F90_COMPLEX[{p},{r}]", t._map, COMBINER_F90_COMPLEX, (p, r))

    @classmethod
    def Get_value_index(cls, value: "Datatype", index: "Datatype") -> "Datatype":
        """The predefined pair type of ``value`` and ``index`` (``index`` must be INT)."""
        value = resolve_datatype(value, call="Datatype.Get_value_index", arg="value")
        index = resolve_datatype(index, call="Datatype.Get_value_index", arg="index")
        pairs = ((FLOAT, FLOAT_INT), (DOUBLE, DOUBLE_INT), (LONG, LONG_INT), (INT, TWOINT),
                 (SHORT, SHORT_INT), (LONG_DOUBLE, LONG_DOUBLE_INT))   # (handles: no hash)
        for v, pair in pairs:
            if index == INT and value == v:
                return pair
        return Datatype()

    # mpi4py 4 conveniences
    def tocode(self) -> str:
        """The typecode of a predefined datatype (``MPI.INT.tocode() == 'i'``)."""
        self._check_usable("tocode")
        if self._combiner == COMBINER_DUP:          # a duplicate reads as its original
            return self._types[0].tocode()
        if not self.is_predefined or self._dtype.fields is not None:
            raise DatatypeError(f"Datatype.tocode: {self._name} has no typecode (derived or "
                                "pair datatype)")
        if not self._predefined:      # F90 types: the predefined type of the same layout
            return from_numpy_dtype(self._dtype).tocode()
        for code, dt in TYPECODES.items():
            if dt is self and len(code) == 1:
                return code
        for code, dt in TYPECODES.items():      # sized C names: 'i4', 'f8'...
            if dt is self:
                return code
        if FORTRAN_SIZED.get(self._key) is self:   # INTEGER4 -> 'i4', REAL16 -> 'f16'
            return f"{self._dtype.kind}{self._dtype.itemsize}"
        for code, dt in TYPECODES.items():      # Fortran names: the C type's code
            if len(code) == 1 and dt._dtype == self._dtype:
                return code
        return self._dtype.str.lstrip("<>=|")

    @classmethod
    def fromcode(cls, code: str) -> "Datatype":
        return from_typecode(code)

    @property
    def typechar(self) -> str:
        if self._map is None:
            return ""
        if FORTRAN_SIZED.get(self._key) is self:   # REAL4: FLOAT's ('f'), as in mpi4py
            return from_typecode(self.tocode()).typechar
        try:
            return self.tocode()
        except ValueError:
            return "V"

    @property
    def typestr(self) -> str:
        if self._map is None:
            return ""
        if self._combiner == COMBINER_DUP:
            return self._types[0].typestr
        if self.is_predefined and self._dtype.fields is None:
            return self._dtype.str
        return f"V{self._map.extent}"

    # ------------------------------------------------------------------ attributes
    _keyvals = DATATYPE_KEYVALS

    def _attribute_store(self, call: str) -> AttributeStore:
        self._check_usable(call)
        if self._attrs is None:
            self._attrs = AttributeStore()
        return self._attrs

    # ------------------------------------------------------------------ internals
    def _check_usable(self, what: str) -> None:
        if self._map is None:
            raise DatatypeError(f"Datatype.{what}: DATATYPE_NULL is not a usable datatype")
        if self._freed:
            raise DatatypeError(f"Datatype.{what}: datatype {self._name} has been freed")

    def __bool__(self) -> bool:
        return not self.is_null

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Datatype):
            return NotImplemented
        if self.is_null or other.is_null:
            return self.is_null and other.is_null
        return self._handle is other._handle

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    # -- integer handles (mpi4py's handle / fromhandle / toint / fromint / py2f / f2py) ------
    @property
    def handle(self) -> int:
        """An integer naming this datatype in this process (0 for a null handle), the same
        for every handle object on it; ``fromhandle`` gives a handle on it back."""
        if self.is_null:
            return 0
        token = self._handle
        if not token.number:
            token.number = register(self)
        else:
            point(token.number, self)      # (keeps a live handle object in the table)
        return token.number

    @classmethod
    def fromhandle(cls, handle: int) -> "Datatype":
        """Another handle object on the datatype ``handle`` names (0: a null handle)."""
        number = operator.index(handle)
        if number == 0:
            return cls()
        found = object_of(number)
        if not isinstance(found, Datatype):
            raise ValueError(f"MPI.Datatype.fromhandle({handle!r}): no live datatype has "
                             f"this handle in this process")
        return cls(found)

    __hash__ = None  # type: ignore[assignment]   (handles are unhashable, as mpi4py's)

    def __repr__(self) -> str:
        if self._predefined or self._map is None:
            return f"MPI.{self._name.removeprefix('MPI_')}"
        state = " (freed)" if self._freed else ""
        return (f"<Datatype {self._name}: size {self._map.size}, extent {self._map.extent}"
                f"{state}>")

    def __reduce__(self):
        if self._predefined or self._map is None:
            if _predefined_by_name(self._key) is not self:    # MPI.Datatype(MPI.INT)
                return (type(self), (_predefined_by_name(self._key),))
            return (_predefined_by_name, (self._key,))
        return (_rebuild_derived, (self._name, self._combiner, self._ints, self._addrs,
                                   self._types))


def typecode(datatype: Datatype) -> Optional[str]:
    """mpi4py's ``MPI._typecode``: the typecode of a predefined type, else None."""
    try:
        return datatype.tocode()
    except (DatatypeError, ValueError):
        return None


def typealign(datatype: Datatype) -> Optional[int]:
    """mpi4py's ``MPI._typealign``: the alignment of a predefined type, else None."""
    if datatype.is_null or not datatype.is_predefined:
        return None
    dt = datatype.dtype
    if dt.fields is not None:
        return max(f[0].alignment for f in dt.fields.values())
    return dt.alignment


_PREDEFINED_COMBINERS = (COMBINER_NAMED, COMBINER_VALUE_INDEX, COMBINER_F90_INTEGER,
                         COMBINER_F90_REAL, COMBINER_F90_COMPLEX)


def _order(order: Any, call: str) -> int:
    order = _int(order, "order", call, minimum=None)
    if order not in (ORDER_C, ORDER_FORTRAN):
        raise ArgumentError(f"Datatype.{call}: order must be MPI.ORDER_C or MPI.ORDER_FORTRAN, "
                            f"got {order}")
    return order


def _f90_float(call: str, p: int, r: int, candidates) -> "Datatype":
    p = _int(p, "p", call, minimum=None)
    r = _int(r, "r", call, minimum=None)
    for t in candidates:
        info = np.finfo(t.element_dtype)
        if p <= info.precision and r <= info.maxexp * 0.30103:
            return t
    raise DatatypeError(f"Datatype.{call}: no type has precision {p} and range {r}")


def _signature_code(name: str, dt: np.dtype) -> str:
    """The basic-type code in signatures: numpy's type char, the MPI name for records."""
    if dt.fields is not None:
        return name
    return dt.char


def _raw(buf: Any, writable: bool) -> np.ndarray:
    """A flat contiguous uint8 array over ``buf``'s bytes (numpy array or buffer object)."""
    if isinstance(buf, np.ndarray):
        arr = buf
    else:
        view = memoryview(buf)
        if not view.contiguous:
            raise BufferSpecError("pack/unpack: the buffer must be contiguous bytes")
        arr = np.asarray(view.cast("B"))
    if not (arr.flags.c_contiguous or arr.flags.f_contiguous):
        raise BufferSpecError("pack/unpack: the buffer must be contiguous bytes")
    if writable and not arr.flags.writeable:
        raise BufferSpecError("unpack: the target buffer is read-only")
    flat = arr.reshape(-1, order="A") if arr.ndim != 1 else arr
    return flat if flat.dtype == np.uint8 else flat.view(np.uint8)


def _run_sizes(datatype: Datatype) -> list[tuple[int, int]]:
    """(element size, repeat) for each run of ``datatype``'s signature."""
    return [(dtype_of_code(code).itemsize, n) for code, n in datatype.signature]


def count_elements(datatype: Datatype, nbytes: int) -> Optional[int]:
    """How many basic elements ``nbytes`` of data of ``datatype`` hold (whole items and the
    elements of a partial last item), or None when the bytes end inside an element."""
    size = datatype.size
    if size == 0:
        return 0
    whole, rest = divmod(nbytes, size)
    elements = whole * sum(n for _, n in datatype.signature)
    for esize, n in _run_sizes(datatype):
        if rest == 0:
            break
        k = min(n, rest // esize)
        elements += k
        rest -= k * esize
        if k < n:
            break
    return elements if rest == 0 else None


def elements_nbytes(datatype: Datatype, count: int) -> int:
    """Bytes of ``count`` basic elements of ``datatype`` (``Status.Set_elements``)."""
    per_item = sum(n for _, n in datatype.signature)
    if per_item == 0:
        return 0
    whole, rest = divmod(count, per_item)
    nbytes = whole * datatype.size
    for esize, n in _run_sizes(datatype):
        k = min(n, rest)
        nbytes += k * esize
        rest -= k
        if rest == 0:
            break
    return nbytes


class _HandleToken:
    """The identity of one MPI datatype, shared by every handle object on it (what ``==``
    compares), the integer handle it gets the first time one is asked for, and the handle
    operations hold (``held``, see :func:`held_handle`)."""

    __slots__ = ("number", "committed", "attrs", "held", "__weakref__")

    def __init__(self, committed: bool = False) -> None:
        self.number = 0
        self.committed = committed
        self.attrs: Optional[AttributeStore] = None
        self.held: Optional[Datatype] = None


def held_handle(datatype: Datatype) -> Datatype:
    """The handle on ``datatype``'s type that operations keep: one per type, never given to
    the program, so ``Free`` of the program's handles (which only marks those, as MPI's
    ``MPI_Type_free``) leaves it whole: a receive posted, a nonblocking collective started or
    a persistent request made before the ``Free`` completes with the type it was given. A
    module constant (``MPI.INT``) is its own; ``datatype`` must be usable."""
    held = datatype._handle.held
    if held is None:
        held = Datatype(datatype)
        datatype._handle.held = held
    return held




def _handle_of(t: Datatype) -> Datatype:
    """What ``Get_contents``/``decode`` hand out: predefined types themselves, a new
    handle to the same type otherwise (the caller may free it, as in MPI)."""
    return t if t._predefined else Datatype(t)


def _predefined_by_name(name: str) -> Datatype:
    if name == "MPI_DATATYPE_NULL":
        return DATATYPE_NULL
    return PREDEFINED[name]


def _rebuild_derived(name: str, combiner: int, ints: tuple, addrs: tuple,
                     types: tuple) -> Datatype:
    """A derived type rebuilt in another process by replaying its constructor call."""
    built = _replay(combiner, list(ints), list(addrs), list(types))
    built._name = name
    return built


def _replay(c: int, i: list, a: list, t: list) -> Datatype:
    base = t[0] if t else None
    if c == COMBINER_DUP:
        return base.Dup()
    if c == COMBINER_CONTIGUOUS:
        return base.Create_contiguous(i[0])
    if c == COMBINER_VECTOR:
        return base.Create_vector(*i)
    if c == COMBINER_HVECTOR:
        return base.Create_hvector(i[0], i[1], a[0])
    if c == COMBINER_INDEXED:
        n = i[0]
        return base.Create_indexed(i[1:1 + n], i[1 + n:])
    if c == COMBINER_HINDEXED:
        return base.Create_hindexed(i[1:], a)
    if c == COMBINER_INDEXED_BLOCK:
        return base.Create_indexed_block(i[1], i[2:])
    if c == COMBINER_HINDEXED_BLOCK:
        return base.Create_hindexed_block(i[1], a)
    if c == COMBINER_STRUCT:
        return Datatype.Create_struct(i[1:], a, t)
    if c == COMBINER_SUBARRAY:
        n = i[0]
        return base.Create_subarray(i[1:1 + n], i[1 + n:1 + 2 * n], i[1 + 2 * n:1 + 3 * n], i[-1])
    if c == COMBINER_DARRAY:
        n = i[2]
        return base.Create_darray(i[0], i[1], i[3:3 + n], i[3 + n:3 + 2 * n],
                                  i[3 + 2 * n:3 + 3 * n], i[3 + 3 * n:3 + 4 * n], i[-1])
    if c == COMBINER_RESIZED:
        return base.Create_resized(a[0], a[1])
    if c == COMBINER_F90_INTEGER:
        return Datatype.Create_f90_integer(i[0])
    if c == COMBINER_F90_REAL:
        return Datatype.Create_f90_real(i[0], i[1])
    if c == COMBINER_F90_COMPLEX:
        return Datatype.Create_f90_complex(i[0], i[1])
    raise DatatypeError(f"cannot rebuild a datatype of combiner {c}")


DATATYPE_NULL = Datatype()

#: All predefined datatypes by MPI name (aliases included: UNSIGNED_INT, TWOINT, ...).
PREDEFINED: dict[str, Datatype] = {}


def _def(name: str, dtype, *aliases: str) -> Datatype:
    if dtype is None:        # a type this platform does not have: a null handle (as in mpi4py)
        dt = Datatype._make(name, predefined=True)
        dt._key = name
        PREDEFINED[name] = dt
        return dt
    dt = Datatype._make(name, dtype, predefined=True)
    dt._handle.held = dt       # (the program cannot free a module constant)
    CODE_DTYPES.setdefault(dt.signature[0][0], dt.dtype)
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
# Fortran's sized types, as MPICH 5 defines them on x86-64 Linux with gfortran (checked under
# mpi4py 4.1.2): INTEGER1-8, REAL4-16 and COMPLEX8-32 are named types of their own (equal to no
# other handle: INTEGER4 != INTEGER != INT32_T); REAL16/COMPLEX32 are the C long double ones
# where that has 16 bytes. The kinds MPICH leaves null (LOGICALn, INTEGER16, REAL2, COMPLEX4)
# are null below. ``Match_size`` answers with these types.
_LONG_DOUBLE_16 = np.dtype(np.longdouble).itemsize == 16
FORTRAN_SIZED: dict[str, Datatype] = {
    name: _def(name, dtype) for name, dtype in (
        ("INTEGER1", np.int8), ("INTEGER2", np.int16), ("INTEGER4", np.int32),
        ("INTEGER8", np.int64), ("REAL4", np.float32), ("REAL8", np.float64),
        ("REAL16", np.longdouble if _LONG_DOUBLE_16 else None), ("COMPLEX8", np.complex64),
        ("COMPLEX16", np.complex128),
        ("COMPLEX32", np.clongdouble if _LONG_DOUBLE_16 else None))}
# C's sized floats: FLOAT32_T and FLOAT64_T are FLOAT and DOUBLE themselves (MPICH's handles
# are equal), and the name of each stays as MPICH reports it (MPI_FLOAT, MPI_DOUBLE).
PREDEFINED["FLOAT32_T"], PREDEFINED["FLOAT64_T"] = FLOAT, DOUBLE
# Names mpi4py has for types this runtime does not provide (the Fortran kinds MPICH does not
# define, 16-bit C floats, MPI-1's LB/UB markers): null handles, as mpi4py gives for types its
# MPI lacks, so programs can test ``MPI.REAL2 != MPI.DATATYPE_NULL``.
for _absent in ("LOGICAL1", "LOGICAL2", "LOGICAL4", "LOGICAL8", "LOGICAL16", "INTEGER16",
                "REAL2", "COMPLEX4", "FLOAT16_T", "BFLOAT16_T", "LB", "UB"):
    _def(_absent, None)
del _absent

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
    type) into a usable :class:`Datatype`, or raise :class:`DatatypeError`. A handle gives
    the one its operations hold (:func:`held_handle`): the program may free its own while
    they run."""
    prefix = f"{call}: " if call else ""
    if isinstance(obj, Datatype):
        if obj._dtype is None:
            raise DatatypeError(f"{prefix}{arg} is MPI.DATATYPE_NULL; pass a real datatype such as MPI.INT")
        if obj._freed:
            raise DatatypeError(f"{prefix}{arg} {obj.name} has been freed")
        return obj._handle.held or held_handle(obj)
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
