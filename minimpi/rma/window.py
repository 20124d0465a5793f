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

import atexit
import itertools
import operator
import os
import weakref
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..comm.group import Group
from ..comm.handles import ERRORS_ARE_FATAL, Errhandler, Info
from ..constants import (
    BOTTOM,
    LOCK_EXCLUSIVE,
    LOCK_SHARED,
    MODE_NOCHECK,
    MODE_NOSUCCEED,
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
from ..data.buffers import BufSpec, get_address, parse_buffer
from ..data.datatypes import Datatype, resolve_datatype
from ..data.memory import alloc_mem, buffer
from ..data.ops import SUM, Op
from ..errors import ArgumentError, CountError, DatatypeError, MinimpiError, OpError, RankError
from ..p2p.request import CompletedRequest, Request
from . import am, cma, shared
from .am import ACC, CAS, COMPLETE, GET, GET_ACC, POST_TAG, PUT, UNLOCK
from .epochs import Epochs
from .errors import ERR_LOCKTYPE, ERR_SIZE, RmaFlavorError, RmaRangeError, WinError
from .exposed import Exposed, outside_text
from .layout import Layout, element_dtype, gather, origin_bytes, scatter, store_into_origin

_KEYVALS = itertools.count(0x6600_1000)

#: windows not freed yet: at exit their servers stop (an unfreed window must not make the
#: runtime think the process left in the middle of a call)
_LIVE: "weakref.WeakSet[_State]" = weakref.WeakSet()
_exit_hook_installed = False


def release_all() -> None:
    """Stop serving every window this process did not free (``MPI.Finalize``, exit)."""
    for state in list(_LIVE):
        if not state.freed:
            state.server.close()


def _remember(state: "_State") -> None:
    global _exit_hook_installed
    _LIVE.add(state)
    if not _exit_hook_installed:   # registered after the runtime's, so it runs before it
        atexit.register(release_all)
        _exit_hook_installed = True


class _EpochWait:
    """Stands in for a request in 'what am I blocked on' reports (Win.Wait, Win.Start)."""

    done = False

    def __init__(self, call: str, peer: int, label: str) -> None:
        self.description = (call, "source", peer, POST_TAG, label)


class _State:
    """Everything one window is, shared by every handle on it (``MPI.Win(win)``)."""

    def __init__(self, comm: Any, flavor: int, memory: np.ndarray, mem_obj: Any,
                 disp_unit: int, info: Any, segment: Optional[shared.SharedSegment]) -> None:
        self.comm = comm.Dup()          # the window's own messages never meet anybody else's
        self.endpoint = self.comm.endpoint
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self.label = f"win#{self.endpoint.context}"
        self.flavor = flavor
        self.mem_obj = mem_obj
        self.disp_unit = int(disp_unit)
        self.base = get_address(mem_obj) if mem_obj is not None else 0
        self.info = Info.Create(info) if isinstance(info, Info) else Info.Create()
        self.name = ""
        self.errhandler = ERRORS_ARE_FATAL
        self.attrs: Dict[int, Any] = {}
        self.segment = segment
        # every rank's window size and disp_unit (origins check bounds before sending), and
        # where its memory is (process, address) for straight copies on one host
        address = int(memory.ctypes.data) if memory.size else 0
        facts = self.comm.allgather((int(memory.size), self.disp_unit, os.getpid(), address))
        self.sizes = [f[0] for f in facts]
        self.units = [f[1] for f in facts]
        hosts = self.endpoint.hosts
        #: target -> (pid, address) of the peers whose memory cross memory attach may reach
        self.reachable: Dict[int, Tuple[int, int]] = {}
        if cma.available() and flavor != WIN_FLAVOR_DYNAMIC and segment is None:
            self.reachable = {t: (f[2], f[3]) for t, f in enumerate(facts)
                              if t != self.rank and hosts[t] == hosts[self.rank] and f[0]}
        self.exposed = Exposed(self.rank, self.label, memory,
                               dynamic=flavor == WIN_FLAVOR_DYNAMIC)
        self.epochs = Epochs(self.rank, self.label)
        self.origin = am.Origin(self.endpoint)
        self.server = am.Server(self.endpoint, self.exposed)
        self.freed = False
        _remember(self)

    @property
    def memory(self) -> np.ndarray:
        return self.exposed.memory

    def direct_memory(self, target: int) -> Optional[np.ndarray]:
        """The target's window memory when this rank can reach it directly (itself, or a
        peer in the same shared segment), else None."""
        if self.segment is not None and target < len(self.segment.parts):
            self.origin.granted(target)       # a lock asked of it must be ours first
            return self.segment.parts[target]
        if target == self.rank and not self.exposed.dynamic:
            return self.exposed.memory
        return None


def _check_int(value: Any, call: str, arg: str) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"Win.{call}: {arg} must be an integer, got "
                        f"{type(value).__name__}") from None


