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
