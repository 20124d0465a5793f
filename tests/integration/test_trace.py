"""minimpi run --trace / --stats on a known program: flows, nesting, ranks, steps, names."""
from __future__ import annotations

import json

from jobhelpers import marker_args, run_minimpi

PROGRAM = """
import numpy as np
from minimpi import MPI
comm = MPI.COMM_WORLD
rank = comm.Get_rank()
buf = np.arange(64, dtype=np.float64) if rank == 0 else np.zeros(64)
comm.Bcast(buf, root=0, algorithm="binomial")
assert buf[5] == 5.0
if rank == 0:
    comm.send({"hello": 1}, dest=1, tag=7)
elif rank == 1:
    assert comm.recv(source=0, tag=7) == {"hello": 1}
out = np.zeros(32)
comm.Allreduce(np.full(32, float(rank)), out, op=MPI.SUM, algorithm="ring")
assert out[0] == 6.0
big = np.zeros(40000)            # 320 KB: above the eager limit (rendezvous)
if rank == 2:
    comm.Send(np.ones(40000), dest=3, tag=1)
elif rank == 3:
    comm.Recv(big, source=2, tag=1)
    assert big.sum() == 40000
"""


def _load(tmp_path, write_script, job_marker, *extra):
    script = write_script("prog.py", PROGRAM)
    out = tmp_path / "trace.json"
    res = run_minimpi("-n", "4", *marker_args(job_marker), "--trace", str(out), *extra, script,
                      timeout=60)
    assert res.returncode == 0, res.stderr
    return json.loads(out.read_text()), res


def _slices(events, tid):
    return sorted((e for e in events if e["ph"] == "X" and e["tid"] == tid),
                  key=lambda e: (e["ts"], -e["dur"]))


def _within(inner, outer, eps=0.01):
    return outer["ts"] - eps <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + eps


