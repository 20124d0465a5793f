"""The coordinator: the launcher's end of the control plane (a pyzmq ROUTER).

It does not own an event loop: the job's loop (``launcher/job.py``) polls
``coordinator.socket`` together with the ranks' pipes and calls :meth:`Coordinator.receive`
when it is readable. That keeps one loop, one thread, and no spinning.

Wire format (both directions): a zmq multipart message ``[mac, payload]`` (the ROUTER
sees the DEALER's routing id in front). ``payload`` is a msgpack map, ``mac`` is
HMAC-SHA256(job secret, payload). Anything whose MAC does not verify is dropped and
logged without being unpacked. Every rank->coordinator map carries ``"r": rank``.

rank -> coordinator
    {"t": "register", "r": R, "addr": "host:port", "pid": PID, "host": HOSTNAME}
    {"t": "state",    "r": R, "s": {...what R is blocked on...}, "time": UNIX_TIME}
    {"t": "abort",    "r": R, "code": CODE, "msg": TEXT}
    {"t": "finalize", "r": R}
coordinator -> rank
    {"t": "table", "addrs": [addr of rank 0, addr of rank 1, ...]}   # once all registered
    {"t": "error", "kind": "startup_timeout", "missing": [ranks], "msg": TEXT}
    {"t": "abort_ack"}

A rank that registers again after the table went out gets the table at once.
"""
from __future__ import annotations

import secrets
import sys
import time
from dataclasses import dataclass
from typing import Callable, Optional

import zmq

from minimpi.runtime.bootstrap import seal, unseal


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
        from minimpi.runtime.diagnose import format_state as diagnose_format
        return diagnose_format(state)
    return ", ".join(f"{k}={v}" for k, v in state.items()) if state else "{}"


@dataclass
class CoordEvent:
    """Something the job loop must act on."""

    kind: str            # "registered" | "all_registered" | "abort" | "finalize" | "state"
    rank: int = -1
    code: int = 0
    message: str = ""


class Coordinator:
    def __init__(self, size: int, secret: bytes, job_id: str, host: str = "127.0.0.1",
                 log: Optional[Callable[[str], None]] = None):
        self.size = size
        self.job_id = job_id
        self._secret = secret
        self._log = log or (lambda text: print(text, file=sys.stderr, flush=True))
        self.ctx = zmq.Context()
        self.socket = self.ctx.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.ROUTER_MANDATORY, 0)
        port = self.socket.bind_to_random_port(f"tcp://{host}")
        self.address = f"tcp://{host}:{port}"
        self.ranks: list[RankState] = [RankState(r) for r in range(size)]
        self.table_sent = False
        self.bad_messages = 0

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
    def receive(self) -> list[CoordEvent]:
        """Handle every message waiting on the socket (never blocks)."""
        events: list[CoordEvent] = []
        while True:
            try:
                frames = self.socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return events
            if len(frames) < 3:
                self._drop("malformed message")
                continue
            ident, body = frames[0], frames[1:]
            msg = unseal(self._secret, body)
            if msg is None:
                self._drop("message with a bad MAC")
                continue
            self._handle(ident, msg, events)

    def _drop(self, what: str) -> None:
        self.bad_messages += 1
        if self.bad_messages <= 5:
            self._log(f"minimpi: coordinator dropped a {what}")
        elif self.bad_messages == 6:
            self._log("minimpi: coordinator dropping further bad messages silently")

    def _handle(self, ident: bytes, msg: dict, events: list[CoordEvent]) -> None:
        rank = msg.get("r")
        if not isinstance(rank, int) or not 0 <= rank < self.size:
            self._drop(f"message from an unknown rank {rank!r}")
            return
        st = self.ranks[rank]
        kind = msg.get("t")
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
        elif kind == "abort":
            code = msg.get("code", 1)
            code = code if isinstance(code, int) else 1
            text = str(msg.get("msg", ""))
            st.abort = (code, text)
            self._send_to(ident, {"t": "abort_ack"})
            events.append(CoordEvent("abort", rank, code=code, message=text))
        elif kind == "finalize":
            st.finalized = True
            events.append(CoordEvent("finalize", rank))
        else:
            self._drop(f"message of unknown type {kind!r} from rank {rank}")

    def _table(self) -> dict:
        return {"t": "table", "addrs": [s.address for s in self.ranks],
                "hosts": [s.host or "" for s in self.ranks]}

    def close(self) -> None:
        self.socket.close(linger=0)
        self.ctx.term()


def new_secret() -> bytes:
    return secrets.token_bytes(32)


def new_job_id() -> str:
    return secrets.token_hex(8)
