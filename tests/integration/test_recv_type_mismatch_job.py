"""The program of issue 29 over real processes: rank 0 sends a struct{int32, float64}
(12 bytes), rank 1 receives it as two DOUBLEs. Under mpi4py + MPICH the job stops (an
assertion in MPICH's unpack); minimpi wrote one and a half doubles and exited 0. Now the
receive raises MPI.ERR_TYPE naming the rank, call, source, bytes and type (the program can
catch it; uncaught, the job ends with it), at n = 2 and with a third rank looking on."""
from __future__ import annotations

import pytest
from jobhelpers import marker_args, run_minimpi

PROGRAM = """
import sys
import numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
st = MPI.Datatype.Create_struct([1, 1], [0, 4], [MPI.INT32_T, MPI.DOUBLE]).Commit()
if comm.rank == 0:
    comm.Send([np.full(16, 7, np.uint8), 1, st], dest=1, tag=5)
elif comm.rank == 1:
    got = np.full(2, -1.0)
    if sys.argv[1] == "catch":
        try:
            comm.Recv([got, MPI.DOUBLE], source=0, tag=5)
        except MPI.Exception as exc:
            print("CAUGHT", exc.Get_error_class() == MPI.ERR_TYPE, flush=True)
    else:
        comm.Recv([got, MPI.DOUBLE], source=0, tag=5)
        print("RECEIVED", got, flush=True)
comm.Barrier()
"""


@pytest.mark.parametrize("n", [2, 3])
def test_uncaught_the_mismatch_ends_the_job_with_err_type(write_script, job_marker, n):
    script = write_script("mismatch.py", PROGRAM)
    proc = run_minimpi(*marker_args(job_marker), "-n", str(n), "--timeout", "40", script,
                       "raise", timeout=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "RECEIVED" not in out, out
    assert "TypeMismatchError" in out and "rank 1: Recv(source=0, tag=5)" in out, out
    assert "12 bytes" in out and "DOUBLE" in out, out


def test_the_program_can_catch_it_and_go_on(write_script, job_marker):
    script = write_script("mismatch.py", PROGRAM)
    proc = run_minimpi(*marker_args(job_marker), "-n", "3", "--timeout", "40", script,
                       "catch", timeout=60)
    assert proc.returncode == 0 and "CAUGHT True" in proc.stdout, proc.stdout + proc.stderr
