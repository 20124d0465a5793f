"""The live dashboard's reporter, rank side (``minimpi run --dashboard``).

Nothing here runs unless the launcher asks for it: ``minimpi run --dashboard`` sets
``MINIMPI_LIVE=1`` for every rank and the runtime then calls :func:`attach` once. Without it
no subscriber, thread or connection exists, so a job without the dashboard pays nothing.

What it costs a rank with the dashboard on:

* per message: :class:`MessageCounter` listens to the bus's ``message_sent`` and adds one
  message and its bytes to a counter per (context, destination) - a dictionary look-up and
  two additions (no I/O, no lock, no time stamp);
* per call: nothing. The MPI call a rank is in is *sampled*, not recorded:
* :data:`DEFAULT_INTERVAL` seconds apart, a daemon thread (:class:`LiveReporter`) looks at
  the stack of the thread that initialised MPI (``sys._current_frames``): the outermost
  frame of minimpi's own code under the program's is the MPI call under way, and its
  arguments say the communicator, peer or root, tag and buffer size; a collective's
  ``Channel`` (the frame of :func:`minimpi.coll.schedule.run`) and the engine's nonblocking
  operations (``engine.active``) give each collective in progress, its algorithm and the
  step this rank has reached. With the process's CPU time, resident memory and the
  message counters it makes one snapshot, which goes to the launcher's coordinator over a
  connection of the reporter's own (:class:`~minimpi.runtime.bootstrap.CoordinatorClient`:
  CURVE keys derived from the job secret, every message HMAC-sealed and bound to the
  connection's challenge), so the rank's main connection is never touched by this thread.

On several hosts the ranks reach the launcher's coordinator directly, as their state
reports do, so the snapshots of every host arrive at the launcher's host over that same
authenticated channel.

What a rank is blocked on (the deadlock reporter's states, :mod:`minimpi.runtime.diagnose`)
is not repeated here: the launcher already has it.

A snapshot (the ``s`` of a ``{"t": "live"}`` coordinator message)::

    {"v": 1, "n": 12, "pid": 4242, "host": "node1", "cpu": 87.5, "rss": 61440000,
     "call": {"call": "Send", "on": "Intracomm", "comm": "COMM_WORLD",
              "peers": [["dest", 1, 1]], "tag": 7, "nbytes": 8, "for": 0.75} or None,
     "colls": [{"call": "Allreduce[ring]", "comm": "COMM_WORLD", "ctx": 0, "tag": 12,
                "rank": 0, "size": 5, "step": 3, "group": [0, 1, 2, 3, 4], "root": None,
                "nbytes": 8, "blocking": True}],
     "sent": [[context, dest world rank, messages, bytes], ...],
     "comms": {"0": ["COMM_WORLD", [0, 1, 2, 3, 4]], ...}, "interval": 0.25}
"""
from __future__ import annotations

import inspect
import os
import socket
import sys
import sysconfig
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from ..bus import Subscriber
from ..comm.communicator import endpoint_of
from ..transports.signal_guard import start_thread_blocked
from .bootstrap import BootInfo, CoordinatorClient
from .observe_env import DEFAULT_INTERVAL, ENV_LIVE, ENV_LIVE_INTERVAL

#: at most this many (context, destination) counters go in one snapshot (the largest)
MAX_COUNTERS = 4096
#: contexts at or above this (with the partitioned bit and the collective bit cleared) are
#: the runtime's own - revoke notices, spawn bridges, clock sync, finalize markers - and
#: are not the program's messages
INTERNAL_CONTEXTS = 0x7FFF_FF00
_CONTEXT_MASK = 0x7FFF_FFFE      # a context -> the p2p context of its communicator

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
#: minimpi's folders whose frames are the program's side, not an MPI call: the start script
#: that runs the program, and the mpi4py face (the futures server runs the user's tasks)
_PROGRAM_SIDE = tuple(os.path.join(_PACKAGE_DIR, d) + os.sep for d in ("_start", "_shim"))
#: frames of these folders (Python's library, installed packages) belong to whichever side
#: called them
_NEUTRAL = tuple(sorted({os.path.abspath(p) + os.sep for k, p in sysconfig.get_paths().items()
                         if k in ("stdlib", "platstdlib", "purelib", "platlib")}))
_SCHEDULE = os.path.join("coll", "schedule.py")

#: (argument name, what the page calls it) for the peer of a call, in this order
_PEER_ARGS = (("dest", "dest"), ("source", "source"), ("root", "root"),
              ("target_rank", "target"))
