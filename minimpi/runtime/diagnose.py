"""Deadlock diagnosis, rank side: "what am I blocked on", told to the launcher.

:class:`BlockReporter` subscribes to the bus (:mod:`minimpi.bus`) and acts on three
events, which come only for waits that last: nothing here runs for a wait shorter than
``engine.block_report_after``.

* ``blocked(waiting_on)`` - the wait has lasted ``block_report_after``: walk the stack
  *once* to find the user's file:line (the first frame outside the minimpi package) and the
  collective step the wait belongs to, describe every pending request (call, peer as
  communicator and world rank, tag, communicator, size, protocol: a large send waiting for
  its rendezvous clear-to-send, a synchronous send waiting for its match) and send it all to
  the coordinator with :meth:`~minimpi.runtime.bootstrap.CoordinatorClient.report_state`.
* ``still_blocked(waiting_on)`` - that wait is still going on but its progress moved
  something (frames or bytes arrived or left, a connection opened). Re-report, at most every
  :data:`REREPORT_INTERVAL` s, with an increased ``io`` counter: to the launcher this says
  "not stuck, data is in flight", so a long transfer is never taken for a deadlock.
* ``unblocked()`` - the wait ended: report ``{"blocked": False}``.

The launcher (``launcher/deadlock.py``) declares a deadlock when every live rank is blocked and
no report arrived (no counter moved) for ``--deadlock-timeout`` seconds, and prints the report
built from these states with :func:`~minimpi.runtime.states.format_state` /
:func:`~minimpi.runtime.states.edge_text` (:mod:`minimpi.runtime.states`: the text alone,
which the launcher imports without this module's engine and collectives).

A state is a plain msgpack-able dict::

    {"blocked": True, "where": "ring.py:12", "func": "main", "code": "comm.recv(source=1, tag=7)",
     "items": [{"call": "recv", "dir": "recv", "peer": 1, "world": 1, "tag": 7,
                "comm": "COMM_WORLD", "nbytes": None, "proto": None, "any": None}, ...],
     "coll": {"call": "Allreduce[ring]", "comm": "COMM_WORLD", "step": 3, "seq": 5,
              "sig": "Allreduce(op=SUM)"} or None,
     "eager_limit": 65536, "io": 0, "n": 1}
"""
from __future__ import annotations

import linecache
import os
import queue
import re
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..bus import Subscriber
from ..coll.mismatch import call_of
from ..coll.schedule import CollectiveRequest
from ..errors import JobAbortedError, PeerLostError
from ..p2p.request import RecvRequest, SendRequest
from .leftovers import waiting_messages
from .states import (  # noqa: F401  (the text of states: here too, for the rank's side)
    ENV_DEADLOCK_TIMEOUT,
    edge_text,
    epoch_text,
    format_state,
    item_text,
    rendezvous_text,
    thread_text,
    wait_targets,
    waiting_text,
    window_stragglers,
)


def lock_reports(engine) -> List[Dict[str, Any]]:
    """The window locks this rank holds or waits for (:func:`minimpi.rma.lock_reports`);
    none while no program part imported ``minimpi.rma``, which a program without windows
    never does (so a rank does not load the one-sided layer to say so)."""
    rma = sys.modules.get("minimpi.rma")
    return rma.lock_reports(engine) if rma is not None else []


#: at most one "still blocked, but data moved" report per this many seconds
REREPORT_INTERVAL = 0.25

#: the minimpi package (two levels up: minimpi/runtime/diagnose.py); frames inside it are ours
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


# ---------------------------------------------------------------------------------------
# Looking at the stack (only when a wait has lasted)
# ---------------------------------------------------------------------------------------
def user_frame(frame=None):
    """The innermost frame outside the minimpi package (the user's call site), or None."""
    f = frame if frame is not None else sys._getframe(1)
    while f is not None:
        filename = f.f_code.co_filename
        if not os.path.abspath(filename).startswith(_PACKAGE_DIR) and not filename.startswith("<frozen"):
            return f
        f = f.f_back
    return None


def _where(frame) -> Dict[str, Any]:
    if frame is None:
        return {"where": None, "func": None, "code": None, "file": None}
    filename = frame.f_code.co_filename
    line = frame.f_lineno
    code = linecache.getline(filename, line).strip() or None
    return {"where": f"{os.path.basename(filename)}:{line}", "file": filename,
            "func": frame.f_code.co_name, "code": code}


def _collective_channel(frame):
    """The Channel of the blocking collective this wait belongs to, if any."""
    f = frame
    while f is not None:
        code = f.f_code
        if code.co_name == "run" and code.co_filename.endswith(os.path.join("coll", "schedule.py")):
            ch = f.f_locals.get("ch")
            if ch is not None:
                return ch
        f = f.f_back
    return None


