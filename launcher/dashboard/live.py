"""What the page shows of a running job, gathered on the launcher (the aggregation).

The launcher already knows most of it; :class:`LiveState` only reads it, a few times a
second, on the dashboard's own thread, and turns it into one *view document* (JSON):

* each rank's row: host, pid, CPU and memory, and the MPI call it is in, from the rank's
  latest snapshot (:mod:`minimpi.runtime.dashboard`, kept by the coordinator in
  ``RankState.live``); its state - computing, in MPI, blocked (the deadlock reporter's
  state, ``RankState.state``), finished, exited with its code (the job's reaping);
* the wait-for graph of the blocked ranks and its cycle (:func:`launcher.deadlock.wait_for_edges`,
  :func:`~launcher.deadlock.find_cycle`), and the deadlock report: the launcher's own once
  it declared a deadlock, a provisional one (same text) while every running rank is blocked;
* the message matrix per communicator, summed from the ranks' counters (each rank counts
  what it sent, so every message is counted once);
* the collectives in progress, grouped by communicator and call, with the step each rank
  has reached and, on up to 16 ranks, the schedule ``minimpi draw`` draws
  (:mod:`.pictures`);
* the ranks' recent output lines and the launcher's own messages (the output forwarder's
  ``tap``), and the exit code and summary when the job ends.

However many messages the job sends, a document costs the same to build: counters, not
events, come from the ranks.
"""
from __future__ import annotations

import threading
import time
from collections import Counter, deque
from typing import Any, Dict, List, Optional, Tuple

from minimpi.runtime.dashboard import INTERNAL_CONTEXTS
from minimpi.runtime.states import edge_text, format_state

from ..deadlock import build_report, find_cycle, wait_for_edges
from .pictures import Pictures, split_call

OUTPUT_PER_RANK = 20
RECENT_OUTPUT = 200
LAUNCHER_LINES = 200
LINE_CHARS = 400
MAX_EDGES = 512
MAX_COLLECTIVES = 24
_CONTEXT_MASK = 0x7FFF_FFFE


def _host_name(identity: Optional[str]) -> Optional[str]:
    return identity.split("/", 1)[0] if identity else None


