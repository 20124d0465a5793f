"""The point-to-point engine: matching, eager and rendezvous protocols, and progress.

One engine per process (per rank thread with the inproc transport). It owns the matching
queues of every communicator context and drives one :class:`~minimpi.transports.base.Transport`.

Protocols (see :mod:`minimpi.transports.frames`):

* **Eager** (message <= ``eager_limit``, default 64 KiB): the data follows its header at once.
  If no receive is posted it is kept in the unexpected queue, so a small standard-mode send
  completes without a matching receive.
* **Rendezvous** (larger): the sender sends ``RTS``; when a receive matches, the receiver answers
  ``CTS`` and the sender streams ``DATA`` straight into the posted buffer. So a large send waits
  for its receive, as in every real MPI, and large transfers are zero-copy.

Interface: the layers above send and receive through :class:`~minimpi.p2p.endpoint.Endpoint`
and use the engine's public operations for the rest - peek a context's queues
(:meth:`Engine.unexpected_messages`, :meth:`Engine.peek_message`, :meth:`Engine.posted_receives`),
fail or drop part of a context's pending traffic (:meth:`Engine.fail_pending`,
:meth:`Engine.drop_unexpected`: how a collective slot fails), count what is held
(:meth:`Engine.match_stats`), and watch it: subscribers of the world's bus
(:mod:`minimpi.bus`, ``engine.bus``) see messages, collective steps and waits; a per-context watcher (:meth:`Engine.watch_unexpected`)
sees each message that matched no posted receive. Nothing above reads the engine's private
fields or replaces its methods.

Progress: any blocking call runs :meth:`Engine.wait_until`, which calls
``transport.progress`` - it reads and writes on every connection, so two ranks that both
send before receiving never stall each other on full socket buffers. How it waits is the
engine's :class:`~minimpi.p2p.progress.ProgressPolicy`: poll without sleeping for a short
while, then sleep in the transport's poll (or sleep at once: ``block``).

Threads (``MPI.THREAD_MULTIPLE``): every operation may be called from any thread.

* One lock (``Engine.lock``, reentrant) is held by whoever touches the matching queues or
  the transport: every public operation takes it (about 0.1 us uncontended, no Python call).
* Exactly one thread at a time runs the transport's progress: the *progress owner*
  (``_owner``). A blocking wait that finds no owner becomes it for one round (the
  progress policy's spin, then the transport's sleep) and progresses for every thread: a
  frame it delivers may complete another thread's request. While it sleeps in the
  transport's poll it releases the lock (:meth:`Engine.sleep`, which the transport calls),
  so the other threads send, post receives and test meanwhile; they never call the
  transport's progress themselves (a ``poll``/``Test`` while an owner exists leaves it to
  the owner).
* A wait that finds an owner waits on the condition ``_turn`` (at most ``POLL_INTERVAL``
  at a time). The owner notifies it after each round and when it leaves, so the request
  it completed wakes its waiter, and a waiter becomes the next owner once the owner's own
  wait is over. A thread that completes a request outside progress (a send to itself, a
  cancel, a failed collective slot) or leaves the sleeping owner work it must see (a frame
  queued for want of room) wakes it (``Transport.wake``) and notifies the waiters.
* ``_waiting`` holds, per thread waiting on ``_turn``, what it waits for;
  :meth:`Engine.waiting_threads` adds the owner: the deadlock reporter
  (:mod:`minimpi.runtime.diagnose`) and finalize read it.

With one thread the cost is the lock's acquire and release per call and a few attribute
tests per wait; the Python calls per operation are those of before.
"""
from __future__ import annotations

import collections
import itertools
import os
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..bus import Bus
from ..constants import ANY_SOURCE, ANY_TAG
from ..data.units import parse_size
from ..errors import (
    JobAbortedError,
    MPITimeoutError,
    PeerLostError,
    ProcFailedError,
    ProcFailedPendingError,
    ProtocolError,
    RevokedError,
    TruncationError,
    UnsupportedError,
)
from ..transports import frames, signal_guard
from ..transports.base import ExpressGate, FrameSink, Transport
from ..transports.frames import (
    CTS,
    DATA,
    EAGER,
    F_SYNC,
    PAYLOAD_WITH_MATCH_MAX,
    RTS,
    SYNC_ACK,
    Header,
    copy_into,
)
from ..transports.tcp import UID_RANK_MASK, UID_SHIFT
from .matching import Incoming, MatchQueues
from .observe import Activities, MatchStats
from .progress import ProgressPolicy
from .request import RecvRequest, Request, SendRequest, Status, describe

_pack = frames.HEADER.pack

#: from this size on, a buffer that a payload will fill is allocated without zeroing it: a
#: received object's bytes overwrite it anyway, and zeroing a megabyte costs as much as
#: copying it (bytearray(n) zeroes; numpy.empty does not)
UNZEROED_FROM = 64 * 1024


def payload_buffer(n: int) -> Union[bytearray, np.ndarray]:
    """A writable buffer of ``n`` bytes for a payload to land in."""
    return bytearray(n) if n < UNZEROED_FROM else np.empty(n, np.uint8)

DEFAULT_EAGER_LIMIT = 64 * 1024

#: context ids 0/1 belong to COMM_WORLD, 2/3 to COMM_SELF; new communicators take the next
#: free ones (:meth:`Engine.free_context`)
FIRST_FREE_CONTEXT = 4

#: How often a blocked wait wakes up to run its checks (peer loss, abort, diagnostics hooks).
POLL_INTERVAL = 0.25
#: looks at a peer's ring per round of an express receive's spin (see receive_now): between
#: two rounds the spin's own checks run, and a frame that comes meanwhile waits for them
#: (64 looks, ~4 us: -0.08 us per 8 B one-way against 16; 160 gains nothing more)
LOOKS = 64

_get_ident = threading.get_ident
_MAIN_THREAD = threading.main_thread().ident
#: per thread: whether it has blocked asynchronous signals (signal_guard), done on the first
#: wait of a thread other than the main one
_thread_flags = threading.local()

#: what a context carries (:meth:`Engine.register_context`): a communicator's point-to-point
#: messages, its collectives' messages, or a layer's own control traffic (fault tolerance's
#: agreements), which process failures touch only when they name the failed peer
CONTEXT_KINDS = ("p2p", "collective", "control")


class HostTable(tuple):
    """The host index of each world rank (a tuple), and of peers of other jobs by their
    peer id (``foreign``): ``hosts[peer]`` for both. Hashable, as layouts are cached."""

    def __new__(cls, own: Tuple[int, ...], foreign: Dict[int, int]) -> "HostTable":
        table = super().__new__(cls, own)
        table.foreign = dict(foreign)
        return table

    def __getitem__(self, index):   # type: ignore[override]
        if isinstance(index, int) and index >= len(self):
            return self.foreign[index]
        return super().__getitem__(index)

    def __eq__(self, other: object) -> bool:
        return tuple.__eq__(self, other) and getattr(other, "foreign", {}) == self.foreign

    def __hash__(self) -> int:
        return hash((tuple(self), tuple(sorted(self.foreign.items()))))


class _FrameSender:
    """The eager writer of a transport without one of its own
    (:meth:`Transport.eager_writer` is None): the header is packed here and the frame handed
    to :meth:`Transport.send_now`."""

    __slots__ = ("transport", "dest")

    def __init__(self, transport: Any, dest: int) -> None:
        self.transport = transport
        self.dest = dest

    def send_eager(self, flags: int, context: int, source: int, tag: int, msg_id: int,
                   payload: Sequence[memoryview], nbytes: int) -> bool:
        return self.transport.send_now(self.dest, _pack(EAGER, flags, 0, context, source,
                                                        tag, msg_id, nbytes), payload, nbytes)

    def send_express(self, gate: ExpressGate, context: int, source: int, tag: int, buf: Any,
                     nbytes: int) -> bool:
        # (a transport's send_now may not be able to take back part of a frame that a
        # buffer which is not C-contiguous left half-sent: such a buffer is declined first)
        if not buf.flags.c_contiguous:
            return False
        try:
            gate.acquire()
            return (gate.open and nbytes <= gate.eager_limit
                    and self.send_eager(0, context, source, tag, next(gate.msg_ids), (buf,),
                                        nbytes))
        finally:
            if gate.held():
                gate.release()


class _Express:
    """The blocking receive :meth:`Engine.receive_now` polls for: what it accepts, the
    buffer a matching eager message is copied into (None: an object's bytes are kept), and
    what it got (source, tag, length, bytes or None)."""

    __slots__ = ("context", "source", "tag", "target", "got")

    def __init__(self, context: int, source: int, tag: int,
                 target: Any) -> None:
        self.context = context
        self.source = source
        self.tag = tag
        self.target = target
        self.got: Optional[Tuple[int, int, int, Any]] = None


