"""Message traces and communication statistics of one rank (``minimpi run --trace/--stats``).

Nothing here runs unless it is switched on: with ``MINIMPI_TRACE`` or ``MINIMPI_STATS`` set
(``minimpi run --trace FILE`` / ``--stats`` set them), :func:`attach` is called once when the
runtime starts. It

* records every outermost MPI call as a slice: the API front publishes calls on the bus
  (:mod:`minimpi.front`) as soon as someone listens to them, and this observer does
  (``call_entered``/``call_left``);
* subscribes an :class:`Observer` to this rank's bus (:mod:`minimpi.bus`): its
  ``step_started`` events (the collective framework reports the start of every algorithm
  step) name collective slices with their algorithm (``Allreduce[ring] 4.0 MiB``) and give
  them one nested slice per step; ``message_sent`` / ``message_received`` show each message
  leave and each receive complete, and ``wait_ended`` sums the time spent in blocking waits.
  A message is named by (sender's world rank, its ``msg_id``), which both sides know, so
  every send gets exactly one flow arrow to the receive that matched it. Recording only
  appends to a list: no message is added, delayed or reordered.

Clocks: ``time.perf_counter`` of every rank is aligned to rank 0's by a short NTP-style
exchange at startup (on a private context, before the program runs; the sample with the
least round trip wins). Each rank writes ``rank.N.json`` into ``MINIMPI_OBSERVE_DIR`` at
finalize; the launcher merges them (:func:`merge_traces`, :func:`format_stats`).

Nonblocking collectives advance from whatever call is waiting, so their steps are shown as
instant events (``Ibcast[binomial] step 2``) rather than slices that would break nesting.
"""
from __future__ import annotations

import json
import os
import struct
import time
from typing import Any, Dict, List, Optional, Tuple

from ..bus import Subscriber
from ..comm.communicator import endpoint_of
from ..data.units import format_size
from ..rma.window import Win
from .leftovers import FINAL_CONTEXT
from .observe_env import ENV_DIR, ENV_STATS, ENV_TRACE  # noqa: F401  (trace.ENV_TRACE...)

#: private context id for the clock exchange (never allocated to a communicator)
CLOCK_CONTEXT = 0x7FFFFFF0
CLOCK_ROUNDS = 8

_ARG_NAMES = ("dest", "source", "tag", "sendtag", "recvtag", "root", "target_rank", "rank")
_BUFFER_ARGS = ("buf", "sendbuf", "recvbuf", "origin")
#: window calls that open or close an epoch (their slices carry ``epoch``: the window's
#: synchronisation, as ``minimpi draw`` and the trace viewer show it)
_EPOCH_CALLS = frozenset(("Fence", "Start", "Complete", "Post", "Wait", "Test", "Lock",
                          "Unlock", "Lock_all", "Unlock_all", "Flush", "Flush_all",
                          "Flush_local", "Flush_local_all", "Sync", "Free"))


def _nbytes(value: Any) -> Optional[int]:
    """Size of a buffer argument (numpy array, buffer, or an mpi4py spec list), else None."""
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


# ----------------------------------------------------------------------------------------
# per-rank observer
# ----------------------------------------------------------------------------------------
class _Slice:
    __slots__ = ("name", "ts", "args", "stats_key", "channel", "sub", "step", "nbytes", "counts")

    def __init__(self, name: str, ts: float, args: dict, nbytes: Optional[int]) -> None:
        self.name = name
        self.ts = ts
        self.args = args
        self.stats_key = name
        self.channel = None   # the (blocking) collective channel this call adopted
        self.sub = None       # an open nested channel slice [name, ts, channel]
        self.step = None      # the open step slice [index, ts, sends, bytes, channel]
        self.nbytes = nbytes
        self.counts = [0, 0, 0, 0]   # messages and bytes sent, received during the call


