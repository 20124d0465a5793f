"""Memory exported through the DLPack protocol or ``__cuda_array_interface__`` (CAI).

mpi4py accepts, besides the Python buffer protocol, objects that expose ``__dlpack__`` /
``__dlpack_device__`` (DLPack 0.x and 1.x capsules) or a ``__cuda_array_interface__`` dict,
and hands their raw pointer to MPI. minimpi moves bytes in Python, so it reads and writes
that memory through a numpy array built over the pointer. This module turns such an object
into an :class:`Exported`: address, size, element format, read-only flag, device, and the
objects that must stay alive while the memory is used.

The checks follow mpi4py's, with its exception classes: a malformed interface raises
``TypeError``/``KeyError``/``ValueError`` (what reading it as mpi4py does raises), a layout
minimpi cannot use (negative sizes, non-contiguous strides, a read-only buffer for a
receive, a foreign byte order, a masked CAI array) raises ``BufferError``.

Device memory. A DLPack tensor on a device other than the CPU, and every CAI array, may
live in GPU memory that the CPU cannot touch (reading it would crash the process). minimpi
therefore uses such memory only after checking, on Linux, that the whole range is mapped
readable (and writable, for a receive) in this process - true for host, pinned and managed
memory - and raises ``BufferError`` naming the object otherwise.

Lifetime. The numpy array made over the memory references (through its base) the exporter
and, for DLPack, the capsule, so as long as any view of the data is alive - a pending
request's target included - the exporter is too.
"""
from __future__ import annotations

import bisect
import ctypes
import sys
import warnings
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

import numpy as np

from ..errors import BufferAccessError, NotABufferError

__all__ = ["Exported", "DEVICE_CPU", "DEVICE_CUDA", "is_dlpack", "is_cai", "from_dlpack",
           "from_cai", "array_at", "host_accessible", "FORMAT_DTYPES"]

#: DLPack device types (the DLPack ABI's numbering)
DEVICE_CPU = 1
DEVICE_CUDA = 2
_DEVICE_CUDA_HOST = 3
_DEVICE_CUDA_MANAGED = 13
_DEVICE_ROCM_HOST = 11
#: devices whose memory is host memory by definition (no mapping check needed)
_HOST_DEVICES = (DEVICE_CPU, _DEVICE_CUDA_HOST, _DEVICE_ROCM_HOST)

_READ_ONLY_FLAG = 1          # DLPACK_FLAG_BITMASK_READ_ONLY

# -- the DLPack ABI (dlpack.h), as ctypes structures -------------------------------------


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_uint), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32),
                ("dtype", _DataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _Managed(ctypes.Structure):            # DLManagedTensor (DLPack < 1.0)
    _fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class _ManagedVersioned(ctypes.Structure):   # DLManagedTensorVersioned (DLPack >= 1.0)
    _fields_ = [("version", _Version), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64),
                ("dl_tensor", _Tensor)]


_capsule_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_is_valid.restype = ctypes.c_int
_capsule_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]

# DLPack type codes
_INT, _UINT, _FLOAT, _COMPLEX, _BOOL = 0, 1, 2, 5, 6

_C_SIZES = {"b": 1, "h": ctypes.sizeof(ctypes.c_short), "i": ctypes.sizeof(ctypes.c_int),
            "l": ctypes.sizeof(ctypes.c_long), "q": ctypes.sizeof(ctypes.c_longlong),
            "e": 2, "f": 4, "d": 8, "g": ctypes.sizeof(ctypes.c_longdouble)}

#: element formats (struct-module style, ``Z`` = complex) -> numpy dtype
FORMAT_DTYPES = {f: np.dtype(f) for f in "bhilqBHILQefdg?"}
FORMAT_DTYPES.update({"Zf": np.dtype("F"), "Zd": np.dtype("D"), "Zg": np.dtype("G")})


def _int_format(bits: int, signed: bool) -> Optional[str]:
    for code in "bhilq":
        if bits == 8 * _C_SIZES[code]:
            return code if signed else code.upper()
    return None


def _float_format(bits: int) -> Optional[str]:
    for code in "efdg":
        if bits == 8 * _C_SIZES[code]:
            return code
    return None