class Engine(FrameSink):
    """Matching and protocols for one rank over one transport."""

    def __init__(self, rank: int, size: int, transport: Optional[Transport],
                 eager_limit: int = DEFAULT_EAGER_LIMIT, bus: Optional[Bus] = None, *,
                 fault_tolerant: bool = False,
                 job_abort: Optional[Callable[[int, str], None]] = None,
                 ledger: object = None, block_report_after: float = 1.0,
                 universe_size: Optional[int] = None,
                 progress_policy: Optional[ProgressPolicy] = None) -> None:
        """The engine of world rank ``rank`` of ``size`` over ``transport`` (None: a world of
        one), configured once here: ``bus`` (the world's instrumentation bus),
        ``fault_tolerant`` (``--fault-tolerant``: see the attribute), ``job_abort`` (how
        ``Comm.Abort`` ends the job), ``ledger`` (where messages came from, for the finalize
        check: :class:`minimpi.comm.ledger.Ledger`), ``block_report_after`` (seconds before
        a wait is reported blocked), ``universe_size`` (``MPI.UNIVERSE_SIZE``) and
        ``progress_policy`` (how a wait spins and sleeps; :meth:`set_progress_policy` once
        the rendezvous knows how many ranks share this host)."""
        self.rank = rank
        self.size = size
        self.transport = transport
        self.eager_limit = int(eager_limit)
        #: held by whoever touches the matching queues or the transport (module docstring:
        #: Threads); hold it to make several calls of this interface one step for the others
        self.lock = threading.RLock()
        self._release_save = self.lock._release_save       # (what threading.Condition uses)
        self._acquire_restore = self.lock._acquire_restore
        # the express lane (send_now, receive_now) takes it with these: a ``with`` statement
        # costs twice the two calls (about 0.1 us per message). The acquire is inside the
        # try and the release asks whether this thread holds it: a signal handler that
        # raises right after the acquire returned still releases it, and one that raises
        # while a contended acquire waited (nothing acquired) releases nothing
        self._lock_acquire = self.lock.acquire
        self._lock_release = self.lock.release
        self._lock_held = self.lock._is_owned
        #: the message numbers of every send (unique per sender; a declined express send
        #: leaves a gap, which nothing minds)
        self._msg_ids = itertools.count(1)
        #: what a transport's eager writer asks before an express send
        #: (:meth:`~minimpi.transports.base.Transport.eager_writer`): open exactly while
        #: the lane is
        self.gate = ExpressGate(self.lock, self.eager_limit, self._msg_ids)
        # waits of threads that are not the progress owner sleep on this
        self._turn = threading.Condition(self.lock)
        self._owner: Optional[int] = None    # the thread running the transport's progress
        self._express: Optional[_Express] = None   # the receive_now polling (one at a time)
        #: world rank -> the eager writer to it (Transport.eager_writer, or a _FrameSender)
        self._writers: Dict[int, Any] = {}
        #: world rank -> the writer an express send to it may use without looking at
        #: anything else (``send_express(self.gate, ...)``, or :meth:`send_now`): filled
        #: while no abort, lost peer or revoked communicator stops express sends, emptied
        #: when one does (:meth:`_close_lane`). A ``Send`` front reads it without the lock:
        #: the writer's gate, taken under it, says whether it still holds
        self.lane: Dict[int, Any] = {}
        #: (context, rank in its group) -> the transport's eager reader of that peer
        self._readers: Dict[Tuple[int, int], Any] = {}
        self._waiters = 0                    # threads waiting on _turn
        self._rounds = 0                     # progress rounds that moved something
        #: thread ident -> the requests its wait waits for, for the threads waiting on _turn
        self._waiting: Dict[int, List[Request]] = {}
        #: set by :meth:`close` while other threads are still inside MPI calls: why their
        #: calls end; ``_park`` when they must never return instead (interpreter exit)
        self._closed_why: Optional[str] = None
        self._park = False
        #: thread ident -> (frame, what) of a communicator creation in flight: between its
        #: proposal of a context id and the agreement (:meth:`free_context`)
        self.creations: Dict[int, Tuple[object, str]] = {}
        #: how a blocked wait polls and sleeps (from MINIMPI_PROGRESS: :meth:`set_progress_policy`)
        self.progress_policy = progress_policy or ProgressPolicy("block")
        if transport is not None:
            transport.attach(self)
        self._queues: Dict[int, MatchQueues] = {}
        self._groups: Dict[int, Tuple[int, ...]] = {}  # context -> world ranks of its members
        self._current: Dict[int, object] = {}  # peer -> what the payload now arriving belongs to
        # (dest, msg_id) -> what to send once the receiver answers CTS:
        # (request, payload, context, source, tag, flags, nbytes)
        self._rndv_sends: Dict[Tuple[int, int], Tuple[SendRequest, Sequence[memoryview], int, int, int, int, int]] = {}
        self._rndv_recvs: Dict[Tuple[int, int], RecvRequest] = {}
        self._sync_sends: Dict[Tuple[int, int], SendRequest] = {}
        #: peers gone (-> why), as a transport or a failure notice said: operations that
        #: name one fail
        self.lost_peers: Dict[int, str] = {}
        #: under fault tolerance, the failed processes (ULFM), in the order they were told
        #: (:meth:`notify_failed`: the launcher's word, the processes that ended abnormally;
        #: a peer that merely finished is gone but has not failed)
        self.failed: Dict[int, str] = {}
        #: ``--fault-tolerant`` (ULFM): a lost peer is a failed process that the job survives;
        #: operations that need it raise ``ProcFailedError`` (MPI.ERR_PROC_FAILED), a wildcard
        #: receive raises ``ProcFailedPendingError`` until the failure is acknowledged, and a
        #: collective on a communicator with a failed member fails at once
        self.fault_tolerant = fault_tolerant
        self._collective_contexts: set = set()
        self._control_contexts: set = set()
        self._acknowledged: Dict[int, frozenset] = {}   # p2p context -> failures acknowledged
        #: context -> why, for the revoked contexts (:meth:`revoke_context`; read-only above)
        self.revoked: Dict[int, str] = {}
        #: failures told by another thread (the launcher's notices), applied by this one
        self._failure_notices: collections.deque = collections.deque()
        # Operations that advance themselves as their messages complete (nonblocking
        # collectives): each has ``advance() -> bool`` (True once finished); every round of
        # progress calls them before it may sleep.
        self.active: List[object] = []
        self.aborted: Optional[str] = None
        #: protocol violations of peers, found inside the transport's progress and raised
        #: from the next wait or poll of this rank (never from inside the transport, whose
        #: stream must stay in step)
        self.faults: List[ProtocolError] = []
        #: the world's instrumentation bus (:mod:`minimpi.bus`): who watches this engine's
        #: messages, steps and waits
        self.bus = bus if bus is not None else Bus()
        #: what the layers above are in the middle of (a window's epoch call), for the
        #: deadlock reporter (observe.Activities)
        self.activities = Activities()
        #: after how many seconds a wait is reported to the subscribers as blocked
        self.block_report_after = block_report_after
        # context -> what to tell about each message that matched no posted receive there
        # (watch_unexpected); consulted only on that path
        self._unexpected_watchers: Dict[int, Callable[[Incoming], None]] = {}
        # How ``Comm.Abort(code)`` ends the job: the process runtime gives one that tells
        # the launcher and exits with ``code``; without one only this engine is aborted.
        self.job_abort = job_abort
        # Where point-to-point messages and nonblocking requests came from, for the check at
        # finalize (minimpi.comm.ledger.Ledger); the runtime of a real job gives one.
        self.ledger = ledger
        #: MPI.UNIVERSE_SIZE (None: the world's size)
        self.universe_size = universe_size if universe_size is not None else size
        self._next_context = FIRST_FREE_CONTEXT
        #: host index of every world rank (ranks with equal indices share a machine); one
        #: host until the rendezvous says otherwise (:meth:`set_hosts`)
        self.hosts: Tuple[int, ...] = (0,) * size

    def set_hosts(self, identities: Sequence[str]) -> None:
        """Record which world ranks share a host, from each rank's host identity (any
        hashable label); hosts are numbered in order of their first rank."""
        numbers: Dict[str, int] = {}
        self.hosts = tuple(numbers.setdefault(h, len(numbers)) for h in identities)
        self._host_numbers = numbers

    def add_foreign_peers(self, hosts: Dict[int, str]) -> None:
        """Processes of other jobs (``Spawn``, ``Connect``) join this engine's peers: peer id
        -> host identity. ``hosts[peer]`` answers for them too from now on."""
        with self.lock:
            numbers = self.__dict__.setdefault("_host_numbers", {})
            foreign = dict(getattr(self.hosts, "foreign", {}))
            for peer, identity in hosts.items():
                foreign[int(peer)] = numbers.setdefault(identity, len(numbers))
            self.hosts = HostTable(tuple(self.hosts), foreign)

    def set_progress_policy(self, policy: ProgressPolicy) -> None:
        """How waits spin and sleep from now on (decided once the rendezvous knows how many
        ranks share this host: spinning pays only while each has a core)."""
        self.progress_policy = policy

    def set_transport(self, transport: Transport) -> None:
        """Give a world of one, which needs no transport to itself, one after all (to reach
        the processes of another job)."""
        if self.transport is not None:
            raise ValueError(f"rank {self.rank}: the engine already has a transport")
        transport.attach(self)
        self.transport = transport

    def step_reporter(self) -> Optional[Callable[[object, int], None]]:
        """What a collective call should call at each step start: None while nobody
        observes steps (the bus's :meth:`~minimpi.bus.Bus.step_reporter`)."""
        return self.bus.step_reporter()

    def watch_unexpected(self, context: int, watcher: Optional[Callable[[Incoming], None]]
                         ) -> None:
        """Call ``watcher(message)`` for every message on ``context`` that matches no posted
        receive, once it is in the unexpected queue (None: stop). It runs inside progress:
        it may fail or drop pending traffic (:meth:`fail_pending`, :meth:`drop_unexpected`)
        but must not send, wait or raise. :meth:`release_context` forgets it."""
        with self.lock:
            if watcher is None:
                self._unexpected_watchers.pop(context, None)
            else:
                self._unexpected_watchers[context] = watcher

    def unexpected_watcher(self, context: int) -> Optional[Callable[[Incoming], None]]:
        """The watcher installed on ``context`` by :meth:`watch_unexpected`, if any."""
        return self._unexpected_watchers.get(context)

    def unexpected_watchers(self) -> Dict[int, Callable[[Incoming], None]]:
        """Every context's watcher (a copy), by context."""
        return dict(self._unexpected_watchers)

    # -- communicator contexts ----------------------------------------------------------
    # -- contexts -------------------------------------------------------------------------
    def free_context(self, creator: object = None, what: str = "") -> int:
        """The lowest context id this process has not used yet: what it proposes when the
        members of a new communicator (or the two groups of an intercommunicator) agree on
        one (each takes the largest proposal, free in every one of them).

        Threads: two creations in flight at once in one process (two threads each ``Dup``
        another communicator) could agree on one context id for two communicators, whose
        messages would then cross. The second is refused (``UnsupportedError``; the
        collective's other members raise ``CollectiveAbortedError``) instead: ``creator``
        (the creating call's frame) marks this thread's creation of a communicator from
        ``what`` in flight until :meth:`claim_contexts`; another thread's mark counts while
        its frame is still running."""
        with self.lock:
            creations = self.creations
            me = _get_ident()
            if creations and (len(creations) > 1 or me not in creations):
                stacks = sys._current_frames()
                for ident, (frame, where) in list(creations.items()):
                    if ident != me and _on_stack(stacks.get(ident), frame):
                        raise UnsupportedError(
                            f"rank {self.rank}: creating a communicator from "
                            f"{what or 'a communicator'} while another thread of this process "
                            f"creates one from {where}: concurrent communicator creation is "
                            f"not supported by minimpi (the context ids of the two could "
                            f"collide); create communicators from one thread at a time, e.g. "
                            f"one Dup per thread before the threads start")
                    if ident != me:
                        del creations[ident]       # (that creation ended in an exception)
            if creator is not None:
                creations[me] = (creator, what)
            return self._next_context

    def claim_contexts(self, first: int, count: int) -> None:
        """The context ids ``first .. first + count - 1`` are used in this process from now
        on (the agreed ids of a new communicator; this thread's creation is over)."""
        with self.lock:
            self._next_context = max(self._next_context, first + count)
            self.creations.pop(_get_ident(), None)

    def register_context(self, context: int, group: Sequence[int], kind: str = "p2p") -> None:
        """Route ``context``'s messages among ``group`` (world ranks); ``kind`` is one of
        :data:`CONTEXT_KINDS` (it decides how a process failure touches the context)."""
        with self.lock:
            old = self._groups.get(context)
            for source in range(len(old) if old is not None and self._readers else 0):
                self._readers.pop((context, source), None)     # (readers of the old group)
            self._groups[context] = tuple(group)
            self._queues.setdefault(context, MatchQueues())
            if kind == "collective":
                self._collective_contexts.add(context)
            elif kind == "control":
                self._control_contexts.add(context)
            elif kind != "p2p":
                raise ValueError(f"register_context: kind {kind!r}: expected one of {CONTEXT_KINDS}")

    def release_context(self, context: int) -> None:
        """The communicator of ``context`` is freed: forget its group and watcher, and its
        queues once nothing waits in them (a message still arriving for it keeps them)."""
        with self.lock:
            group = self._groups.pop(context, None)
            for source in range(len(group) if group is not None and self._readers else 0):
                self._readers.pop((context, source), None)
            self._unexpected_watchers.pop(context, None)
            self._collective_contexts.discard(context)
            self._control_contexts.discard(context)
            self._acknowledged.pop(context, None)
            self.revoked.pop(context, None)
            q = self._queues.get(context)
            if q is not None and not q.posted and not q.unexpected:
                del self._queues[context]

    def context_kind(self, context: int) -> str:
        """What ``context`` carries: one of :data:`CONTEXT_KINDS` (``p2p`` unless registered
        otherwise)."""
        if context in self._collective_contexts:
            return "collective"
        return "control" if context in self._control_contexts else "p2p"

    def group_of(self, context: int) -> Optional[Tuple[int, ...]]:
        """The world ranks of the communicator of ``context`` (None: not registered)."""
        return self._groups.get(context)

    def contexts(self) -> List[int]:
        """Every context that has queues here, in increasing order."""
        return sorted(self._queues)

    # -- looking at and changing a context's queues ----------------------------------------
    def unexpected_messages(self, context: int) -> Tuple[Incoming, ...]:
        """The messages waiting unreceived on ``context``, in arrival order (a snapshot)."""
        with self.lock:
            q = self._queues.get(context)
            return tuple(q.unexpected) if q is not None and q.unexpected else ()

    def posted_receives(self, context: int) -> Tuple[RecvRequest, ...]:
        """The receives posted on ``context`` and not yet matched, in posting order."""
        with self.lock:
            q = self._queues.get(context)
            return tuple(q.posted) if q is not None and q.posted else ()

    def peek_message(self, context: int, source: int, tag: int) -> Optional[Incoming]:
        """The message a receive for (``source``, ``tag``) on ``context`` would match now,
        left in the queue (a probe)."""
        with self.lock:
            q = self._queues.get(context)
            return q.find_unexpected(source, tag, remove=False) if q is not None else None

    def fail_pending(self, context: int, error: BaseException,
                     tag_filter: Optional[Callable[[int], bool]] = None) -> bool:
        """Fail with ``error`` the receives posted on ``context`` and the rendezvous sends on
        it still waiting for their receiver, those whose tag passes ``tag_filter`` (all if
        None); True if any was failed. (How a failed or mismatched collective call stops
        its peers from waiting forever.)"""
        with self.lock:
            failed = False
            q = self._queues.get(context)
            if q is not None and q.posted:
                keep = []
                for req in q.posted:
                    if tag_filter is None or tag_filter(req.tag):
                        req._fail(error)
                        failed = True
                    else:
                        keep.append(req)
                q.posted[:] = keep
            for key, value in list(self._rndv_sends.items()):
                if value[2] == context and (tag_filter is None or tag_filter(value[4])):
                    del self._rndv_sends[key]
                    value[0]._fail(error)
                    failed = True
            if failed and (self._owner is not None or self._waiters):
                self._tell_others()
            return failed

    def drop_unexpected(self, context: int, tag_filter: Callable[[int], bool]) -> int:
        """Drop the messages waiting on ``context`` whose tag passes ``tag_filter`` (they can
        never be received); how many were dropped."""
        with self.lock:
            q = self._queues.get(context)
            if q is None or not q.unexpected:
                return 0
            keep = [inc for inc in q.unexpected if not tag_filter(inc.tag)]
            dropped = len(q.unexpected) - len(keep)
            q.unexpected[:] = keep
            return dropped

    def send_protocol(self, req: SendRequest) -> Tuple[str, Optional[int]]:
        """How a send that is not done yet is under way: ``("rndv", nbytes)`` waiting for its
        receiver's clear-to-send, ``("sync", None)`` waiting for a synchronous send's
        acknowledgement, else ``("inflight", None)`` (handed to the transport)."""
        with self.lock:
            key = (req.peer, req.msg_id)
            rndv = self._rndv_sends.get(key)
            if rndv is not None:
                return "rndv", rndv[6]
            if key in self._sync_sends:
                return "sync", None
            return "inflight", None

    def match_stats(self) -> MatchStats:
        """Counts of what this engine holds now (see :class:`~.observe.MatchStats`)."""
        with self.lock:
            queues = self._queues.values()
            return MatchStats(sum(len(q.posted) for q in queues),
                              sum(len(q.unexpected) for q in queues), len(self._rndv_sends),
                              len(self._rndv_recvs), len(self._sync_sends), len(self.active))

    def _queue(self, context: int) -> MatchQueues:
        q = self._queues.get(context)
        if q is None:  # a message for a communicator this rank has not created yet
            q = self._queues[context] = MatchQueues()
        return q

    # -- sending ----------------------------------------------------------------------
    def isend(self, context: int, dest: int, source: int, tag: int, payload: Sequence[memoryview],
              nbytes: int, flags: int = 0, description=None) -> SendRequest:
        """Start sending ``payload`` (byte memoryviews, ``nbytes`` in all) to world rank ``dest``.

        ``source`` is this rank's rank in the communicator of ``context``.
        """
        try:
            with self.lock:
                if self.aborted is not None:
                    self._check_alive()
                req = SendRequest(self, description, dest)
                if self.lost_peers or self.revoked:
                    error = self._refusal(context, dest, req)
                    if error is not None:
                        req._fail(error)
                        return req
                if dest == self.rank:
                    self._send_to_self(req, context, source, tag, payload, nbytes, flags)
                    if self._owner is not None or self._waiters:   # it may be another thread's
                        self._tell_others()
                    return req
                req.msg_id = msg_id = next(self._msg_ids)
                if self.bus.sent:
                    for o in self.bus.sent:
                        o.message_sent(context, dest, source, tag, payload, nbytes, msg_id)
                if nbytes <= self.eager_limit:
                    if flags & F_SYNC:
                        req._pending = 2  # handed off, and acknowledged by the matching receive
                        self._sync_sends[(dest, msg_id)] = req
                    header = _pack(EAGER, flags, 0, context, source, tag, msg_id, nbytes)
                    self.transport.send(dest, header, payload, req._sent)
                else:
                    req.bulk = True
                    self._rndv_sends[(dest, msg_id)] = (req, payload, context, source, tag, flags, nbytes)
                    header = frames.pack(RTS, flags, context, source, tag, msg_id, nbytes)
                    self.transport.send(dest, header, (), None)
                if self._owner is not None:     # another thread sleeps in progress
                    self._nudge()
                return req
        except JobAbortedError:
            if self._park:      # (a daemon thread's call after close at exit: parked)
                self._park_if_exiting()
            raise

    # -- the express lane ---------------------------------------------------------------------
    # A blocking Send of a small contiguous buffer (or a pickle) to a peer whose transport can
    # take the frame at once, and a blocking Recv whose message is already here (or arrives
    # within the wait's spin), need no request, no queue and no callback: the frame goes
    # straight into the peer's ring, the message straight out of the unexpected queue. The
    # general path serves everything else (observers, wildcards behind posted receives,
    # rendezvous, synchronous sends, failures, revokes) with the same semantics; these two
    # only decline (False / None) and the caller takes it.
    def send_now(self, context: int, dest: int, source: int, tag: int,
                 payload: Sequence[memoryview], nbytes: int, flags: int = 0) -> bool:
        """Send ``payload`` (``nbytes`` in all) to world rank ``dest`` eagerly and at once,
        without a request: True if it is on its way (the send is complete), False if the
        general path must send it (:meth:`isend`)."""
        try:
            self._lock_acquire()
            writer = self.lane.get(dest)
            if writer is None:
                writer = self._open_lane(dest, nbytes, flags)
                if writer is None:
                    return False
            elif nbytes > self.eager_limit or flags & F_SYNC:
                return False
            msg_id = next(self._msg_ids)
            if not writer.send_eager(flags, context, source, tag, msg_id, payload, nbytes):
                return False
            if self.bus.sent:       # (once it is on its way: a declined frame is not sent)
                for o in self.bus.sent:
                    o.message_sent(context, dest, source, tag, payload, nbytes, msg_id)
            return True
        finally:
            if self._lock_held():
                self._lock_release()

    def _open_lane(self, dest: int, nbytes: int, flags: int) -> Any:
        """:meth:`send_now` where ``dest`` has no writer in the lane yet (the lock held):
        every condition looked at; the writer to use, put in the lane, or None when the
        general path must send (express sends stopped, a frame too large or synchronous)."""
        if (nbytes > self.eager_limit or flags & F_SYNC or dest == self.rank
                or self.aborted is not None or self.lost_peers or self.revoked
                or self.transport is None):
            return None
        writer = self._writers.get(dest)
        if writer is None:
            writer = self.transport.eager_writer(dest)
            if writer is None:
                writer = _FrameSender(self.transport, dest)
            self._writers[dest] = writer
        self.lane[dest] = writer
        self.gate.open = True       # (every condition of a closed lane looked at above)
        return writer

    def receive_now(self, context: int, source: int, tag: int,
                    target: Any) -> Optional[Tuple[int, int, int, Any]]:
        """The eager message a blocking receive for (``source``, ``tag``) on ``context``
        would get - from the unexpected queue, or taken as it arrives while the transport
        is polled for the progress policy's spin - as ``(source, tag, length, data)``.
        ``target``: a writable C-contiguous buffer the message is copied into (a byte view,
        a numpy array...; data is None), or None for an object (data: its bytes). A message
        that arrives during the spin goes from the transport's ring straight into ``target``
        (:meth:`eager_arrived`), never through the unexpected queue. None: no such message
        now, or the general path must receive (a receive is posted before this one, the
        message is a rendezvous or synchronous one, larger than ``target``, an observer
        listens, a peer is gone...). It polls the
        transport only while no other thread runs progress or waits for it (module
        docstring: Threads).

        From a named source whose transport has an eager reader (shared memory), the frame
        at the head of that peer's stream is looked at and taken in place (the reader's
        ``take`` is one store): a signal handler raising before it leaves the message there,
        so this needs no signal mask, which costs two system calls per message where the
        transport's ``progress`` delivers (:mod:`minimpi.transports.signal_guard`)."""
        try:
            self._lock_acquire()
            if (self.aborted is not None or self.lost_peers or self.revoked or self.faults
                    or self._failure_notices or self.bus.posted or self.bus.received):
                return None
            q = self._queues.get(context)
            if q is None or q.posted:
                return None
            if q.unexpected:
                inc = q.find_unexpected(source, tag, False)
                if inc is not None:
                    return self._take_queued(q, inc, target)
            if (self._owner is not None or self._waiters or not self.progress_policy.spin
                    or self.transport is None):
                return None
            reader = None if source < 0 else self._readers.get((context, source), False)
            if reader is False:
                reader = self._reader(context, source)
            if (target is not None and type(target) is not memoryview
                    and target.nbytes > PAYLOAD_WITH_MATCH_MAX):
                # a byte view of a larger buffer, made now, while nothing has come: the copy
                # of a message that comes later is then the cheapest there is (a small one's
                # comes with its header: frames.MATCH_AND_PAYLOAD, into the buffer itself)
                target = memoryview(target).cast("B")
            if reader is not None:
                # the first round of looks, before the spin's clock is set up: in a ping-pong
                # the answer often comes within it, and what this call does before it looks
                # delays that message as much as the sender's work does
                ahead = reader.take_matching(context, source, tag, target, LOOKS)
                if ahead:               # (source, tag, length, data): taken
                    return ahead
            # the spin: the reader's looks, the transport's progress between, until the
            # message comes or the policy's spin ends
            transport = self.transport
            policy = self.progress_policy
            express = None      # (made for the transport's progress only when it runs)
            try:
                clock = time.perf_counter
                start = clock()
                deadline = start + policy.spin
                yield_from = start + policy.yield_after
                progress = transport.progress
                polls = 0
                while True:
                    if reader is None:
                        ahead = None
                    elif self.bus.received:     # (an observer came meanwhile: progress's)
                        ahead = ()
                    else:
                        ahead = reader.take_matching(context, source, tag, target, LOOKS)
                        if ahead:               # (source, tag, length, data): taken
                            return ahead
                    # the transport's progress moves everything else (other peers, frames the
                    # reader does not hand over - at once -, queued sends, liveness); beside a
                    # reader that found nothing only every few rounds of looks, so that the
                    # frame awaited is seldom delivered by progress, which holds signals back
                    # for it (two system calls)
                    polls += 1
                    if reader is None or ahead is not None or not polls & 7:
                        if express is None:
                            express = self._express = _Express(context, source, tag, target)
                        progress(0)
                        if express.got is not None:
                            return express.got
                        if q.unexpected:      # one the lane cannot take (see eager_arrived)
                            inc = q.find_unexpected(source, tag, False)
                            if inc is not None:
                                return self._take_queued(q, inc, target)
                    now = clock()
                    if q.posted or self.lost_peers or self.faults or now >= deadline:
                        return None
                    if now >= yield_from:
                        os.sched_yield()
            finally:
                self._express = None
        finally:
            if self._lock_held():
                self._lock_release()

    def _reader(self, context: int, source: int) -> Any:
        """The transport's eager reader (:meth:`Transport.eager_reader`) of the world rank
        that is rank ``source`` of ``context``'s group, or None; kept per (context, source)
        until the context is released."""
        group = self._groups.get(context)
        if group is None or source >= len(group):
            return None
        reader = self._readers[(context, source)] = self.transport.eager_reader(group[source])
        return reader

    @staticmethod
    def _take_queued(q: MatchQueues, inc: Incoming, target: Any
                     ) -> Optional[Tuple[int, int, int, Any]]:
        """``receive_now``'s result for the queued message ``inc``, taken out of the queue
        (None, and it stays queued, if the general path must receive it)."""
        if (not inc.arrived or inc.rendezvous or inc.flags & F_SYNC or inc.waiting is not None
                or target is not None and inc.length > target.nbytes):
            return None
        q.unexpected.remove(inc)
        n = inc.length
        if target is None:
            return inc.source, inc.tag, n, inc.buffer
        if n:
            copy_into(target, inc.buffer)
        return inc.source, inc.tag, n, None

    def _send_to_self(self, req: SendRequest, context: int, source: int, tag: int,
                      payload: Sequence[memoryview], nbytes: int, flags: int) -> None:
        """Loopback: deliver through the same matching path, always eagerly (copied)."""
        req.msg_id = msg_id = next(self._msg_ids)
        if self.bus.sent:
            for o in self.bus.sent:
                o.message_sent(context, self.rank, source, tag, payload, nbytes, msg_id)
        if flags & F_SYNC:
            req._pending = 2
            self._sync_sends[(self.rank, msg_id)] = req
        header = Header(EAGER, flags, 0, context, source, tag, msg_id, nbytes)
        target = self.frame_arrived(self.rank, header)
        pos = 0
        for seg in payload:
            n = seg.nbytes
            target[pos:pos + n] = seg
            pos += n
        self.payload_arrived(self.rank, header, target)
        req._complete()

    def _send_control(self, peer: int, kind: int, msg_id: int) -> None:
        if peer == self.rank:
            self.frame_arrived(peer, Header(kind, 0, 0, 0, 0, 0, msg_id, 0))
        elif peer not in self.lost_peers:
            self.transport.send(peer, frames.pack(kind, 0, 0, 0, 0, msg_id, 0), (), None)

    # -- receiving --------------------------------------------------------------------
    def irecv(self, context: int, source: int, tag: int, target: Optional[memoryview],
              is_object: bool, description=None) -> RecvRequest:
        """Post a receive; ``target`` is a writable byte memoryview (None for an object)."""
        try:
            with self.lock:
                if self.aborted is not None:
                    self._check_alive()
                if self.bus.posted:
                    for o in self.bus.posted:
                        o.receive_posted(context, source, tag, target)
                req = RecvRequest(self, description, context, source, tag, target, is_object)
                if self.revoked or (self.lost_peers and self.fault_tolerant):
                    error = self._refusal(context, None, req)
                    if error is not None:
                        req._fail(error)
                        return req
                q = self._queues.get(context) or self._queue(context)
                inc = q.find_unexpected(source, tag, remove=True) if q.unexpected else None
                if inc is not None:
                    self._bind(req, inc)
                    if self._owner is not None:   # (a clear-to-send went out)
                        self._nudge()
                else:
                    lost = self._source_lost(source, self._groups.get(context)) if self.lost_peers else None
                    if lost is None:
                        q.posted.append(req)
                    else:  # the peer it names is gone: nothing can ever match
                        req._fail(self.lost_error(lost, describe(req)))
                return req
        except JobAbortedError:
            if self._park:      # (a daemon thread's call after close at exit: parked)
                self._park_if_exiting()
            raise

    def _bind(self, req: RecvRequest, inc: Incoming) -> None:
        """A posted receive meets an unexpected message."""
        req.matched = True
        req.peer = inc.peer
        st = req.status
        st.source, st.tag, st.nbytes = inc.source, inc.tag, inc.length
        if not inc.arrived and inc.peer in self.lost_peers:  # (taken by Mprobe before the loss)
            req._fail(self.lost_error(inc.peer, describe(req)))
            return
        if inc.rendezvous:
            self._rndv_recvs[(inc.peer, inc.msg_id)] = req
            self._send_control(inc.peer, CTS, inc.msg_id)
            return
        if inc.flags & F_SYNC:
            self._send_control(inc.peer, SYNC_ACK, inc.msg_id)
        if inc.arrived:
            self._deliver(req, inc.buffer)
            if self.bus.received:
                for o in self.bus.received:
                    o.message_received(inc.peer, inc.context, inc.tag, inc.msg_id, inc.length)
        else:
            inc.waiting = req

    def _deliver(self, req: RecvRequest, buffer: bytearray) -> None:
        """Hand a fully buffered message to its receive (no copy for objects)."""
        n = len(buffer)
        if req.is_object:
            req.buffer = buffer
        elif n > req.target.nbytes:
            self._truncated(req, n)
        elif n:
            req.target[:n] = buffer
        req._complete()

    def _truncated(self, req: RecvRequest, n: int) -> None:
        req.truncated = True
        req.error = TruncationError(
            f"rank {self.rank}: {describe(req)}: message of {n} bytes from rank {req.status.source} "
            f"does not fit the receive buffer of {req.target.nbytes} bytes (MPI_ERR_TRUNCATE); "
            f"nothing was written past the buffer - post a larger receive or Probe first")

    def _payload_target(self, req: RecvRequest, length: int) -> memoryview:
        if req.is_object:
            req.buffer = payload_buffer(length)
            return memoryview(req.buffer)
        if length > req.target.nbytes:
            self._truncated(req, length)
            return memoryview(bytearray(length))
        return req.target[:length]

    def iprobe(self, context: int, source: int, tag: int) -> Optional[Status]:
        inc = self.peek_message(context, source, tag)
        if inc is None:
            return None
        return Status(inc.source, inc.tag, inc.length)

    def take_message(self, context: int, source: int, tag: int) -> Optional[Incoming]:
        """Remove and return the message a receive would match (for Mprobe/Improbe)."""
        with self.lock:
            return self._queue(context).find_unexpected(source, tag, remove=True)

    def irecv_message(self, inc: Incoming, target: Optional[memoryview], is_object: bool,
                      description=None) -> RecvRequest:
        """Receive a message taken by :meth:`take_message` (``Message.Recv``)."""
        with self.lock:
            req = RecvRequest(self, description, inc.context, inc.source, inc.tag, target, is_object)
            self._bind(req, inc)
            return req

    def cancel(self, req: Request) -> None:
        """Cancel a receive that has not matched yet (sends cannot be cancelled once started)."""
        with self.lock:
            if isinstance(req, RecvRequest) and not req.matched:
                q = self._queue(req.context)
                if req in q.posted:
                    q.posted.remove(req)
                    req.status.cancelled = True
                    req._pending = 0
                    req.done = True
                    if self._owner is not None or self._waiters:   # (another thread's wait)
                        self._tell_others()

    # -- FrameSink: called by the transport -------------------------------------------------
    def frame_arrived(self, peer: int, header: Header) -> Optional[memoryview]:
        kind = header.kind
        if kind == EAGER:
            q = self._queues.get(header.context) or self._queue(header.context)
            req = q.take_posted(header.source, header.tag) if q.posted else None
            if req is not None:
                req.matched = True
                req.peer = peer
                st = req.status
                st.source, st.tag, st.nbytes = header.source, header.tag, header.length
                if header.flags & F_SYNC:
                    self._send_control(peer, SYNC_ACK, header.msg_id)
                self._current[peer] = req
                length = header.length
                if not req.is_object and length <= req.target.nbytes:   # the common case
                    return req.target[:length]
                return self._payload_target(req, length)
            inc = Incoming(peer, header.context, header.source, header.tag, header.flags,
                           header.msg_id, header.length, False)
            inc.buffer = payload_buffer(header.length)
            self._current[peer] = inc
            if self.revoked and header.context in self.revoked:
                return memoryview(inc.buffer)   # (read into no queue: Comm.Revoke drops it)
            q.unexpected.append(inc)
            if self._unexpected_watchers:
                watcher = self._unexpected_watchers.get(inc.context)
                if watcher is not None:
                    watcher(inc)
            return memoryview(inc.buffer)
        if kind == DATA:
            req = self._rndv_recvs.pop((peer, header.msg_id), None)
            if req is None:   # read its payload (the stream stays in step) into nothing
                self.faults.append(self._protocol_error(
                    peer, "data", header.msg_id, "no receive of this rank asked for it"))
                discard = Incoming(peer, header.context, header.source, header.tag,
                                   header.flags, header.msg_id, header.length, False)
                discard.buffer = payload_buffer(header.length)   # (in no queue)
                self._current[peer] = discard
                return memoryview(discard.buffer)
            self._current[peer] = req
            return self._payload_target(req, header.length)
        if kind == RTS:
            q = self._queue(header.context)
            req = q.take_posted(header.source, header.tag)
            inc = Incoming(peer, header.context, header.source, header.tag, header.flags,
                           header.msg_id, header.length, True)
            if req is not None:
                self._bind(req, inc)
            elif not (self.revoked and header.context in self.revoked):
                q.unexpected.append(inc)
                if self._unexpected_watchers:
                    watcher = self._unexpected_watchers.get(inc.context)
                    if watcher is not None:
                        watcher(inc)
            return None
        if kind == CTS:
            offer = self._rndv_sends.pop((peer, header.msg_id), None)
            if offer is None:
                self.faults.append(self._protocol_error(
                    peer, "clear-to-send", header.msg_id, "this rank offered no rendezvous "
                    "send with that id to it, or already answered one"))
                return None
            req, payload, context, source, tag, flags, nbytes = offer
            data = frames.pack(DATA, flags, context, source, tag, header.msg_id, nbytes)
            self.transport.send(peer, data, payload, req._sent)
            return None
        if kind == SYNC_ACK:
            req = self._sync_sends.pop((peer, header.msg_id), None)
            if req is not None:
                req._complete()
            return None
        self.faults.append(ProtocolError(
            f"rank {self.rank}: protocol error: unknown frame kind {kind} from world rank "
            f"{peer}; the frame was ignored (a fault in rank {peer}'s minimpi, or a different "
            f"version)"))
        return None

    def eager_arrived(self, peer: int, header: Header, payload: memoryview) -> None:
        """A whole eager frame, its payload readable in ``payload`` (the transport's ring):
        one call for what ``frame_arrived`` + ``payload_arrived`` do. With no receive
        posted on its context - the common case of the express lane, whose receives look in
        the unexpected queue first - the payload is copied once, into the queued message."""
        context = header.context
        q = self._queues.get(context) or self._queue(context)
        if q.posted or self.bus.received or header.flags & F_SYNC:
            target = self.frame_arrived(peer, header)
            if header.length:
                target[:header.length] = payload
            self.payload_arrived(peer, header, target)
            return
        if self.revoked and context in self.revoked:
            return                              # (Comm.Revoke drops what arrives for it)
        express = self._express
        if (express is not None and express.got is None and context == express.context
                and (header.source == express.source or express.source == ANY_SOURCE)
                and (header.tag == express.tag or express.tag == ANY_TAG)
                and (not q.unexpected
                     or q.find_unexpected(express.source, express.tag, False) is None)):
            # the blocking receive that polls for it (receive_now): straight into its buffer
            # - unless a message it matches came first and was queued (a synchronous or
            # rendezvous one, one too large for it): that one is its message, not this
            n, target = header.length, express.target
            if target is None:
                express.got = (header.source, header.tag, n, bytearray(payload))
                return
            if n <= target.nbytes:
                if n:
                    copy_into(target, payload)
                express.got = (header.source, header.tag, n, None)
                return
        inc = Incoming(peer, context, header.source, header.tag, header.flags,
                       header.msg_id, header.length, False)
        inc.buffer = bytearray(payload)
        inc.arrived = True
        q.unexpected.append(inc)
        if self._unexpected_watchers:
            watcher = self._unexpected_watchers.get(context)
            if watcher is not None:
                watcher(inc)

    def _protocol_error(self, peer: int, frame: str, msg_id: int, why: str) -> ProtocolError:
        return ProtocolError(
            f"rank {self.rank}: protocol error: world rank {peer} sent a {frame} frame for "
            f"message #{msg_id}, but {why}; the frame was ignored (a fault in rank {peer}'s "
            f"minimpi, or a different version)")

    def payload_arrived(self, peer: int, header: Header, buffer: Optional[memoryview]) -> None:
        owner = self._current.pop(peer)
        if isinstance(owner, RecvRequest):
            owner._complete()
            if self.bus.received:
                for o in self.bus.received:
                    o.message_received(peer, header.context, header.tag, header.msg_id,
                                       header.length)
            return
        owner.arrived = True
        if owner.waiting is not None:
            self._deliver(owner.waiting, owner.buffer)
            if self.bus.received:
                for o in self.bus.received:
                    o.message_received(peer, header.context, header.tag, header.msg_id,
                                       header.length)

    def peer_lost(self, peer: int, reason: str) -> None:
        self.lost_peers.setdefault(peer, reason)
        self._close_lane()
        for key in [k for k in self._rndv_sends if k[0] == peer]:
            req = self._rndv_sends.pop(key)[0]
            req._fail(self.lost_error(peer, describe(req)))
        for key in [k for k in self._sync_sends if k[0] == peer]:
            req = self._sync_sends.pop(key)
            req._fail(self.lost_error(peer, describe(req)))
        for key in [k for k in self._rndv_recvs if k[0] == peer]:
            req = self._rndv_recvs.pop(key)
            req._fail(self.lost_error(peer, describe(req)))
        owner = self._current.pop(peer, None)
        if isinstance(owner, Incoming):   # an unexpected message cut off mid-payload
            owner = owner.waiting
        if owner is not None:
            owner._fail(self.lost_error(peer, describe(owner)))
        for context, q in self._queues.items():
            # Its messages that never fully arrived (cut off, or a request-to-send whose data
            # can no longer come) must not match a receive that would then wait forever.
            if any(inc.peer == peer for inc in q.unexpected):
                q.unexpected[:] = [inc for inc in q.unexpected
                                   if inc.peer != peer or inc.arrived]
            # Receives that name this peer as their source can never match now.
            group = self._groups.get(context)
            if group is None:
                continue
            for req in list(q.posted):
                lost = self._source_lost(req.source, group)
                if lost is not None:
                    q.posted.remove(req)
                    req._fail(self.lost_error(lost, describe(req)))

    # -- fault tolerance (ULFM; minimpi.comm.ulfm) ------------------------------------------
    def notify_failed(self, peer: int, reason: str) -> None:
        """Process ``peer`` (a world rank) failed, as the launcher says; safe from any thread:
        the engine's own thread applies it at its next progress (within ``POLL_INTERVAL``)."""
        self._failure_notices.append((int(peer), str(reason)))

    def apply_failure_notices(self) -> None:
        """Apply the failures :meth:`notify_failed` queued (this engine's thread only)."""
        while self._failure_notices:
            peer, reason = self._failure_notices.popleft()
            if peer == self.rank or peer in self.failed:
                continue
            self.failed[peer] = reason
            self.peer_lost(peer, reason)
            if self.fault_tolerant:
                self._fail_for_failure(peer)

    def failed_peers(self) -> Tuple[int, ...]:
        """The world ranks of the processes known to have failed, in the order told."""
        with self.lock:
            if self._failure_notices:
                self.apply_failure_notices()
            return tuple(self.failed)

    def gone_peers(self) -> Tuple[int, ...]:
        """The world ranks of every peer known to be gone: failed, or ended (a transport
        saw it go)."""
        with self.lock:
            if self._failure_notices:
                self.apply_failure_notices()
            return tuple(self.lost_peers)

    def acknowledge_failures(self, contexts: Sequence[int], peers: Sequence[int]) -> None:
        """``Comm.Ack_failed``: wildcard receives on ``contexts`` no longer raise
        ``ProcFailedPendingError`` for the failures of ``peers`` (world ranks)."""
        with self.lock:
            for context in contexts:
                self._acknowledged[context] = frozenset(peers)

    def revoke_context(self, context: int, why: str) -> None:
        """``Comm.Revoke``: every pending and later operation on ``context`` fails with
        ``RevokedError``; messages that arrive for it are dropped."""
        with self.lock:
            if context in self.revoked:
                return
            self.revoked[context] = why
            self._close_lane()
            self._fail_each(context, lambda req: RevokedError(
                f"rank {self.rank}: {describe(req)}: {why}"))
            self.drop_unexpected(context, lambda tag: True)
            if self._owner is not None or self._waiters:
                self._tell_others()

    def is_revoked(self, context: int) -> bool:
        """Whether :meth:`revoke_context` was called for ``context``."""
        return context in self.revoked

    def probe_refusal(self, context: int, source: int, what: str) -> Optional[Exception]:
        """Why a probe (``what``: the call, for the message) for ``source`` (a rank of the
        context's group, or ``ANY_SOURCE``) on ``context`` that found nothing can never
        find anything: the context is revoked, or (fault tolerance) the source failed or a
        wildcard meets an unacknowledged failure. None: it may still."""
        with self.lock:
            if self._failure_notices:
                self.apply_failure_notices()
            if context in self.revoked:
                return RevokedError(f"rank {self.rank}: {what}: {self.revoked[context]}")
            if not self.fault_tolerant or not self.lost_peers:
                return None
            group = self._groups.get(context)
            if group is None or context in self._control_contexts:
                return None
            if source == ANY_SOURCE:
                pending = self._unacknowledged(context, group)
                return self._pending_error(pending, what) if pending else None
            lost = self._source_lost(source, group)
            return self.lost_error(lost, what) if lost is not None else None

    def _refusal(self, context: int, dest: Optional[int], req: Request) -> Optional[Exception]:
        """Why an operation on ``context`` (a send to world rank ``dest``, or the receive
        ``req``) cannot even start: the context is revoked, its peer is gone, a wildcard
        receive meets an unacknowledged failure, or (fault tolerance) a collective context
        has a failed member. None: it can."""
        if context in self.revoked:
            return RevokedError(f"rank {self.rank}: {describe(req)}: {self.revoked[context]}")
        if dest is not None and dest in self.lost_peers:
            return self.lost_error(dest, describe(req))
        if not self.fault_tolerant or not self.lost_peers:
            return None
        group = self._groups.get(context)
        if group is None:
            return None
        if context in self._collective_contexts:
            failed = [w for w in group if w in self.failed]
            if failed:
                return self.lost_error(failed[0], describe(req), collective=True)
        elif dest is None and req.source == ANY_SOURCE and context not in self._control_contexts:
            pending = self._unacknowledged(context, group)
            if pending:
                return self._pending_error(pending, describe(req))
        return None

    def _fail_each(self, context: int, error_for: Callable[[Request], Exception]) -> None:
        """Fail the receives posted on ``context`` and its rendezvous sends waiting for their
        receiver, each with the error ``error_for(request)`` (which names the call)."""
        q = self._queues.get(context)
        if q is not None and q.posted:
            posted, q.posted[:] = list(q.posted), []
            for req in posted:
                req._fail(error_for(req))
        for key, value in list(self._rndv_sends.items()):
            if value[2] == context:
                del self._rndv_sends[key]
                value[0]._fail(error_for(value[0]))

    def _unacknowledged(self, context: int, group: Sequence[int]) -> List[int]:
        acked = self._acknowledged.get(context, frozenset())
        return [w for w in group if w in self.failed and w not in acked]

    def _pending_error(self, peers: Sequence[int], what: str) -> ProcFailedPendingError:
        return ProcFailedPendingError(
            f"rank {self.rank}: {what}: world rank(s) {', '.join(map(str, peers))} of this "
            f"communicator failed ({self.failed[peers[0]]}) and the failure is not "
            f"acknowledged, so a wildcard receive cannot know its sender "
            f"(MPI.ERR_PROC_FAILED_PENDING; Comm.Ack_failed acknowledges)")

    def _fail_for_failure(self, peer: int) -> None:
        """Fault tolerance: what ``peer``'s failure ends beyond the operations that name it -
        every pending operation of a collective context it belongs to, and wildcard receives
        of point-to-point contexts it belongs to."""
        for context, group in list(self._groups.items()):
            if peer not in group or context in self._control_contexts:
                continue
            if context in self._collective_contexts:
                self._fail_each(context, lambda req: self.lost_error(
                    peer, describe(req), collective=True))
                continue
            q = self._queues.get(context)
            if q is None or not q.posted:
                continue
            for req in [r for r in q.posted if r.source == ANY_SOURCE]:
                q.posted.remove(req)
                req._fail(self._pending_error([peer], describe(req)))

    def lost_error(self, peer: int, what: str, collective: bool = False) -> PeerLostError:
        """The error of an operation that needs the lost ``peer``: ``PeerLostError`` (the
        job ends), or under fault tolerance ``ProcFailedError`` (MPI.ERR_PROC_FAILED)."""
        if not self.fault_tolerant:
            return PeerLostError(self._lost_text(peer, what))
        reason = self.failed.get(peer) or self.lost_peers.get(peer, "connection lost")
        how = ("a member of its communicator, " if collective else "") + f"world rank {peer}"
        return ProcFailedError(f"rank {self.rank}: {what} cannot complete: {how} failed "
                               f"({reason}) (MPI.ERR_PROC_FAILED)")

    def _source_lost(self, source: int, group: Optional[Sequence[int]]) -> Optional[int]:
        """The world rank of communicator rank ``source`` if that peer is gone, else None."""
        if group is not None and 0 <= source < len(group) and group[source] in self.lost_peers:
            return group[source]
        return None

    def _lost_text(self, peer: int, what: str) -> str:
        reason = self.lost_peers.get(peer, "connection lost")
        who = f"world rank {peer}" if peer >> UID_SHIFT == 0 else \
            f"rank {peer & UID_RANK_MASK} of job {(peer >> UID_SHIFT) - 1} (another job: Spawn, Connect)"
        return (f"rank {self.rank}: {what} cannot complete: {who} is gone ({reason}); "
                f"it exited or failed before the message could be exchanged")

    # -- waiting ------------------------------------------------------------------------
    def poll(self) -> None:
        """One non-blocking round of progress (used by test/iprobe). While another thread
        runs progress (the owner, maybe asleep in the transport's poll) it is left to that
        one, which wakes for whatever arrives."""
        owner = self._owner
        if owner is not None and owner != _get_ident():
            if self.aborted is not None or self.faults or self._failure_notices:
                with self.lock:
                    self._check_alive()
            return
        with self.lock:
            self._check_alive()
            if self.transport is not None and self._owner is None:
                if self.transport.progress(0) and self._waiters:
                    self._turn.notify_all()
            if self.active:
                self.advance_active()

    def add_active(self, operation: object) -> None:
        """Register a self-advancing operation (see ``active``) and advance it once."""
        with self.lock:
            if not operation.advance():
                self.active.append(operation)

    def advance_active(self) -> None:
        still = []
        for op in self.active:
            if not op.advance():
                still.append(op)
        self.active[:] = still

    def wait_for(self, req: Request, timeout: Optional[float] = None) -> None:
        if not req.done:
            self.wait_until(lambda: req.done, [req], timeout)

    def wait_all(self, reqs: Sequence[Request], timeout: Optional[float] = None) -> None:
        pending = [r for r in reqs if not r.done]
        if not pending:
            return

        def all_done() -> bool:
            while pending and pending[-1].done:
                pending.pop()
            return not pending or all(r.done for r in pending)

        self.wait_until(all_done, pending, timeout)

    def wait_any(self, reqs: Sequence[Request], timeout: Optional[float] = None) -> None:
        if any(r.done for r in reqs):
            return
        self.wait_until(lambda: any(r.done for r in reqs), list(reqs), timeout)

    def wait_until(self, done: Callable[[], bool], waiting_on: List[Request],
                   timeout: Optional[float] = None) -> None:
        """Make progress until ``done()``; sleep only in the transport's poll (the progress
        owner) or on ``_turn`` (the other threads' waits: module docstring, Threads).

        Signal handlers are held back for the whole wait (:mod:`~minimpi.transports.
        signal_guard`) except while the transport sleeps and at one point of each turn on
        ``_turn``: a handler that raises (``KeyboardInterrupt``, a ``SIGALRM`` timeout the
        program catches) never cuts the bookkeeping of who runs progress and who waits
        short - a progress owner left behind made the next wait wait for itself."""
        held = signal_guard.hold()      # (a pending handler raises here: nothing changed yet)
        try:
            self._wait_until(done, waiting_on, timeout)
        finally:
            signal_guard.release(held)  # handlers held back meanwhile run (and may raise) here

    def _wait_until(self, done: Callable[[], bool], waiting_on: List[Request],
                    timeout: Optional[float]) -> None:
        try:
            with self.lock:
                self._check_alive()
                transport = self.transport
                if transport is None:  # a world of one: everything is local
                    if self.active:
                        self.advance_active()
                    if done():
                        return
                    self._unless_alone(waiting_on)
                me = _get_ident()
                if me != _MAIN_THREAD and not getattr(_thread_flags, "signals_blocked", False):
                    _thread_flags.signals_blocked = True      # (signals go to the main thread)
                    signal_guard.block_in_this_thread()
                start = time.monotonic()
                reported = False

                def ready() -> bool:     # (advancing the operations in flight, whose steps
                    if self.active:      # may wait on such memory)
                        self.advance_active()
                    return done()

                bulk = None         # (whether it waits for a large transfer: once, if it spins)
                blocks = self.bus.blocks
                waits = self.bus.waits
                if waits:
                    t0 = time.perf_counter()
                try:
                    while True:
                        if self.active:
                            self.advance_active()
                        if done():
                            break
                        if self._owner is None and transport is not None:
                            self._owner = me
                            # what it waits for may be memory a peer writes (a collective's
                            # shared segment): the transport looks at it too before it
                            # sleeps, after arming its wake-up
                            transport.set_sleep_check(ready)
                            try:
                                if self._waiters:   # others wait for this round: no spin, sleep now
                                    moved = transport.progress(POLL_INTERVAL)
                                else:
                                    # (done, not ready: operations in flight advance
                                    # after a round that moved something, as before)
                                    if bulk is None:
                                        bulk = self._awaits_bulk(waiting_on)
                                    moved = self.progress_policy.wait(transport, POLL_INTERVAL,
                                                                      done, bulk)
                            finally:
                                self._owner = None
                                transport.set_sleep_check(None)
                            if self.active:
                                self.advance_active()
                            if self._waiters:     # what it delivered may be theirs; or their turn
                                self._rounds += moved
                                self._turn.notify_all()
                        else:
                            moved = self._wait_turn(me, waiting_on)
                            # (Condition.wait is no place for a handler to raise: it may
                            # leave the lock released; here everything is consistent)
                            signal_guard.let_handlers_run()
                            if self.active:
                                self.advance_active()
                            if transport is None and not done():
                                self._unless_alone(waiting_on)
                        if done():
                            break
                        self._check_alive()
                        now = time.monotonic()
                        if timeout is not None and now - start > timeout:
                            raise MPITimeoutError(
                                f"rank {self.rank}: {', '.join(describe(r) for r in waiting_on)} did not "
                                f"complete within {timeout:g} s")
                        if reported:
                            if moved:
                                for o in blocks:
                                    o.still_blocked(waiting_on)
                            else:
                                for o in blocks:
                                    o.still_waiting(waiting_on)
                        elif now - start >= self.block_report_after and blocks:
                            reported = True
                            for o in blocks:
                                o.blocked(waiting_on)
                finally:
                    if self._waiters:       # a waiter may now take over progress
                        self._turn.notify_all()
                    if reported:
                        for o in blocks:
                            o.unblocked()
                    if waits:
                        seconds = time.perf_counter() - t0
                        for o in waits:
                            o.wait_ended(seconds)
        except JobAbortedError:
            if self._park:      # the interpreter is exiting: this thread must not go on
                self._park_forever()
            raise

    def _awaits_bulk(self, waiting_on: List[Request]) -> bool:
        """Whether one of ``waiting_on`` is a large transfer: a receive into a buffer larger
        than the eager limit, or a rendezvous send (its receiver pulls the data) - a wait
        the progress policy gives a short spin (:data:`~.progress.BULK_SPIN`)."""
        limit = self.eager_limit
        for r in waiting_on:
            kind = type(r)
            if kind is RecvRequest:
                if r.target is not None and r.target.nbytes > limit:
                    return True
            elif kind is SendRequest and r.bulk:
                return True
        return False

    def _wait_turn(self, me: int, waiting_on: List[Request]) -> bool:
        """A wait while another thread runs progress (or, without a transport, for another
        thread's send): sleep on ``_turn`` until notified, at most ``POLL_INTERVAL``
        (lock held). True if the owner's rounds moved something meanwhile."""
        rounds = self._rounds
        outer = self._waiting.get(me)     # (a wait inside a wait: rare)
        self._waiting[me] = waiting_on
        self._waiters += 1
        try:
            self._turn.wait(POLL_INTERVAL)
        finally:
            self._waiters -= 1
            if outer is None:
                del self._waiting[me]
            else:
                self._waiting[me] = outer
        return self._rounds != rounds

    def _unless_alone(self, waiting_on: List[Request]) -> None:
        """A world of one (no transport) waits for what only another thread of this
        process can still do (a send to itself, a cancel): raise when there is none."""
        me = _get_ident()
        if self.active or any(t != me for t in self._waiting):
            return
        if any(t.ident != me and not t.daemon and t.is_alive() for t in threading.enumerate()):
            return
        raise MPITimeoutError(
            f"rank {self.rank}: {', '.join(describe(r) for r in waiting_on)} can never "
            f"complete: this process is alone (size 1) and no matching message was sent")

    def waiting_threads(self) -> Dict[int, List[Request]]:
        """The threads inside a wait of this engine now, by ident: those waiting for the
        progress owner's rounds (-> the requests they wait for) and the owner, asleep in the
        transport (-> []). A copy: the deadlock reporter and finalize read it."""
        with self.lock:
            threads = dict(self._waiting)
            if self._owner is not None:
                threads.setdefault(self._owner, [])
            return threads

    def sleep(self, wait: Callable[..., object], *args: object) -> object:
        """FrameSink: the transport blocks in ``wait(*args)`` (its poll). The progress owner
        releases the engine's lock meanwhile (fully, however deep it holds it), so the
        process's other threads send, post receives and test while it sleeps."""
        if self._owner != _get_ident():     # (start-up: nobody else uses the engine yet)
            return wait(*args)
        saved = self._release_save()
        try:
            return wait(*args)
        finally:
            self._acquire_restore(saved)

    def _tell_others(self) -> None:
        """This thread completed requests outside progress, maybe another thread's: wake the
        owner's sleep and the waiters so that they look (lock held)."""
        owner = self._owner
        if owner is not None and owner != _get_ident() and self.transport is not None:
            self.transport.wake()
        if self._waiters:
            self._turn.notify_all()

    def _nudge(self) -> None:
        """Another thread sleeps in the transport's progress: wake it if this one left it
        frames to push (queued for want of room in a ring or socket)."""
        if self._owner != _get_ident() and self.transport.pending_sends():
            self.transport.wake()

    def _check_alive(self) -> None:
        if self._failure_notices:
            self.apply_failure_notices()
        if self.aborted is not None:
            if self._closed_why is not None:
                raise JobAbortedError(f"rank {self.rank}: {self._closed_why}")
            raise JobAbortedError(f"rank {self.rank}: the job was aborted ({self.aborted}); "
                                  f"no further MPI calls are possible")
        if self.faults:
            raise self.faults.pop(0)

    def _close_lane(self) -> None:
        """Stop express sends (:meth:`send_now` looks at every condition again)."""
        self.gate.open = False
        self.lane.clear()

    def abort(self, reason: str) -> None:
        """Make every current and future wait of this engine raise :class:`JobAbortedError`
        (also those of other threads, woken now). Safe from any thread."""
        self.aborted = reason
        self._close_lane()
        if self.transport is not None:
            self.transport.wake()
        if self.lock.acquire(timeout=1.0):   # (a thread stuck holding it: its wait ends anyway)
            try:
                self._close_lane()      # (again: a send_now under way may have filled it)
                self._turn.notify_all()
            finally:
                self.lock.release()

    def abort_job(self, code: int, reason: str) -> None:
        """End the whole job with exit code ``code`` (``Comm.Abort``), through ``job_abort``;
        an engine without one (threads in a test) aborts itself and raises."""
        if self.job_abort is not None:
            self.job_abort(code, reason)
        self.abort(reason)
        raise JobAbortedError(f"rank {self.rank}: {reason} (exit code {code})")

    def _park_if_exiting(self) -> None:
        """A call of a thread other than the main one that :meth:`close` at the interpreter's
        exit ended (a daemon thread still using MPI): it parks, as such a thread's wait does,
        with the lock released - else the dying thread printed a traceback at the end of a
        correct run. The main thread's call raises."""
        if _get_ident() != _MAIN_THREAD:
            self._park_forever()

    @staticmethod
    def _park_forever() -> None:
        """What a thread still waiting in MPI does when the interpreter exits (its process
        ends it): it must neither go on nor print a traceback."""
        threading.Event().wait()

    # -- shutdown ---------------------------------------------------------------------------
    def flush(self, timeout: float = 30.0) -> bool:
        """Deliver queued sends before exit. False if some could not be delivered in time."""
        transport = self.transport
        if transport is None:
            return True
        deadline = time.monotonic() + timeout
        with self.lock:
            # (peer_lost drops rendezvous sends to a lost peer, so none of these waits on one)
            while (transport.pending_sends() or self._rndv_sends) and time.monotonic() < deadline:
                self._progress_round(0.05)
            return not (transport.pending_sends() or self._rndv_sends)

    def _progress_round(self, timeout: float) -> None:
        """One round of progress outside a wait (lock held): as the owner, or - another
        thread owns it - the wait for that one's round."""
        if self._owner is None:
            self._owner = _get_ident()
            try:
                moved = self.transport.progress(timeout)
            finally:
                self._owner = None
            if moved:
                self._rounds += 1
            if self._waiters:
                self._turn.notify_all()
        else:
            self._waiters += 1
            try:
                self._turn.wait(timeout)
            finally:
                self._waiters -= 1

    def pending_summary(self) -> str:
        """The rendezvous sends still waiting for their receivers, described."""
        with self.lock:
            parts = [describe(v[0]) for v in self._rndv_sends.values()]
            return "; ".join(parts)

    def close(self, why: Optional[str] = None, at_exit: bool = False) -> None:
        """Close the transport. Threads still inside a wait of this engine (an erroneous
        program: MPI wants every thread's calls finished before ``Finalize``) are ended
        first: their waits raise :class:`JobAbortedError` saying ``why`` (``at_exit``: they
        are daemon threads of an exiting interpreter, parked instead, so that they neither
        go on nor print tracebacks); so does every wait begun afterwards, by a thread whose
        call had not reached its wait yet or that calls later."""
        transport = self.transport
        with self.lock:
            me = _get_ident()
            # every wait from now on ends saying why: also that of a thread whose call had
            # not reached its wait yet (between the express lane, which held the lock until
            # now, and the general path's wait), and of one that calls later
            self._closed_why = why or "MPI was finalized while this thread waited in it"
            self._park = at_exit
            self.aborted = self._closed_why
            self._close_lane()
            if any(t != me for t in self._waiting) or self._owner not in (None, me):
                if transport is not None:
                    transport.wake()
                self._turn.notify_all()
                deadline = time.monotonic() + 2.0
                self._waiters += 1      # (the owner notifies on leaving the transport)
                try:
                    while self._owner is not None and time.monotonic() < deadline:
                        self._turn.wait(0.05)
                finally:
                    self._waiters -= 1
        if transport is not None:
            transport.close()


def _on_stack(innermost: object, frame: object) -> bool:
    """Whether ``frame`` is on the stack whose innermost frame is ``innermost``."""
    while innermost is not None:
        if innermost is frame:
            return True
        innermost = innermost.f_back
    return False


def eager_limit_from_env(environ=os.environ) -> int:
    value = environ.get("MINIMPI_EAGER_LIMIT")
    return parse_size(value) if value else DEFAULT_EAGER_LIMIT