class Observer(Subscriber):
    """Records one rank's calls, steps and messages; writes them at finalize."""

    def __init__(self, engine: Any, rank: int, size: int, trace: bool, stats: bool,
                 out_dir: Optional[str]) -> None:
        self.engine = engine
        self.rank = rank
        self.size = size
        self.trace = trace
        self.stats = stats
        self.out_dir = out_dir
        self.offset = 0.0          # seconds to add to perf_counter to get rank 0's clock
        self.rtt = 0.0
        self.events: List[dict] = []
        self.current: Optional[_Slice] = None
        self.first_post: Optional[float] = None   # first send since the last step hook
        self.start = time.perf_counter()
        self.in_calls = 0.0        # seconds inside outermost MPI calls
        self.blocked = 0.0         # seconds inside the engine's blocking waits
        self.totals = [0, 0, 0, 0]  # messages sent, bytes sent, messages received, bytes received
        self.per_call: Dict[str, List[float]] = {}  # key -> [calls, seconds, ms, bs, mr, br]
        self.written = False

    # -- helpers -------------------------------------------------------------------------
    def _us(self, t: float) -> float:
        return (t + self.offset) * 1e6

    def _emit_slice(self, name: str, t0: float, t1: float, args: Optional[dict] = None,
                    cat: str = "mpi") -> None:
        # the duration as the difference of the two ends on the trace's time base, so that
        # ts + dur is this slice's end exactly where a parent or the next step begins
        start = self._us(t0)
        ev = {"ph": "X", "name": name, "cat": cat, "ts": start,
              "dur": max(0.0, self._us(t1) - start), "pid": 0, "tid": self.rank}
        if args:
            ev["args"] = args
        self.events.append(ev)

    def _account(self, index: int, nbytes: int) -> None:
        t = self.totals
        t[index] += 1
        t[index + 1] += nbytes
        cur = self.current
        if cur is not None:
            cur.counts[index] += 1
            cur.counts[index + 1] += nbytes
        else:
            row = self.per_call.get("(outside MPI calls)")
            if row is None:
                row = self.per_call["(outside MPI calls)"] = [0, 0.0, 0, 0, 0, 0]
            row[2 + index] += 1
            row[3 + index] += nbytes

    # -- MPI calls (the bus's call events) ------------------------------------------------
    def call_entered(self, call: str, target: Any, args: Dict[str, Any]) -> None:
        name = call.rpartition(".")[2]
        info = {p: args[p] for p in _ARG_NAMES if args.get(p) is not None}
        nbytes = None
        for p in _BUFFER_ARGS:
            if p in args:
                nbytes = _nbytes(args[p])
                break
        if not isinstance(target, type):
            comm_name = getattr(endpoint_of(target) or getattr(target, "endpoint", None),
                                "name", None)
            if comm_name:
                info["comm"] = comm_name
            if isinstance(target, Win):
                info["win"] = target.label
                if name in _EPOCH_CALLS:
                    info["epoch"] = name
        self.enter(name, info, nbytes)

    def call_left(self, call: str, error: Optional[BaseException]) -> None:
        self.leave()

    def enter(self, name: str, args: dict, nbytes: Optional[int]) -> None:
        self.current = _Slice(name, time.perf_counter(), args, nbytes)
        self.first_post = None

    def leave(self) -> None:
        cur = self.current
        t1 = time.perf_counter()
        self.current = None
        self.in_calls += t1 - cur.ts
        if self.trace:
            self._close_step(cur, t1)
            self._close_sub(cur, t1)
            name = cur.name if cur.nbytes is None else f"{cur.name} {format_size(cur.nbytes)}"
            self._emit_slice(name, cur.ts, t1, cur.args)
        row = self.per_call.get(cur.stats_key)
        if row is None:
            row = self.per_call[cur.stats_key] = [0, 0.0, 0, 0, 0, 0]
        row[0] += 1
        row[1] += t1 - cur.ts
        for i, n in enumerate(cur.counts):
            row[2 + i] += n

    # -- engine events (minimpi.bus) ---------------------------------------------------
    def step_started(self, ch: Any, index: int) -> None:
        now = time.perf_counter()
        cur = self.current
        call = ch.call
        base = call.split("[", 1)[0]
        if cur is None or _is_nonblocking(base):
            if cur is not None and index == 0 and base.lower() == cur.name.lower():
                cur.name = cur.stats_key = call
            if self.trace:
                self.events.append({"ph": "i", "s": "t", "name": f"{call} step {index + 1}",
                                    "cat": "step", "ts": self._us(now), "pid": 0,
                                    "tid": self.rank})
            return
        start = self.first_post if self.first_post is not None else now
        self.first_post = None
        if cur.channel is None and cur.sub is None and index == 0 and \
                base.lower() == cur.name.lower():
            cur.channel = ch
            cur.name = call
            cur.stats_key = call
        elif cur.channel is not ch and (cur.sub is None or cur.sub[2] is not ch):
            if self.trace:
                self._close_step(cur, start)
                self._close_sub(cur, start)
            cur.sub = [call, start, ch]
        if not self.trace:
            return
        self._close_step(cur, start)
        cur.step = [index, start, 0, 0, ch]

    def _close_step(self, cur: _Slice, t: float) -> None:
        step = cur.step
        if step is not None:
            cur.step = None
            args = {"sends": step[2], "bytes sent": step[3]} if step[2] else None
            self._emit_slice(f"step {step[0] + 1}", step[1], t, args, cat="step")

    def _close_sub(self, cur: _Slice, t: float) -> None:
        sub = cur.sub
        if sub is not None:
            cur.sub = None
            self._emit_slice(sub[0], sub[1], t, cat="collective")

    def message_sent(self, context: int, dest: int, source: int, tag: int, payload: Any,
                     nbytes: int, msg_id: int) -> None:
        self.sent(time.perf_counter(), dest, msg_id, tag, nbytes, context)

    def message_received(self, peer: int, context: int, tag: int, msg_id: int,
                         nbytes: int) -> None:
        self.received(peer, msg_id, tag, nbytes, context)

    def wait_ended(self, seconds: float) -> None:
        self.blocked += seconds

    # -- messages ------------------------------------------------------------------------
    def sent(self, t: float, dest: int, msg_id: int, tag: int, nbytes: int, context: int) -> None:
        if context == FINAL_CONTEXT:      # finalize's own markers are not the program's
            return
        self._account(0, nbytes)
        cur = self.current
        if cur is not None:
            if self.first_post is None:
                self.first_post = t
            if cur.step is not None:
                cur.step[2] += 1
                cur.step[3] += nbytes
        if self.trace:
            self.events.append(_flow("s", self.rank, self.rank, msg_id, tag, nbytes, context,
                                     self._us(t), dest))

    def received(self, peer: int, msg_id: int, tag: int, nbytes: int, context: int) -> None:
        if context == FINAL_CONTEXT:
            return
        self._account(2, nbytes)
        if self.trace:
            ev = _flow("f", self.rank, peer, msg_id, tag, nbytes, context,
                       self._us(time.perf_counter()), peer)
            ev["bp"] = "e"
            self.events.append(ev)

    # -- output --------------------------------------------------------------------------
    def summary(self) -> dict:
        wall = time.perf_counter() - self.start
        ms, bs, mr, br = self.totals
        return {"rank": self.rank, "wall": wall, "in_calls": self.in_calls,
                "blocked": self.blocked, "sent": [ms, bs], "received": [mr, br],
                "per_call": {k: v for k, v in self.per_call.items()},
                "wires": self._wires()}

    def _wires(self) -> str:
        """How this rank reaches its peers and how it waits, e.g. ``shm to 3 peers;
        progress yield (auto: 4 ranks on this host, 2 cores -> yield)``."""
        routes = getattr(self.engine.transport, "routes", None)
        text = ""
        if routes is not None:
            counts: Dict[str, int] = {}
            for name in routes():
                if name is not None:
                    counts[name] = counts.get(name, 0) + 1
            text = ", ".join(f"{name} to {n} peer{'s' if n != 1 else ''}"
                             for name, n in counts.items()) + "; "
        policy = getattr(self.engine, "progress_policy", None)
        if policy is not None:
            text += f"progress {policy.mode}" + (f" ({policy.reason})" if policy.reason else "")
        return text

    def write(self) -> Optional[str]:
        if self.written or not self.out_dir:
            return None
        self.written = True
        doc = {"rank": self.rank, "size": self.size, "clock_offset_us": self.offset * 1e6,
               "clock_rtt_us": self.rtt * 1e6, "stats": self.summary()}
        if self.trace:
            doc["events"] = self.events
        path = os.path.join(self.out_dir, f"rank.{self.rank}.json")
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, path)
        return path


