"""MPI constants shared by every layer (values match what mpi4py programs expect to compare)."""
from __future__ import annotations

ANY_SOURCE = -1
ANY_TAG = -1
PROC_NULL = -2
ROOT = -3
UNDEFINED = -32766
TAG_UB = 2**31 - 1  # largest valid user tag

# Comparison results (Comm.Compare, Group.Compare)
IDENT = 0
CONGRUENT = 1
SIMILAR = 2
UNEQUAL = 3

# Topology kinds
GRAPH = 1
CART = 2
DIST_GRAPH = 3

# Thread levels
THREAD_SINGLE = 0
THREAD_FUNNELED = 1
THREAD_SERIALIZED = 2
THREAD_MULTIPLE = 3


class _InPlace:
    """``MPI.IN_PLACE``: the receive buffer is also the send buffer."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MPI.IN_PLACE"

    def __reduce__(self):
        return (_InPlace, ())


IN_PLACE = _InPlace()


class _Bottom:
    """``MPI.BOTTOM``: address zero, the base of absolute addresses (``MPI.Get_address``).

    In a buffer spec it stands for "no buffer": ``[MPI.BOTTOM, 0, MPI.BYTE]`` is an empty
    message, and in ``Alltoallw`` the displacements are then absolute addresses.
    """

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __int__(self) -> int:
        return 0

    __index__ = __int__

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "MPI.BOTTOM"

    def __reduce__(self):
        return (_Bottom, ())


BOTTOM = _Bottom()


class _BufferAutomatic:
    """``MPI.BUFFER_AUTOMATIC``: attach it (``Attach_buffer``) to let buffered sends manage
    their own memory - which minimpi's always do."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __int__(self) -> int:
        return 0

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "MPI.BUFFER_AUTOMATIC"

    def __reduce__(self):
        return (_BufferAutomatic, ())


BUFFER_AUTOMATIC = _BufferAutomatic()

# MPI-IO (MPI.File): access modes (bit flags, values as in MPICH), seek whence, views
MODE_CREATE = 1
MODE_RDONLY = 2
MODE_WRONLY = 4
MODE_RDWR = 8
MODE_DELETE_ON_CLOSE = 16
MODE_UNIQUE_OPEN = 32
MODE_EXCL = 64
MODE_APPEND = 128
MODE_SEQUENTIAL = 256
SEEK_SET = 600
SEEK_CUR = 602
SEEK_END = 604
#: ``Set_view``'s displacement meaning "the shared file pointer's current position"
#: (files opened with ``MODE_SEQUENTIAL``)
DISPLACEMENT_CURRENT = -54278278
# One-sided communication (RMA windows; values as MPICH's, so printed numbers look familiar)
LOCK_EXCLUSIVE = 234
LOCK_SHARED = 235
# assertions for Fence/Lock/Post/Start (hints; minimpi uses MODE_NOCHECK and MODE_NOSUCCEED)
MODE_NOCHECK = 1024
MODE_NOSTORE = 2048
MODE_NOPUT = 4096
MODE_NOPRECEDE = 8192
MODE_NOSUCCEED = 16384
# how a window was made (Win.Get_attr(WIN_CREATE_FLAVOR))
WIN_FLAVOR_CREATE = 1
WIN_FLAVOR_ALLOCATE = 2
WIN_FLAVOR_DYNAMIC = 3
WIN_FLAVOR_SHARED = 4
# memory models (Win.Get_attr(WIN_MODEL)): minimpi's windows are plain memory, so unified
WIN_SEPARATE = 1
WIN_UNIFIED = 2
# window attribute keyvals (Win.Get_attr)
WIN_BASE = 0x66000001
WIN_SIZE = 0x66000003
WIN_DISP_UNIT = 0x66000005
WIN_CREATE_FLAVOR = 0x66000007
WIN_MODEL = 0x66000009
