"""MPI constants shared by every layer (values match what mpi4py programs expect to compare)."""
from __future__ import annotations

import operator

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


def _is_integral(value: object) -> bool:
    """mpi4py's test of what a buffer constant compares with: an index-like value that is
    not a sized sequence (a 0-d integer numpy array counts, a list does not)."""
    if not hasattr(type(value), "__index__"):
        return False
    if hasattr(type(value), "__len__"):
        try:
            len(value)  # type: ignore[arg-type]
        except TypeError:
            pass
        else:
            return False
    try:
        operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return False
    return True


class _AddressConstant:
    """What ``MPI.BOTTOM``, ``MPI.IN_PLACE`` and ``MPI.BUFFER_AUTOMATIC`` share, as in
    mpi4py: each is the integer address MPICH gives it (``int()``; ``==``, ``!=`` and
    ``hash`` as that integer, so ``MPI.BOTTOM == 0`` and ``MPI.IN_PLACE == -1``), its
    ``repr`` is its name, it pickles by name and exports an empty writable buffer (Python
    3.12's ``__buffer__``). Each is one object: minimpi tells them apart by identity
    (``buf is MPI.IN_PLACE``), and calling its type gives that object back."""

    __slots__ = ()
    _name = ""
    _address = 0
    _instance: "_AddressConstant | None" = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __init_subclass__(cls, **kwargs) -> None:
        if _AddressConstant not in cls.__bases__:
            raise TypeError(f"type {cls.__mro__[1].__name__!r} is not an acceptable base type")
        super().__init_subclass__(**kwargs)

    def __int__(self) -> int:
        return self._address

    def __bool__(self) -> bool:
        return self._address != 0

    def __hash__(self) -> int:
        return hash(self._address)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, type(self)):
            return True
        if not _is_integral(other):
            return NotImplemented
        return self._address == operator.index(other)  # type: ignore[arg-type]

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __buffer__(self, flags: int) -> memoryview:
        return memoryview(bytearray())

    def __repr__(self) -> str:
        return self._name

    def __reduce__(self) -> str:
        return self._name


class InPlaceType(_AddressConstant):
    """Type of ``MPI.IN_PLACE``: the receive buffer is also the send buffer."""

    __slots__ = ()
    _name = "IN_PLACE"
    _address = -1


class BottomType(_AddressConstant):
    """Type of ``MPI.BOTTOM``: address zero, the base of absolute addresses
    (``MPI.Get_address``).

    In a buffer spec it stands for "no buffer": ``[MPI.BOTTOM, 0, MPI.BYTE]`` is an empty
    message, and in ``Alltoallw`` the displacements are then absolute addresses. Unlike
    the other two it is also an index (``operator.index(MPI.BOTTOM) == 0``), as in mpi4py.
    """

    __slots__ = ()
    _name = "BOTTOM"
    _address = 0

    def __index__(self) -> int:
        return 0


class BufferAutomaticType(_AddressConstant):
    """Type of ``MPI.BUFFER_AUTOMATIC``: attach it (``Attach_buffer``) to let buffered
    sends manage their own memory - which minimpi's always do."""

    __slots__ = ()
    _name = "BUFFER_AUTOMATIC"
    _address = -2


IN_PLACE = InPlaceType()
BOTTOM = BottomType()
BUFFER_AUTOMATIC = BufferAutomaticType()

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