def _is_nonblocking(base: str) -> bool:
    """'Ibcast', 'iallreduce', 'Ireduce_scatter' are nonblocking; 'Init...' is not a collective."""
    return base[:1] in ("I", "i")


def _flow(ph: str, rank: int, sender: int, msg_id: int, tag: int, nbytes: int, context: int,
          ts: float, peer: int) -> dict:
    coll = context & 1
    name = f"{format_size(nbytes)}" + ("" if coll else f" tag {tag}")
    return {"ph": ph, "id": sender * (1 << 32) + msg_id, "name": name,
            "cat": "coll-msg" if coll else "msg", "ts": ts, "pid": 0, "tid": rank,
            "args": {"bytes": nbytes, "tag": tag, "context": context, "peer": peer}}


def observer_of_engine(engine: Any) -> Optional[Observer]:
    """The trace/statistics observer subscribed to ``engine``, if any."""
    for o in engine.bus.subscribers:
        if isinstance(o, Observer):
            return o
    return None


def sync_clock(engine: Any, rank: int, size: int, rounds: int = CLOCK_ROUNDS) -> Tuple[float, float]:
    """(offset, rtt): seconds to add to this rank's perf_counter to read rank 0's clock."""
    if size == 1 or engine.transport is None:
        return 0.0, 0.0
    engine.register_context(CLOCK_CONTEXT, range(size))
    fmt = struct.Struct("<d")
    perf = time.perf_counter
    if rank == 0:
        for peer in range(1, size):
            for _ in range(rounds):
                buf = bytearray(8)
                engine.irecv(CLOCK_CONTEXT, peer, 1, memoryview(buf), False, "clock sync").wait()
                stamp = fmt.pack(perf())
                engine.isend(CLOCK_CONTEXT, peer, 0, 2, (memoryview(stamp),), 8, 0,
                             "clock sync").wait()
        return 0.0, 0.0
    best = (float("inf"), 0.0)
    for _ in range(rounds):
        buf = bytearray(8)
        rreq = engine.irecv(CLOCK_CONTEXT, 0, 2, memoryview(buf), False, "clock sync")
        t1 = perf()
        engine.isend(CLOCK_CONTEXT, 0, rank, 1, (memoryview(fmt.pack(t1)),), 8, 0,
                     "clock sync").wait()
        rreq.wait()
        t2 = perf()
        t0 = fmt.unpack(buf)[0]
        rtt = t2 - t1
        if rtt < best[0]:
            best = (rtt, t0 - (t1 + t2) / 2)
    return best[1], best[0]


