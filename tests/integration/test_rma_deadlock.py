"""Deadlocks inside one-sided window calls over real processes (``minimpi run``): the report
names the window, the call, the epoch and the ranks missing. Small timeouts
(``--deadlock-timeout 1``), hard test timeouts, and a leftover-process check after every job
(the ``job_marker`` fixture)."""
from __future__ import annotations

import re
import sys

import pytest
from jobhelpers import marker_args, run_minimpi

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux launcher tests")

EXIT_DEADLOCK = 3


def run(n, script, marker, timeout=60):
    return run_minimpi("-n", n, "--deadlock-timeout", "1", *marker_args(marker), script,
                       timeout=timeout)


def test_fence_reached_by_some_ranks_only(write_script, job_marker):
    script = write_script("fence.py", """
        from minimpi import MPI
        comm = MPI.COMM_WORLD
        win = MPI.Win.Allocate(8, comm=comm)
        win.Set_name("w0")
        if comm.rank < 3:
            win.Fence()
        else:
            comm.recv(source=0, tag=5)
    """)
    res = run(5, script, job_marker)
    assert res.returncode == EXIT_DEADLOCK, res.stderr
    err = res.stderr
    for r in range(3):
        assert (f"rank {r}: blocked in Win.Fence on window 'w0' (COMM_WORLD), fence epoch, "
                f"ranks 3, 4 have not reached it at fence.py:7 (win.Fence())") in err, err
    for r in (3, 4):
        assert f"rank {r}: blocked in recv(source=0, tag=5) on COMM_WORLD at fence.py:9" in err
    assert re.search(r"wait-for cycle: rank 0 waits for rank [34] in Win\.Fence on window 'w0' "
                     r"at fence\.py:7 -> rank [34] waits for rank 0 in recv\(tag=5\)", err), err


def test_wait_for_an_origin_that_never_completes(write_script, job_marker):
    script = write_script("pscw.py", """
        import numpy as np
        from minimpi import MPI
        comm = MPI.COMM_WORLD
        win = MPI.Win.Create(np.zeros(4), comm=comm)
        if comm.rank == 0:
            win.Post(comm.Get_group().Incl([1, 2]))
            win.Wait()
        else:
            win.Start(comm.Get_group().Incl([0]))
            win.Put(np.ones(1), 0)
            if comm.rank == 2:
                win.Complete()
            comm.recv(source=0, tag=9)
    """)
    res = run(3, script, job_marker)
    assert res.returncode == EXIT_DEADLOCK, res.stderr
    assert re.search(r"rank 0: blocked in Win\.Wait on window 'win#\d+' \(COMM_WORLD\), "
                     r"exposure \(post/start/complete/wait\) epoch, waiting for ranks 1, 2 at "
                     r"pscw\.py:8 \(win\.Wait\(\)\)", res.stderr), res.stderr


def test_unlock_waiting_for_a_lock_another_rank_holds(write_script, job_marker):
    script = write_script("lock.py", """
        import numpy as np
        from minimpi import MPI
        comm = MPI.COMM_WORLD
        win = MPI.Win.Create(np.zeros(4), comm=comm)
        win.Set_name("counts")
        if comm.rank == 1:
            win.Lock(0, MPI.LOCK_EXCLUSIVE)
            win.Put(np.ones(1), 0)
            win.Flush(0)
            comm.Barrier()
            comm.recv(source=2, tag=3)
        elif comm.rank == 2:
            comm.Barrier()
            win.Lock(0, MPI.LOCK_EXCLUSIVE)
            win.Accumulate(np.ones(1), 0)
            win.Unlock(0)
        else:
            comm.Barrier()
            comm.recv(source=1, tag=3)
    """)
    res = run(3, script, job_marker)
    assert res.returncode == EXIT_DEADLOCK, res.stderr
    err = res.stderr
    assert ("rank 2: blocked in Win.Unlock(0) on window 'counts' (COMM_WORLD), passive target "
            "(lock) epoch, waiting for rank 0 at lock.py:17 (win.Unlock(0))") in err, err
    assert "rank 1: blocked in recv(source=2, tag=3) on COMM_WORLD at lock.py:12" in err
