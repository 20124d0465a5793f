"""Liveness of spawned processes on one host: one that goes silent (stopped, or hung in a call
that holds Python's GIL) is reported by name within --heartbeat-timeout, never a hang."""
from __future__ import annotations

import time

from jobhelpers import marker_args, run_minimpi

PARENT = """
    import os, sys
    from mpi4py import MPI
    child = MPI.COMM_SELF.Spawn(sys.executable, [os.path.join(os.path.dirname(__file__),
                                "child.py")], maxprocs=2)
    child.recv(source=1)       # never comes: the child goes silent
"""


def test_a_stopped_spawned_process_is_reported(write_script, job_marker):
    script = write_script("parent.py", PARENT)
    write_script("child.py", """
        import os, signal
        from mpi4py import MPI
        MPI.Comm.Get_parent()
        if MPI.COMM_WORLD.rank == 1:
            os.kill(os.getpid(), signal.SIGSTOP)
        MPI.COMM_WORLD.Barrier()
    """)
    t0 = time.monotonic()
    res = run_minimpi("-n", 1, "--heartbeat-timeout", 2, "--timeout", 60,
                      *marker_args(job_marker), script, timeout=90)
    assert res.returncode == 124, res.stderr
    assert "minimpi: spawned job 1, rank 1 (`" in res.stderr, res.stderr
    assert "child.py`) sent no heartbeat for" in res.stderr
    assert "its process is stopped" in res.stderr, res.stderr
    assert time.monotonic() - t0 < 30


def test_a_spawned_process_hung_holding_the_gil_is_reported(write_script, job_marker):
    script = write_script("parent.py", PARENT)
    write_script("child.py", """
        import ctypes
        from mpi4py import MPI
        MPI.Comm.Get_parent()
        if MPI.COMM_WORLD.rank == 1:
            ctypes.PyDLL(None).sleep(60)     # holds the GIL: no heartbeat, no CPU time
        MPI.COMM_WORLD.Barrier()
    """)
    t0 = time.monotonic()
    res = run_minimpi("-n", 1, "--heartbeat-timeout", 2, "--timeout", 60,
                      *marker_args(job_marker), script, timeout=90)
    assert res.returncode == 124, res.stderr
    assert "minimpi: spawned job 1, rank 1 (`" in res.stderr, res.stderr
    assert "used no CPU time" in res.stderr, res.stderr
    assert time.monotonic() - t0 < 40