def attach(engine: Any, rank: int, size: int, env: Dict[str, str], *, sync: bool = True
           ) -> Observer:
    """Switch on tracing/statistics for this engine (called once by the runtime)."""
    trace = bool(env.get(ENV_TRACE))
    stats = bool(env.get(ENV_STATS))
    obs = Observer(engine, rank, size, trace, stats, env.get(ENV_DIR))
    if sync:
        obs.offset, obs.rtt = sync_clock(engine, rank, size)
    engine.bus.subscribe(obs)   # its step events also name the per-collective statistics
    if trace:
        obs.events.append({"ph": "M", "name": "thread_name", "pid": 0, "tid": rank,
                           "args": {"name": f"rank {rank}"}})
        obs.events.append({"ph": "M", "name": "thread_sort_index", "pid": 0, "tid": rank,
                           "args": {"sort_index": rank}})
    obs.start = time.perf_counter()
    return obs


# ----------------------------------------------------------------------------------------
# the launcher side: merge the per-rank files
# ----------------------------------------------------------------------------------------
def load_rank_files(directory: str) -> List[dict]:
    docs = []
    for name in sorted(os.listdir(directory)):
        if name.startswith("rank.") and name.endswith(".json"):
            with open(os.path.join(directory, name)) as f:
                docs.append(json.load(f))
    docs.sort(key=lambda d: d["rank"])
    return docs


