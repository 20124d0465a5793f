"""mpi4py's ``MPI`` namespace over minimpi: ``from minimpi import MPI``.

Inside processes started by ``minimpi run``, ``from mpi4py import MPI`` is this module too
(see ``minimpi/_shim``). Importing it initializes the runtime, as importing ``mpi4py.MPI``
does, unless ``mpi4py.rc.initialize`` is False (then ``Init()`` or the first use of
``COMM_WORLD`` does).

What is refused (``UnsupportedError``, a ``NotImplementedError`` naming the feature)
(``File`` and ``Register_datarep`` are minimpi/io, ``Win`` minimpi/rma): dynamic processes (``Spawn``, ``Connect``...), user error classes
and ``MPI_T``. Intercommunicators are ``minimpi.dynamic.Intercomm``; sessions are
``minimpi.runtime.session``, generalized requests ``minimpi.comm.grequest``.

``Get_version()`` answers MPI 4.1: the MPI-4 calls mpi4py code uses (``Isendrecv``,
``Idup``, ``Split_type`` kinds, ``Create_from_group``, per-communicator buffer attach, request
status queries, ``Get_hw_resource_info``, persistent collectives, partitioned point-to-point,
sessions) are implemented, within the refusals above.
"""
from __future__ import annotations

import socket as _socket
import sys as _sys
import threading as _threading
import time as _time

# Everything imported here without a leading underscore is a public name of this module
# (mpi4py's ``MPI`` namespace), hence the F401 waivers. The order matters (see the keyvals
# below), so the import sorter leaves this file alone.
# isort: skip_file
from . import __version__ as _minimpi_version
from .comm.communicator import Cartcomm, Comm, Intracomm, Topocomm  # noqa: F401
from .comm.communicator import Distgraphcomm, Graphcomm  # noqa: F401
from .comm.graph import UNWEIGHTED, WEIGHTS_EMPTY  # noqa: F401
from .dynamic import Intercomm  # noqa: F401
from .dynamic import close_port as Close_port, lookup_name as Lookup_name  # noqa: F401
from .dynamic import open_port as Open_port, publish_name as Publish_name  # noqa: F401
from .dynamic import unpublish_name as Unpublish_name  # noqa: F401
from .comm.management import (COMM_TYPE_HW_GUIDED, COMM_TYPE_HW_UNGUIDED,  # noqa: F401
                               COMM_TYPE_RESOURCE_GUIDED, COMM_TYPE_SHARED)
from .comm.pt2pt import flush_buffered as _flush_buffered
from .comm.communicator import COMM_NULL  # noqa: F401
from .comm.group import GROUP_EMPTY, GROUP_NULL, Group  # noqa: F401
from .comm.handle_types import (ERRHANDLER_NULL, ERRORS_ABORT, ERRORS_ARE_FATAL,  # noqa: F401
                           ERRORS_RETURN, INFO_ENV, INFO_NULL, Errhandler, Info, refusing)
from .comm.message import MESSAGE_NO_PROC, MESSAGE_NULL, Message  # noqa: F401
from .comm.persistent import Prequest  # noqa: F401
from .comm.grequest import Grequest  # noqa: F401
from .comm.topology import TopologyError as _TopologyError  # noqa: F401
from .comm.topology import compute_dims as Compute_dims  # noqa: F401
from .constants import *  # noqa: F401,F403
from .constants import BOTTOM, BUFFER_AUTOMATIC, IN_PLACE  # noqa: F401
from .constants import THREAD_MULTIPLE as _THREAD_PROVIDED
from .data.datatypes import *  # noqa: F401,F403
from .data.datatypes import PREDEFINED as _PREDEFINED_TYPES
from .data.datatypes import TYPECODES as _typedict  # noqa: F401  (mpi4py's private helpers)
from .data.datatypes import typealign as _typealign, typecode as _typecode  # noqa: F401
from .data.ops import *  # noqa: F401,F403
from .data.ops import Op  # noqa: F401
from .data.buffers import get_address as Get_address  # noqa: F401
from .data.buffers import aint_add as Aint_add, aint_diff as Aint_diff  # noqa: F401
from .data.memory import alloc_mem as _alloc_mem, attachable_buffer, buffer, memory  # noqa: F401
from .data.serialization import Pickle  # noqa: F401
from .errors import *  # noqa: F401,F403
from .errors import MinimpiError as Exception  # noqa: A001,F401  (mpi4py's name)
from .errors import UnsupportedError, error_string as _error_string  # noqa: F401
from .errors import USER_ERRORS as _USER_ERRORS, error_class_of as _error_class_of
from .p2p.request import REQUEST_NULL, Request, Status  # noqa: F401
from .runtime import world as _runtime