@dataclass
class Exported:
    """Memory another object exported: where it is and how to read it."""

    address: int
    nbytes: int
    readonly: bool
    #: struct-style element format ("i", "d", "Zd"...; "B" = plain bytes)
    format: str
    itemsize: int
    #: DLPack device type (1 = CPU; CAI memory is reported as CUDA, 2)
    device: int
    #: what must stay alive while the memory is used (the exporter, the capsule)
    owner: Any


def is_dlpack(obj: Any) -> bool:
    try:
        return hasattr(obj, "__dlpack__")
    except Exception:   # a property that raises: not an exporter
        return False


def is_cai(obj: Any) -> bool:
    try:
        return hasattr(obj, "__cuda_array_interface__")
    except Exception:
        return False


# -- DLPack -----------------------------------------------------------------------------
def _contiguous(shape, strides, ndim: int, unit: int, fortran: bool) -> bool:
    """Whether ``strides`` (None: C order) describe a dense C (or Fortran) layout, ignoring
    dimensions of size 1."""
    if strides is None:
        return not fortran or ndim <= 1
    order = range(ndim) if fortran else range(ndim - 1, -1, -1)
    expected = unit
    for i in order:
        dim = shape[i]
        if dim > 1 and strides[i] != expected:
            return False
        expected *= dim
    return True