_TAG_ARGS = ("tag", "sendtag", "recvtag")
_BUFFER_ARGS = ("buf", "sendbuf", "recvbuf", "origin", "inbuf")
#: a runtime function that stands for an MPI call
_CALL_NAMES = {"_finalize_at_exit": "Finalize", "finalize": "Finalize", "abort": "Abort"}

#: the code flags of a function taking (*args, **kwargs)
_FORWARDS = inspect.CO_VARARGS | inspect.CO_VARKEYWORDS
# frame kinds
_OURS, _PROGRAM, _NEUTRAL_KIND = 0, 1, 2


def interval_from_env(env: Dict[str, str]) -> float:
    try:
        value = float(env.get(ENV_LIVE_INTERVAL) or DEFAULT_INTERVAL)
    except ValueError:
        return DEFAULT_INTERVAL
    return min(5.0, max(0.05, value))


class MessageCounter(Subscriber):
    """Messages and bytes sent per (context, destination world rank): the heat map's data.

    Its one event runs on the sending thread for every message: a look-up and two
    additions (about 0.2 us with the call). The key is one integer, ``context << 32 |
    dest`` (a destination is a world rank, or a process of another job, ``job << 20 |
    rank``: below 2**32), which is cheaper to hash than a tuple. The reporter thread copies
    the table (:meth:`table`: one C-level call, atomic under the GIL) and never writes it."""

    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts: Dict[int, List[int]] = {}

    def message_sent(self, context: int, dest: int, source: int, tag: int, payload: Any,
                     nbytes: int, msg_id: int) -> None:
        c = self.counts.get(context << 32 | dest)
        if c is None:
            self.counts[context << 32 | dest] = [1, nbytes]
        else:
            c[0] += 1
            c[1] += nbytes

    def table(self) -> List[Tuple[int, int, int, int]]:
        """(context, destination, messages, bytes) of every pair so far."""
        return [(key >> 32, key & 0xFFFF_FFFF, c[0], c[1])
                for key, c in list(self.counts.items())]


def _nbytes(value: Any) -> Optional[int]:
    """Size of a buffer argument (numpy array, bytes-like, an mpi4py buffer spec)."""
    if value is None:
        return None
    n = getattr(value, "nbytes", None)
    if isinstance(n, int):
        return n
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    if isinstance(value, (list, tuple)) and value:
        n = getattr(value[0], "nbytes", None)
        if isinstance(n, int):
            return n
    return None


def _comm_name(target: Any) -> Tuple[Optional[str], Optional[Any]]:
    """(name, endpoint) of the communicator or window a call was made on."""
    ep = endpoint_of(target)
    if ep is None:
        ep = getattr(target, "endpoint", None)
        if ep is not None and not hasattr(ep, "context"):
            ep = None
    return (getattr(ep, "name", None), ep)