# Attribute keyvals for Comm.Get_attr (after the star imports: constants.TAG_UB is the value,
# MPI.TAG_UB the keyval, as in mpi4py).
from .comm.communicator import (KEYVAL_APPNUM as APPNUM, KEYVAL_HOST as HOST,  # noqa: E402,F401
                                KEYVAL_IO as IO, KEYVAL_LASTUSEDCODE as LASTUSEDCODE,
                                KEYVAL_TAG_UB as TAG_UB, KEYVAL_UNIVERSE_SIZE as UNIVERSE_SIZE,
                                KEYVAL_WTIME_IS_GLOBAL as WTIME_IS_GLOBAL)

# -- every predefined datatype under its MPI name (``getattr(MPI, "2INT")`` included) --------
globals().update(_PREDEFINED_TYPES)

# -- version -------------------------------------------------------------------------------------
VERSION = 4
SUBVERSION = 1


def Get_version() -> tuple:
    """The MPI standard version whose calls minimpi answers: ``(4, 1)`` (see the module
    docstring for what is refused)."""
    return (VERSION, SUBVERSION)


def get_vendor() -> tuple:
    """mpi4py's ``MPI.get_vendor()``: ``("minimpi", (major, minor, micro))``.

    The name matches none of the MPI implementations mpi4py's test helpers special-case
    (MPICH, Open MPI, Intel MPI...), so no workaround meant for those fires here.
    """
    parts = [int(p) if p.isdigit() else 0 for p in _minimpi_version.split(".")[:3]]
    return ("minimpi", tuple(parts + [0] * (3 - len(parts))))


def Get_library_version() -> str:
    return (f"minimpi {_minimpi_version} (pure Python; mpi4py-compatible subset of MPI "
            f"{VERSION}.{SUBVERSION})")


# -- error classes, numbered as in MPICH (those errors.py does not define) ----------------------
ERR_NAME = 33
ERR_NO_MEM = 34
ERR_NOT_SAME = 35
ERR_PORT = 38
ERR_SERVICE = 41
ERR_SPAWN = 42
ERR_WIN = 45
ERR_BASE = 46
ERR_LOCKTYPE = 47
ERR_KEYVAL = 48
ERR_RMA_CONFLICT = 49
ERR_RMA_SYNC = 50
ERR_SIZE = 51
ERR_DISP = 52
ERR_ASSERT = 53
ERR_RMA_RANGE = 55
ERR_RMA_ATTACH = 56
ERR_RMA_SHARED = 57
ERR_RMA_FLAVOR = 58


def Get_error_class(errorcode: int) -> int:
    """The error class of ``errorcode`` (a user code: the class it was added to)."""
    return _error_class_of(int(errorcode))


def Get_error_string(errorcode: int) -> str:
    return _error_string(int(errorcode))


# -- other constants -------------------------------------------------------------------------
KEYVAL_INVALID = -1
MAX_PROCESSOR_NAME = 256
from .errors import MAX_ERROR_STRING  # noqa: E402,F401
MAX_PORT_NAME = 1024
MAX_INFO_KEY = 255
MAX_INFO_VAL = 1024
MAX_OBJECT_NAME = 128
MAX_DATAREP_STRING = 128
MAX_LIBRARY_VERSION_STRING = 8192
BSEND_OVERHEAD = 96
STATUS_IGNORE = None
STATUSES_IGNORE = None
ERRCODES_IGNORE = None
ARGV_NULL = None
ARGVS_NULL = None
DISPLACEMENTS_MIXED = 0



# -- environment -----------------------------------------------------------------------------
def _rc():
    mod = _sys.modules.get("mpi4py")
    return getattr(mod, "rc", None) if getattr(mod, "__minimpi_shim__", False) else None


def Init() -> None:
    _runtime.world_state()
    _bind_worlds()


