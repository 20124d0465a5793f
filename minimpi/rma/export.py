"""The buffer protocol on ``MPI.Win``: ``memoryview(win)``, ``np.frombuffer(win)``,
``np.asarray(win)`` see this rank's window memory, as with mpi4py (whose ``Win`` fills a
PEP 3118 buffer with the window's base and size: one dimension of unsigned bytes,
writable; a dynamic window has none, 0 bytes).

Python 3.12 and later let a class export its memory with ``__buffer__`` (PEP 688), which
``Win`` defines. Before 3.12 a class written in Python cannot: the interpreter asks the
C-level ``bf_getbuffer`` slot of the object's type, and a class statement leaves it empty.
:func:`install` fills that slot of ``Win``'s type (and so of the subclasses made after it)
with a small C-callable function made by ``ctypes``, which hands the interpreter's own
``PyBuffer_FillInfo`` the window's address and size. It writes only into the type's own
buffer-slot table, after checking that the table is where CPython puts it (inside the
type object, both entries empty); anywhere else (another interpreter, a layout it does not
recognise) it does nothing and says so (:data:`ACTIVE` False, :func:`reason`):
``win.tomemory()`` then gives the same memory.

The view holds a reference to the window handle, which holds the memory: the view stays
valid after ``Win.Free`` (the memory is kept until the last view and handle are gone).
Limits of the pre-3.12 path: it cannot raise, so a null or freed window exports 0 bytes
instead of raising ``MPI.Exception`` as under 3.12 and mpi4py.
"""
from __future__ import annotations

import ctypes
import platform
import sys
from typing import Any, Callable, Optional, Tuple

#: whether ``Win``'s type exports buffers (set by :func:`install`)
ACTIVE = False
_why_not = "not installed"
_keep: list = []        # the C callback must outlive the type

#: the slot ``tp_as_buffer`` is entry 20 of ``PyTypeObject`` (after ob_refcnt, ob_type,
#: ob_size, tp_name, tp_basicsize, tp_itemsize, tp_dealloc, tp_vectorcall_offset,
#: tp_getattr, tp_setattr, tp_as_async, tp_repr, tp_as_number, tp_as_sequence,
#: tp_as_mapping, tp_hash, tp_call, tp_str, tp_getattro, tp_setattro) in CPython 3.8-3.13
_AS_BUFFER_INDEX = 20
_HEAPTYPE = 1 << 9


def reason() -> str:
    """Why ``memoryview(win)`` does not work here ("" when it does)."""
    return "" if ACTIVE else _why_not


def install(cls: type, memory_of: Callable[[Any], Tuple[int, int]]) -> bool:
    """Make ``cls`` (and its later subclasses) export a buffer: ``memory_of(obj)`` gives
    ``(address, nbytes)`` of ``obj``'s memory and must not raise. Python >= 3.12: nothing to
    do (the class defines ``__buffer__``). True when instances export buffers."""
    global ACTIVE, _why_not
    if sys.version_info >= (3, 12):
        ACTIVE = hasattr(cls, "__buffer__")
        _why_not = "" if ACTIVE else f"{cls.__name__} defines no __buffer__"
        return ACTIVE
    problem = _slot_problem(cls)
    if problem is not None:
        _why_not = problem
        return False
    fill = ctypes.pythonapi.PyBuffer_FillInfo
    fill.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.c_void_p, ctypes.c_ssize_t,
                     ctypes.c_int, ctypes.c_int]
    fill.restype = ctypes.c_int
    getbuffer_type = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_void_p,
                                       ctypes.c_int)

    def getbuffer(obj: Any, view: int, flags: int) -> int:
        try:
            address, nbytes = memory_of(obj)
        except BaseException:     # an exception cannot leave a C slot: export nothing
            address, nbytes = 0, 0
        # writable, format "B", one dimension: PyBuffer_FillInfo cannot fail for these
        return fill(view, obj, address or None, nbytes, 0, flags)

    callback = getbuffer_type(getbuffer)
    _keep.append(callback)
    procs = _procs(cls)
    procs[0] = ctypes.cast(callback, ctypes.c_void_p).value     # bf_getbuffer
    ACTIVE, _why_not = True, ""
    return True


def _procs(cls: type) -> Any:
    """The type's ``PyBufferProcs`` table (bf_getbuffer, bf_releasebuffer)."""
    table = ctypes.c_void_p.from_address(
        id(cls) + _AS_BUFFER_INDEX * ctypes.sizeof(ctypes.c_void_p)).value
    return (ctypes.c_void_p * 2).from_address(table)


def _slot_problem(cls: type) -> Optional[str]:
    """Why the buffer slot of ``cls`` cannot be filled safely (None: it can)."""
    if platform.python_implementation() != "CPython":
        return f"{platform.python_implementation()} is not CPython"
    if sys.version_info < (3, 8):
        return "Python older than 3.8"
    if not cls.__flags__ & _HEAPTYPE:
        return f"{cls.__name__} is not a class made by a class statement"
    pointer = ctypes.c_void_p.from_address(
        id(cls) + _AS_BUFFER_INDEX * ctypes.sizeof(ctypes.c_void_p)).value
    # a heap type's table lives inside the type object itself (PyHeapTypeObject.as_buffer)
    if pointer is None or not id(cls) < pointer < id(cls) + type.__basicsize__:
        return "the type's buffer table is not where CPython keeps it"
    procs = (ctypes.c_void_p * 2).from_address(pointer)
    if procs[0] is not None or procs[1] is not None:
        return f"{cls.__name__} already exports buffers"
    return None
