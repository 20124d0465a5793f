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


def run(n, script, marker, timeout=60, extra=()):
    return run_minimpi("-n", n, "--deadlock-timeout", "1", *marker_args(marker), script,
                       *extra, timeout=timeout)


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
    # rank 2 waits for the holder of the lock, rank 1, not for rank 0 (which serves)
    assert ("rank 2 waits in Win.Unlock(0) at lock.py:17 for the exclusive lock on rank 0 of "
            "window 'counts', which rank 1 holds; rank 1 is blocked in recv(source=2, tag=3) "
            "on COMM_WORLD at lock.py:12") in err, err
    assert ("wait-for cycle: rank 1 waits for rank 2 in recv(tag=3) at lock.py:12 -> rank 2 "
            "waits for rank 1 in Win.Unlock(0) on window 'counts' (for the exclusive lock on "
            "rank 0, which rank 1 holds) at lock.py:17 -> rank 1") in err, err


@pytest.mark.parametrize("flavor", ["create", "shared"])
def test_two_ranks_each_waiting_for_the_lock_the_other_holds(flavor, write_script,
                                                             job_marker):
    """Ranks 0 and 1 lock ranks 2 and 3 in opposite orders; 2 and 3 wait in a receive (and
    serve meanwhile): the cycle runs through the lock holders, not through the targets."""
    script = write_script("pair.py", """
        import sys
        import numpy as np
        from minimpi import MPI
        comm = MPI.COMM_WORLD
        if sys.argv[1] == "create":
            win = MPI.Win.Create(np.zeros(4), comm=comm)
        else:
            win = MPI.Win.Allocate_shared(32, 8, comm=comm)
        win.Set_name("pair")
        one = np.ones(1)
        if comm.rank in (0, 1):
            mine, theirs = (2, 3) if comm.rank == 0 else (3, 2)
            win.Lock(mine, MPI.LOCK_EXCLUSIVE)
            win.Put(one, mine)
            win.Flush(mine)
            comm.Barrier()
            win.Lock(theirs, MPI.LOCK_EXCLUSIVE)
            win.Put(one, theirs)
            win.Flush(theirs)
        else:
            comm.Barrier()
            comm.recv(source=0, tag=9)
    """)
    res = run(4, script, job_marker, extra=[flavor])
    assert res.returncode == EXIT_DEADLOCK, res.stderr
    err = res.stderr
    line = 19 if flavor == "create" else 18     # the Put waits (Create), or the Lock
    for waiter, holder, target in ((0, 1, 3), (1, 0, 2)):
        call = "Win.Put" if flavor == "create" else f"Win.Lock({target})"
        assert (f"rank {waiter} waits in {call} at pair.py:{line} for the exclusive lock on "
                f"rank {target} of window 'pair', which rank {holder} holds; rank {holder} is "
                f"blocked in ") in err, err
    assert re.search(r"wait-for cycle: rank 0 waits for rank 1 in Win\.\w+(\(3\))? on window "
                     r"'pair' \(for the exclusive lock on rank 3, which rank 1 holds\) at "
                     r"pair\.py:\d+ -> rank 1 waits for rank 0 in Win\.\w+(\(2\))? on window "
                     r"'pair' \(for the exclusive lock on rank 2, which rank 0 holds\) at "
                     r"pair\.py:\d+ -> rank 0", err), err