class Sampler:
    """What one thread of a rank is doing, read from its stack by another thread."""

    def __init__(self, engine: Any, thread_id: int) -> None:
        self.engine = engine
        self.thread_id = thread_id
        self._kinds: Dict[Any, int] = {}       # code object -> _OURS / _PROGRAM / _NEUTRAL
        self._entry: Any = None                # the API frame seen last (kept: see since)
        self._since = 0.0
        #: communicator names seen in calls: p2p context -> (name, world ranks)
        self.comms: Dict[int, Tuple[str, Tuple[int, ...]]] = {}

    def _kind(self, code: Any) -> int:
        kind = self._kinds.get(code)
        if kind is None:
            name = code.co_filename
            path = os.path.abspath(name) if not name.startswith("<") else name
            if path.startswith(_PACKAGE_DIR):
                kind = _PROGRAM if path.startswith(_PROGRAM_SIDE) else _OURS
            elif name.startswith("<frozen") or path.startswith(_NEUTRAL):
                kind = _NEUTRAL_KIND
            else:
                kind = _PROGRAM
            self._kinds[code] = kind
        return kind

    def frames(self) -> Tuple[Any, Any]:
        """(the API frame of the MPI call under way or None, the blocking collective's
        channel or None). The innermost frame that is minimpi's or the program's decides:
        the program's - no MPI call; minimpi's - the call is the outermost of minimpi's
        frames before the program's (frames of Python's library and of installed packages
        go with either side)."""
        f = sys._current_frames().get(self.thread_id)
        chain, channel = [], None          # minimpi's frames, innermost first
        while f is not None:
            code = f.f_code
            kind = self._kind(code)
            if kind == _OURS:
                chain.append(f)
                if channel is None and code.co_name == "run" and \
                        code.co_filename.endswith(_SCHEDULE):
                    channel = f.f_locals.get("ch")
            elif kind == _PROGRAM:
                break
            f = f.f_back
        if not chain:
            return None, channel
        # the API's wrappers (error handlers, call events) forward (self, *args, **kwargs)
        # to the method: the call is the method they wrap
        i = len(chain) - 1
        while i > 0 and chain[i].f_code.co_flags & _FORWARDS == _FORWARDS:
            i -= 1
        return chain[i], channel

    def _learn(self, ep: Any) -> None:
        context = getattr(ep, "context", None)
        if isinstance(context, int) and context not in self.comms:
            self.comms[context] = (str(ep.name), tuple(ep.group))

    def call(self, entry: Any, now: float) -> Optional[Dict[str, Any]]:
        """The MPI call whose API frame is ``entry``."""
        if entry is None:
            self._entry = None
            return None
        if entry is not self._entry:
            # a new call (the frame of the previous one is kept until now, so that a new
            # call can never be taken for it)
            self._entry, self._since = entry, now
        code = entry.f_code
        name = _CALL_NAMES.get(code.co_name, code.co_name)
        local = entry.f_locals
        # what the call was made on: the API function's first argument (``self`` of a
        # method; the front's methods name it as the function they run does: ``comm``...)
        target = local.get(code.co_varnames[0]) if code.co_argcount else None
        call: Dict[str, Any] = {"call": name, "on": None, "comm": None, "peers": [],
                                "tag": None, "nbytes": None, "for": round(now - self._since, 3)}
        if target is None:
            return call
        call["on"] = target.__name__ if isinstance(target, type) else type(target).__name__
        comm, ep = _comm_name(target)
        if ep is not None:
            call["comm"] = comm
            self._learn(ep)
        group = getattr(ep, "group", None)
        for arg, label in _PEER_ARGS:
            peer = local.get(arg)
            if isinstance(peer, int):
                world = group[peer] if group is not None and 0 <= peer < len(group) else None
                call["peers"].append([label, peer, world])
        for arg in _TAG_ARGS:
            if isinstance(local.get(arg), int):
                call["tag"] = local[arg]
                break
        for arg in _BUFFER_ARGS:
            if arg in local:
                call["nbytes"] = _nbytes(local[arg])
                if call["nbytes"] is not None:
                    break
        requests = local.get("requests")
        if isinstance(requests, (list, tuple)) and requests and call["on"] != "Comm":
            # Waitall([...]) and friends: how many, and the communicator of the first
            first = getattr(requests[0], "description", None)
            call["request"] = f"{len(requests)} request{'s' if len(requests) != 1 else ''}"
            if isinstance(first, tuple) and len(first) == 5:
                call["comm"] = call["comm"] or str(first[4])
        d = getattr(target, "description", None)
        if isinstance(d, tuple) and len(d) == 5:   # a request: what it stands for
            what, peer_name, peer, tag, comm_name = d
            call["request"] = str(what)
            call["comm"] = call["comm"] or str(comm_name)
            if isinstance(peer, int) and not call["peers"]:
                call["peers"].append(["dest" if peer_name == "dest" else "source", peer, None])
            if call["tag"] is None and isinstance(tag, int):
                call["tag"] = tag
        elif isinstance(d, str) and d:
            call["request"] = d
        return call

    def collective(self, ch: Any, blocking: bool, call: Optional[Dict[str, Any]]
                   ) -> Optional[Dict[str, Any]]:
        ep = getattr(ch, "ep", None)
        if ep is None:
            return None
        self._learn(ep)
        root = nbytes = None
        if blocking and call is not None:
            nbytes = call.get("nbytes")
            for label, peer, _ in call.get("peers", ()):
                if label == "root":
                    root = peer
        return {"call": str(ch.call), "comm": str(ep.name), "ctx": int(ep.context),
                "tag": int(ch.tag), "rank": int(ch.rank), "size": int(ch.size),
                "step": int(ch.step_index), "group": list(ep.group), "root": root,
                "nbytes": nbytes, "blocking": blocking}


