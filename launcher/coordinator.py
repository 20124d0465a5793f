"""The coordinator: the launcher's end of the control plane (a pyzmq ROUTER).

It does not own an event loop: the job's loop (``launcher/job.py``) polls
``coordinator.socket`` together with the ranks' pipes and calls :meth:`Coordinator.receive`
when it is readable. That keeps one loop, one thread, and no spinning.

Wire format (both directions): a zmq multipart message ``[mac, payload]`` (the ROUTER
sees the DEALER's routing id in front). ``payload`` is a msgpack map, ``mac`` is
HMAC-SHA256(job secret, payload). Anything whose MAC does not verify is dropped and
logged without being unpacked. Every rank->coordinator map carries ``"r": rank`` and,
except ``hello``, ``"c": challenge`` of its connection.

rank -> coordinator
    {"t": "hello",    "r": R}                                   # -> challenge
    {"t": "register", "r": R, "c": C, "addr": "host:port", "pid": PID, "host": HOSTNAME}
    {"t": "state",    "r": R, "c": C, "s": {...what R is blocked on...}, "time": UNIX_TIME}
    {"t": "failed",   "r": R, "c": C, "s": {...error, where, lost peers...}}   # -> failed_ack
    {"t": "abort",    "r": R, "c": C, "code": CODE, "msg": TEXT}             # -> abort_ack
    {"t": "hb",       "r": R, "c": C}                           # heartbeat
    {"t": "live",     "r": R, "c": C, "s": {...snapshot...}}    # --dashboard (a second
        connection of the rank: minimpi.runtime.dashboard); kept in RankState.live
    {"t": "finalize", "r": R, "c": C, "lost": [world ranks this rank saw vanish]}
    {"t": "spawn" | "port" | "publish" | "unpublish" | "lookup", "r": R, "c": C, "n": ID, ...}
        requests about other jobs (``Spawn``, ports, names), handed to the job's loop as
        events and answered by ``launcher/dynamic.py``: -> {"t": "reply", "n": ID, ...}
coordinator -> rank
    {"t": "challenge", "c": C}
    {"t": "table", "addrs": [addr of rank 0, addr of rank 1, ...]}   # once all registered
    {"t": "error", "kind": "startup_timeout", "missing": [ranks], "msg": TEXT}
    {"t": "abort_ack"} / {"t": "failed_ack"}

A rank that registers again after the table went out gets the table at once.

What a hostile local process can do, and what stops it:

* connect without the job secret: the socket is a CURVE server whose keys derive from the
  secret, so the zmq handshake fails and nothing reaches this code;
* send a huge frame: ``zmq.MAXMSGSIZE`` disconnects it before the frame is buffered;
* flood (bad MACs, unknown kinds): :meth:`Coordinator.receive` handles at most
  ``max_messages`` per call, so the job's loop still reaps ranks and runs its timers; a
  connection with :data:`BAN_AFTER` bad messages is banned (its messages are dropped
  without computing a MAC) and the log says so at most every :data:`LOG_INTERVAL` s;
* replay a captured sealed message from another connection: its challenge belongs to the
  old connection (``minimpi.runtime.bootstrap.challenge_for``), so it is dropped.
"""
from __future__ import annotations

import collections
import secrets
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import zmq

from minimpi.runtime.bootstrap import (
    MAX_MESSAGE,
    challenge_for,
    curve_server_keys,
    seal,
    unseal,
)

#: bad messages (bad MAC, wrong challenge, unknown rank or kind) after which a connection
#: is banned: its later messages are dropped unread
BAN_AFTER = 3
#: connections remembered (bad-message counts, bans); the oldest are forgotten first
MAX_TRACKED = 4096
#: per-message log lines for the first few drops, then one summary per this many seconds
LOG_FIRST = 5
LOG_INTERVAL = 10.0
#: messages handled per receive() call, so that a flood cannot starve the job's loop
MAX_PER_CALL = 256
#: inbound messages zmq queues per connection (each at most MAX_MESSAGE bytes)
RCVHWM = 256


@dataclass
class RankState:
    """Everything the launcher knows about one rank (one row of the state table)."""

    rank: int
    registered: bool = False
    address: Optional[str] = None      # data-plane address, "host:port"
    pid: Optional[int] = None
    host: Optional[str] = None
    identity: Optional[bytes] = None   # zmq routing id of the rank's DEALER
    state: Optional[dict] = None       # latest "what am I blocked on" report
    state_time: Optional[float] = None  # when it arrived (time.monotonic())
    finalized: bool = False
    abort: Optional[tuple] = None      # (code, message) if the rank called abort
    exit_status: Optional[str] = None  # set by the job when the process ends ("exited with code 0")
    failure: Optional[dict] = None     # the rank's report of the error that is ending it
    lost: list = field(default_factory=list)   # world ranks it saw vanish (failure or finalize)
    last_seen: Optional[float] = None  # time.monotonic() of its latest authentic message
    live: Optional[dict] = None        # latest --dashboard snapshot (minimpi.runtime.dashboard)
    live_time: Optional[float] = None  # when it arrived (time.monotonic())

    def describe(self) -> str:
        """One line for diagnostics: the latest state, else how the rank ended, else nothing."""
        if self.state is not None:
            return format_state(self.state)
        if self.exit_status is not None:
            return self.exit_status
        if self.finalized:
            return "finalized"
        return "no state reported"


