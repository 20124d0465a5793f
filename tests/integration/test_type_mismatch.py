"""Different element types on different ranks (same byte count) end the job with one clear
error naming both types, instead of reinterpreted bits and exit 0 (MPI's type-matching rule)."""
from __future__ import annotations

import pytest
from jobhelpers import run_minimpi

PROGRAM = """
import sys
import numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
x = np.ones(4, np.int64 if comm.rank == comm.size - 1 else np.float64)
call = sys.argv[1]
if call == "Allreduce":
    comm.Allreduce(x, np.empty_like(x))
elif call == "Bcast":
    comm.Bcast(x, root=0)
elif call == "Allgather":
    comm.Allgather(x, np.empty((comm.size, 4), x.dtype))
elif call == "Scan":
    comm.Scan(x, np.empty_like(x))
print("returned on rank", comm.rank, flush=True)
"""


@pytest.mark.parametrize("call,n", [("Allreduce", 3), ("Bcast", 2), ("Allgather", 5),
                                    ("Scan", 3)])
def test_mismatched_element_types_end_the_job_naming_both(call, n, tmp_path):
    prog = tmp_path / "types.py"
    prog.write_text(PROGRAM)
    proc = run_minimpi("-n", str(n), "--timeout", "40", str(prog), call, timeout=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "CollectiveMismatchError" in out and "element types differ" in out, out
    assert "int64" in out and "float64" in out, out
    # no rank may return data that depends on the odd rank's: only a Bcast root (it receives
    # nothing) and, in a Scan, the ranks before the odd one may return
    allowed = {"Bcast": {"0"}, "Scan": {str(r) for r in range(n - 1)}}.get(call, set())
    returned = {line.split()[-1] for line in proc.stdout.splitlines() if "returned on rank" in line}
    assert returned <= allowed, out
