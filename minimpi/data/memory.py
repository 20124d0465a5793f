"""``MPI.buffer`` (alias ``MPI.memory``): a byte view of memory, as mpi4py's.

``MPI.Alloc_mem`` returns one; ``MPI.buffer(obj)`` / ``buffer.frombuffer(obj)`` views any
buffer minimpi accepts (the buffer protocol, DLPack, ``__cuda_array_interface__``);
``buffer.fromaddress(address, nbytes)`` views raw memory (from ``MPI.Get_address``);
``buffer.allocate(nbytes)`` allocates. It has mpi4py's attributes (``address``, ``nbytes``,
``readonly``, ``obj``, ``format``, ``itemsize``) and methods (``cast``, ``tobytes``,
``toreadonly``, ``release``), indexes as unsigned bytes, and works as a message buffer
(its datatype is ``MPI.BYTE``).

It is a numpy ``uint8`` array subclass, which is what gives it the buffer protocol in pure
Python (``memoryview(buf)``, ``np.asarray(buf)``...). Memory exported from a device other
than the CPU (DLPack device type != CPU, or any ``__cuda_array_interface__``) is reachable
for communication only if the process can map it (see :mod:`minimpi.data.foreign`), and,
as in mpi4py, the view refuses host-side access (``cast``, ``tobytes``, indexing) with
``BufferError``.
"""
from __future__ import annotations

import operator
from typing import Any, Optional, Sequence

import numpy as np

from ..constants import BUFFER_AUTOMATIC
from ..errors import BufferAccessError
from .buffers import export, not_contiguous
from .foreign import DEVICE_CPU, Exported, array_at, from_cai, from_dlpack, is_cai, is_dlpack

_NOTHING = object()   # MPI.buffer()'s "no argument" (None is refused, as in mpi4py)


class buffer(np.ndarray):  # noqa: N801 - mpi4py's name
    """A contiguous byte view of memory (``MPI.buffer``); see the module docstring."""

    #: minimpi's buffer parser reads these as bytes (MPI.BYTE), as mpi4py does
    _mpi_bytes = True

    def __new__(cls, obj: Any = _NOTHING) -> "buffer":
        if obj is _NOTHING:                   # MPI.buffer(): an empty one at address 0
            view = cls._wrap(np.empty(0, np.uint8), None, DEVICE_CPU)
            view._null_address = True
            return view
        return cls.frombuffer(obj)

    @classmethod
    def _wrap(cls, raw: np.ndarray, obj: Any, device: int) -> "buffer":
        view = raw.view(cls)
        view._obj = obj
        view._device = device
        view._released = False
        return view

    def __array_finalize__(self, parent: Any) -> None:
        # slices and views share the parent's exporter and device
        self._obj = getattr(parent, "_obj", None)
        self._device = getattr(parent, "_device", DEVICE_CPU)
        self._released = getattr(parent, "_released", False)

    # -- constructors ------------------------------------------------------------------
    @staticmethod
    def allocate(nbytes: int, clear: bool = False) -> "buffer":
        """A new buffer of ``nbytes`` bytes (zeroed when ``clear``; always zeroed here). Its
        ``obj`` is the ``bytearray`` that owns the memory, as in mpi4py."""
        n = operator.index(nbytes)
        if n < 0:
            raise ValueError(f"buffer.allocate: expected nbytes >= 0, got {n}")
        owner = bytearray(n)
        return buffer._wrap(np.frombuffer(owner, np.uint8), owner, DEVICE_CPU)

    @staticmethod
    def frombuffer(obj: Any, readonly: bool = False) -> "buffer":
        """A byte view of ``obj``'s memory (read-only if ``obj`` is, or if asked)."""
        if obj is None or isinstance(obj, (int, float, list, tuple)):
            raise TypeError(f"MPI.buffer: expected an object with the buffer protocol "
                            f"(bytes, bytearray, numpy array...), got {type(obj).__name__}")
        if isinstance(obj, buffer):
            raw, device = obj.view(np.ndarray), obj._device
        elif not isinstance(obj, np.ndarray) and _no_buffer_protocol(obj) and \
                (is_dlpack(obj) or is_cai(obj)):
            ex = (from_dlpack if is_dlpack(obj) else from_cai)(obj, False, "MPI.buffer")
            raw, device = array_at(ex, "MPI.buffer", False), ex.device
        else:
            arr, _ = export(obj, writable=False, call="MPI.buffer", arg="obj")
            if not (arr.flags.c_contiguous or arr.flags.f_contiguous):
                raise not_contiguous(arr, obj, "MPI.buffer", "obj")
            raw, device = arr.reshape(-1, order="A").view(np.uint8), DEVICE_CPU
        view = buffer._wrap(raw, obj, device)
        if readonly:
            view.flags.writeable = False
        return view

    @staticmethod
    def fromaddress(address: int, nbytes: int, readonly: bool = False) -> "buffer":
        """A byte view of ``nbytes`` bytes at ``address`` (memory this process owns, e.g.
        from ``MPI.Get_address``; the range must be mapped, checked on Linux)."""
        address, nbytes = operator.index(address), operator.index(nbytes)
        if nbytes < 0:
            raise ValueError(f"buffer.fromaddress: expected nbytes >= 0, got {nbytes}")
        if address == 0 and nbytes > 0:
            raise ValueError("buffer.fromaddress: a NULL address with a nonzero size")
        ex = Exported(address, nbytes, readonly, "B", 1, 0, None)
        view = buffer._wrap(array_at(ex, "buffer.fromaddress", not readonly), None, DEVICE_CPU)
        if address == 0:
            view._null_address = True     # numpy gives an empty array a pointer of its own
        return view

    def __bool__(self) -> bool:
        """As mpi4py's buffer: true when it holds at least one byte (not numpy's
        element-wise truth, which refuses arrays of several bytes)."""
        return self.size > 0

    # -- mpi4py's attributes -------------------------------------------------------------
    @property
    def address(self) -> int:
        """The address of the first byte (0 for ``buffer()``, ``fromaddress(0, 0)`` and a
        released buffer, as in mpi4py)."""
        if getattr(self, "_null_address", False) or self._released:
            return 0
        return int(self.__array_interface__["data"][0] or 0)

    @property
    def nbytes(self) -> int:  # type: ignore[override]
        """The size in bytes (0 once released)."""
        return 0 if self._released else int(np.ndarray.nbytes.__get__(self))

    @property
    def obj(self) -> Any:
        """The object whose memory this is (None for allocated memory)."""
        return self._obj

    @property
    def readonly(self) -> bool:
        """Whether the memory is read-only (False once released, as in mpi4py)."""
        return not self._released and not self.flags.writeable

    @property
    def format(self) -> str:
        return "B"

    # -- host access (refused for device memory, as mpi4py does) -------------------------
    def _host(self, what: str) -> None:
        if self._released:
            raise ValueError(f"MPI.buffer.{what}: operation on a released buffer")
        if self._device != DEVICE_CPU:
            raise BufferAccessError(f"MPI.buffer.{what}: the memory belongs to device type "
                                    f"{self._device}, not the host")

    def __getitem__(self, item: Any) -> Any:
        self._host("__getitem__")
        _check_index(item, len(self), "__getitem__")
        value = super().__getitem__(item)
        return int(value) if isinstance(value, np.integer) else value

    def __setitem__(self, item: Any, value: Any) -> None:
        self._host("__setitem__")
        _check_index(item, len(self), "__setitem__")
        if not self.flags.writeable:
            raise TypeError("MPI.buffer.__setitem__: the buffer is read-only")
        if isinstance(value, (bytes, bytearray, memoryview)):
            value = np.frombuffer(value, np.uint8)
        super().__setitem__(item, value)

    def __delitem__(self, item: Any) -> None:
        raise NotImplementedError("MPI.buffer has a fixed size: its bytes cannot be deleted")

    def cast(self, format: str, shape: Optional[Sequence[int]] = None) -> memoryview:
        """A memoryview of the bytes as ``format`` items (``memoryview.cast``)."""
        self._host("cast")
        mv = memoryview(self.view(np.ndarray))
        return mv.cast(format) if shape is None else mv.cast(format, list(shape))

    def tobytes(self, order: Any = None) -> bytes:
        """The bytes, copied (``order`` is accepted for mpi4py's signature; bytes have none)."""
        self._host("tobytes")
        return self.view(np.ndarray).tobytes()

    def toreadonly(self) -> "buffer":
        """A read-only view of the same memory."""
        view = self.view(buffer)
        view.flags.writeable = False
        return view

    def release(self) -> None:
        """Drop the reference to the exporter; later host access raises ValueError."""
        self._obj = None
        self._released = True

    def __repr__(self) -> str:
        return f"<MPI.buffer address=0x{self.address:x} nbytes={self.nbytes} " \
               f"readonly={self.readonly}>"

    __str__ = __repr__

    def __reduce__(self):
        raise TypeError("MPI.buffer views memory and cannot be pickled; pickle its bytes "
                        "(buf.tobytes()) instead")


