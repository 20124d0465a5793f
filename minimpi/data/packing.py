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

from ..errors import (
    ArgumentError,
    BufferAccessError,
    BufferSpecError,
    NotABufferError,
    UnsupportedError,
)
from .foreign import array_at, from_cai, from_dlpack, is_cai, is_dlpack
from .typemap import dtype_of_code

__all__ = ["pack_into", "unpack_from", "external_size"]


def _flat(buf: Any, *, writable: bool, call: str, arg: str) -> np.ndarray:
    """The bytes of a contiguous buffer (numpy array or any buffer-protocol object)."""
    if isinstance(buf, np.ndarray):
        arr = buf
    elif is_dlpack(buf) and not _has_buffer(buf):
        arr = array_at(from_dlpack(buf, writable, f"{call}: {arg}"), f"{call}: {arg}", writable)
    elif is_cai(buf) and not _has_buffer(buf):
        arr = array_at(from_cai(buf, writable, f"{call}: {arg}"), f"{call}: {arg}", writable)
    else:
        try:
            view = memoryview(buf)
        except TypeError:
            raise NotABufferError(f"{call}: {arg} is {type(buf).__name__}, not a buffer") from None
        if not view.contiguous:
            raise BufferAccessError(f"{call}: {arg} must be a contiguous buffer")
        arr = np.asarray(view.cast("B"))
    if not (arr.flags.c_contiguous or arr.flags.f_contiguous):
        raise BufferAccessError(f"{call}: {arg} must be a contiguous buffer")
    if writable and not arr.flags.writeable:
        raise BufferAccessError(f"{call}: {arg} is read-only")
    flat = arr.reshape(-1, order="A")
    return flat if flat.dtype == np.uint8 else flat.view(np.uint8)


def _has_buffer(obj: Any) -> bool:
    try:
        memoryview(obj)
    except TypeError:
        return False
    return True


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
#: long double is the x87 80-bit format in 16 bytes: external32 wants IEEE binary128 there,
#: which has the same sign and exponent fields, so the conversion is a bit shuffle.
_X87 = np.finfo(np.longdouble).nmant == 63 and np.dtype(np.longdouble).itemsize == 16
_QUAD = np.dtype("V16")


def _is_x87(dt: np.dtype) -> bool:
    return _X87 and dt.kind in "fc" and dt.itemsize == (16 if dt.kind == "f" else 32)


def _external_dtype(dt: np.dtype, call: str) -> np.dtype:
    """The big-endian, unpadded form of a native element (or record) dtype."""
    if dt.subdtype is not None:
        base, shape = dt.subdtype
        return np.dtype((_external_dtype(base, call), shape))
    if dt.fields is not None:
        names = list(dt.names)
        return np.dtype({"names": names,
                         "formats": [_external_dtype(dt.fields[n][0], call) for n in names]})
    if _is_x87(dt):
        return _QUAD if dt.kind == "f" else np.dtype((_QUAD, (2,)))
    if dt.kind in "fc" and dt.itemsize not in (2, 4, 8, 16):
        raise UnsupportedError(f"{call}: external32 of {dt} is not supported")
    return dt.newbyteorder(">") if dt.itemsize > 1 and dt.kind not in "SVU" else dt


def _x87_to_quad(x: np.ndarray) -> np.ndarray:
    """x87 extended values -> big-endian binary128 bytes, shape ``x.shape + (16,)``."""
    b = np.ascontiguousarray(x).view(np.uint8).reshape(-1, 16)
    mant = b[:, 0:8].copy().view("<u8").ravel().astype(np.uint64)
    sign_exp = b[:, 8:10].copy().view("<u2").ravel().astype(np.uint64)
    frac = mant & np.uint64(0x7FFFFFFFFFFFFFFF)          # drop the explicit integer bit
    out = np.empty((b.shape[0], 2), ">u8")
    out[:, 0] = (sign_exp << np.uint64(48)) | (frac >> np.uint64(15))
    out[:, 1] = frac << np.uint64(49)
    return out.view(np.uint8).reshape(x.shape + (16,))


def _quad_to_x87(q: np.ndarray, shape: tuple) -> np.ndarray:
    """Big-endian binary128 bytes -> x87 extended values of ``shape``."""
    words = np.ascontiguousarray(q).view(np.uint8).reshape(-1, 16).copy().view(">u8")
    hi, lo = words[:, 0].astype(np.uint64), words[:, 1].astype(np.uint64)
    sign_exp = hi >> np.uint64(48)
    frac = ((hi & np.uint64(0xFFFFFFFFFFFF)) << np.uint64(15)) | (lo >> np.uint64(49))
    explicit = np.where((sign_exp & np.uint64(0x7FFF)) != 0, np.uint64(1 << 63), np.uint64(0))
    out = np.zeros((words.shape[0], 16), np.uint8)
    out[:, 0:8] = (frac | explicit).astype("<u8").view(np.uint8).reshape(-1, 8)
    out[:, 8:10] = sign_exp.astype("<u2").view(np.uint8).reshape(-1, 2)
    return out.view(np.longdouble).reshape(shape)


def _convert(src: np.ndarray, dst: np.ndarray, to_external: bool) -> None:
    """Fill ``dst`` from ``src`` field by field (numpy casts swap the bytes; x87 long
    doubles are reshuffled)."""
    if src.dtype.fields is not None:
        for name in src.dtype.names:
            _convert(src[name], dst[name], to_external)
        return
    native = src if to_external else dst
    if not _is_x87(native.dtype):
        dst[...] = src
    elif to_external:
        flat = src.view(np.longdouble) if src.dtype.kind == "c" else src
        dst[...] = _x87_to_quad(flat).reshape(dst.shape + (16,)).view(_QUAD)[..., 0]
    else:
        shape = dst.shape + ((2,) if dst.dtype.kind == "c" else ())
        values = _quad_to_x87(src, shape)
        dst[...] = values.view(dst.dtype).reshape(dst.shape) if dst.dtype.kind == "c" else values


def _record_dtypes(datatype: Any, call: str) -> tuple[np.dtype, np.dtype]:
    """One item as a record of its signature runs: (native, external32) record dtypes, so
    that each run converts as one array whatever the number of items."""
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
    out = np.empty(count, external)
    _convert(np.ascontiguousarray(packed).view(native), out, True)
    return out.view(np.uint8)


def from_external(datatype: Any, data: np.ndarray, count: int) -> np.ndarray:
    if count == 0 or datatype.size == 0:
        return np.empty(0, np.uint8)
    native, external = _record_dtypes(datatype, "Datatype.Unpack_external")
    out = np.empty(count, native)
    _convert(np.ascontiguousarray(data).view(external), out, False)
    return out.view(np.uint8)
