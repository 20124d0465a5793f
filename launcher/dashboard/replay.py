"""A recorded trace as the dashboard's view documents, one per moment (``minimpi view``).

``minimpi run --trace FILE`` records every outermost MPI call of every rank (a slice with
its arguments), every step of every collective, and every message (a flow from its send to
its receive), on one time base. :class:`TraceReplay` answers "what did the page show at
time t": each rank's call under way (or computing), the collectives in progress and the
step each rank was in, the messages sent so far (the heat map), and who was inside a
blocking point-to-point call waiting for whom. What a trace does not hold - host, pid, CPU,
memory, output, the deadlock reporter's states - is left empty.
"""
from __future__ import annotations

import bisect
import json
import re
from typing import Any, Dict, List, Optional, Tuple

from .pictures import Pictures, split_call

_CONTEXT_MASK = 0x7FFF_FFFE
_SIZE = re.compile(r"^(.*?)\s+(\d+(?:\.\d+)?)\s+(B|KiB|MiB|GiB|TiB)$")
_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
#: point-to-point calls that wait for one peer (what the wait-for panel draws)
_WAITING_CALLS = {"Recv", "recv", "Send", "send", "Ssend", "ssend", "Probe", "probe",
                  "Mprobe", "mprobe", "Sendrecv", "sendrecv", "Sendrecv_replace", "Wait",
                  "wait"}
_PEER_ARGS = (("dest", "dest"), ("source", "source"), ("root", "root"),
              ("target_rank", "target"))


class TraceError(ValueError):
    """A file that is not a trace ``minimpi run --trace`` wrote."""


class _Call:
    __slots__ = ("start", "end", "name", "nbytes", "args", "ordinal")

    def __init__(self, start: float, end: float, name: str, nbytes: Optional[int],
                 args: Dict[str, Any]) -> None:
        self.start, self.end, self.name, self.nbytes, self.args = start, end, name, nbytes, args
        self.ordinal = -1      # for a collective: its number among this rank's on its comm


def _name_and_size(name: str) -> Tuple[str, Optional[int]]:
    m = _SIZE.match(name)
    if m is None:
        return name, None
    return m.group(1), int(float(m.group(2)) * _UNITS[m.group(3)])


