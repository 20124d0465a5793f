"""``MPI.Win``: RMA windows - creation, attributes, epochs and the one-sided operations.

How bytes move (chosen per target when the window is made):

* to this rank itself, and ``Put``/``Get`` to any rank of a window in shared memory
  (``Allocate_shared``; ``Allocate`` when every rank is on one host): straight from and into
  the target's memory (:mod:`minimpi.rma.shared`), no message, no help from the target;
* ``Put``/``Get`` to a same-host peer's other window: cross memory attach
  (:mod:`minimpi.rma.cma`), where the kernel allows;
* everything else: an active message served by the target's progress (:mod:`minimpi.rma.am`)
  - the target must be inside some MPI call for it to be served.

``MPI.Win()`` and ``MPI.WIN_NULL`` are null windows (falsy, equal to each other).
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np

from ..comm.errhandlers import call_errhandler, handle_error
from ..comm.group import Group
from ..comm.handle_types import (
    ERRORS_RETURN,
    Errhandler,
    Info,
    IntHandles,
    checked_errhandler,
    create_errhandler,
)
from ..constants import (
    BOTTOM,
    PROC_NULL,
    WIN_BASE,
    WIN_CREATE_FLAVOR,
    WIN_DISP_UNIT,
    WIN_FLAVOR_ALLOCATE,
    WIN_FLAVOR_CREATE,
    WIN_FLAVOR_DYNAMIC,
    WIN_FLAVOR_SHARED,
    WIN_MODEL,
    WIN_SIZE,
    WIN_UNIFIED,
)
from ..data.attributes import WIN_KEYVALS, Attributed, AttributeStore
from ..data.buffers import get_address, parse_buffer
from ..data.memory import alloc_mem, buffer
from ..errors import ArgumentError, MinimpiError, RankError
from ..front import Fronted
from . import export, shared
from .errors import ERR_SIZE, RmaFlavorError
from .operations import Operations
from .state import _check_int, _State
from .synchronisation import Synchronisation


class Win(Attributed, Operations, Synchronisation, IntHandles, metaclass=Fronted):
    """An RMA window (``MPI.Win``). Make one with :meth:`Create`, :meth:`Allocate`,
    :meth:`Allocate_shared` or :meth:`Create_dynamic` (collective over the communicator).
    Integer handles (``handle``, ``toint``, ``fromhandle``...) as
    :class:`~minimpi.comm.handle_types.IntHandles`."""

    __slots__ = ("_int_handle",)

    def __new__(cls, *args: Any, **kwargs: Any) -> "Win":
        # mpi4py's subclassing idiom ``MPI.Win.__new__(cls, win)``: the handle is made by
        # __init__, from the same argument
        return super().__new__(cls)

    def __init__(self, win: Any = None) -> None:
        if win is not None and not isinstance(win, Win):
            raise TypeError(f"MPI.Win({win!r:.40}): expected a window or nothing")
        self._s: Optional[_State] = win._s if win is not None else None

    @classmethod
    def _of(cls, state: _State) -> "Win":
        w = cls.__new__(cls)
        w._s = state
        return w

    # -- handle behaviour ------------------------------------------------------------------
    def __bool__(self) -> bool:
        return self._s is not None and not self._s.freed

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Win):
            return NotImplemented
        a = self._s if self else None
        b = other._s if other else None
        return a is b

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None  # type: ignore[assignment]   (handles are unhashable, as mpi4py's)

    def __repr__(self) -> str:
        if not self:
            return "MPI.WIN_NULL"
        return f"<MPI.Win {self._s.label} rank {self._s.rank} of {self._s.size}>"

    def __reduce__(self):
        """mpi4py's rule: ``WIN_NULL`` pickles by name (back to this process's own); another
        null handle to a null handle of its own class; a live window is a ValueError."""
        if self is WIN_NULL:
            return "WIN_NULL"               # this module's global: the same object back
        if not self:
            return (type(self), (WIN_NULL,))
        raise ValueError(f"cannot pickle a live window ({self._s.label}): windows are "
                         f"local handles")

    # -- creation --------------------------------------------------------------------------
    @classmethod
    def Create(cls, memory: Any, disp_unit: int = 1, info: Any = None, comm: Any = None) -> "Win":
        """A window over ``memory`` (any writable contiguous buffer, or None / MPI.BOTTOM
        for none) on every rank of ``comm`` (collective)."""
        comm = _comm_or_self(comm)
        disp_unit = _disp_unit(disp_unit, "Create")
        if memory is None or _is_bottom(memory):
            raw, obj = np.zeros(0, np.uint8), None
        else:
            spec = parse_buffer(memory, writable=True, call="Win.Create", arg="memory")
            if spec.is_temporary:
                raise ArgumentError("Win.Create: memory must be contiguous (window memory is "
                                    "read and written in place)")
            raw, obj = np.frombuffer(spec.view, np.uint8), memory
            if isinstance(memory, (list, tuple)):
                obj = spec.view
        return cls._of(_State(comm, WIN_FLAVOR_CREATE, raw, obj, disp_unit, info, None))

    @classmethod
    def Allocate(cls, size: int, disp_unit: int = 1, info: Any = None, comm: Any = None) -> "Win":
        """A window over ``size`` new bytes per rank (collective). On one host the memory
        is shared, so ``Put``/``Get`` go straight into it."""
        comm = _comm_or_self(comm)
        size = _size(size, "Allocate")
        disp_unit = _disp_unit(disp_unit, "Allocate")
        if comm.Get_size() > 1 and shared.one_host(comm.endpoint.hosts):
            segment = shared.allocate(comm, size, "Win.Allocate")
            part = segment.parts[comm.Get_rank()]
            return cls._of(_State(comm, WIN_FLAVOR_ALLOCATE, part, part, disp_unit, info,
                                  segment))
        mem = alloc_mem(size)
        raw = mem.view(np.ndarray).view(np.uint8).reshape(-1)
        return cls._of(_State(comm, WIN_FLAVOR_ALLOCATE, raw, mem, disp_unit, info, None))

    @classmethod
    def Allocate_shared(cls, size: int, disp_unit: int = 1, info: Any = None,
                        comm: Any = None) -> "Win":
        """A window in memory shared by every rank of ``comm``, which must all be on one
        host (``comm.Split_type(MPI.COMM_TYPE_SHARED)``); see :meth:`Shared_query`."""
        comm = _comm_or_self(comm)
        size = _size(size, "Allocate_shared")
        disp_unit = _disp_unit(disp_unit, "Allocate_shared")
        hosts = comm.endpoint.hosts
        if not shared.one_host(hosts):
            raise shared.RmaSharedError(
                f"rank {comm.Get_rank()}: Win.Allocate_shared on {comm.name}: its ranks are "
                f"on {len(set(hosts))} hosts; shared memory needs one host - split the "
                f"communicator with comm.Split_type(MPI.COMM_TYPE_SHARED) first")
        segment = shared.allocate(comm, size, "Win.Allocate_shared")
        part = segment.parts[comm.Get_rank()]
        return cls._of(_State(comm, WIN_FLAVOR_SHARED, part, part, disp_unit, info, segment))

    @classmethod
    def Create_dynamic(cls, info: Any = None, comm: Any = None) -> "Win":
        """A window without memory; each rank attaches buffers with :meth:`Attach`, and
        target displacements are then addresses (``MPI.Get_address``)."""
        comm = _comm_or_self(comm)
        return cls._of(_State(comm, WIN_FLAVOR_DYNAMIC, np.zeros(0, np.uint8), None, 1, info,
                              None))

    def Attach(self, memory: Any) -> None:
        """Expose ``memory`` in this dynamic window (local, not collective)."""
        s = self._live("Attach")
        if s.flavor != WIN_FLAVOR_DYNAMIC:
            raise RmaFlavorError(f"rank {s.rank}: Win.Attach on window {s.label}: only dynamic "
                                 f"windows (Win.Create_dynamic) take attached memory")
        spec = parse_buffer(memory, writable=True, call="Win.Attach", arg="memory")
        if spec.is_temporary:
            raise ArgumentError("Win.Attach: memory must be contiguous")
        s.exposed.attach(get_address(memory if not isinstance(memory, (list, tuple))
                                     else spec.view), np.frombuffer(spec.view, np.uint8))

    def Detach(self, memory: Any) -> None:
        """Stop exposing memory attached with :meth:`Attach`."""
        s = self._live("Detach")
        if s.flavor != WIN_FLAVOR_DYNAMIC:
            raise RmaFlavorError(f"rank {s.rank}: Win.Detach on window {s.label}: not a "
                                 f"dynamic window")
        s.exposed.detach(get_address(memory))

    def free(self) -> None:
        """``Free`` unless the window is already null or freed (mpi4py 4's safe free)."""
        if self:
            self.Free()

    def Free(self) -> None:
        """Free the window (collective): finish this rank's operations, wait for every rank,
        stop serving."""
        s = self._live("Free")
        try:      # the attributes go first (their delete_fn see the window)
            s.attrs.clear(self)
        finally:  # a failing delete_fn is raised, but the window is freed on every rank
            with s.epoch_call("Win.Free", "freeing the window", collective=True):
                s.origin.complete_remote(s.origin.targets(), "Win.Free")
                s.comm.Barrier()
            s.server.close()
            s.rdma.close()                  # every rank is past the barrier: no RDMA left
            s.comm.Free()
            s.direct_views = {}             # the views hold the segment's mapping
            if s.segment is not None:
                s.segment.release()
            s.freed = True

    # -- attributes, names, info, groups -------------------------------------------------------
    _keyvals = WIN_KEYVALS

    def _attribute_store(self, call: str) -> AttributeStore:
        return self._live(call).attrs

    def _predefined_attr(self, keyval: int) -> Tuple[bool, Any]:
        """``MPI.WIN_BASE``, ``WIN_SIZE``, ``WIN_DISP_UNIT``, ``WIN_CREATE_FLAVOR``,
        ``WIN_MODEL``."""
        if keyval not in (WIN_BASE, WIN_SIZE, WIN_DISP_UNIT, WIN_CREATE_FLAVOR, WIN_MODEL):
            return False, None
        s = self._live("Get_attr")
        return True, {WIN_BASE: s.base, WIN_SIZE: int(s.memory.size),
                      WIN_DISP_UNIT: s.disp_unit, WIN_CREATE_FLAVOR: s.flavor,
                      WIN_MODEL: WIN_UNIFIED}[keyval]

    @property
    def attrs(self) -> Tuple[int, int, int]:
        """``(base address, size in bytes, disp_unit)``."""
        s = self._live("attrs")
        return (s.base, int(s.memory.size), s.disp_unit)

    @property
    def flavor(self) -> int:
        return self._live("flavor").flavor

    @property
    def model(self) -> int:
        self._live("model")
        return WIN_UNIFIED

    def Get_group(self) -> Group:
        return self._live("Get_group").comm.Get_group()

    @property
    def group(self) -> Group:
        return self.Get_group()

    @property
    def group_size(self) -> int:
        return self._live("group_size").size

    @property
    def group_rank(self) -> int:
        return self._live("group_rank").rank

    def Get_info(self) -> Info:
        return Info.Create(self._live("Get_info").info)

    def Set_info(self, info: Any) -> None:
        s = self._live("Set_info")
        if isinstance(info, Info):
            s.info = Info.Create(info)

    info = property(Get_info, Set_info)

    def Get_name(self) -> str:
        if self._s is None:
            return "MPI_WIN_NULL"
        return self._live("Get_name").name

    def Set_name(self, name: str) -> None:
        if not isinstance(name, str):
            raise TypeError(f"Win.Set_name: expected a str, got {type(name).__name__}")
        self._live("Set_name").name = name

    name = property(Get_name, Set_name)

    @classmethod
    def Create_errhandler(cls, errhandler_fn: Any) -> Errhandler:
        """A user error handler: ``errhandler_fn(win, errorcode)`` runs on the errors of
        the windows it is set on (which then raise ``MPI.Exception``)."""
        return create_errhandler("Win", errhandler_fn)

    def Get_errhandler(self) -> Errhandler:
        """A new handle on the window's error handler (``ERRORS_RETURN`` unless set)."""
        return Errhandler(self._live("Get_errhandler").errhandler)

    def Set_errhandler(self, errhandler: Errhandler) -> None:
        """Handle this window's errors with ``errhandler``."""
        s = self._live("Set_errhandler")
        s.errhandler = checked_errhandler(errhandler, "Win", f"rank {s.rank}: Win.Set_errhandler")

    def Call_errhandler(self, errorcode: int) -> None:
        """Run the window's error handler for ``errorcode`` (``ERRORS_RETURN``: nothing)."""
        call_errhandler(self, self._live("Call_errhandler").errhandler, errorcode,
                        self._abort_on_error)

    def _current_errhandler(self) -> Errhandler:
        return self._s.errhandler if self._s is not None else ERRORS_RETURN

    _handle_error = handle_error     # what the API front does with an error (minimpi.front)

    def _front_bus(self) -> Any:
        """The bus of this window's world (None for a freed or null window)."""
        return self._s.comm.endpoint.engine.bus if self._s is not None else None

    def _abort_on_error(self, code: int) -> None:
        if self._s is not None:
            self._s.comm.Abort(code)

    # -- memory ------------------------------------------------------------------------------
    def tomemory(self) -> buffer:
        """This rank's window memory as an ``MPI.buffer`` (empty for a dynamic window)."""
        s = self._live("tomemory")
        if s.flavor == WIN_FLAVOR_DYNAMIC:
            return buffer.fromaddress(0, 0)
        if s.mem_obj is None:
            return buffer.frombuffer(s.memory)
        return buffer.frombuffer(s.mem_obj)

    # buffer protocol (PEP 3118, as mpi4py's Win): memoryview(win), np.frombuffer(win)
    def __buffer__(self, flags: int) -> memoryview:
        """This rank's window memory as a writable 1-D byte view (Python >= 3.12 calls
        this; before 3.12 :mod:`minimpi.rma.export` serves ``memoryview(win)``)."""
        return memoryview(_exported(self._live("__buffer__")))

    def __release_buffer__(self, view: memoryview) -> None:
        view.release()

    def Shared_query(self, rank: int) -> Tuple[buffer, int]:
        """``(memory, disp_unit)`` of ``rank``'s part of a window in shared memory
        (``PROC_NULL``: the first rank with a nonzero size). Other windows answer with
        their own memory for this rank and an empty buffer for the others."""
        s = self._live("Shared_query")
        rank = _check_int(rank, "Shared_query", "rank")
        if rank == PROC_NULL:
            rank = next((r for r, n in enumerate(s.sizes) if n), 0)
        if not 0 <= rank < s.size:
            raise RankError(f"rank {s.rank}: Win.Shared_query({rank}): expected 0..{s.size - 1} "
                            f"or MPI.PROC_NULL")
        if s.segment is not None:
            return buffer.frombuffer(s.segment.parts[rank]), s.units[rank]
        if rank == s.rank and s.flavor != WIN_FLAVOR_DYNAMIC:
            return self.tomemory(), s.disp_unit
        return buffer.fromaddress(0, 0), s.units[rank]

WIN_NULL = Win()


def _exported(s: _State) -> np.ndarray:
    """The bytes a window exports by the buffer protocol: its memory (mpi4py: WIN_BASE,
    WIN_SIZE); nothing for a dynamic window."""
    if s.flavor == WIN_FLAVOR_DYNAMIC:
        return np.zeros(0, np.uint8)
    return s.memory


def _address_and_size(win: Win) -> Tuple[int, int]:
    """(address, nbytes) of what ``win`` exports; (0, 0) for a null or freed window."""
    s = win._s
    if s is None or s.freed:
        return 0, 0
    memory = _exported(s)
    return (int(memory.ctypes.data), int(memory.nbytes)) if memory.nbytes else (0, 0)


export.install(Win, _address_and_size)


# ----------------------------------------------------------------------------- helpers
def _is_bottom(x: Any) -> bool:
    return x is BOTTOM


#: what ``comm=None`` means (mpi4py's default, ``MPI.COMM_SELF``); MPI.py installs it, as
#: the runtime that owns COMM_SELF sits above this layer
default_comm: Optional[Any] = None


def _comm_or_self(comm: Any) -> Any:
    if comm is None:
        if default_comm is None:
            raise TypeError("Win: pass a communicator (e.g. MPI.COMM_WORLD)")
        comm = default_comm()
    if not hasattr(comm, "endpoint") or not comm:
        raise TypeError(f"Win: comm must be an MPI communicator, got {type(comm).__name__}")
    return comm


def _size(size: Any, call: str) -> int:
    n = _check_int(size, call, "size")
    if n < 0:
        raise MinimpiError(f"Win.{call}: size must be >= 0, got {n}", ERR_SIZE)
    return n


def _disp_unit(unit: Any, call: str) -> int:
    n = _check_int(unit, call, "disp_unit")
    if n <= 0:
        raise ArgumentError(f"Win.{call}: disp_unit must be > 0, got {n}")
    return n