def merge_traces(docs: List[dict], nprocs: int, program: str = "") -> dict:
    """One Chrome/Perfetto trace for the job: ranks' events on a common time base (0 = start)."""
    events: List[dict] = []
    for d in docs:
        events.extend(d.get("events", ()))
    timed = [e["ts"] for e in events if "ts" in e]
    t0 = min(timed) if timed else 0.0
    for e in events:
        # Round the two ends of a slice to the nanosecond, then take the duration between
        # them: rounding the start and the duration separately let 1 ns of a child slice
        # stick out of its parent, or a step into the next one, and viewers then break the
        # nesting. Rounding is monotonic, so nested ends stay nested.
        if "ts" in e:
            start = e["ts"] - t0
            e["ts"] = round(start, 3)
            if "dur" in e:
                e["dur"] = round(round(start + e["dur"], 3) - e["ts"], 3)
        elif "dur" in e:
            e["dur"] = round(e["dur"], 3)
    # flows whose other end is missing (a rank that died, a message never received) would
    # dangle: keep only complete pairs, and say how many were dropped
    starts = {e["id"] for e in events if e.get("ph") == "s"}
    ends = {e["id"] for e in events if e.get("ph") == "f"}
    complete = starts & ends
    kept = [e for e in events if e.get("ph") not in ("s", "f") or e["id"] in complete]
    meta = [{"ph": "M", "name": "process_name", "pid": 0,
             "args": {"name": f"minimpi job: {program} (-n {nprocs})" if program else
                      f"minimpi job (-n {nprocs})"}}]
    missing = sorted(set(range(nprocs)) - {d["rank"] for d in docs})
    return {
        "traceEvents": meta + kept,
        "displayTimeUnit": "ms",
        "otherData": {
            "ranks": nprocs,
            "ranks_without_trace": missing,
            "unmatched_flows": len(starts ^ ends),
            "clock_offsets_us": {str(d["rank"]): round(d.get("clock_offset_us", 0.0), 3)
                                 for d in docs},
            "clock_rtt_us": {str(d["rank"]): round(d.get("clock_rtt_us", 0.0), 3) for d in docs},
        },
    }


def format_stats(docs: List[dict], nprocs: int) -> str:
    """The ``--stats`` tables: per rank, then per rank and call (collectives with algorithm)."""
    def ms(x: float) -> str:
        return f"{x * 1e3:.1f}"

    lines = ["minimpi stats (times in ms; 'in MPI' = inside MPI calls, 'waiting' = blocked in "
             "them, 'compute' = the rest)"]
    head = ("rank", "msgs sent", "bytes sent", "msgs recv", "bytes recv", "wall", "in MPI",
            "waiting", "compute")
    rows = []
    for d in docs:
        s = d["stats"]
        rows.append((str(s["rank"]), str(s["sent"][0]), format_size(s["sent"][1]),
                     str(s["received"][0]), format_size(s["received"][1]), ms(s["wall"]),
                     ms(s["in_calls"]), ms(s["blocked"]), ms(max(0.0, s["wall"] - s["in_calls"]))))
    lines += _table(head, rows)
    wires = {d["stats"].get("wires") for d in docs} - {None, ""}
    if len(wires) == 1:
        lines.append(f"every rank: {wires.pop()}")
    else:
        lines += [f"rank {d['stats']['rank']}: {d['stats']['wires']}" for d in docs
                  if d["stats"].get("wires")]
    missing = sorted(set(range(nprocs)) - {d["rank"] for d in docs})
    if missing:
        lines.append(f"(no statistics from rank(s) {', '.join(map(str, missing))}: they did "
                     f"not reach finalize)")
    head2 = ("rank", "call", "calls", "time", "msgs sent", "bytes sent", "msgs recv", "bytes recv")
    rows2 = []
    for d in docs:
        s = d["stats"]
        for key, v in sorted(s["per_call"].items(), key=lambda kv: -kv[1][1]):
            rows2.append((str(s["rank"]), key, str(int(v[0])), ms(v[1]), str(int(v[2])),
                          format_size(int(v[3])), str(int(v[4])), format_size(int(v[5]))))
    if rows2:
        lines.append("")
        lines.append("per call (collectives named with their algorithm):")
        lines += _table(head2, rows2)
    return "\n".join(lines)


def _table(head: Tuple[str, ...], rows: List[Tuple[str, ...]]) -> List[str]:
    widths = [max(len(head[i]), *(len(r[i]) for r in rows)) if rows else len(head[i])
              for i in range(len(head))]
    def fmt(r):
        return "  ".join(c.ljust(w) if i == 1 and head[1] == "call" else c.rjust(w)
                         for i, (c, w) in enumerate(zip(r, widths)))
    return [fmt(head)] + [fmt(r) for r in rows]