def test_trace_of_a_known_program(tmp_path, write_script, job_marker):
    doc, res = _load(tmp_path, write_script, job_marker)
    ev = doc["traceEvents"]
    assert "written to" in res.stderr
    # a track per rank
    names = {e["tid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {r: f"rank {r}" for r in range(4)}
    assert doc["otherData"]["ranks_without_trace"] == []
    assert doc["otherData"]["unmatched_flows"] == 0
    # one flow per message: every start has exactly one end with the same id, on the peer
    starts = [e for e in ev if e["ph"] == "s"]
    ends = [e for e in ev if e["ph"] == "f"]
    assert len(starts) == len(ends) == len({e["id"] for e in starts})
    by_id = {e["id"]: e for e in ends}
    for s in starts:
        f = by_id[s["id"]]
        assert f["bp"] == "e" and f["tid"] == s["args"]["peer"] and f["args"]["peer"] == s["tid"]
        assert f["args"]["bytes"] == s["args"]["bytes"] and f["args"]["tag"] == s["args"]["tag"]
    # 3 bcast messages + 1 send + 24 ring-allreduce messages + 1 rendezvous send
    assert len(starts) == 29
    user = [s for s in starts if s["cat"] == "msg"]
    assert sorted((s["tid"], s["args"]["peer"], s["args"]["tag"]) for s in user) == [(0, 1, 7), (2, 3, 1)]
    assert any(s["args"]["bytes"] == 320000 for s in user)
    for tid in range(4):
        xs = _slices(ev, tid)
        # slices nest: each one lies inside the enclosing open one or after it
        stack = []
        for e in xs:
            while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - 0.01 and not _within(e, stack[-1]):
                stack.pop()
            if stack:
                assert _within(e, stack[-1]), (e, stack[-1])
            stack.append(e)
        calls = [e for e in xs if e["cat"] == "mpi"]
        names = [e["name"] for e in calls]
        assert names[0] == "Bcast[binomial] 512 B"
        assert "Allreduce[ring] 256 B" in names
        ar = next(e for e in calls if e["name"].startswith("Allreduce[ring]"))
        steps = [e for e in xs if e["cat"] == "step" and _within(e, ar)]
        assert [s["name"] for s in steps] == [f"step {k}" for k in range(1, 7)]
        # ring allreduce: each rank sends one message per step, each inside its step slice
        sends = [s for s in starts if s["tid"] == tid and _within(s | {"dur": 0}, ar)]
        assert len(sends) == 6
        for s in sends:
            assert any(_within(s | {"dur": 0}, st) for st in steps)
        # every flow end is inside a slice of the receiving rank
        for f in (f for f in ends if f["tid"] == tid):
            assert any(_within(f | {"dur": 0}, x) for x in calls), f
    bc = [e for e in ev if e["ph"] == "X" and e["name"].startswith("Bcast[binomial]")]
    assert len(bc) == 4
    root = next(e for e in bc if e["tid"] == 0)
    assert sum(1 for s in starts if s["tid"] == 0 and _within(s | {"dur": 0}, root)) == 2


def test_stats_table(tmp_path, write_script, job_marker):
    script = write_script("prog.py", PROGRAM)
    res = run_minimpi("-n", "4", *marker_args(job_marker), "--stats", script, timeout=60)
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    head = next(i for i, l in enumerate(lines) if l.split()[:3] == ["rank", "msgs", "sent"])
    rows = [l.split() for l in lines[head + 1:head + 5]]
    assert [r[0] for r in rows] == ["0", "1", "2", "3"]
    assert "Allreduce[ring]" in res.stderr and "Bcast[binomial]" in res.stderr
    # rank 0 sends 2 bcast messages, 1 object, 6 ring messages
    assert rows[0][1] == "9"


def test_trace_and_stats_together_and_failure(tmp_path, write_script, job_marker):
    doc, res = _load(tmp_path, write_script, job_marker, "--stats")
    assert "per call" in res.stderr and doc["traceEvents"]
    bad = write_script("bad.py", """
        from minimpi import MPI
        comm = MPI.COMM_WORLD
        comm.bcast(1)
        if comm.rank == 1:
            raise SystemExit(3)
    """)
    out = tmp_path / "bad.json"
    res = run_minimpi("-n", "2", *marker_args(job_marker), "--trace", str(out), bad, timeout=60)
    assert res.returncode == 3
    assert json.loads(out.read_text())["traceEvents"]


def _ns(x):
    return round(x * 1000)


def test_child_slices_lie_inside_their_parent_to_the_nanosecond(tmp_path, write_script,
                                                                 job_marker):
    # Rounding ts and dur separately used to let step slices end 1 ns after their call or
    # into the next step; viewers then break the nesting. No tolerance here.
    doc, _ = _load(tmp_path, write_script, job_marker)
    ev = doc["traceEvents"]
    checked = 0
    for tid in range(4):
        xs = _slices(ev, tid)
        calls = [e for e in xs if e["cat"] == "mpi"]
        for call in calls:
            c0, c1 = _ns(call["ts"]), _ns(call["ts"]) + _ns(call["dur"])
            inside = [e for e in xs if e is not call and c0 <= _ns(e["ts"]) < c1]
            for child in inside:
                assert _ns(child["ts"]) + _ns(child["dur"]) <= c1, (child, call)
                checked += 1
            steps = sorted((e for e in inside if e["cat"] == "step"), key=lambda e: e["ts"])
            for a, b in zip(steps, steps[1:]):
                assert _ns(a["ts"]) + _ns(a["dur"]) <= _ns(b["ts"]), (a, b)
    assert checked >= 24          # 6 ring steps on each of 4 ranks, at least


def test_merge_rounds_the_ends_not_the_duration():
    from minimpi.runtime.trace import merge_traces
    # exact times (us): the call [1000.0004, 1010.0006], its step [1000.0006, 1010.0006]
    call = {"ph": "X", "name": "Bcast", "cat": "mpi", "ts": 1000.0004, "dur": 10.0002,
            "pid": 0, "tid": 0}
    step = {"ph": "X", "name": "step 1", "cat": "step", "ts": 1000.0006, "dur": 10.0,
            "pid": 0, "tid": 0}
    first = {"ph": "i", "name": "start", "ts": 0.0, "pid": 0, "tid": 0}
    doc = merge_traces([{"rank": 0, "events": [first, call, step]}], 1)
    got = {e["name"]: e for e in doc["traceEvents"] if e.get("ph") == "X"}
    end = lambda e: _ns(e["ts"]) + _ns(e["dur"])
    assert end(got["step 1"]) <= end(got["Bcast"])
    assert (got["Bcast"]["ts"], got["Bcast"]["dur"]) == (1000.0, 10.001)
