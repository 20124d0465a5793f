"""minimpi run --trace records one-sided operations (target, bytes, window) and the
window calls that bound their epochs."""
from __future__ import annotations

import json
import sys

import pytest
from jobhelpers import marker_args, run_minimpi

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux launcher tests")

PROGRAM = """
import numpy as np
from minimpi import MPI
comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
win = MPI.Win.Allocate(64 * 8, disp_unit=8, comm=comm)
win.Set_name("ring")
win.Fence()
win.Put(np.full(8, rank, np.float64), (rank + 1) % size)
win.Fence()
got = np.zeros(2)
win.Lock(0, MPI.LOCK_SHARED)
win.Get(got, 0)
win.Accumulate(np.ones(4), 0, op=MPI.SUM)
win.Unlock(0)
win.Free()
"""


def test_one_sided_operations_and_epochs_are_traced(tmp_path, write_script, job_marker):
    script = write_script("rma_prog.py", PROGRAM)
    out = tmp_path / "trace.json"
    res = run_minimpi("-n", "3", *marker_args(job_marker), "--trace", str(out), script,
                      timeout=90)
    assert res.returncode == 0, res.stderr
    events = json.loads(out.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    for rank in range(3):
        mine = sorted((e for e in events if e.get("ph") == "X" and e.get("tid") == rank
                       and (e.get("args") or {}).get("win") == "ring"), key=lambda e: e["ts"])
        calls = [(e["name"], e["args"].get("target_rank"), e["args"].get("epoch"))
                 for e in mine]
        assert calls == [
            ("Fence", None, "Fence"),
            ("Put 64 B", (rank + 1) % 3, None),
            ("Fence", None, "Fence"),
            ("Lock", None, "Lock"),
            ("Get 16 B", 0, None),
            ("Accumulate 32 B", 0, None),
            ("Unlock", None, "Unlock"),
            ("Free", None, "Free"),
        ], calls
        assert all(e["args"]["comm"] for e in mine)
        lock = next(e for e in mine if e["name"] == "Lock")
        assert lock["args"]["rank"] == 0