def Init_thread(required: int = THREAD_MULTIPLE) -> int:  # noqa: F405
    """Initialize; returns the thread level provided: always ``THREAD_MULTIPLE`` (MPI allows
    more than ``required``; there is no cheaper single-threaded mode to choose).

    Any thread may call any MPI operation at any time. One engine lock serializes the
    engine's work (uncontended, about 0.1 us per call; nothing else is paid by a program
    with one thread); one thread at a time drives progress for all, and a blocking wait
    releases the engine while it sleeps, so a thread that receives does not hold up one
    that sends or computes. Python's GIL still runs one thread's Python code at a time:
    threads overlap waiting with computing, not two computations. Concurrent collectives
    on the *same* communicator remain erroneous (MPI); on different communicators (one
    ``Dup`` per thread) they are correct. Communicator creation (``Dup``, ``Split``...)
    on different communicators from several threads at once is not supported (it raises
    a clear error rather than risk two communicators on one context)."""
    Init()
    required = int(required)
    if not THREAD_SINGLE <= required <= THREAD_MULTIPLE:   # noqa: F405
        raise ValueError(f"MPI.Init_thread(required={required}): expected one of "
                         f"THREAD_SINGLE (0), THREAD_FUNNELED (1), THREAD_SERIALIZED (2), "
                         f"THREAD_MULTIPLE (3)")
    return _THREAD_PROVIDED


def Query_thread() -> int:
    """The thread level provided: ``THREAD_MULTIPLE`` (see :func:`Init_thread`)."""
    return _THREAD_PROVIDED


def Is_thread_main() -> bool:
    return _threading.current_thread() is _threading.main_thread()


def Finalize() -> None:
    _runtime.finalize()


def Is_initialized() -> bool:
    return _runtime.initialized()


def Is_finalized() -> bool:
    return _runtime.finalized()


def Wtime() -> float:
    return _time.perf_counter()


def Wtick() -> float:
    return _time.get_clock_info("perf_counter").resolution


def Get_processor_name() -> str:
    return _socket.gethostname()


def Pcontrol(level: int) -> None:
    """Profiling control: accepted and ignored."""


_attached: list = []


def Attach_buffer(buf) -> None:
    """Attach a buffer (or ``MPI.BUFFER_AUTOMATIC``) for buffered sends. minimpi's buffered
    sends copy their data themselves, so it is only kept, for ``Detach_buffer`` (read-only
    memory is a BufferError, as in mpi4py)."""
    _attached[:] = [attachable_buffer(buf, "MPI.Attach_buffer")]


def Detach_buffer():
    """Wait until every buffered send of this process is delivered, then return the
    attached buffer (None if none)."""
    Flush_buffer()
    return _attached.pop() if _attached else None


def Flush_buffer() -> None:
    """Wait until every buffered send of this process has been delivered (MPI 4.1)."""
    _flush_buffered().Wait()


def Iflush_buffer() -> Request:
    """A request complete once every buffered send of this process is delivered."""
    return _flush_buffered()


def Alloc_mem(size: int, info=None) -> buffer:
    """``size`` bytes of zeroed memory, as an ``MPI.buffer`` (``.address``, ``.nbytes``)."""
    return _alloc_mem(size)


def Free_mem(mem) -> None:
    """Release memory from ``Alloc_mem`` (the view is released; Python frees the bytes)."""
    if isinstance(mem, buffer):
        mem.release()


def Get_hw_resource_info() -> Info:
    """The hardware resources minimpi knows about this process (MPI 4.1): the shared-memory
    level (its host), the one ``Split_type`` guides by."""
    return Info.Create({"mpi_hw_resource_type": "mpi_shared_memory"})


#: ``MPI.pickle``: the pickler of ``MPI.pickle.dumps``/``loads`` (see ``Pickle``)
pickle = Pickle()


def _comm_lock_table(comm) -> dict:
    """mpi4py's per-communicator table of the locks its lowercase collectives take (one
    per collective name, made on first use)."""
    return comm.__dict__.setdefault("_lock_table", {})