def _check_index(item: Any, length: int, call: str) -> None:
    """mpi4py's buffer indexing: an integer in range, or a slice with step 1 (a buffer is
    contiguous bytes, so strided views are refused with IndexError)."""
    if isinstance(item, slice):
        if item.step not in (None, 1):
            raise IndexError(f"MPI.buffer.{call}: slices must have step 1, got {item.step}")
        return
    try:
        i = operator.index(item)
    except TypeError:
        raise TypeError(f"MPI.buffer.{call}: expected an integer or a slice, got "
                        f"{type(item).__name__}") from None
    if not -length <= i < length:
        raise IndexError(f"MPI.buffer.{call}: index {i} out of range for {length} bytes")


def _no_buffer_protocol(obj: Any) -> bool:
    try:
        memoryview(obj)
    except TypeError:
        return True
    return False


memory = buffer


def attachable_buffer(buf: Any, call: str) -> Any:
    """``buf`` if it can be attached for buffered sends (``Attach_buffer``): None,
    ``MPI.BUFFER_AUTOMATIC`` or writable memory (buffer protocol, DLPack or CUDA array
    interface). Memory that is read-only is a BufferError,
    an object that is no memory at all a TypeError, as in mpi4py."""
    if buf is None or buf is BUFFER_AUTOMATIC:
        return buf
    if isinstance(buf, buffer):
        readonly = buf.readonly
    elif _no_buffer_protocol(buf) and (is_dlpack(buf) or is_cai(buf)):
        readonly = (from_dlpack if is_dlpack(buf) else from_cai)(buf, False, call).readonly
    else:
        try:
            view = memoryview(buf)
        except TypeError:
            raise TypeError(f"{call}: expected writable memory (bytearray, numpy array, "
                            f"MPI.buffer) or MPI.BUFFER_AUTOMATIC, got "
                            f"{type(buf).__name__}") from None
        readonly = view.readonly
        if not view.contiguous:       # (mpi4py: BufferError too)
            raise not_contiguous(np.asarray(view), buf, call, "buf")
    if readonly:
        raise BufferError(f"{call}: the buffer is read-only; buffered sends need writable "
                          f"memory")
    return buf


def alloc_mem(size: int) -> buffer:
    """``MPI.Alloc_mem``: zeroed memory of ``size`` bytes, as an ``MPI.buffer``."""
    return buffer.allocate(size, clear=True)

