"""``Datatype.Pack``/``Unpack`` and their portable ``external32`` forms.

``Pack`` gathers items of a datatype from a user buffer into a byte buffer at a position,
``Unpack`` scatters them back; the packed form is the native bytes of the type signature in
order (what the wire carries). ``external32`` is the MPI standard's portable representation:
the same elements big-endian, records (the pair types) without padding. Conversion walks the
signature's runs (one numpy conversion per run of one basic type), never element by element.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ArgumentError, BufferSpecError, UnsupportedError
from .buffers import export

__all__ = ["pack_into", "unpack_from", "external_size"]


def _flat(buf: Any, *, writable: bool, call: str, arg: str) -> np.ndarray:
    arr, _ = export(buf, writable=writable, call=call, arg=arg)
    if not (arr.flags.c_contiguous or arr.flags.f_contiguous):
        raise BufferSpecError(f"{call}: {arg} must be a contiguous buffer")
    flat = arr.reshape(-1, order="A")
    return flat if flat.dtype == np.uint8 else flat.view(np.uint8)


def _position(position: Any, size: int, need: int, call: str, what: str) -> int:
    try:
        pos = int(position)
    except (TypeError, ValueError):
        raise TypeError(f"{call}: position must be an integer, got {position!r:.40}") from None
    if pos < 0:
        raise ArgumentError(f"{call}: position must be >= 0, got {pos}")
    if pos + need > size:
        raise BufferSpecError(f"{call}: {what} needs {need} bytes at position {pos} but the "
                              f"packed buffer has {size} bytes")
    return pos


def _check_datarep(datarep: Any, call: str) -> None:
    if datarep != "external32":
        raise UnsupportedError(f"{call}: data representation {datarep!r} is not supported; "
                               "only 'external32' is")


def _items_in(datatype: Any, nbytes: int) -> int:
    """How many items of ``datatype`` a buffer of ``nbytes`` holds (mpi4py: length // extent)."""
    extent = datatype.extent
    return nbytes // extent if extent > 0 else 0


def pack_into(datatype: Any, inbuf: Any, outbuf: Any, position: Any, *, call: str,
              datarep: str | None = None) -> int:
    """Pack ``inbuf`` (as many items as it holds) into ``outbuf`` at ``position``."""
    if datarep is not None:
        _check_datarep(datarep, call)
    src = _flat(inbuf, writable=False, call=call, arg="inbuf")
    dst = _flat(outbuf, writable=True, call=call, arg="outbuf")
    count = _items_in(datatype, src.size)
    packed = datatype.typemap.pack(src, count, call=call)
    if datarep is not None:
        packed = to_external(datatype, packed, count)
    pos = _position(position, dst.size, packed.size, call, f"{count} item(s) of {datatype.name}")
    dst[pos:pos + packed.size] = packed
    return pos + packed.size


def unpack_from(datatype: Any, inbuf: Any, position: Any, outbuf: Any, *, call: str,
                datarep: str | None = None) -> int:
    """Unpack into ``outbuf`` (as many items as it holds) from ``inbuf`` at ``position``."""
    if datarep is not None:
        _check_datarep(datarep, call)
    src = _flat(inbuf, writable=False, call=call, arg="inbuf")
    dst = _flat(outbuf, writable=True, call=call, arg="outbuf")
    count = _items_in(datatype, dst.size)
    need = external_size(datatype, datarep, count) if datarep else count * datatype.size
    pos = _position(position, src.size, need, call, f"{count} item(s) of {datatype.name}")
    data = src[pos:pos + need]
    if datarep is not None:
        data = from_external(datatype, data, count)
    datatype.typemap.unpack(np.ascontiguousarray(data), dst, count, call=call)
    return pos + need


# ------------------------------------------------------------------ external32
def _external_dtype(dt: np.dtype, call: str) -> np.dtype:
    """The big-endian, unpadded form of a native element dtype."""
    if dt.fields is not None:
        names = list(dt.names)
        return np.dtype({"names": names,
                         "formats": [_external_dtype(dt.fields[n][0], call) for n in names]})
    if dt.kind == "f" and dt.itemsize not in (2, 4, 8):
        raise UnsupportedError(f"{call}: external32 of long double ({dt}) is not supported "
                               "(its native format is not IEEE quad precision)")
    if dt.kind == "c" and dt.itemsize not in (8, 16):
        raise UnsupportedError(f"{call}: external32 of long double complex is not supported")
    return dt.newbyteorder(">") if dt.itemsize > 1 and dt.kind not in "SVc" else dt


def _record_dtypes(datatype: Any, call: str) -> tuple[np.dtype, np.dtype]:
    """One item as a record of its signature runs: (native, external32) record dtypes, so
    that a single ``astype`` converts any number of items."""
    from .datatypes import dtype_of_code
    names, native, external = [], [], []
    for i, (code, n) in enumerate(datatype.signature):
        dt = dtype_of_code(code)
        names.append(f"r{i}")
        native.append((dt, (n,)))
        external.append((_external_dtype(dt, call), (n,)))
    return (np.dtype({"names": names, "formats": native}),
            np.dtype({"names": names, "formats": external}))


def external_size(datatype: Any, datarep: Any, count: int) -> int:
    """Bytes of ``count`` items in ``external32``."""
    _check_datarep(datarep, "Datatype.Pack_external_size")
    if datatype.size == 0 or count == 0:
        return 0
    return _record_dtypes(datatype, "Datatype.Pack_external_size")[1].itemsize * count


def to_external(datatype: Any, packed: np.ndarray, count: int) -> np.ndarray:
    if count == 0 or datatype.size == 0:
        return np.empty(0, np.uint8)
    native, external = _record_dtypes(datatype, "Datatype.Pack_external")
    return np.ascontiguousarray(packed).view(native).astype(external).view(np.uint8)


def from_external(datatype: Any, data: np.ndarray, count: int) -> np.ndarray:
    if count == 0 or datatype.size == 0:
        return np.empty(0, np.uint8)
    native, external = _record_dtypes(datatype, "Datatype.Unpack_external")
    return np.ascontiguousarray(data).view(external).astype(native).view(np.uint8)