# ---------------------------------------------------------------------------------------
# Describing what a wait is waiting for
# ---------------------------------------------------------------------------------------
def _coll_info(ch) -> Dict[str, Any]:
    info = {"call": ch.call, "comm": ch.ep.name, "step": ch.step_index, "seq": None, "sig": None}
    try:
        mine = call_of(ch.ep, ch.tag)
        if mine is not None:
            info["seq"] = mine.seq
            info["sig"] = mine.text()
    except Exception:  # pragma: no cover - diagnostics only
        pass
    return info


def _item(engine, req) -> Optional[Dict[str, Any]]:
    """One pending request as a dict (None when it is done)."""
    if getattr(req, "done", False):
        return None
    d = getattr(req, "description", None)
    item: Dict[str, Any] = {"call": str(d), "dir": None, "peer": None, "world": None, "tag": None,
                            "comm": None, "nbytes": None, "proto": None, "any": None}
    if isinstance(d, tuple) and len(d) == 5:
        call, peer_name, peer, tag, comm_name = d
        item.update(call=str(call), dir="send" if peer_name == "dest" else "recv", peer=peer,
                    tag=tag, comm=str(comm_name))
    if isinstance(req, SendRequest):
        item["world"] = req.peer
        item["proto"], nbytes = engine.send_protocol(req)
        if nbytes is not None:
            item["nbytes"] = nbytes
    elif isinstance(req, RecvRequest):
        group = engine.group_of(req.context)
        if req.source >= 0 and group is not None and req.source < len(group):
            item["world"] = group[req.source]
        elif group is not None:
            item["any"] = [w for w in group if w != engine.rank]
        if req.matched:
            item["proto"] = "inflight"   # matched: its data is on the way
        if req.target is not None:
            item["nbytes"] = req.target.nbytes
    elif isinstance(req, CollectiveRequest):   # a nonblocking collective
        ch = req.channel
        item.update(call=ch.call, dir="coll", comm=ch.ep.name)
        item["coll"] = _coll_info(ch)
        pending = [_item(engine, r) for r in req.step_requests()]
        item["step_items"] = [p for p in pending if p is not None]
    elif isinstance(getattr(req, "world", None), int):   # a layer's own wait (a window's)
        item["world"] = req.world
    elif item["dir"] == "recv" and item["comm"] == "COMM_WORLD" and isinstance(item["peer"], int):
        if item["peer"] >= 0:   # a Probe on COMM_WORLD: communicator rank = world rank
            item["world"] = item["peer"]
        else:
            item["any"] = [w for w in range(engine.size) if w != engine.rank]
    return item


def blocked_state(engine, waiting_on: List[Any], frame=None) -> Dict[str, Any]:
    """The full "what am I blocked on" dict for a wait on ``waiting_on``."""
    state: Dict[str, Any] = {"blocked": True}
    user = user_frame(frame)
    state.update(_where(user))
    ch = _collective_channel(frame)
    state["coll"] = _coll_info(ch) if ch is not None else None
    state["items"] = [i for i in (_item(engine, r) for r in waiting_on) if i is not None]
    state["waiting"] = waiting_messages(engine, waiting_on)
    state["eager_limit"] = engine.eager_limit
    # a one-sided window's synchronisation call this wait is part of (rma: Win.epoch_call)
    activity = engine.activities.current()
    state["epoch"] = activity.describe() if activity is not None else None
    # who holds and who waits for the locks of this rank's windows: a lock wait elsewhere
    # waits for the holder, not for this rank (which serves while it waits)
    state["locks"] = lock_reports(engine)
    return state


# ---------------------------------------------------------------------------------------
# Threads: is the whole process blocked?
# ---------------------------------------------------------------------------------------
#: where a thread waits for another thread of its process (Thread.join, Lock/Condition/
#: Event waits, queue.Queue.get...): its innermost Python frame is in one of these files
_WAITS_ON_THREADS = frozenset(os.path.abspath(m.__file__) for m in (threading, queue))


def _is_ours(thread: threading.Thread, frame: Any) -> bool:
    """Whether ``thread`` is minimpi's own (heartbeat, lifeline, failure notices, the
    ``mpi4py.futures`` manager): named ``minimpi-...``, or running a function of the
    minimpi package (its outermost frame outside ``threading``)."""
    if thread is threading.main_thread():   # (it runs the program, from minimpi's start)
        return False
    if thread.name.startswith("minimpi-"):
        return True
    outer = None
    while frame is not None:
        if os.path.abspath(frame.f_code.co_filename) not in _WAITS_ON_THREADS:
            outer = frame
        frame = frame.f_back
    return outer is not None and os.path.abspath(outer.f_code.co_filename).startswith(_PACKAGE_DIR)