def load(path: str) -> Dict[str, Any]:
    """The trace in ``path``; TraceError says what is wrong with it."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as exc:
        raise TraceError(f"{path}: {exc.strerror}") from None
    except ValueError as exc:
        raise TraceError(f"{path}: not JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceError(f"{path}: not a trace of minimpi run --trace (no traceEvents list)")
    return doc


class TraceReplay:
    """The moments of one trace (see the module docstring)."""

    def __init__(self, doc: Dict[str, Any], title: str = "",
                 pictures: Optional[Pictures] = None) -> None:
        events = doc.get("traceEvents") or []
        other = doc.get("otherData") or {}
        tids = [e.get("tid") for e in events if isinstance(e.get("tid"), int)]
        self.nprocs = int(other.get("ranks") or (max(tids) + 1 if tids else 0))
        self.title = title
        for e in events:
            if e.get("ph") == "M" and e.get("name") == "process_name" and not title:
                self.title = str((e.get("args") or {}).get("name", ""))
        self.pictures = pictures if pictures is not None else Pictures()
        n = self.nprocs
        self.calls: List[List[_Call]] = [[] for _ in range(n)]
        self.steps: List[List[Tuple[float, float, int]]] = [[] for _ in range(n)]
        sends: List[Tuple[float, int, int, int, int]] = []
        end = 0.0
        for e in events:
            tid, ph = e.get("tid"), e.get("ph")
            if not isinstance(tid, int) or not 0 <= tid < n or "ts" not in e:
                continue
            ts = float(e["ts"]) / 1e6
            if ph == "X":
                stop = ts + float(e.get("dur", 0.0)) / 1e6
                end = max(end, stop)
                if e.get("cat") == "mpi":
                    name, nbytes = _name_and_size(str(e.get("name", "")))
                    self.calls[tid].append(_Call(ts, stop, name, nbytes, dict(e.get("args") or {})))
                elif e.get("cat") == "step":
                    m = re.match(r"step (\d+)$", str(e.get("name", "")))
                    if m:
                        self.steps[tid].append((ts, stop, int(m.group(1))))
            elif ph == "s":
                args = e.get("args") or {}
                peer = args.get("peer")
                if isinstance(peer, int):
                    sends.append((ts, tid, peer, int(args.get("bytes") or 0),
                                  int(args.get("context") or 0)))
                end = max(end, ts)
        self.duration = end
        for calls in self.calls:
            calls.sort(key=lambda c: c.start)
            seen: Dict[str, int] = {}
            for c in calls:
                if "[" in c.name:
                    comm = str(c.args.get("comm"))
                    c.ordinal = seen.get(comm, 0)
                    seen[comm] = c.ordinal + 1
        for steps in self.steps:
            steps.sort()
        self._starts = [[c.start for c in calls] for calls in self.calls]
        self._step_starts = [[s[0] for s in steps] for steps in self.steps]
        sends.sort()
        self.sends = sends
        self._send_times = [s[0] for s in sends]
        # communicator names of the contexts, from the call each message was sent in
        self.context_names: Dict[int, str] = {0: "COMM_WORLD"}
        for ts, src, _, _, context in sends:
            base = context & _CONTEXT_MASK
            if base not in self.context_names:
                call = self._call_at(src, ts)
                if call is not None and call.args.get("comm"):
                    self.context_names[base] = str(call.args["comm"])
        # the ranks of each collective call: (comm, ordinal) -> ranks that made it
        self._members: Dict[Tuple[str, int], List[int]] = {}
        for r, calls in enumerate(self.calls):
            for c in calls:
                if c.ordinal >= 0:
                    self._members.setdefault((str(c.args.get("comm")), c.ordinal), []).append(r)
        self.missing = list(other.get("ranks_without_trace") or [])

    def meta(self) -> Dict[str, Any]:
        return {"mode": "replay", "title": self.title, "nprocs": self.nprocs,
                "duration": self.duration}

    # -- one moment ----------------------------------------------------------------------
    def _call_at(self, r: int, t: float) -> Optional[_Call]:
        i = bisect.bisect_right(self._starts[r], t) - 1
        if i >= 0:
            c = self.calls[r][i]
            if c.start <= t < c.end:
                return c
        return None

    def _step_at(self, r: int, t: float, call: _Call) -> int:
        i = bisect.bisect_right(self._step_starts[r], t) - 1
        best = 0
        while i >= 0:
            start, _, index = self.steps[r][i]
            if start < call.start:
                break
            best = max(best, index)
            i -= 1
        return best

    def frame(self, t: float) -> Dict[str, Any]:
        """The view document of time ``t`` seconds after the trace's start."""
        t = max(0.0, min(float(t), self.duration))
        rows, edges, blocked = [], [], []
        colls: Dict[Tuple[str, int], Dict[str, Any]] = {}
        for r in range(self.nprocs):
            call = self._call_at(r, t)
            calls = self.calls[r]
            row: Dict[str, Any] = {
                "rank": r, "host": None, "pid": None, "cpu": None, "rss": None,
                "state": "computing", "text": "", "call": None, "blocked_for": None,
                "exit": None, "code": None, "out": []}
            if not calls or t < calls[0].start:
                row["state"] = "starting" if calls else "computing"
            elif t >= calls[-1].end and call is None:
                row.update(state="finished", text="past its last MPI call")
            if call is not None:
                row["state"] = "mpi"
                peers = []
                for arg, label in _PEER_ARGS:
                    if isinstance(call.args.get(arg), int):
                        peers.append([label, call.args[arg], None])
                tag = next((call.args[a] for a in ("tag", "sendtag", "recvtag")
                            if isinstance(call.args.get(a), int)), None)
                row["call"] = {"call": call.name, "on": None, "comm": call.args.get("comm"),
                               "peers": peers, "tag": tag, "nbytes": call.nbytes,
                               "for": round(t - call.start, 6)}
                if call.name in _WAITING_CALLS:
                    for label, peer, _ in peers:
                        if label in ("dest", "source") and 0 <= peer < self.nprocs and peer != r:
                            blocked.append(r)
                            edges.append([r, peer, f"rank {r} is in {call.name}({label}={peer}) "
                                                   f"for {1e3 * (t - call.start):.3f} ms", False])
                if call.ordinal >= 0:
                    self._collective(colls, r, call, t)
            rows.append(row)
        return {
            "mode": "replay", "seq": 0, "elapsed": t, "title": self.title,
            "nprocs": self.nprocs, "interval": 0, "output": [], "ranks": rows,
            "waitfor": {"blocked": sorted(set(blocked)), "edges": edges, "cycle": [],
                        "cycle_text": ""},
            "diagnosis": None, "matrix": self._matrix(t),
            "collectives": list(colls.values()), "failure": None,
            "job": {"status": "replay", "exit_code": None, "ended_after": None},
            "summary": None, "launcher": [], "time": t, "duration": self.duration,
            "trace": self._trace_lines(),
        }

    def _collective(self, colls: Dict, r: int, call: _Call, t: float) -> None:
        comm = str(call.args.get("comm"))
        key = (comm, call.ordinal)
        members = self._members.get(key, [r])
        size = self.nprocs if comm == "COMM_WORLD" else len(members)
        group = list(range(self.nprocs)) if comm == "COMM_WORLD" else members
        entry = colls.get(key)
        if entry is None:
            collective, algorithm = split_call(call.name)
            root = call.args.get("root")
            entry = colls[key] = {
                "call": call.name, "collective": collective, "algorithm": algorithm,
                "comm": comm, "size": size, "group": group, "tag": call.ordinal, "root": root,
                "nbytes": call.nbytes, "blocking": not collective.startswith("i"), "steps": {}}
            pkey = Pictures.key(call.name, size, root, call.nbytes, None)
            entry["picture"] = self.pictures.get_now(pkey) if pkey is not None else None
        rank = group.index(r) if r in group else r
        entry["steps"][str(rank)] = self._step_at(r, t, call)

    def _matrix(self, t: float) -> Dict[str, Any]:
        upto = bisect.bisect_right(self._send_times, t)
        total: Dict[Tuple[int, int], List[int]] = {}
        per: Dict[int, Dict[Tuple[int, int], List[int]]] = {}
        for _, src, dst, nbytes, context in self.sends[:upto]:
            if not 0 <= dst < self.nprocs:
                continue
            for table in (total, per.setdefault(context & _CONTEXT_MASK, {})):
                cell = table.setdefault((src, dst), [0, 0])
                cell[0] += 1
                cell[1] += nbytes

        def doc(key: str, name: str, ranks: List[int], table: Dict) -> Dict[str, Any]:
            cells = [[s, d, m, b] for (s, d), (m, b) in sorted(table.items())]
            return {"id": key, "name": name, "ranks": ranks, "cells": cells,
                    "messages": sum(c[2] for c in cells), "bytes": sum(c[3] for c in cells)}

        everyone = list(range(self.nprocs))
        comms = [doc("all", "all communicators", everyone, total)]
        for base, table in sorted(per.items()):
            name = self.context_names.get(base, f"context {base}")
            ranks = everyone if base == 0 else sorted({r for pair in table for r in pair})
            comms.append(doc(str(base), name, ranks, table))
        return {"comms": comms}

    def _trace_lines(self) -> List[str]:
        lines = [f"{self.nprocs} ranks, {self.duration * 1e3:.3f} ms, {len(self.sends)} "
                 f"messages, {sum(len(c) for c in self.calls)} MPI calls recorded; move the "
                 f"slider or press play"]
        if self.missing:
            lines.append(f"no trace from rank(s) {', '.join(map(str, self.missing))}: they did "
                         f"not reach finalize")
        return lines
