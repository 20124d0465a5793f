"""``mpi4py.util.dtlib``: numpy dtypes to new MPI datatype handles and back.

Unlike :func:`minimpi.data.datatypes.from_numpy_dtype` (which buffer parsing uses and which
answers predefined singletons), :func:`datatype_from_numpy` returns a *new* handle the
caller owns and frees, as mpi4py's ``dtlib.from_numpy_dtype`` does: records become struct
types resized to the record's item size, subarray dtypes contiguous or subarray types, and
elementary dtypes a ``Dup`` of their predefined type. :func:`numpy_from_datatype` decodes a
datatype's constructor calls (``decode``) into the numpy dtype of one item: structs, vectors
and indexed types become records with explicit offsets (fields ``f0``, ``f1``...), marked
aligned when every member sits at a multiple of its alignment.
"""
from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Any, Callable, Optional

import numpy as np

from . import datatypes as D

__all__ = ["datatype_from_numpy", "numpy_from_datatype"]

#: numpy record dtypes converted lately -> a handle of ours on the result: converting an
#: equal dtype again copies that construction instead of building every member again (a
#: round trip dtype -> MPI -> dtype -> MPI converts equal dtypes over and over)
_RECENT_RECORDS: "OrderedDict[tuple, D.Datatype]" = OrderedDict()
_RECENT_LIMIT = 256
#: an MPI datatype's numpy dtype, worked out once per type (a type's constructor call never
#: changes); keyed weakly by the type's identity, so it goes with the type
_NUMPY_OF: "weakref.WeakKeyDictionary[object, np.dtype]" = weakref.WeakKeyDictionary()


def _dtype_key(dt: np.dtype) -> tuple:
    """What the conversion depends on, and equal only for dtypes that convert alike
    (``np.dtype('l') == np.dtype('q')``, but they are MPI's LONG and LONG_LONG)."""
    if dt.fields:
        return ("record", dt.itemsize,
                tuple((_dtype_key(dt.fields[n][0]), dt.fields[n][1]) for n in dt.names))
    if dt.subdtype:
        return ("array", _dtype_key(dt.subdtype[0]), dt.subdtype[1])
    return (dt.char, dt.str)


def datatype_from_numpy(dtype: Any) -> D.Datatype:
    """A new MPI datatype handle for a numpy dtype-like."""
    dt = np.dtype(dtype)
    if not dt.fields:
        return _convert(dt)
    key = _dtype_key(dt)
    known = _RECENT_RECORDS.get(key)
    if known is not None:
        _RECENT_RECORDS.move_to_end(key)
        copy = known._copy_construction()
        numpy_dtype = _NUMPY_OF.get(known._identity())
        if numpy_dtype is not None:
            _NUMPY_OF[copy._identity()] = numpy_dtype
        return copy
    result = _convert(dt)
    _RECENT_RECORDS[key] = D.Datatype(result)
    if len(_RECENT_RECORDS) > _RECENT_LIMIT:
        _RECENT_RECORDS.popitem(last=False)
    return result


def _convert(dt: np.dtype) -> D.Datatype:
    if dt.hasobject:
        raise ValueError(f"numpy dtype {dt} holds Python objects; it has no MPI datatype")
    if not dt.isnative:
        raise ValueError(f"numpy dtype {dt} is not in native byte order")
    if dt.fields:
        members = [datatype_from_numpy(dt.fields[name][0]) for name in dt.names]
        offsets = [dt.fields[name][1] for name in dt.names]
        record = D.Datatype.Create_struct([1] * len(members), offsets, members)
        return record.Create_resized(0, dt.itemsize)
    if dt.subdtype:
        base, shape = dt.subdtype
        element = datatype_from_numpy(base)
        if len(shape) == 1:
            return element.Create_contiguous(shape[0])
        return element.Create_subarray(list(shape), list(shape), [0] * len(shape))
    try:
        return D.Datatype.fromcode(dt.char).Dup()
    except (KeyError, ValueError):
        raise ValueError(f"numpy dtype {dt} has no MPI datatype") from None


def _alignment(datatype: D.Datatype) -> int:
    dt = datatype.dtype
    if dt.fields is not None:
        return max(f[0].alignment for f in dt.fields.values())
    return dt.alignment


def _aligned(datatype: D.Datatype, offset: int = 0) -> bool:
    """Whether every basic member of ``datatype`` placed at ``offset`` is aligned."""
    if datatype.is_predefined:
        return offset % _alignment(datatype) == 0
    base, _, params = datatype.decode()
    parts = [(base, 0)]
    combiner = datatype.combiner
    if combiner == D.COMBINER_RESIZED:
        parts = [(base, params["extent"])]
    elif combiner == D.COMBINER_STRUCT:
        parts = list(zip(params["datatypes"], params["displacements"]))
    elif combiner == D.COMBINER_HVECTOR:
        parts = [(base, params["stride"] if params["count"] > 1 else 0)]
    elif combiner in (D.COMBINER_HINDEXED, D.COMBINER_HINDEXED_BLOCK):
        parts = [(base, d) for d in params["displacements"]]
    return all(_aligned(t, offset + d) for t, d in parts)