def other_threads(engine: Any, reported: Any) -> List[Dict[str, Any]]:
    """What the process's threads that are not in a reported wait (``reported``: their
    idents) do: one dict per thread of the program (minimpi's own are left out) -
    ``{"thread": name, "idle": bool, "where", "code", ...}``, ``idle`` when it waits for
    another thread (``Thread.join``, a lock, an event, a queue), not when it computes, makes
    progress or has only just started an MPI wait."""
    frames = sys._current_frames()
    in_mpi = engine.waiting_threads()
    out = []
    for thread in threading.enumerate():
        ident = thread.ident
        frame = frames.get(ident)
        if ident in reported or frame is None or not thread.is_alive() or _is_ours(thread, frame):
            continue
        idle = ident not in in_mpi and \
            os.path.abspath(frame.f_code.co_filename) in _WAITS_ON_THREADS
        entry = {"thread": thread.name, "idle": idle}
        entry.update(_where(_program_frame(frame)))
        out.append(entry)
    return out


def _program_frame(frame: Any) -> Any:
    """The innermost frame of the program's own code: outside minimpi, ``threading`` and
    ``queue`` (the line that joins a thread or waits on a queue)."""
    f = user_frame(frame)
    while f is not None and os.path.abspath(f.f_code.co_filename) in _WAITS_ON_THREADS:
        f = user_frame(f.f_back)
    return f


# ---------------------------------------------------------------------------------------
# The reporter installed in a real job
# ---------------------------------------------------------------------------------------
class BlockReporter(Subscriber):
    """An engine observer that sends this rank's blocked state to the coordinator.

    **Threads.** Waits are reported per thread (the events come from the waiting thread),
    and the *rank* is reported blocked only when the program has nothing else to do:
    every thread of the program (minimpi's own left out) is either in a wait that lasted
    ``block_report_after`` or waits for another thread of the process (``Thread.join``, a
    lock, an event, a queue). A thread that computes, makes progress, or has only just
    started waiting makes the rank "running" - so a receiving thread that waits beside one
    that computes for longer than ``--deadlock-timeout`` is never a deadlock, while threads
    that all wait in MPI (or join one that does) still are. A thread blocked in a call the
    reporter cannot see into (``time.sleep``, a socket, a lock taken in C) counts as
    running: a missed report, never a false one. The state then lists every thread
    (``threads``) and the union of what they wait for (``items``, the wait-for edges).
    """

    def __init__(self, engine, send: Callable[[Dict[str, Any]], Any],
                 send_failure: Optional[Callable[[Dict[str, Any]], Any]] = None) -> None:
        self.engine = engine
        self.send = send
        self.send_failure = send_failure
        #: thread ident -> (what its wait waits on, its state): the waits reported so far
        self.waits: Dict[int, Tuple[List[Any], Dict[str, Any]]] = {}
        #: what the launcher was last told: None (not blocked), else which waits
        self.told: Optional[tuple] = None
        self.io = 0
        self.count = 0
        self.last = 0.0
        self._last_locks: Optional[List[Dict[str, Any]]] = None

    @property
    def state(self) -> Optional[Dict[str, Any]]:
        """The state of the calling thread's reported wait (None: none)."""
        entry = self.waits.get(threading.get_ident())
        return entry[1] if entry is not None else None

    def install(self) -> "BlockReporter":
        self.engine.bus.subscribe(self)
        return self

    def _rank_state(self, others: List[Dict[str, Any]]) -> Dict[str, Any]:
        """What the rank is blocked on: the reported waits, and ``others`` (the rest of the
        program's threads, all waiting for another thread)."""
        main = threading.main_thread().ident
        order = sorted(self.waits, key=lambda ident: ident != main)   # the main thread first
        engine = self.engine
        if len(order) == 1 and not others:
            waiting_on, first = self.waits[order[0]]
            state = dict(first)
            state["items"] = [i for i in (_item(engine, r) for r in waiting_on) if i is not None]
            state["waiting"] = waiting_messages(engine, waiting_on)   # may have arrived since
            return state
        state = dict(self.waits[order[0]][1])
        items: List[Dict[str, Any]] = []
        waiting: List[Any] = []
        threads = []
        for ident in order:
            waiting_on, own = self.waits[ident]
            mine = [i for i in (_item(engine, r) for r in waiting_on) if i is not None]
            items += mine
            for w in waiting_messages(engine, waiting_on):
                if w not in waiting:
                    waiting.append(w)
            threads.append({**own, "items": mine, "waiting": None})
        state["items"] = items
        state["waiting"] = waiting
        state["threads"] = threads + others
        return state

    def _tell(self, force: bool) -> None:
        """Send the rank's state if it changed (``force``: also when it did not - data
        moved, which the ``io`` counter says). The rank is blocked when a wait is reported
        and no other thread of the program is running (class docstring)."""
        others = other_threads(self.engine, self.waits) if self.waits else []
        if not self.waits or any(not o["idle"] for o in others):
            if self.told is not None:
                self.told = None
                self.count += 1
                self.send({"blocked": False, "n": self.count})
            return
        key = tuple(sorted((ident, id(w[0])) for ident, w in self.waits.items()))
        key += tuple(o.get("where") or "" for o in others)
        if not force and key == self.told:
            return
        self.told = key
        state = self._rank_state(others)
        state["locks"] = self._last_locks = lock_reports(self.engine)
        self.count += 1
        state["io"] = self.io
        state["n"] = self.count
        self.last = time.monotonic()
        self.send(state)

    def blocked(self, waiting_on: List[Any]) -> None:
        try:
            self.io = 0
            state = blocked_state(self.engine, waiting_on, sys._getframe(1))
            state["thread"] = threading.current_thread().name
            self.waits[threading.get_ident()] = (waiting_on, state)
            self._tell(force=True)
        except Exception:  # pragma: no cover - a diagnostic must never break a wait
            pass

    def still_blocked(self, waiting_on: List[Any]) -> None:
        self.io += 1
        if not self.waits:
            return
        try:
            if time.monotonic() - self.last >= REREPORT_INTERVAL:
                self._tell(force=self.told is not None)
                return
            # a lock asked of (or given back to) this rank's window while it waits changes
            # whom the asker waits for: told at once, or a report could stay stale forever
            if self.told is not None and lock_reports(self.engine) != self._last_locks:
                self._tell(force=True)
        except Exception:  # pragma: no cover
            pass

    def still_waiting(self, waiting_on: List[Any]) -> None:
        # (another thread may have started or stopped computing: say so when it did)
        try:
            self._tell(force=False)
        except Exception:  # pragma: no cover
            pass

    def failed(self, exc: BaseException) -> None:
        """An uncaught exception is ending this rank (called by the runtime's excepthook)."""
        try:
            self.count += 1
            state = failure_state(exc, self.engine.lost_peers)
            state["n"] = self.count
            # acknowledged, so the launcher has it before it sees this process end
            (self.send_failure or self.send)(state)
        except Exception:  # pragma: no cover
            pass

    def unblocked(self) -> None:
        if self.waits.pop(threading.get_ident(), None) is not None:
            try:
                self._tell(force=False)
            except Exception:  # pragma: no cover
                pass