def from_dlpack(obj: Any, writable: bool, what: str) -> Exported:
    """The memory of a DLPack exporter (``__dlpack__`` + ``__dlpack_device__``)."""
    try:
        dlpack = obj.__dlpack__
        device_fn = obj.__dlpack_device__
    except AttributeError:
        raise NotABufferError(f"{what}: {type(obj).__name__} has __dlpack__ but no "
                              f"__dlpack_device__; it is not a DLPack exporter") from None
    device = device_fn()
    device_type, device_id = device            # TypeError / ValueError, as mpi4py
    if not isinstance(device_type, int) or not isinstance(device_id, int):
        raise TypeError(f"{what}: __dlpack_device__() returned {device!r}; expected "
                        f"(device_type, device_id), two ints")
    try:                                      # DLPack >= 1.0
        kwargs = {"max_version": (1, 0), "copy": False}
        if device_type != DEVICE_CPU:
            kwargs["stream"] = -1
        capsule = dlpack(**kwargs)
        major, name = 1, b"dltensor_versioned"
    except TypeError:                         # a 0.x exporter: no keywords
        capsule = dlpack() if device_type == DEVICE_CPU else dlpack(stream=-1)
        major, name = 0, b"dltensor"
    if capsule is None or not _capsule_is_valid(capsule, name):
        raise BufferAccessError(f"{what}: {type(obj).__name__}.__dlpack__() did not return a "
                                f"valid (unused) {name.decode()} capsule")
    pointer = _capsule_pointer(capsule, name)
    readonly = False
    if major >= 1:
        managed = _ManagedVersioned.from_address(pointer)
        if managed.version.major < 1:
            raise BufferAccessError(f"{what}: DLPack capsule of version "
                                    f"{managed.version.major}.{managed.version.minor} in a "
                                    f"versioned capsule; expected 1.x")
        readonly = bool(managed.flags & _READ_ONLY_FLAG)
        tensor = managed.dl_tensor
    else:
        tensor = _Managed.from_address(pointer).dl_tensor
    ndim = tensor.ndim
    if ndim < 0:
        raise BufferAccessError(f"{what}: DLPack tensor with a negative number of dimensions")
    if ndim > 0 and not tensor.shape:
        raise BufferAccessError(f"{what}: DLPack tensor with {ndim} dimensions but no shape")
    shape = [tensor.shape[i] for i in range(ndim)]
    strides = [tensor.strides[i] for i in range(ndim)] if tensor.strides else None
    if any(d < 0 for d in shape):
        raise BufferAccessError(f"{what}: DLPack tensor with a negative dimension {shape}")
    if strides is not None and any(s < 0 for s in strides):
        raise BufferAccessError(f"{what}: DLPack tensor with negative strides {strides}")
    if not (_contiguous(shape, strides, ndim, 1, False)
            or _contiguous(shape, strides, ndim, 1, True)):
        raise BufferAccessError(f"{what}: DLPack tensor is not contiguous (shape {shape}, "
                                f"strides {strides}); pass a contiguous array")
    if readonly and writable:
        raise BufferAccessError(f"{what}: the DLPack tensor is read-only; a receive needs a "
                                f"writable buffer")
    code, bits, lanes = tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes
    count = 1
    for d in shape:
        count *= d
    nbytes = count * ((bits * lanes + 7) // 8)
    fmt, itemsize = _dlpack_format(code, bits, lanes)
    address = (tensor.data or 0) + tensor.byte_offset
    return Exported(address, nbytes, readonly, fmt, itemsize, device_type, (obj, capsule))


def _dlpack_format(code: int, bits: int, lanes: int) -> Tuple[str, int]:
    """The element format and item size of a DLPack dtype ("B", 1 when it has none)."""
    fmt = None
    if lanes != 1:
        if code == _FLOAT and lanes == 2 and bits in (32, 64, 8 * _C_SIZES["g"]):
            fmt = "Z" + _float_format(bits)
            return fmt, bits // 8 * 2
        return "B", 1
    if code == _BOOL and bits == 8:
        fmt = "?"
    elif code in (_INT, _UINT):
        fmt = _int_format(bits, code == _INT)
    elif code == _FLOAT:
        fmt = _float_format(bits)
    elif code == _COMPLEX and bits % 2 == 0:
        half = _float_format(bits // 2)
        fmt = None if half is None else "Z" + half
    if fmt is None:
        return "B", 1
    return fmt, (bits + 7) // 8


# -- __cuda_array_interface__ -------------------------------------------------------------
def _cai_format(kind: str, itemsize: int) -> str:
    fmt = None
    if kind == "b" and itemsize == 1:
        fmt = "?"
    elif kind in "iu":
        fmt = _int_format(8 * itemsize, kind == "i")
    elif kind == "f":
        fmt = _float_format(8 * itemsize)
    elif kind == "c" and itemsize % 2 == 0:
        half = _float_format(4 * itemsize)
        fmt = None if half is None else "Z" + half
    return fmt or "B"


def from_cai(obj: Any, writable: bool, what: str) -> Exported:
    """The memory of an object with ``__cuda_array_interface__`` (any version)."""
    cai = obj.__cuda_array_interface__
    if not isinstance(cai, dict):
        raise TypeError(f"{what}: __cuda_array_interface__ is {type(cai).__name__}, "
                        f"expected a dict")
    data, typestr, shape = cai["data"], cai["typestr"], cai["shape"]   # KeyError if missing
    strides, descr, mask = cai.get("strides"), cai.get("descr"), cai.get("mask")
    if not isinstance(data, tuple):
        raise TypeError(f"{what}: __cuda_array_interface__['data'] is "
                        f"{type(data).__name__}, expected (pointer, read_only)")
    if len(data) != 2:
        raise ValueError(f"{what}: __cuda_array_interface__['data'] has {len(data)} items, "
                         f"expected (pointer, read_only)")
    pointer, readonly = data
    if not isinstance(typestr, str):
        raise TypeError(f"{what}: __cuda_array_interface__['typestr'] is "
                        f"{type(typestr).__name__}, expected a string such as '<f8'")
    if not isinstance(shape, tuple):
        raise TypeError(f"{what}: __cuda_array_interface__['shape'] is "
                        f"{type(shape).__name__}, expected a tuple")
    if strides is not None and not isinstance(strides, tuple):
        raise TypeError(f"{what}: __cuda_array_interface__['strides'] is "
                        f"{type(strides).__name__}, expected a tuple or None")
    if descr is not None and not isinstance(descr, list):
        raise TypeError(f"{what}: __cuda_array_interface__['descr'] is "
                        f"{type(descr).__name__}, expected a list or None")
    count = 1
    for d in shape:
        count *= int(d)
    if pointer is None and count == 0:
        pointer = 0
    address = int(pointer)
    byteorder, kind = typestr[:1], typestr[1:2]
    itemsize = int(typestr[2:])            # ValueError for a malformed size, as mpi4py
    native = "<" if sys.byteorder == "little" else ">"
    if byteorder in "<>" and byteorder != native:
        raise BufferAccessError(f"{what}: __cuda_array_interface__ typestr {typestr!r} has "
                                f"a non-native byte order")
    if byteorder not in ("<", ">", "|"):
        raise BufferAccessError(f"{what}: __cuda_array_interface__ typestr {typestr!r} has an "
                                f"unrecognized byte order")
    if mask is not None:
        raise BufferAccessError(f"{what}: cannot use a masked __cuda_array_interface__ array")
    if count < 0:
        raise BufferAccessError(f"{what}: __cuda_array_interface__ shape {shape} gives a "
                                f"negative size")
    if strides is not None and not (_contiguous(shape, strides, len(shape), itemsize, False)
                                    or _contiguous(shape, strides, len(shape), itemsize, True)):
        raise BufferAccessError(f"{what}: __cuda_array_interface__ buffer is not contiguous "
                                f"(shape {shape}, strides {strides}, itemsize {itemsize})")
    if readonly and writable:
        raise BufferAccessError(f"{what}: the __cuda_array_interface__ buffer is read-only; a "
                                f"receive needs a writable buffer")
    if descr is not None and (len(descr) != 1 or descr[0] != ("", typestr)):
        warnings.warn("__cuda_array_interface__: ignoring 'descr' key", RuntimeWarning,
                      stacklevel=4)
    fmt = _cai_format(kind, itemsize)
    return Exported(address, count * itemsize, bool(readonly), fmt,
                    itemsize if fmt != "B" else 1, DEVICE_CUDA, obj)


# -- reaching the memory -----------------------------------------------------------------
_maps: List[Tuple[int, int, bytes]] = []     # (start, end, permissions), sorted
_maps_starts: List[int] = []


def _read_maps() -> bool:
    global _maps, _maps_starts
    try:
        with open("/proc/self/maps", "rb") as f:
            lines = f.read().splitlines()
    except OSError:
        return False
    maps = []
    for line in lines:
        span, perms = line.split(b" ", 2)[:2]
        lo, hi = (int(x, 16) for x in span.split(b"-"))
        maps.append((lo, hi, perms))
    maps.sort()
    _maps, _maps_starts = maps, [m[0] for m in maps]
    return True


def _covered(address: int, nbytes: int, need: bytes) -> bool:
    pos, end = address, address + nbytes
    i = bisect.bisect_right(_maps_starts, pos) - 1
    while 0 <= i < len(_maps):
        lo, hi, perms = _maps[i]
        if not lo <= pos < hi or perms[:len(need)] != need:
            return False
        pos = hi
        if pos >= end:
            return True
        i += 1
    return False


def host_accessible(address: int, nbytes: int, writable: bool) -> bool:
    """Whether ``[address, address + nbytes)`` is mapped readable (and writable if asked) in
    this process (Linux ``/proc/self/maps``, re-read when the range is not in the copy read
    last; False where that cannot be checked)."""
    if nbytes <= 0:
        return True
    need = b"rw" if writable else b"r"
    if _maps and _covered(address, nbytes, need):
        return True
    return _read_maps() and _covered(address, nbytes, need)


def array_at(ex: Exported, what: str, writable: bool) -> np.ndarray:
    """A flat uint8 numpy array over ``ex``'s memory (read-only if ``ex`` is), whose base
    keeps ``ex.owner`` alive. Memory of a device other than the CPU is used only if the
    process can reach it (:func:`host_accessible`)."""
    if ex.nbytes == 0:
        arr = np.empty(0, np.uint8)
    else:
        if ex.address == 0:
            raise BufferAccessError(f"{what}: the exported buffer of {ex.nbytes} bytes has a "
                                    f"NULL data pointer")
        if ex.device not in _HOST_DEVICES and not host_accessible(ex.address, ex.nbytes,
                                                                    writable and not ex.readonly):
            raise BufferAccessError(
                f"{what}: the buffer's memory (device type {ex.device}, {ex.nbytes} bytes at "
                f"0x{ex.address:x}) is not mapped in this process; minimpi moves data through "
                f"host memory, so pass host, pinned or managed memory (or copy to the host)")
        raw = (ctypes.c_ubyte * ex.nbytes).from_address(ex.address)
        raw._minimpi_owner = ex.owner      # the exporter lives as long as any view of it
        arr = np.frombuffer(raw, dtype=np.uint8)
    if ex.readonly:
        arr.flags.writeable = False
    return arr