# -- the rest of mpi4py 4.1.2's names (tests/unit/data/mpi4py_412_names.txt) -----------------
# Aliases mpi4py defines for names above (MPI.pyx, Datatype.pyx, File.pyx).
WIN_FLAVOR = WIN_CREATE_FLAVOR  # noqa: F405  (the keyval)
DISP_CUR = DISPLACEMENT_CURRENT  # noqa: F405
SIGNED_SHORT, SIGNED_INT, SIGNED_LONG, SIGNED_LONG_LONG = SHORT, INT, LONG, LONG_LONG  # noqa: F405
SINT8_T, SINT16_T, SINT32_T, SINT64_T = INT8_T, INT16_T, INT32_T, INT64_T  # noqa: F405
F_BOOL, F_INT, F_FLOAT, F_DOUBLE = LOGICAL, INTEGER, REAL, DOUBLE_PRECISION  # noqa: F405
F_COMPLEX = F_FLOAT_COMPLEX = COMPLEX  # noqa: F405
F_DOUBLE_COMPLEX = DOUBLE_COMPLEX  # noqa: F405
BottomType, InPlaceType, BufferAutomaticType = type(BOTTOM), type(IN_PLACE), type(BUFFER_AUTOMATIC)
# Error classes: MPICH's numbers where MPICH has the class, else the value mpi4py gives a
# class the MPI library lacks (ERR_LASTCODE); the fault-tolerance classes (ERR_PROC_FAILED,
# ERR_PROC_FAILED_PENDING, ERR_REVOKED) are MPICH's MPIX_ numbers, from minimpi.errors.
ERR_SESSION = 75
ERR_PROC_ABORTED = 76
ERR_VALUE_TOO_LARGE = 77
ERR_ERRHANDLER = ERR_ABI = ERR_LASTCODE  # noqa: F405
# Fortran status indices: where Status.py2f's list (source, tag, error, count, cancelled)
# holds each field.
F_SOURCE, F_TAG, F_ERROR, F_STATUS_SIZE = 0, 1, 2, 5
MAX_PSET_NAME_LEN = 256
MAX_STRINGTAG_LEN = 256


def _typedict_of(codes: dict) -> dict:
    """mpi4py's typecode tables: code -> predefined datatype, for the types minimpi has."""
    g = globals()
    return {code: g[name] for code, name in codes.items()
            if isinstance(g.get(name), Datatype) and g[name] != DATATYPE_NULL}  # noqa: F405


#: C types by typecode (mpi4py's ``MPI._typedict_c``; ``MPI._typedict`` is the full table)
_typedict_c = _typedict_of({
    "?": "C_BOOL", "b": "SIGNED_CHAR", "h": "SHORT", "i": "INT", "l": "LONG", "q": "LONG_LONG",
    "B": "UNSIGNED_CHAR", "H": "UNSIGNED_SHORT", "I": "UNSIGNED", "L": "UNSIGNED_LONG",
    "Q": "UNSIGNED_LONG_LONG", "f": "FLOAT", "d": "DOUBLE", "g": "LONG_DOUBLE",
    "F": "C_FLOAT_COMPLEX", "D": "C_DOUBLE_COMPLEX", "G": "C_LONG_DOUBLE_COMPLEX",
    "b1": "C_BOOL", "i1": "INT8_T", "i2": "INT16_T", "i4": "INT32_T", "i8": "INT64_T",
    "u1": "UINT8_T", "u2": "UINT16_T", "u4": "UINT32_T", "u8": "UINT64_T", "f2": "FLOAT16_T",
    "f4": "FLOAT", "c8": "C_FLOAT_COMPLEX", "f8": "DOUBLE", "c16": "C_DOUBLE_COMPLEX",
    "f16": "LONG_DOUBLE", "c32": "C_LONG_DOUBLE_COMPLEX"})
#: Fortran types by typecode (mpi4py's ``MPI._typedict_f``)
_typedict_f = _typedict_of({
    "l": "LOGICAL", "i": "INTEGER", "r": "REAL", "s": "REAL", "d": "DOUBLE_PRECISION",
    "c": "COMPLEX", "z": "DOUBLE_COMPLEX", "l1": "LOGICAL1", "l2": "LOGICAL2",
    "l4": "LOGICAL4", "l8": "LOGICAL8", "l16": "LOGICAL16", "i1": "INTEGER1",
    "i2": "INTEGER2", "i4": "INTEGER4", "i8": "INTEGER8", "i16": "INTEGER16", "r2": "REAL2",
    "r4": "REAL4", "r8": "REAL8", "r16": "REAL16", "c4": "COMPLEX4", "c8": "COMPLEX8",
    "c16": "COMPLEX16", "c32": "COMPLEX32"})


def _comm_lock(comm, key=None) -> _threading.Lock:
    """mpi4py's lock for ``comm`` and ``key`` (one per pair, made on first use; see
    ``_comm_lock_table``)."""
    return _comm_lock_table(comm).setdefault(key, _threading.Lock())


# -- user error classes, codes and strings (this process's; see errors.UserErrors) ----------
def Add_error_class() -> int:
    """A new error class, above every value used so far (``LASTUSEDCODE`` becomes it)."""
    return _USER_ERRORS.add_class()


def Add_error_code(errorclass: int) -> int:
    """A new error code of ``errorclass`` (predefined or from ``Add_error_class``)."""
    return _USER_ERRORS.add_code(errorclass)


