"""Liveness of spawned processes on one host: one that goes silent (stopped, or hung in a call
that holds Python's GIL) is reported by name within --heartbeat-timeout, and a deadlock between
a parent and the process it spawned is reported with both, never a hang; work that only the
spawned processes do is not taken for a deadlock."""
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


def test_a_deadlock_with_a_spawned_process_is_reported(write_script, job_marker):
    script = write_script("parent.py", """
        import os, sys
        from mpi4py import MPI
        child = MPI.COMM_SELF.Spawn(sys.executable, [os.path.join(os.path.dirname(__file__),
                                    "waits.py")])
        child.recv(source=0)
    """)
    write_script("waits.py", """
        from mpi4py import MPI
        MPI.Comm.Get_parent().recv(source=0)      # the parent waits for us too
    """)
    res = run_minimpi("-n", 1, "--deadlock-timeout", 2, "--timeout", 60,
                      *marker_args(job_marker), script, timeout=90)
    assert res.returncode == 3, res.stderr
    assert "  rank 0: blocked in recv(source=0, tag=ANY_TAG) on COMM_SELF" in res.stderr
    assert "  spawned job 1, rank 0: blocked in recv(source=0, tag=ANY_TAG) on parent at " \
        "waits.py:3" in res.stderr, res.stderr


def test_spawned_processes_at_work_are_no_deadlock(write_script, job_marker):
    script = write_script("parent.py", """
        import os, sys
        from mpi4py import MPI
        child = MPI.COMM_SELF.Spawn(sys.executable, [os.path.join(os.path.dirname(__file__),
                                    "works.py")], maxprocs=2)
        print("result", child.recv(source=0), flush=True)
        child.Disconnect()
    """)
    # the two children pass messages back and forth, each wait long enough to be reported
    # as blocked, for several deadlock timeouts, while the parent waits for them
    write_script("works.py", """
        import time
        from mpi4py import MPI
        parent, world = MPI.Comm.Get_parent(), MPI.COMM_WORLD
        other = 1 - world.rank
        for i in range(8):
            if world.rank == i % 2:
                time.sleep(0.5)
                world.send(i, dest=other)
            else:
                world.recv(source=other)
        if world.rank == 0:
            parent.send("done", dest=0)
        parent.Disconnect()
    """)
    res = run_minimpi("-n", 1, "--deadlock-timeout", 1, "--timeout", 60,
                      *marker_args(job_marker), script, timeout=90)
    assert res.returncode == 0, res.stderr
    assert "[0] result done" in res.stdout


def test_spawned_processes_deadlocked_after_the_parents_ended_are_reported(write_script,
                                                                           job_marker):
    script = write_script("parent.py", """
        import os, sys
        from mpi4py import MPI
        child = MPI.COMM_SELF.Spawn(sys.executable, [os.path.join(os.path.dirname(__file__),
                                    "pair.py")], maxprocs=2)
        child.Disconnect()
        print("parent done", flush=True)
    """)
    write_script("pair.py", """
        from mpi4py import MPI
        MPI.Comm.Get_parent().Disconnect()
        world = MPI.COMM_WORLD
        world.recv(source=1 - world.rank)      # each waits for the other
    """)
    t0 = time.monotonic()
    res = run_minimpi("-n", 1, "--deadlock-timeout", 2, "--timeout", 60,
                      *marker_args(job_marker), script, timeout=90)
    assert res.returncode == 3, res.stderr
    assert "[0] parent done" in res.stdout
    assert "every spawned process still running is blocked" in res.stderr, res.stderr
    for r in (0, 1):
        assert f"  spawned job 1, rank {r}: blocked in recv(source={1 - r}" in res.stderr
    assert time.monotonic() - t0 < 30
