"""Fault tolerance over real processes (``minimpi run --fault-tolerant``, ULFM): a rank that
dies mid-run is reported to the survivors, who revoke, shrink and go on; the job's exit code
is theirs and the summary names the dead rank. Without the flag the job still ends at the
first death, naming it."""
from __future__ import annotations

import pathlib
import sys

import pytest
from jobhelpers import marker_args, run_minimpi

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux launcher tests")

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"

#: rank 3 of 5 dies in the middle of a loop of Allreduce; the others see it, revoke the
#: world, shrink it to the 4 survivors and compute an Allreduce there (Get_failed: only once
#: the launcher's notice came - a transport that saw the process go cannot tell a failure
#: from a rank that finished)
DIES_MIDRUN = """
    import os
    import time
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    x, y = np.ones(4), np.empty(4)
    try:    # (any call may see the failure: a peer's, or a revoke by a rank that saw it)
        for step in range(1000):
            if rank == 3 and step == 10:
                os._exit(1)
            comm.Allreduce(x, y)
        raise SystemExit(f"rank {rank}: the failure of rank 3 went unnoticed")
    except MPI.Exception as exc:
        cls = exc.Get_error_class()
        assert cls in (MPI.ERR_PROC_FAILED, MPI.ERR_REVOKED), (cls, str(exc))
        comm.Revoke()
    assert comm.Is_revoked()
    alive = comm.Shrink()
    out = np.empty(2)
    alive.Allreduce(np.array([float(rank), 1.0]), out)
    members = MPI.Group.Translate_ranks(alive.Get_group(), list(range(alive.Get_size())),
                                        comm.Get_group())
    deadline = time.monotonic() + 5   # the launcher's word that rank 3 failed (not ended)
    while comm.Get_failed().Get_size() == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    print(f"rank {rank}: shrunk to {alive.Get_size()} as rank {alive.Get_rank()}, "
          f"members {members}, sum {out.tolist()}, failed {comm.Get_failed().Get_size()}",
          flush=True)
"""


def test_a_rank_dies_and_the_survivors_shrink_and_go_on(write_script, job_marker):
    script = write_script("dies.py", DIES_MIDRUN)
    res = run_minimpi("-n", 5, "--fault-tolerant", *marker_args(job_marker), script,
                      timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    new_rank = {0: 0, 1: 1, 2: 2, 4: 3}
    for rank in (0, 1, 2, 4):
        assert (f"[{rank}] rank {rank}: shrunk to 4 as rank {new_rank[rank]}, members "
                f"[0, 1, 2, 4], sum [7.0, 4.0], failed 1") in res.stdout, res.stdout
    assert "[3]" not in res.stdout
    err = res.stderr
    assert "minimpi: rank 3 failed (exited with code 1); the job went on without it" in err, err
    assert ("minimpi: 4 rank(s) finished with exit code 0 (0-2, 4) after rank(s) 3 failed; "
            "the job's exit code is theirs: 0") in err, err


def test_without_the_flag_a_death_still_ends_the_job_naming_the_rank(write_script, job_marker):
    script = write_script("dies.py", DIES_MIDRUN)
    res = run_minimpi("-n", 5, *marker_args(job_marker), script, timeout=60)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "minimpi: rank 3 exited with code 1" in res.stderr, res.stderr
    assert "shrunk" not in res.stdout and "--fault-tolerant" not in res.stderr


def test_no_survivor_finishes_well_then_the_code_is_the_first_failures(write_script,
                                                                        job_marker):
    # Survivors that do not handle the failure die of it too: no rank ends with 0, so the
    # job's code is the first failed rank's and each failure is named.
    script = write_script("unhandled.py", """
        import os
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        comm.Barrier()
        if comm.rank == 1:
            os._exit(5)
        comm.recv(source=1)
    """)
    res = run_minimpi("-n", 3, "--fault-tolerant", *marker_args(job_marker), script,
                      timeout=60)
    assert res.returncode == 5, res.stdout + res.stderr
    err = res.stderr
    assert "minimpi: rank 1 failed (exited with code 5)" in err, err
    assert "ProcFailedError" in err and "recv(source=1" in err, err
    assert "no rank finished: every rank failed; exit code 5 (rank 1's, the first to fail)" \
        in err, err


def test_the_worker_pool_example_survives_a_worker(job_marker):
    res = run_minimpi("-n", 4, "--fault-tolerant", *marker_args(job_marker),
                      str(EXAMPLES / "ft_worker_pool.py"), "--kill-worker", "2", timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "[0] manager: worker 2 failed;" in res.stdout, res.stdout
    assert "[0] manager: 40 tasks done by 2 surviving worker(s)" in res.stdout, res.stdout
    assert "as computed serially" in res.stdout
    assert "minimpi: rank 2 failed (exited with code 1)" in res.stderr, res.stderr


def test_the_flag_is_refused_for_jobs_on_several_hosts(write_script):
    script = write_script("x.py", "print('never')\n")
    res = run_minimpi("-n", 2, "--fault-tolerant", "--hosts", "localhost:2", script,
                      timeout=30)
    assert res.returncode == 2 and "--fault-tolerant runs local jobs only" in res.stderr