def Add_error_string(errorcode: int, string: str) -> None:
    """Give a user error class or code its description (``Get_error_string``)."""
    _USER_ERRORS.add_string(errorcode, string)


def Remove_error_class(errorclass: int) -> None:
    """Remove a user error class (MPI 4.1): its codes and its string must be removed first."""
    _USER_ERRORS.remove_class(errorclass)


def Remove_error_code(errorcode: int) -> None:
    """Remove a user error code (MPI 4.1): its string must be removed first."""
    _USER_ERRORS.remove_code(errorcode)


def Remove_error_string(errorcode: int) -> None:
    """Remove the description of a user error class or code (MPI 4.1)."""
    _USER_ERRORS.remove_string(errorcode)


_ABI = "the MPI 5 ABI queries (minimpi is no C library with an ABI)"
Get_abi_version = refusing(_ABI, "MPI.Get_abi_version")
Get_abi_info = refusing(_ABI, "MPI.Get_abi_info")
Get_abi_fortran_info = refusing(_ABI, "MPI.Get_abi_fortran_info")
# mpi4py's private helpers that its own modules use (mpi4py.run, mpi4py.util.pkl5, datatype
# pickling, handle addresses): minimpi has its own ways (or no C handles) for these.
_set_abort_status = refusing("mpi4py.run's abort status", "MPI._set_abort_status")
_commctx_intra = refusing("mpi4py.util.pkl5's communicator contexts", "MPI._commctx_intra")
_commctx_inter = refusing("mpi4py.util.pkl5's communicator contexts", "MPI._commctx_inter")
_datatype_create = refusing("mpi4py's datatype (de)construction helpers",
                            "MPI._datatype_create")
_datatype_decode = refusing("mpi4py's datatype (de)construction helpers",
                            "MPI._datatype_decode")
_sizeof = refusing("C sizes and addresses of MPI handles", "MPI._sizeof")
_addressof = refusing("C sizes and addresses of MPI handles", "MPI._addressof")
_handleof = refusing("C sizes and addresses of MPI handles", "MPI._handleof")


# -- COMM_WORLD / COMM_SELF ----------------------------------------------------------------------
def _bind_worlds() -> None:
    g = globals()
    g["COMM_WORLD"] = _runtime.comm_world()
    g["COMM_SELF"] = _runtime.comm_self()


# -- the layers a program may never use, loaded at its first use of one of their names -------
#: name -> (module, its name there). Windows (minimpi.rma), files (minimpi.io) and sessions
#: load when the program first reaches ``MPI.Win``, ``MPI.File``, ``MPI.Session`` or their
#: null handles: ``from mpi4py import MPI`` in a program that uses none of them (most do not)
#: starts without their modules (tests/integration/test_startup_imports.py).
_LAZY = {
    "Win": ("minimpi.rma", "Win"), "WIN_NULL": ("minimpi.rma", "WIN_NULL"),
    "File": ("minimpi.io", "File"), "FILE_NULL": ("minimpi.io", "FILE_NULL"),
    "Register_datarep": ("minimpi.io.datarep", "Register_datarep"),
    "Session": ("minimpi.runtime.session", "Session"),
    "SESSION_NULL": ("minimpi.runtime.session", "SESSION_NULL"),
}


def _load(name: str):
    """Import the layer behind lazy name ``name`` and bind its names here (once)."""
    import importlib
    module = importlib.import_module(_LAZY[name][0])
    if module.__name__ == "minimpi.rma":
        module.window.default_comm = _runtime.comm_self   # Win.Create(..., comm=None)
    g = globals()
    for lazy, (where, attr) in _LAZY.items():
        if where == module.__name__:
            g[lazy] = getattr(module, attr)
    return g[name]


def __getattr__(name: str):
    if name in _LAZY:
        return _load(name)
    # Only reached before initialization (mpi4py.rc.initialize = False): the first use of a
    # world communicator initializes, as a late MPI.Init() would.
    if name in ("COMM_WORLD", "COMM_SELF"):
        Init()
        return globals()[name]
    raise AttributeError(f"module 'mpi4py.MPI' (minimpi) has no attribute {name!r}")


def __dir__() -> list:
    return sorted(set(globals()) | set(_LAZY))



_rcobj = _rc()
if _rcobj is None or getattr(_rcobj, "initialize", True):
    Init()

#: ``from mpi4py.MPI import *``: every public name, the lazy ones included (they load then)
__all__ = sorted({n for n in globals() if not n.startswith("_")} | set(_LAZY))