class LiveState:
    """The launcher's view of one job for its page (see the module docstring)."""

    def __init__(self, title: str, nprocs: int, interval: float,
                 pictures: Optional[Pictures] = None) -> None:
        self.title = title
        self.nprocs = nprocs
        self.interval = interval
        self.pictures = pictures if pictures is not None else Pictures()
        self.job: Any = None
        self.started = time.time()
        self._t0 = time.monotonic()
        self._lock = threading.Lock()
        self._out: List[deque] = [deque(maxlen=OUTPUT_PER_RANK) for _ in range(nprocs)]
        self._recent: deque = deque(maxlen=RECENT_OUTPUT)
        self._launcher: deque = deque(maxlen=LAUNCHER_LINES)
        self._blocked_since: Dict[int, float] = {}
        self.exit_code: Optional[int] = None
        self.ended_after: Optional[float] = None
        self.seq = 0

    # -- fed by the job ------------------------------------------------------------------
    def attach(self, job: Any) -> None:
        """Watch ``job`` (a Job or MultiHostJob whose coordinator and output forwarder exist)."""
        self.job = job
        job.forward.tap = self.on_output

    def on_output(self, rank: Any, stream: str, lines: List[Any]) -> None:
        """The forwarder's tap (on the job's loop): remember, never block for long."""
        at = round(time.monotonic() - self._t0, 2)
        with self._lock:
            for raw in lines:
                text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
                for line in text.rstrip("\n").split("\n") if rank is None else (text,):
                    line = line[:LINE_CHARS]
                    if rank is None:
                        self._launcher.append(line)
                    elif isinstance(rank, int) and 0 <= rank < self.nprocs:
                        self._out[rank].append([at, stream, line])
                        self._recent.append([at, rank, stream, line])
                    else:                  # a spawned process's stream (its label)
                        self._recent.append([at, str(rank), stream, line])

    def ended(self, code: int) -> None:
        self.exit_code = code
        self.ended_after = time.monotonic() - self._t0

    # -- the view ------------------------------------------------------------------------
    def _alive(self, r: int) -> bool:
        ranks = getattr(self.job, "ranks", None) or []
        rp = ranks[r] if r < len(ranks) else None
        return rp is not None and rp.alive

    def view(self) -> Dict[str, Any]:
        """The view document now (see static/app.js for how it is drawn)."""
        self.seq += 1
        now = time.monotonic()
        job = self.job
        coord = getattr(job, "coord", None)
        states = list(coord.ranks) if coord is not None else []
        failure = getattr(job, "failure", None)
        doc: Dict[str, Any] = {
            "mode": "live", "seq": self.seq, "elapsed": round(now - self._t0, 2),
            "title": self.title, "nprocs": self.nprocs, "interval": self.interval,
        }
        with self._lock:
            out = [list(d) for d in self._out]
            doc["output"] = list(self._recent)
            launcher = list(self._launcher)
        doc["ranks"] = [self._row(r, states[r] if r < len(states) else None, out[r], now)
                        for r in range(self.nprocs)]
        blocked = self._blocked(states, failure)
        doc["waitfor"] = self._waitfor(blocked)
        doc["diagnosis"] = self._diagnosis(coord, states, blocked, failure, now)
        doc["matrix"] = self._matrix(states)
        doc["collectives"] = self._collectives(states, now)
        doc["failure"] = None if failure is None else {
            "kind": failure.kind, "summary": failure.summary, "details": list(failure.details),
            "rank": failure.rank}
        if self.exit_code is not None:
            status = "ended"
        elif failure is not None:
            status = "ending"
        elif coord is not None and coord.table_sent:
            status = "running"
        else:
            status = "starting"
        doc["job"] = {"status": status, "exit_code": self.exit_code,
                      "ended_after": self.ended_after}
        if self.exit_code is not None:
            counts = Counter(row["exit"] or "still running" for row in doc["ranks"])
            doc["summary"] = {"code": self.exit_code, "lines": launcher,
                              "counts": sorted([k, v] for k, v in counts.items())}
        else:
            doc["summary"] = None
        doc["launcher"] = launcher
        return doc

    def _fresh(self, st: Any, now: float) -> bool:
        return st.live_time is not None and now - st.live_time <= 3 * self.interval + 1.0

    def _row(self, r: int, st: Any, out: List[list], now: float) -> Dict[str, Any]:
        ranks = getattr(self.job, "ranks", None) or []
        rp = ranks[r] if r < len(ranks) else None
        live = st.live if st is not None else None
        row: Dict[str, Any] = {
            "rank": r, "host": None, "pid": None, "cpu": None, "rss": None,
            "state": "starting", "text": "", "call": None, "blocked_for": None,
            "exit": None, "code": None, "out": out[-3:]}
        if live:
            row.update(host=live.get("host"), pid=live.get("pid"), cpu=live.get("cpu"),
                       rss=live.get("rss"))
        if st is not None:
            row["host"] = row["host"] or _host_name(st.host)
            row["pid"] = row["pid"] or st.pid
        state = st.state if st is not None and isinstance(st.state, dict) else None
        if rp is not None and not rp.alive:
            code = rp.returncode
            row.update(state="exited" if code == 0 else "failed", code=code, cpu=None,
                       exit=(st.exit_status if st is not None else None) or f"exit code {code}")
            if st is not None and st.failure and st.failure.get("error"):
                row["text"] = str(st.failure["error"])
            self._blocked_since.pop(r, None)
            return row
        if st is not None and st.failure and st.failure.get("error"):
            row.update(state="failed", text=f"failing: {st.failure['error']}")
        elif st is not None and st.finalized:
            row.update(state="finished", text="done; waits in MPI finalize for the others")
        elif state is not None and state.get("blocked"):
            since = self._blocked_since.setdefault(r, st.state_time or now)
            row.update(state="blocked", text=format_state(state),
                       blocked_for=round(now - since, 1))
        elif live and self._fresh(st, now):
            row["state"] = "mpi" if live.get("call") else "computing"
        elif live:
            row.update(state="silent", text=f"no report for {now - st.live_time:.0f} s "
                                            f"(a long call holding Python's GIL, or stopped?)")
        elif st is not None and st.registered:
            row["state"] = "running"
        if row["state"] != "blocked":
            self._blocked_since.pop(r, None)
        if live and row["state"] in ("mpi", "blocked", "finished", "silent", "failed"):
            row["call"] = live.get("call")
        return row

    def _blocked(self, states: List[Any], failure: Any) -> Dict[int, dict]:
        """The blocked ranks' states; once a deadlock was declared, the states it was
        declared on (its ranks are being ended)."""
        deadlocked = failure is not None and failure.kind == "deadlock"
        return {st.rank: st.state for st in states
                if isinstance(st.state, dict) and st.state.get("blocked") and not st.finalized
                and (deadlocked or self._alive(st.rank))}

    def _waitfor(self, blocked: Dict[int, dict]) -> Dict[str, Any]:
        edges = wait_for_edges(blocked)
        cycle = find_cycle(edges) or []
        on_cycle = {(a, b) for a, _, b in cycle}
        out: List[list] = []
        seen = set()
        for a in sorted(edges):
            for b, item in edges[a]:
                if (a, b) in seen or len(out) >= MAX_EDGES:
                    continue
                seen.add((a, b))
                out.append([a, b, edge_text(a, blocked[a], item, b), (a, b) in on_cycle])
        return {"blocked": sorted(blocked), "edges": out,
                "cycle": [a for a, _, _ in cycle],
                "cycle_text": " -> ".join(edge_text(a, blocked[a], item, b)
                                          for a, item, b in cycle)}

    def _diagnosis(self, coord: Any, states: List[Any], blocked: Dict[int, dict],
                   failure: Any, now: float) -> Optional[Dict[str, Any]]:
        if failure is not None and failure.kind == "deadlock":
            return {"final": True, "summary": failure.summary, "lines": list(failure.details)}
        if failure is not None or coord is None or not coord.table_sent or not blocked:
            return None
        live = [st.rank for st in states if self._alive(st.rank) and not st.finalized]
        if not live or any(r not in blocked for r in live):
            return None
        timeout = getattr(getattr(self.job, "spec", None), "deadlock_timeout", 0.0)
        _, lines = build_report(coord, self._alive, timeout)
        since = max(self._blocked_since.get(r, now) for r in live)
        when = (f"if nothing moves for {timeout:g} s (--deadlock-timeout), minimpi declares a "
                f"deadlock and ends the job" if timeout > 0 else
                "deadlock detection is off (--deadlock-timeout 0)")
        return {"final": False, "lines": lines,
                "summary": f"every rank still running has been blocked in minimpi for "
                           f"{now - since:.1f} s; {when}. What each rank is doing:"}

    def _matrix(self, states: List[Any]) -> Dict[str, Any]:
        """Messages and bytes sent, by (sender, receiver) world rank: all of them, and per
        communicator (a context and the world ranks of its group)."""
        n = self.nprocs
        total: Dict[Tuple[int, int], List[int]] = {}
        per: Dict[Tuple[int, Tuple[int, ...]], Dict[Tuple[int, int], List[int]]] = {}
        names: Dict[Tuple[int, Tuple[int, ...]], Optional[str]] = {}
        for st in states:
            live = st.live
            if not live:
                continue
            comms = live.get("comms") or {}
            for row in live.get("sent") or ():
                try:
                    context, dest, msgs, nbytes = (int(x) for x in row)
                except (TypeError, ValueError):
                    continue
                base = context & _CONTEXT_MASK
                if not 0 <= dest < n or base >= INTERNAL_CONTEXTS:
                    continue
                name, group = (comms.get(str(base)) or [None, None])[:2]
                key = (base, tuple(group) if isinstance(group, list) else ())
                if name or key not in names:
                    names[key] = name or names.get(key)
                for table in (total, per.setdefault(key, {})):
                    cell = table.setdefault((st.rank, dest), [0, 0])
                    cell[0] += msgs
                    cell[1] += nbytes

        def doc(key: str, name: str, ranks: List[int], table: Dict) -> Dict[str, Any]:
            cells = [[s, d, m, b] for (s, d), (m, b) in sorted(table.items())]
            return {"id": key, "name": name, "ranks": ranks, "cells": cells,
                    "messages": sum(c[2] for c in cells), "bytes": sum(c[3] for c in cells)}

        comms = [doc("all", "all communicators", list(range(n)), total)]
        for (base, group), table in sorted(per.items(), key=lambda kv: kv[0]):
            ranks = list(group) if group else sorted({r for pair in table for r in pair})
            name = names.get((base, group)) or f"context {base}"
            comms.append(doc(f"{base}:{','.join(map(str, group))}", name, ranks, table))
        return {"comms": comms}

    def _collectives(self, states: List[Any], now: float) -> List[Dict[str, Any]]:
        """The collectives in progress: per (communicator, call), each rank's step."""
        calls: Dict[Tuple[int, Tuple[int, ...], int], Dict[str, Any]] = {}
        for st in states:
            live = st.live
            if not live or not self._alive(st.rank) or not self._fresh(st, now):
                continue
            for c in live.get("colls") or ():
                group = tuple(c.get("group") or ())
                key = (int(c.get("ctx", -1)), group, int(c.get("tag", -1)))
                entry = calls.get(key)
                if entry is None:
                    collective, algorithm = split_call(str(c.get("call", "")))
                    entry = calls[key] = {
                        "call": c.get("call"), "collective": collective,
                        "algorithm": algorithm, "comm": c.get("comm"), "size": c.get("size"),
                        "group": list(group), "tag": c.get("tag"), "root": c.get("root"),
                        "nbytes": c.get("nbytes"), "blocking": c.get("blocking"), "steps": {}}
                entry["steps"][str(c.get("rank"))] = c.get("step")
                if entry["root"] is None and c.get("root") is not None:
                    entry["root"] = c.get("root")
                if entry["nbytes"] is None and c.get("nbytes") is not None:
                    entry["nbytes"] = c.get("nbytes")
        out = sorted(calls.values(), key=lambda e: (str(e["comm"]), e["tag"] or 0))
        out = out[:MAX_COLLECTIVES]
        coord = getattr(self.job, "coord", None)
        for entry in out:
            hosts = None
            if coord is not None and entry["group"]:
                hosts = [coord.ranks[w].host if 0 <= w < len(coord.ranks) else None
                         for w in entry["group"]]
            key = Pictures.key(str(entry["call"]), int(entry["size"] or 0), entry["root"],
                               entry["nbytes"], hosts)
            entry["picture"] = self.pictures.get(key) if key is not None else None
        return out