def failure_state(exc: BaseException, lost: Any = ()) -> Dict[str, Any]:
    """The state a rank reports when an uncaught exception is about to end it.

    ``consequence`` marks errors caused by another rank's failure (a peer that vanished, an
    aborted job), so the launcher can name the rank whose error came first instead; ``lost``
    (the world ranks this rank saw vanish) tells it where to look. ``where``/``code`` are the
    user's own line that raised, for the launcher's one-line summary.
    """
    lost = sorted(int(p) for p in lost)
    if isinstance(exc, PeerLostError):
        # every peer that merely finished is "lost" too: name the one this error is about
        named = [int(m) for m in re.findall(r"world rank (\d+) is gone", str(exc))]
        lost = [p for p in named if p in lost] or lost
    state = {"blocked": False, "error": f"{type(exc).__name__}: {exc}"[:2000],
             "type": type(exc).__name__, "lost": lost,
             "consequence": isinstance(exc, (PeerLostError, JobAbortedError))}
    tb, user = exc.__traceback__, None
    while tb is not None:   # the innermost frame of the traceback that is not minimpi's
        if user_frame(tb.tb_frame) is tb.tb_frame:
            user = tb
        tb = tb.tb_next
    if user is not None:
        where = _where(user.tb_frame)
        line = user.tb_lineno   # the frame's f_lineno may have moved on since the raise
        where["where"] = f"{os.path.basename(where['file'])}:{line}"
        where["code"] = linecache.getline(where["file"], line).strip() or None
        state.update(where)
    return state


def deadlock_timeout_from_env(env: Dict[str, str]) -> float:
    try:
        return max(0.0, float(env.get(ENV_DEADLOCK_TIMEOUT, "") or 0.0))
    except ValueError:
        return 0.0


def report_after(env: Dict[str, str], default: float = 1.0) -> float:
    """After how many seconds a wait is reported blocked (the engine's
    ``block_report_after``): ``default``, or early enough that the launcher sees the state
    well within ``--deadlock-timeout``."""
    timeout = deadlock_timeout_from_env(env)
    return min(default, max(0.05, timeout / 4)) if timeout > 0 else default


def install(engine, coordinator, env: Dict[str, str]) -> Optional[BlockReporter]:
    """Report blocked waits of ``engine`` to ``coordinator`` (called by the runtime; the
    engine was made with :func:`report_after`)."""
    if coordinator is None:    # (a world of one may still wait: on processes of other jobs)
        return None
    return BlockReporter(engine, coordinator.report_state,
                         getattr(coordinator, "report_failure", None)).install()
