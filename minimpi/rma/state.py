"""A window's state, shared by every handle on it, and the base of ``MPI.Win``: what the
operations (:mod:`.operations`) and the synchronisation calls (:mod:`.synchronisation`)
both stand on."""
from __future__ import annotations

import operator
import os
import weakref
from contextlib import nullcontext
from typing import Any, ContextManager, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..comm.handle_types import ERRORS_RETURN, Info
from ..constants import (
    PROC_NULL,
    WIN_FLAVOR_DYNAMIC,
)
from ..data.attributes import AttributeStore
from ..data.buffers import get_address
from ..errors import RankError
from ..p2p.observe import Activity
from . import am, cma, direct, rdma, shared
from .am import POST_TAG
from .epochs import Epochs
from .errors import WinError
from .exposed import Exposed


class _EpochWait:
    """Stands in for a request in 'what am I blocked on' reports (Win.Wait, Win.Start)."""

    done = False

    def __init__(self, call: str, peer: int, label: str, world: int) -> None:
        self.description = (call, "source", peer, POST_TAG, label)
        self.world = world        # whom the deadlock report's wait-for graph points at


class _State:
    """Everything one window is, shared by every handle on it (``MPI.Win(win)``)."""

    def __init__(self, comm: Any, flavor: int, memory: np.ndarray, mem_obj: Any,
                 disp_unit: int, info: Any, segment: Optional[shared.SharedSegment]) -> None:
        #: the communicator the window was made on, named as diagnostics name it
        self.comm_name = getattr(comm.endpoint, "name", None) or comm.Get_name()
        self.comm = comm.Dup()          # the window's own messages never meet anybody else's
        self.endpoint = self.comm.endpoint
        # its point-to-point context carries only the window's own requests and replies: a
        # failed process touches only the operations that name it (under --fault-tolerant
        # a wildcard receive on a plain p2p context fails until the failure is acknowledged,
        # which would stop the server's receive for every origin); Fence and Free keep the
        # collective context, which fails once a member failed
        self.endpoint.engine.register_context(self.endpoint.context, self.endpoint.group,
                                              "control")
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self.label = f"win#{self.endpoint.context}"
        self.flavor = flavor
        self.mem_obj = mem_obj
        self.disp_unit = int(disp_unit)
        self.base = get_address(mem_obj) if mem_obj is not None else 0
        self.info = Info.Create(info) if isinstance(info, Info) else Info.Create()
        self.name = ""
        self.errhandler = ERRORS_RETURN    # what mpi4py sets on the windows it makes
        self.attrs = AttributeStore()   # the user attributes (Set_attr)
        self.segment = segment
        # every rank's window size and disp_unit (origins check bounds before sending), and
        # where its memory is (process, address) for straight copies on one host
        address = int(memory.ctypes.data) if memory.size else 0
        #: RDMA into the peers' registered windows (verbs; not for shared or dynamic ones)
        self.rdma = rdma.Windows.expose(self.endpoint, memory,
                                        flavor != WIN_FLAVOR_DYNAMIC and segment is None)
        facts = self.comm.allgather((int(memory.size), self.disp_unit, os.getpid(), address,
                                     self.rdma.remote))
        self.sizes = [f[0] for f in facts]
        self.units = [f[1] for f in facts]
        hosts = self.endpoint.hosts
        # peers reached over verbs take RDMA, even on this host (a job that chose verbs for
        # them); cross memory attach reaches the other peers of this host
        self.rdma.connect(self.endpoint, [f[4] for f in facts])
        #: target -> (pid, address) of the peers whose memory cross memory attach may reach
        self.reachable: Dict[int, Tuple[int, int]] = {}
        if cma.available() and flavor != WIN_FLAVOR_DYNAMIC and segment is None:
            self.reachable = {t: (f[2], f[3]) for t, f in enumerate(facts)
                              if t != self.rank and hosts[t] == hosts[self.rank] and f[0]
                              and t not in self.rdma.targets}
        self.exposed = Exposed(self.rank, self.label, memory,
                               dynamic=flavor == WIN_FLAVOR_DYNAMIC,
                               range_lock=segment.lock if segment is not None else None)
        self.epochs = Epochs(self.rank, self.label)
        self.origin = am.Origin(self.endpoint)
        self.server = am.Server(self.endpoint, self.exposed)
        state = weakref.ref(self)
        self.server.names = lambda: _names(state())
        self.server.open_epochs = lambda: _open_epochs(state())
        self.freed = False
        #: target -> byte view of its memory, for the targets reached directly (the fast
        #: path of Put/Get: :mod:`.direct`); emptied by Free
        self.direct_views: Dict[int, memoryview] = direct.views_of(self)
        #: fast-path calls since the last round of progress (:func:`.direct.put`)
        self.unpolled = 0

    @property
    def memory(self) -> np.ndarray:
        return self.exposed.memory

    def epoch_call(self, call: str, epoch: str, peers: Optional[Sequence[int]] = None,
                   collective: bool = False) -> "EpochCall":
        """A context manager naming this synchronisation call as the rank's current
        activity (``Engine.activities``), so that a wait inside it that lasts is reported as
        ``Win.Fence on window 'w0' (COMM_WORLD)`` with its epoch and the ranks it waits for.
        ``peers``: window ranks it waits for (every other rank when ``collective``)."""
        return EpochCall(self, call, epoch, peers, collective)

    def direct_memory(self, target: int, call: str) -> Optional[np.ndarray]:
        """The target's window memory when this rank can reach it directly (itself, or a
        peer in the same shared segment), else None."""
        if self.segment is not None and target < len(self.segment.parts):
            self.wait_for_grant(target, call)     # a lock asked of it must be ours first
            return self.segment.parts[target]
        if target == self.rank and not self.exposed.dynamic:
            return self.exposed.memory
        return None

    def wait_for_grant(self, target: int, call: str) -> None:
        """Wait until the lock this rank asked of ``target`` is granted (before touching its
        memory straight); a wait that lasts is reported as ``call`` in a passive target
        epoch on ``target``, so the deadlock report can name who holds that lock."""
        req = self.origin.grants.get(target)
        if req is None or req.done:
            self.origin.granted(target)
            return
        with self.epoch_call(f"Win.{call}", "passive target (lock)", [target]):
            self.origin.granted(target)

    def loads_and_stores(self, target: int) -> bool:
        """Whether this rank can reach ``target``'s window memory with plain loads and
        stores (its own memory, or a part of the shared segment), which a lock on
        ``target`` must protect from the moment ``Lock`` returns."""
        return target == self.rank or self.segment is not None

    def atomic(self, target: int, layout: Any, write: bool) -> ContextManager[Any]:
        """What an accumulate applied straight in ``target``'s memory (see
        :meth:`direct_memory`) holds to be atomic against every other accumulate there: in a
        shared segment, its byte-range lock (:mod:`.atomics`), which the target's server
        takes too; for this rank's own private memory nothing (its server runs in this
        thread, one request at a time)."""
        lock = self.segment.lock if self.segment is not None else None
        if lock is None or not layout.nbytes:
            return _NOTHING
        return lock.hold(target, layout.low, layout.high, write)