def _member(datatype: D.Datatype, count: int, make: Optional[Callable]) -> Any:
    dt = numpy_from_datatype(datatype, make)
    return dt if count == 1 else (dt, (count,))


def _record(names_count: int, formats: list, offsets: list, itemsize: int | None,
            aligned: bool, make: Optional[Callable]) -> Any:
    spec = {"names": [f"f{i}" for i in range(names_count)], "formats": formats,
            "offsets": offsets, "aligned": aligned}
    if itemsize is not None:
        spec["itemsize"] = itemsize
    return make(spec) if make else spec


def numpy_from_datatype(datatype: D.Datatype, make: Optional[Callable] = np.dtype) -> Any:
    """The numpy dtype of one item of ``datatype``; with ``make=None``, the specification
    numpy would take instead (a type code string, ``(spec, shape)`` or a record dict), as
    mpi4py's dtlib answers where numpy is missing."""
    if not isinstance(datatype, D.Datatype) or datatype.is_null:
        raise ValueError("cannot convert a null MPI datatype to a numpy dtype")
    if make is not np.dtype:
        return _numpy_from_datatype(datatype, make)
    identity = datatype._identity()
    known = _NUMPY_OF.get(identity)
    if known is None:
        known = _NUMPY_OF[identity] = _numpy_from_datatype(datatype, make)
    return known


def _numpy_from_datatype(datatype: D.Datatype, make: Optional[Callable]) -> Any:
    combiner = datatype.combiner
    if combiner in (D.COMBINER_NAMED, D.COMBINER_F90_INTEGER, D.COMBINER_F90_REAL,
                    D.COMBINER_F90_COMPLEX):
        dt = datatype.dtype
        if dt.fields is not None:      # MAXLOC/MINLOC pairs: {value; int index;}
            value = dt.fields[dt.names[0]][0]
            spec = f"{value.char},i"
            return np.dtype(spec, align=True) if make else spec
        return dt if make else datatype.tocode()
    base, _, params = datatype.decode()
    if combiner == D.COMBINER_DUP:
        return numpy_from_datatype(base, make)
    if combiner == D.COMBINER_CONTIGUOUS:
        spec = (numpy_from_datatype(base, make), (params["count"],))
        return make(spec) if make else spec
    if combiner == D.COMBINER_SUBARRAY:
        sizes, subsizes, starts = params["sizes"], params["subsizes"], params["starts"]
        if sizes != subsizes or any(starts):
            raise ValueError("cannot convert a subarray datatype of part of an array to numpy")
        if params["order"] == D.ORDER_FORTRAN:
            sizes = sizes[::-1]
        spec = (numpy_from_datatype(base, make), tuple(sizes))
        return make(spec) if make else spec
    aligned = True
    if combiner == D.COMBINER_RESIZED and base.combiner == D.COMBINER_STRUCT:
        aligned = _aligned(base, params["extent"])
        combiner, (_, _, params) = D.COMBINER_STRUCT, base.decode()
    if combiner == D.COMBINER_STRUCT:
        types, lengths, displs = params["datatypes"], params["blocklengths"], params["displacements"]
        aligned = aligned and all(_aligned(t, d) for t, d in zip(types, displs))
        return _record(len(types), [_member(t, n, make) for t, n in zip(types, lengths)],
                       displs, datatype.extent, aligned, make)
    if combiner in (D.COMBINER_VECTOR, D.COMBINER_HVECTOR):
        count, stride = params["count"], params["stride"]
        if combiner == D.COMBINER_VECTOR:
            stride *= base.extent
            aligned = _aligned(base)
        else:
            stride = stride if count > 1 else 0
            aligned = _aligned(base, stride)
        block = (numpy_from_datatype(base, make), (params["blocklength"],))
        return _record(count, [block] * count, [stride * i for i in range(count)],
                       datatype.extent, aligned, make)
    if combiner in (D.COMBINER_INDEXED, D.COMBINER_HINDEXED, D.COMBINER_INDEXED_BLOCK,
                    D.COMBINER_HINDEXED_BLOCK):
        displs = params["displacements"]
        lengths = params["blocklengths"] if "blocklengths" in params \
            else [params["blocklength"]] * len(displs)
        in_bytes = combiner in (D.COMBINER_HINDEXED, D.COMBINER_HINDEXED_BLOCK)
        unit = 1 if in_bytes else base.extent
        aligned = _aligned(base) and (not in_bytes or all(_aligned(base, d) for d in displs))
        element = numpy_from_datatype(base, make)
        return _record(len(displs), [(element, (n,)) for n in lengths],
                       [d * unit for d in displs], None, aligned, make)
    raise ValueError(f"cannot convert datatype {datatype.name} ({combiner=}) to a numpy dtype")