def format_state(state: dict) -> str:
    if isinstance(state, dict) and "blocked" in state:   # a minimpi.runtime.diagnose report
        from minimpi.runtime.states import format_state as diagnose_format
        return diagnose_format(state)
    return ", ".join(f"{k}={v}" for k, v in state.items()) if state else "{}"


@dataclass
class CoordEvent:
    """Something the job loop must act on."""

    kind: str            # "registered" | "all_registered" | "abort" | "finalize" | "state" | "failed"
    rank: int = -1       # ... or one of REQUEST_KINDS
    code: int = 0
    message: str = ""
    data: Optional[dict] = None   # a request's message


#: requests a rank makes about processes of other jobs (launcher/dynamic.py answers them)
REQUEST_KINDS = frozenset({"spawn", "port", "publish", "unpublish", "lookup"})


class Coordinator:
    def __init__(self, size: int, secret: bytes, job_id: str, host: str = "127.0.0.1",
                 log: Optional[Callable[[str], None]] = None, port: Optional[int] = None):
        self.size = size
        self.job_id = job_id
        self._secret = secret
        self._log = log or (lambda text: print(text, file=sys.stderr, flush=True))
        self.ctx = zmq.Context()
        self.socket = self.ctx.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.ROUTER_MANDATORY, 0)
        # the MAC and the challenge travel in the message: allow their few bytes on top
        self.socket.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE + 1024)
        self.socket.setsockopt(zmq.RCVHWM, RCVHWM)
        public, private = curve_server_keys(secret)
        self.socket.curve_server = True
        self.socket.curve_publickey = public
        self.socket.curve_secretkey = private
        if port is None:
            port = self.socket.bind_to_random_port(f"tcp://{host}")
        else:   # a port agreed beforehand (srun, environment rendezvous: launcher/rendezvous.py)
            self.socket.bind(f"tcp://{host}:{port}")
        self.address = f"tcp://{host}:{port}"
        self.ranks: list[RankState] = [RankState(r) for r in range(size)]
        self.table_sent = False
        self.bad_messages = 0
        self.banned: collections.OrderedDict[bytes, None] = collections.OrderedDict()
        self._bad_by_conn: collections.OrderedDict[bytes, int] = collections.OrderedDict()
        self._unlogged = 0          # drops since the last log line
        self._unlogged_conns: set = set()
        self._last_log = 0.0

    # -- queries (used by the launcher's messages and, later, deadlock diagnosis) ----------
    def registered_ranks(self) -> list[int]:
        return [s.rank for s in self.ranks if s.registered]

    def missing_ranks(self) -> list[int]:
        return [s.rank for s in self.ranks if not s.registered]

    def states(self) -> dict[int, Optional[dict]]:
        return {s.rank: s.state for s in self.ranks}

    # -- sending ---------------------------------------------------------------------------
    def _send_to(self, identity: bytes, message: dict) -> None:
        try:
            self.socket.send_multipart([identity, *seal(self._secret, message)], zmq.NOBLOCK)
        except zmq.ZMQError:
            pass  # the rank is gone or its queue is full: nothing useful to do

    def send(self, rank: int, message: dict) -> None:
        ident = self.ranks[rank].identity
        if ident is not None:
            self._send_to(ident, message)

    def fail_startup(self, missing: list[int], text: str) -> None:
        """Tell every waiting rank that the address exchange will not complete."""
        for s in self.ranks:
            if s.registered:
                self._send_to(s.identity, {"t": "error", "kind": "startup_timeout",
                                           "missing": missing, "msg": text})

    # -- receiving -------------------------------------------------------------------------
    def receive(self, max_messages: int = MAX_PER_CALL) -> list[CoordEvent]:
        """Handle the messages waiting on the socket, at most ``max_messages`` of them
        (never blocks). The socket stays readable while more wait, so the caller's next
        poll returns at once: a flood slows the job's loop down but never stops it."""
        events: list[CoordEvent] = []
        for _ in range(max_messages):
            try:
                frames = self.socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            ident = frames[0]
            if ident in self.banned:
                self._drop(ident, None)
                continue
            if len(frames) != 3:
                self._drop(ident, f"malformed message ({len(frames) - 1} frames)")
                continue
            msg = unseal(self._secret, frames[1:])
            if msg is None:
                self._drop(ident, "message with a bad MAC")
                continue
            self._handle(ident, msg, events)
        self._log_drops(time.monotonic())
        return events

    def _drop(self, ident: bytes, what: Optional[str]) -> None:
        """Count a bad message from connection ``ident``; ban it after BAN_AFTER of them.
        ``what`` is None for a banned connection's message (counted, never logged alone)."""
        self.bad_messages += 1
        if what is not None:
            count = self._bad_by_conn.pop(ident, 0) + 1
            self._bad_by_conn[ident] = count
            if len(self._bad_by_conn) > MAX_TRACKED:
                self._bad_by_conn.popitem(last=False)
            if count >= BAN_AFTER:
                self.banned[ident] = None
                if len(self.banned) > MAX_TRACKED:
                    self.banned.popitem(last=False)
                what += f"; connection banned after {count} bad messages"
        if what is not None and self.bad_messages <= LOG_FIRST:
            self._log(f"minimpi: coordinator dropped a {what}")
            self._last_log = time.monotonic()
            return
        self._unlogged += 1
        self._unlogged_conns.add(ident)

    def _log_drops(self, now: float, force: bool = False) -> None:
        """One line for the drops not logged yet, at most every LOG_INTERVAL seconds."""
        if self._unlogged and (force or now - self._last_log >= LOG_INTERVAL):
            self._log(f"minimpi: coordinator dropped {self._unlogged} more bad message(s) from "
                      f"{len(self._unlogged_conns)} connection(s) ({len(self.banned)} banned)")
            self._unlogged = 0
            self._unlogged_conns.clear()
            self._last_log = now

    def _handle(self, ident: bytes, msg: dict, events: list[CoordEvent]) -> None:
        rank = msg.get("r")
        if not isinstance(rank, int) or not 0 <= rank < self.size:
            self._drop(ident, f"message from an unknown rank {rank!r}")
            return
        kind = msg.get("t")
        challenge = challenge_for(self._secret, ident)
        if kind == "hello":
            self._send_to(ident, {"t": "challenge", "c": challenge})
            return
        if msg.get("c") != challenge:
            # sealed by someone with the secret, but for another connection: a replay (or
            # a rank whose zmq reconnected, which learns its new challenge from the answer)
            self._drop(ident, f"{kind!r} message for rank {rank} that does not carry this "
                              f"connection's challenge (a replay?)")
            self._send_to(ident, {"t": "challenge", "c": challenge})
            return
        st = self.ranks[rank]
        st.last_seen = time.monotonic()
        if kind == "hb":
            return
        if kind == "register":
            st.registered = True
            st.identity = ident
            st.address = str(msg.get("addr"))
            st.pid = msg.get("pid")
            st.host = msg.get("host")
            events.append(CoordEvent("registered", rank))
            if self.table_sent:
                self._send_to(ident, self._table())
            elif all(s.registered for s in self.ranks):
                table = self._table()
                for s in self.ranks:
                    self._send_to(s.identity, table)
                self.table_sent = True
                events.append(CoordEvent("all_registered"))
        elif kind == "state":
            s = msg.get("s")
            st.state = s if isinstance(s, dict) else {"state": s}
            st.state_time = time.monotonic()
            events.append(CoordEvent("state", rank))
        elif kind == "live":
            s = msg.get("s")
            if isinstance(s, dict):
                st.live = s
                st.live_time = time.monotonic()
        elif kind == "failed":
            s = msg.get("s")
            s = s if isinstance(s, dict) else {"error": str(s)}
            st.state = st.failure = s
            st.state_time = time.monotonic()
            st.lost = _ranks_in(s.get("lost"), self.size)
            self._send_to(ident, {"t": "failed_ack"})
            events.append(CoordEvent("failed", rank))
        elif kind == "abort":
            code = msg.get("code", 1)
            code = code if isinstance(code, int) else 1
            text = str(msg.get("msg", ""))
            st.abort = (code, text)
            self._send_to(ident, {"t": "abort_ack"})
            events.append(CoordEvent("abort", rank, code=code, message=text))
        elif kind == "finalize":
            st.finalized = True
            st.lost = _ranks_in(msg.get("lost"), self.size) or st.lost
            events.append(CoordEvent("finalize", rank))
        elif kind in REQUEST_KINDS:
            if st.identity is None:   # a request before registering: answer where it came from
                st.identity = ident
            events.append(CoordEvent(kind, rank, data=msg))
        else:
            self._drop(ident, f"message of unknown type {kind!r} from rank {rank}")

    def _table(self) -> dict:
        return {"t": "table", "addrs": [s.address for s in self.ranks],
                "hosts": [s.host or "" for s in self.ranks]}

    def close(self) -> None:
        self._log_drops(time.monotonic(), force=True)
        self.socket.close(linger=0)
        self.ctx.term()


def _ranks_in(value, size: int) -> list:
    """The valid ranks of a reported list (anything else in it is ignored)."""
    if not isinstance(value, (list, tuple)):
        return []
    return sorted({r for r in value if isinstance(r, int) and 0 <= r < size})


def new_secret() -> bytes:
    return secrets.token_bytes(32)


def new_job_id() -> str:
    return secrets.token_hex(8)