_NOTHING = nullcontext()


def _open_epochs(state: Optional["_State"]) -> List[str]:
    """The calls whose epochs this rank left open on the window (``Lock(2)``, ``Lock_all``,
    ``Start``, ``Post``); an open fence epoch is normal and not listed."""
    if state is None or state.freed:
        return []
    epochs = state.epochs
    out = [f"Lock({target})" for target in sorted(epochs.locks)]
    out += ["Lock_all"] if epochs.lock_all is not None else []
    out += ["Start"] if epochs.access is not None else []
    out += ["Post"] if epochs.exposure is not None else []
    return out


def _names(state: Optional["_State"]) -> Tuple[str, str]:
    """(the window's name or label, the communicator it was made on) for reports; a window
    whose handles are all gone (never freed) keeps serving under its label."""
    if state is None:
        return "a window no handle refers to", "?"
    return state.name or state.label, state.comm_name


class EpochCall(Activity):
    """A window's synchronisation call under way (see :meth:`_State.epoch_call`); its
    description is built only if a wait inside it lasts long enough to be reported."""

    __slots__ = ("state", "call", "epoch", "peers", "collective")

    def __init__(self, state: _State, call: str, epoch: str, peers: Optional[Sequence[int]],
                 collective: bool) -> None:
        self.state, self.call, self.epoch = state, call, epoch
        self.peers, self.collective = peers, collective

    def __enter__(self) -> "EpochCall":
        self.state.endpoint.engine.activities.push(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.state.endpoint.engine.activities.pop()

    def describe(self) -> dict:
        s = self.state
        world = s.endpoint.engine.group_of(s.endpoint.context) or tuple(range(s.size))
        peers = self.peers
        if peers is None:
            peers = [r for r in range(s.size) if r != s.rank] if self.collective else []
        return {"call": self.call, "win": s.name or s.label, "comm": s.comm_name,
                "epoch": self.epoch, "collective": self.collective, "label": s.label,
                "group": [int(w) for w in world], "peers": [int(world[r]) for r in peers]}


def _check_int(value: Any, call: str, arg: str) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"Win.{call}: {arg} must be an integer, got "
                        f"{type(value).__name__}") from None



class WinHandle:
    """The part of ``MPI.Win`` every call needs: the state (``_s``, None for a null window),
    liveness checks and progress."""

    __slots__ = ("_s", "__weakref__")

    @property
    def endpoint(self) -> Optional[Any]:
        """The engine's view of the window's own communicator (None for a null or freed
        window): what tracing asks for the rank's observer."""
        return self._s.endpoint if self else None

    @property
    def label(self) -> str:
        """How diagnostics and traces name the window: its name (``Set_name``) or
        ``win#<context>``; ``WIN_NULL`` for a null window."""
        s = self._s
        if s is None:
            return "WIN_NULL"
        return s.name or s.label

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

    def _target_rank(self, s: _State, rank: Any, call: str) -> int:
        rank = _check_int(rank, call, "target_rank")
        if rank != PROC_NULL and not 0 <= rank < s.size:
            raise RankError(f"rank {s.rank}: Win.{call}(target_rank={rank}): expected "
                            f"0..{s.size - 1} or MPI.PROC_NULL (window {s.label})")
        return rank