class LiveReporter:
    """The daemon thread that samples this rank and sends its snapshots to the launcher."""

    def __init__(self, engine: Any, info: BootInfo, counter: MessageCounter,
                 interval: float, thread_id: int) -> None:
        self.engine = engine
        self.info = info
        self.counter = counter
        self.interval = interval
        self.sampler = Sampler(engine, thread_id)
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.count = 0
        self.sent = 0              # snapshots that went out
        self._stop = threading.Event()
        self._client: Optional[CoordinatorClient] = None
        self._thread: Optional[threading.Thread] = None
        self._cpu = (time.monotonic(), time.process_time())
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

    def name(self, context: int, name: str, group: Any) -> None:
        """Name a communicator the samples may not see (the world, self)."""
        self.sampler.comms[context] = (name, tuple(group))

    def start(self) -> "LiveReporter":
        coord = self.info.coordinator
        self._client = CoordinatorClient(coord.address, self.info.secret, self.info.rank,
                                         self.info.size, self.info.job_id)
        self._thread = threading.Thread(target=self._main, name="minimpi-live", daemon=True)
        start_thread_blocked(self._thread)
        return self

    def stop(self) -> None:
        """End the thread and close its connection (at finalize, before the engine closes)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)
        if self._client is not None:
            self._client.close()
            self._client = None

    def _main(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                snapshot = self.snapshot()
            except Exception:   # a sample must never take the rank down
                continue
            client = self._client
            if client is not None and not self._stop.is_set() and client.report_live(snapshot):
                self.sent += 1

    # -- one snapshot ------------------------------------------------------------------------
    def _usage(self, now: float) -> Tuple[float, Optional[int]]:
        cpu_now = time.process_time()
        then, cpu_then = self._cpu
        self._cpu = (now, cpu_now)
        percent = 100.0 * (cpu_now - cpu_then) / (now - then) if now > then else 0.0
        rss = None
        try:
            with open("/proc/self/statm", "rb") as f:
                rss = int(f.read().split()[1]) * self._page
        except (OSError, ValueError, IndexError):
            pass
        return round(percent, 1), rss

    def _counters(self) -> Tuple[List[List[int]], Dict[str, Any]]:
        rows = []
        contexts = set()
        for context, dest, msgs, nbytes in self.counter.table():
            base = context & _CONTEXT_MASK
            if base >= INTERNAL_CONTEXTS:
                continue
            rows.append([context, dest, msgs, nbytes])
            contexts.add(base)
        if len(rows) > MAX_COUNTERS:
            rows.sort(key=lambda r: -r[2])
            del rows[MAX_COUNTERS:]
        comms: Dict[str, Any] = {}
        known = self.sampler.comms
        for base in sorted(contexts | set(known)):
            if base in known:
                name, group = known[base]
                comms[str(base)] = [name, list(group)]
            else:
                group = self.engine.group_of(base)
                comms[str(base)] = [None, list(group) if group is not None else None]
        return rows, comms

    def snapshot(self) -> Dict[str, Any]:
        """What this rank is doing now (the module docstring shows one)."""
        now = time.monotonic()
        sampler = self.sampler
        entry, channel = sampler.frames()
        call = sampler.call(entry, now)
        colls = []
        if channel is not None:
            c = sampler.collective(channel, True, call)
            if c is not None:
                colls.append(c)
        for op in list(self.engine.active):     # nonblocking collectives under way
            ch = getattr(op, "channel", None)
            if ch is not None and ch is not channel:
                c = sampler.collective(ch, False, None)
                if c is not None:
                    colls.append(c)
        cpu, rss = self._usage(now)
        sent, comms = self._counters()
        self.count += 1
        return {"v": 1, "n": self.count, "pid": self.pid, "host": self.host, "cpu": cpu,
                "rss": rss, "call": call, "colls": colls, "sent": sent, "comms": comms,
                "interval": self.interval}


def attach(engine: Any, info: BootInfo, world: Any = None, self_comm: Any = None
           ) -> Optional[LiveReporter]:
    """Start this rank's reporter (called once by the runtime when ``MINIMPI_LIVE`` is set;
    None where there is no launcher to report to)."""
    if not info.env.get(ENV_LIVE) or info.coordinator is None or not info.secret:
        return None
    counter = MessageCounter()
    engine.bus.subscribe(counter)
    reporter = LiveReporter(engine, info, counter, interval_from_env(info.env),
                            threading.get_ident())
    for comm in (world, self_comm):
        ep = endpoint_of(comm) if comm is not None else None
        if ep is not None:
            reporter.name(ep.context, ep.name, ep.group)
    return reporter.start()