class Win:
    """An RMA window (``MPI.Win``). Make one with :meth:`Create`, :meth:`Allocate`,
    :meth:`Allocate_shared` or :meth:`Create_dynamic` (collective over the communicator)."""

    __slots__ = ("_s", "__weakref__")

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

    def __hash__(self) -> int:
        return id(self._s) if self else 0

    def __repr__(self) -> str:
        if not self:
            return "MPI.WIN_NULL"
        return f"<MPI.Win {self._s.label} rank {self._s.rank} of {self._s.size}>"

    def __reduce__(self):
        if not self:
            return (Win, ())
        raise ValueError(f"cannot pickle a live window ({self._s.label}): windows are "
                         f"local handles")

    @property
    def endpoint(self) -> Optional[Any]:
        """The engine's view of the window's own communicator (None for a null or freed
        window): what tracing asks for the rank's observer."""
        return self._s.endpoint if self else None

    def _live(self, call: str) -> _State:
        s = self._s
        if s is None or s.freed:
            raise WinError(f"Win.{call}: the window is MPI.WIN_NULL or was freed; make one with "
                           f"Win.Create/Allocate/Allocate_shared/Create_dynamic")
        return s

    def _call(self, call: str) -> _State:
        """``_live`` for a one-sided call, plus one round of progress: a rank whose window
        calls all complete locally (operations on itself) still serves its peers' requests."""
        s = self._live(call)
        s.endpoint.engine.poll()
        return s

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

    def Free(self) -> None:
        """Free the window (collective): finish this rank's operations, wait for every rank,
        stop serving."""
        s = self._live("Free")
        s.origin.complete_remote(s.origin.targets(), "Win.Free")
        s.comm.Barrier()
        s.server.close()
        s.comm.Free()
        if s.segment is not None:
            s.segment.release()
        s.freed = True

    # -- attributes, names, info, groups -------------------------------------------------------
    def Get_attr(self, keyval: int) -> Any:
        s = self._live("Get_attr")
        if keyval == WIN_BASE:
            return s.base
        if keyval == WIN_SIZE:
            return int(s.memory.size)
        if keyval == WIN_DISP_UNIT:
            return s.disp_unit
        if keyval == WIN_CREATE_FLAVOR:
            return s.flavor
        if keyval == WIN_MODEL:
            return WIN_UNIFIED
        return s.attrs.get(keyval)

    def Set_attr(self, keyval: int, attrval: Any) -> None:
        self._live("Set_attr").attrs[keyval] = attrval

    def Delete_attr(self, keyval: int) -> None:
        self._live("Delete_attr").attrs.pop(keyval, None)

    @staticmethod
    def Create_keyval(copy_fn: Any = None, delete_fn: Any = None, nopython: bool = False) -> int:
        """A new attribute key for :meth:`Set_attr`."""
        return next(_KEYVALS)

    @staticmethod
    def Free_keyval(keyval: int) -> int:
        return -1

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

    def Get_errhandler(self) -> Errhandler:
        return Errhandler(self._live("Get_errhandler").errhandler)

    def Set_errhandler(self, errhandler: Errhandler) -> None:
        if not isinstance(errhandler, Errhandler):
            raise TypeError("Win.Set_errhandler: expected an MPI.Errhandler")
        self._live("Set_errhandler").errhandler = Errhandler(errhandler)

    def Call_errhandler(self, errorcode: int) -> None:
        raise MinimpiError(f"Win.Call_errhandler({errorcode})", int(errorcode))

    # -- memory ------------------------------------------------------------------------------
    def tomemory(self) -> buffer:
        """This rank's window memory as an ``MPI.buffer`` (empty for a dynamic window)."""
        s = self._live("tomemory")
        if s.flavor == WIN_FLAVOR_DYNAMIC:
            return buffer.fromaddress(0, 0)
        if s.mem_obj is None:
            return buffer.frombuffer(s.memory)
        return buffer.frombuffer(s.mem_obj)

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

    # -- argument handling shared by the operations -----------------------------------------
    def _target_rank(self, s: _State, rank: Any, call: str) -> int:
        rank = _check_int(rank, call, "target_rank")
        if rank != PROC_NULL and not 0 <= rank < s.size:
            raise RankError(f"rank {s.rank}: Win.{call}(target_rank={rank}): expected "
                            f"0..{s.size - 1} or MPI.PROC_NULL (window {s.label})")
        return rank

    def _layout(self, s: _State, target_rank: int, target: Any, default: BufSpec,
                call: str) -> Tuple[Layout, Datatype]:
        """The target layout of ``target`` (None, a displacement, or [disp, count, type]),
        checked against the target's window size."""
        disp, count, datatype = 0, default.count, default.datatype
        if target is not None:
            if isinstance(target, (list, tuple)):
                if not 1 <= len(target) <= 3:
                    raise ValueError(f"Win.{call}: target must be [disp], [disp, count] or "
                                     f"[disp, count, datatype], got {len(target)} items")
                disp = _check_int(target[0], call, "target displacement")
                if len(target) >= 2 and target[1] is not None:
                    count = _check_int(target[1], call, "target count")
                if len(target) == 3 and target[2] is not None:
                    if not isinstance(target[2], (Datatype, str)):
                        raise TypeError(f"Win.{call}: target datatype must be an MPI datatype, "
                                        f"got {type(target[2]).__name__}")
                    datatype = resolve_datatype(target[2], call=f"Win.{call}",
                                                arg="target datatype")
            else:
                try:
                    disp = operator.index(target)
                except TypeError:
                    raise ValueError(f"Win.{call}: target must be None, an int displacement or "
                                     f"a list/tuple, got {type(target).__name__}") from None
        if count < 0:
            raise CountError(f"Win.{call}: target count must be >= 0, got {count}")
        unit = 1 if s.flavor == WIN_FLAVOR_DYNAMIC else s.units[target_rank]
        layout = Layout.of(disp * unit, datatype, count)
        if s.flavor != WIN_FLAVOR_DYNAMIC and layout.nbytes and \
                (layout.low < 0 or layout.high > s.sizes[target_rank]):
            raise RmaRangeError(outside_text(s.rank, target_rank, s.label, call, layout.low,
                                             layout.high, s.sizes[target_rank]))
        return layout, datatype

    @staticmethod
    def _same_bytes(origin: BufSpec, layout: Layout, call: str, what: str = "origin") -> None:
        n = origin.count * origin.datatype.size
        if n != layout.nbytes:
            raise CountError(f"Win.{call}: the {what} buffer holds {n} bytes "
                             f"({origin.count} x {origin.datatype.name}) but the target "
                             f"layout holds {layout.nbytes}; they must match")

    @staticmethod
    def _check_op(op: Any, datatype: Datatype, call: str) -> np.dtype:
        if not isinstance(op, Op):
            raise OpError(f"Win.{call}: op must be an MPI.Op such as MPI.SUM, got "
                          f"{type(op).__name__}")
        if not op.is_predefined:
            raise OpError(f"Win.{call}: one-sided accumulates take predefined operations "
                          f"only (MPI.SUM, MPI.REPLACE, ...), not a user-defined Op")
        dtype = element_dtype(datatype)
        if dtype is None:
            raise DatatypeError(f"Win.{call}: target datatype {datatype.name} mixes basic "
                                f"types; accumulates need one basic type")
        op.check_datatype(datatype, f"Win.{call}")
        return dtype

    # -- Put / Get ---------------------------------------------------------------------------
    def _put(self, origin: Any, target_rank: Any, target: Any, call: str) -> Request:
        s = self._call(call)
        rank = self._target_rank(s, target_rank, call)
        spec = parse_buffer(origin, writable=False, call=f"Win.{call}", arg="origin")
        if rank == PROC_NULL:
            return CompletedRequest()
        s.epochs.check_access(rank, call)
        layout, _ = self._layout(s, rank, target, spec, call)
        self._same_bytes(spec, layout, call)
        data = origin_bytes(spec)
        memory = s.direct_memory(rank)
        if memory is not None:
            scatter(memory, layout, data)
            return CompletedRequest()
        if rank in s.reachable and layout.nbytes and \
                self._cross(s, rank, layout, np.frombuffer(data, np.uint8), True):
            return CompletedRequest()
        return s.origin.send(rank, (PUT, layout.wire()), data, f"Win.{call}")

    def _get(self, origin: Any, target_rank: Any, target: Any, call: str) -> Request:
        s = self._call(call)
        rank = self._target_rank(s, target_rank, call)
        spec = parse_buffer(origin, writable=True, call=f"Win.{call}", arg="origin")
        if rank == PROC_NULL:
            return CompletedRequest()
        s.epochs.check_access(rank, call)
        layout, _ = self._layout(s, rank, target, spec, call)
        self._same_bytes(spec, layout, call)
        memory = s.direct_memory(rank)
        if memory is not None:
            store_into_origin(spec, gather(memory, layout).tobytes())
            return CompletedRequest()
        if rank in s.reachable and layout.nbytes:
            landing = np.empty(layout.nbytes, np.uint8)
            if self._cross(s, rank, layout, landing, False):
                store_into_origin(spec, landing)
                return CompletedRequest()
        return s.origin.ask(rank, (GET, layout.wire()), None, f"Win.{call}",
                            lambda body: store_into_origin(spec, body))

    @staticmethod
    def _cross(s: _State, rank: int, layout: Layout, local: np.ndarray, write: bool) -> bool:
        """A straight copy to/from a same-host peer's window memory (cross memory attach);
        False - and that peer is reached by messages from now on - if the kernel refuses.
        Ordering: this rank's earlier requests to ``rank`` are completed first."""
        s.origin.granted(rank)
        if s.origin.pending.get(rank):
            s.origin.complete_local([rank])
        if rank in s.origin.dirty:
            s.origin.complete_remote([rank], "Win.Put")
        pid, address = s.reachable[rank]
        if cma.transfer(pid, address, layout, local, write):
            return True
        del s.reachable[rank]
        return False

    def Put(self, origin: Any, target_rank: int, target: Any = None) -> None:
        """Write ``origin`` into ``target_rank``'s window at ``target`` (a displacement in
        the target's disp_unit, or ``[disp, count, datatype]``); complete at the next
        Fence/Flush/Unlock/Complete."""
        self._put(origin, target_rank, target, "Put")

    def Get(self, origin: Any, target_rank: int, target: Any = None) -> None:
        """Read ``target_rank``'s window into ``origin``; the data is there after the next
        Fence/Flush/Unlock/Complete."""
        self._get(origin, target_rank, target, "Get")

    def Rput(self, origin: Any, target_rank: int, target: Any = None) -> Request:
        """``Put`` with a request (complete once ``origin`` may be reused)."""
        return self._put(origin, target_rank, target, "Rput")

    def Rget(self, origin: Any, target_rank: int, target: Any = None) -> Request:
        """``Get`` with a request (complete once the data is in ``origin``)."""
        return self._get(origin, target_rank, target, "Rget")

    # -- accumulates -------------------------------------------------------------------------
    def _accumulate(self, origin: Any, target_rank: Any, target: Any, op: Any, call: str
                    ) -> Request:
        s = self._call(call)
        rank = self._target_rank(s, target_rank, call)
        spec = parse_buffer(origin, writable=False, call=f"Win.{call}", arg="origin")
        if rank == PROC_NULL:
            return CompletedRequest()
        s.epochs.check_access(rank, call)
        layout, datatype = self._layout(s, rank, target, spec, call)
        dtype = self._check_op(op, datatype, call)
        self._same_bytes(spec, layout, call)
        data = origin_bytes(spec)
        if rank == s.rank and not s.exposed.dynamic:
            am.accumulate(s.memory, layout, op.name, dtype, data)
            return CompletedRequest()
        return s.origin.send(rank, (ACC, layout.wire(), op.name, dtype), data, f"Win.{call}")

    def _get_accumulate(self, origin: Any, result: Any, target_rank: Any, target: Any,
                        op: Any, call: str) -> Request:
        s = self._call(call)
        rank = self._target_rank(s, target_rank, call)
        ospec = parse_buffer(origin, writable=False, call=f"Win.{call}", arg="origin")
        rspec = parse_buffer(result, writable=True, call=f"Win.{call}", arg="result")
        if rank == PROC_NULL:
            return CompletedRequest()
        s.epochs.check_access(rank, call)
        no_op = isinstance(op, Op) and op.name == "NO_OP"
        default = rspec if (no_op or not ospec.count) else ospec
        layout, datatype = self._layout(s, rank, target, default, call)
        dtype = self._check_op(op, datatype, call)
        self._same_bytes(rspec, layout, call, "result")
        if not no_op:
            self._same_bytes(ospec, layout, call)
        data = origin_bytes(ospec) if not no_op else memoryview(b"")
        if rank == s.rank and not s.exposed.dynamic:
            old = gather(s.memory, layout).tobytes()
            am.accumulate(s.memory, layout, op.name, dtype, data)
            store_into_origin(rspec, old)
            return CompletedRequest()
        return s.origin.ask(rank, (GET_ACC, layout.wire(), op.name, dtype), data,
                            f"Win.{call}", lambda body: store_into_origin(rspec, body))

    def Accumulate(self, origin: Any, target_rank: int, target: Any = None, op: Op = SUM
                   ) -> None:
        """``target = origin (op) target`` at ``target_rank`` (atomic per element against
        other accumulates); any predefined op, ``MPI.REPLACE`` and ``MPI.NO_OP`` included."""
        self._accumulate(origin, target_rank, target, op, "Accumulate")

    def Raccumulate(self, origin: Any, target_rank: int, target: Any = None, op: Op = SUM
                    ) -> Request:
        return self._accumulate(origin, target_rank, target, op, "Raccumulate")

    def Get_accumulate(self, origin: Any, result: Any, target_rank: int, target: Any = None,
                       op: Op = SUM) -> None:
        """Fetch the target's values into ``result``, then accumulate ``origin`` into them
        (one atomic step)."""
        self._get_accumulate(origin, result, target_rank, target, op, "Get_accumulate")

    def Rget_accumulate(self, origin: Any, result: Any, target_rank: int, target: Any = None,
                        op: Op = SUM) -> Request:
        return self._get_accumulate(origin, result, target_rank, target, op, "Rget_accumulate")

    @staticmethod
    def _single(spec: BufSpec, like: BufSpec, call: str, arg: str) -> None:
        if spec.count != 1:
            raise ValueError(f"Win.{call}: {arg} must hold exactly one element, got "
                             f"{spec.count} x {spec.datatype.name}")
        if spec.datatype.size != like.datatype.size or spec.datatype.dtype != like.datatype.dtype:
            raise ValueError(f"Win.{call}: {arg} is {spec.datatype.name} but origin is "
                             f"{like.datatype.name}; they must be the same type")

    def Fetch_and_op(self, origin: Any, result: Any, target_rank: int, target_disp: int = 0,
                     op: Op = SUM) -> None:
        """One element: fetch the target's value into ``result`` and combine ``origin`` into
        it with ``op``, atomically."""
        s = self._call("Fetch_and_op")
        ospec = parse_buffer(origin, writable=False, call="Win.Fetch_and_op", arg="origin")
        rspec = parse_buffer(result, writable=True, call="Win.Fetch_and_op", arg="result")
        self._single(ospec, ospec, "Fetch_and_op", "origin")
        self._single(rspec, ospec, "Fetch_and_op", "result")
        if self._target_rank(s, target_rank, "Fetch_and_op") == PROC_NULL:
            return
        self._get_accumulate(origin, result, target_rank,
                             [target_disp, 1, ospec.datatype], op, "Fetch_and_op").Wait()

    def Compare_and_swap(self, origin: Any, compare: Any, result: Any, target_rank: int,
                         target_disp: int = 0) -> None:
        """One element: fetch the target's value into ``result``; if it equals ``compare``,
        replace it with ``origin`` (atomically)."""
        call = "Compare_and_swap"
        s = self._call(call)
        ospec = parse_buffer(origin, writable=False, call=f"Win.{call}", arg="origin")
        cspec = parse_buffer(compare, writable=False, call=f"Win.{call}", arg="compare")
        rspec = parse_buffer(result, writable=True, call=f"Win.{call}", arg="result")
        self._single(ospec, ospec, call, "origin")
        self._single(cspec, ospec, call, "compare")
        self._single(rspec, ospec, call, "result")
        rank = self._target_rank(s, target_rank, call)
        if rank == PROC_NULL:
            return
        s.epochs.check_access(rank, call)
        layout, _ = self._layout(s, rank, [target_disp, 1, ospec.datatype], ospec, call)
        payload = memoryview(origin_bytes(ospec).tobytes() + origin_bytes(cspec).tobytes())
        if rank == s.rank and not s.exposed.dynamic:
            old = gather(s.memory, layout).tobytes()
            if old == payload[layout.nbytes:].tobytes():
                scatter(s.memory, layout, payload[:layout.nbytes])
            store_into_origin(rspec, old)
            return
        s.origin.ask(rank, (CAS, layout.wire()), payload, f"Win.{call}",
                     lambda body: store_into_origin(rspec, body)).Wait()

    # -- active target: Fence ---------------------------------------------------------------
    def Fence(self, assertion: int = 0) -> None:
        """End the fence epoch (every rank's operations complete) and - unless
        ``MODE_NOSUCCEED`` - start the next (collective)."""
        s = self._call("Fence")
        assertion = _check_int(assertion, "Fence", "assertion")
        s.epochs.check_fence()
        s.origin.complete_remote(s.origin.targets(), "Win.Fence")
        s.comm.Barrier()
        s.epochs.fence_open = not assertion & MODE_NOSUCCEED

    # -- active target: post/start/complete/wait -----------------------------------------------
    def _ranks_of(self, s: _State, group: Any, call: str) -> List[int]:
        if not isinstance(group, Group):
            raise TypeError(f"Win.{call}: expected an MPI.Group, got {type(group).__name__}")
        if group.Get_size() == 0:
            return []
        ranks = Group.Translate_ranks(group, None, s.comm.Get_group())
        bad = [r for r in ranks if r < 0]
        if bad:
            raise ArgumentError(f"rank {s.rank}: Win.{call}: the group has ranks that are not "
                                f"in window {s.label}'s group")
        return ranks

    def Post(self, group: Group, assertion: int = 0) -> None:
        """Expose this rank's window to the ranks of ``group`` (they ``Start`` then)."""
        s = self._call("Post")
        ranks = self._ranks_of(s, group, "Post")
        if s.epochs.exposure is not None:
            raise s.epochs._error("Post", "an exposure epoch is already open (Wait first)")
        s.epochs.exposure = ranks
        for r in ranks:
            s.endpoint.isend([], 0, r, POST_TAG, 0, "Win.Post")

    def Start(self, group: Group, assertion: int = 0) -> None:
        """Begin an access epoch to the ranks of ``group`` (waits for their ``Post``)."""
        s = self._call("Start")
        ranks = self._ranks_of(s, group, "Start")
        if s.epochs.access is not None:
            raise s.epochs._error("Start", "an access epoch is already open (Complete first)")
        reqs = [s.endpoint.irecv(None, r, POST_TAG, "Win.Start") for r in ranks]
        s.endpoint.engine.wait_all(reqs)
        s.epochs.access = ranks

    def Complete(self) -> None:
        """End the access epoch begun by ``Start``: this rank's operations complete."""
        s = self._call("Complete")
        ranks = s.epochs.access
        if ranks is None:
            raise s.epochs._error("Complete", "no access epoch is open (Complete without Start)")
        for r in ranks:
            s.origin.send(r, (COMPLETE,), None, "Win.Complete")
        s.origin.complete_local(ranks)
        s.epochs.access = None

    def _exposure_done(self, s: _State) -> bool:
        return s.exposed.completions >= len(s.epochs.exposure or ())

    def _end_exposure(self, s: _State) -> None:
        s.exposed.completions -= len(s.epochs.exposure)
        s.epochs.exposure = None

    def Wait(self) -> None:
        """End the exposure epoch begun by ``Post``: wait until every origin completed."""
        s = self._call("Wait")
        if s.epochs.exposure is None:
            raise s.epochs._error("Wait", "no exposure epoch is open (Wait without Post)")
        if not self._exposure_done(s):
            waits = [_EpochWait("Win.Wait", r, s.label) for r in s.epochs.exposure]
            s.endpoint.engine.wait_until(lambda: self._exposure_done(s), waits)
        self._end_exposure(s)

    def Test(self) -> bool:
        """``Wait`` without blocking: True (and the epoch ended) once every origin completed."""
        s = self._call("Test")
        if s.epochs.exposure is None:
            raise s.epochs._error("Test", "no exposure epoch is open (Test without Post)")
        if not self._exposure_done(s):
            s.endpoint.engine.poll()
        if not self._exposure_done(s):
            return False
        self._end_exposure(s)
        return True

    # -- passive target ----------------------------------------------------------------------
    def Lock(self, rank: int, lock_type: int = LOCK_EXCLUSIVE, assertion: int = 0) -> None:
        """Begin a passive-target epoch on ``rank`` (waits until the lock is granted)."""
        s = self._call("Lock")
        rank = self._target_rank(s, rank, "Lock")
        lock_type = _lock_type(s, lock_type)
        if rank == PROC_NULL:
            return
        s.epochs.check_lock(rank, lock_type, "Lock")
        nocheck = bool(_check_int(assertion, "Lock", "assertion") & MODE_NOCHECK)
        if not nocheck:
            s.origin.lock(rank, lock_type, "Win.Lock")
            if rank == s.rank:      # local loads and stores may follow: wait for it now
                s.origin.granted(rank)
        s.epochs.locks[rank] = (lock_type, nocheck)

    def Unlock(self, rank: int) -> None:
        """End the passive-target epoch on ``rank``: its operations are complete there."""
        s = self._call("Unlock")
        rank = self._target_rank(s, rank, "Unlock")
        if rank == PROC_NULL:
            return
        _, nocheck = s.epochs.check_unlock(rank, "Unlock")
        del s.epochs.locks[rank]
        self._release(s, [rank], nocheck, "Win.Unlock")

    def _release(self, s: _State, ranks: Sequence[int], nocheck: bool, call: str) -> None:
        if nocheck:
            s.origin.complete_remote(ranks, call)
            return
        s.origin.complete_local(ranks)      # fetched data in, sends out
        for r in ranks:
            if r in s.origin.dirty:          # writes to acknowledge: Unlock waits for them
                s.origin.ask(r, (UNLOCK,), None, call)
                s.origin.dirty.discard(r)
            else:                            # all complete already: just give the lock back
                s.origin.release_lock(r, call)
        s.origin.complete_local(ranks)

    def Lock_all(self, assertion: int = 0) -> None:
        """A shared lock on every rank of the window."""
        s = self._call("Lock_all")
        if s.epochs.lock_all is not None or s.epochs.locks:
            raise s.epochs._error("Lock_all", "this rank already holds locks on this window")
        nocheck = bool(_check_int(assertion, "Lock_all", "assertion") & MODE_NOCHECK)
        if not nocheck:
            for r in range(s.size):
                s.origin.lock(r, LOCK_SHARED, "Win.Lock_all")
            s.origin.granted(s.rank)
        s.epochs.lock_all = nocheck

    def Unlock_all(self) -> None:
        s = self._call("Unlock_all")
        if s.epochs.lock_all is None:
            raise s.epochs._error("Unlock_all", "this rank holds no Lock_all (Unlock_all "
                                                "without Lock_all)")
        nocheck, s.epochs.lock_all = s.epochs.lock_all, None
        self._release(s, range(s.size), nocheck, "Win.Unlock_all")

    def Flush(self, rank: int) -> None:
        """Complete this rank's operations to ``rank``, at the target too."""
        s = self._call("Flush")
        rank = self._target_rank(s, rank, "Flush")
        if rank == PROC_NULL:
            return
        s.epochs.check_flush(rank, "Flush")
        s.origin.complete_remote([rank], "Win.Flush")

    def Flush_all(self) -> None:
        s = self._call("Flush_all")
        s.origin.complete_remote(s.origin.targets(), "Win.Flush_all")

    def Flush_local(self, rank: int) -> None:
        """Complete this rank's operations to ``rank`` locally (buffers reusable)."""
        s = self._call("Flush_local")
        rank = self._target_rank(s, rank, "Flush_local")
        if rank == PROC_NULL:
            return
        s.epochs.check_flush(rank, "Flush_local")
        s.origin.complete_local([rank])

    def Flush_local_all(self) -> None:
        s = self._call("Flush_local_all")
        s.origin.complete_local(s.origin.targets())

    def Sync(self) -> None:
        """Synchronise the public and private copies of the window: minimpi's windows are
        unified (one copy), so there is nothing to do."""
        self._call("Sync")

    # -- mpi4py's handle conversions -----------------------------------------------------------
    def py2f(self) -> int:
        return 0 if not self else id(self._s) & 0x7FFFFFFF

    toint = py2f


WIN_NULL = Win()


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


def _lock_type(s: _State, lock_type: Any) -> int:
    t = _check_int(lock_type, "Lock", "lock_type")
    if t not in (LOCK_EXCLUSIVE, LOCK_SHARED):
        raise MinimpiError(f"rank {s.rank}: Win.Lock: lock_type must be MPI.LOCK_EXCLUSIVE or "
                           f"MPI.LOCK_SHARED, got {t}", ERR_LOCKTYPE)
    return t
