"""Windows that are still live at the end of a program, over real processes (``minimpi
run``): the rank that owns one keeps serving it in finalize until the other ranks have
finished, a rank that ends holding a lock gives it back (with a warning), a peer that never
finishes ends the wait with a message naming it, and a finalize wait that can never end is
a reported deadlock. Small timeouts; leftover processes are checked (``job_marker``)."""
from __future__ import annotations

import re
import sys

import pytest
from jobhelpers import marker_args, run_minimpi

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux launcher tests")

#: rank 0 owns the window and reaches the end at once (nothing freed, no Finalize call);
#: ranks 1-3 lock it, read it and unlock it later
OWNER_ENDS_FIRST = """
    import sys, time
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank = comm.rank
    if sys.argv[1] == "create":
        win = MPI.Win.Create(np.arange(4, dtype="q") if rank == 0 else None, 8, comm=comm)
    else:
        win = MPI.Win.Allocate(32 if rank == 0 else 0, 8, comm=comm)
        if rank == 0:
            np.frombuffer(win.tomemory(), "q")[:] = np.arange(4)
    win.Set_name("w0")
    comm.Barrier()
    if rank != 0:
        time.sleep(float(sys.argv[2]) * rank)
        out = np.zeros(4, "q")
        win.Lock(0, MPI.LOCK_SHARED)
        win.Get(out, 0)
        win.Unlock(0)
        print("got", out.tolist(), flush=True)
"""


@pytest.mark.parametrize("flavor", ["create", "allocate"])
def test_a_target_that_ends_first_serves_until_the_others_finish(flavor, write_script,
                                                                 job_marker):
    script = write_script("owner_ends.py", OWNER_ENDS_FIRST)
    res = run_minimpi("-n", 4, *marker_args(job_marker), script, flavor, "0.3", timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    for rank in (1, 2, 3):
        assert f"[{rank}] got [0, 1, 2, 3]" in res.stdout, res.stdout + res.stderr
    assert "warning" not in res.stderr, res.stderr


def test_a_peer_that_never_finishes_ends_the_wait_with_a_message(write_script, job_marker):
    """Rank 0 serves for 1 s (MINIMPI_FINALIZE_WINDOW_WAIT); rank 1 comes after 3 s."""
    script = write_script("owner_ends.py", OWNER_ENDS_FIRST)
    res = run_minimpi("-n", 2, "-x", "MINIMPI_FINALIZE_WINDOW_WAIT=1", *marker_args(job_marker),
                      script, "create", "3", timeout=60)
    assert res.returncode != 0
    assert ("minimpi rank 0: warning at finalize: window 'w0' (COMM_WORLD) was not freed, and "
            "after 1 s rank 1 of it had still not finished; this rank stops serving it, so "
            "their one-sided calls to it fail") in res.stderr, res.stderr
    assert "PeerLostError" in res.stderr, res.stderr
    assert "got" not in res.stdout


HOLDER_ENDS = """
    import time
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank = comm.rank
    win = MPI.Win.Create(np.zeros(4, "q") if rank == 0 else None, 8, comm=comm)
    win.Set_name("held")
    comm.Barrier()
    if rank == 1:
        win.Lock(0, MPI.LOCK_EXCLUSIVE)
        win.Put(np.full(1, 5, "q"), 0)
        win.Flush(0)                  # ... and the program ends without Unlock(0)
    elif rank == 2:
        time.sleep(1.0)
        out = np.zeros(4, "q")
        win.Lock(0, MPI.LOCK_EXCLUSIVE)
        win.Get(out, 0)
        win.Unlock(0)
        print("rank 2 got", out.tolist(), flush=True)
        comm.send("done", dest=0)
    else:
        comm.recv(source=2)
"""


def test_a_rank_that_ends_holding_a_lock_gives_it_back_with_a_warning(write_script,
                                                                     job_marker):
    script = write_script("holder_ends.py", HOLDER_ENDS)
    res = run_minimpi("-n", 3, *marker_args(job_marker), script, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "[2] rank 2 got [5, 0, 0, 0]" in res.stdout, res.stdout + res.stderr
    assert ("minimpi rank 1: warning at finalize: window 'held' (COMM_WORLD) reaches finalize "
            "with Lock(0) still open (Unlock, Unlock_all, Complete or Wait missing)"
            ) in res.stderr, res.stderr


def test_a_finalize_wait_that_can_never_end_is_a_reported_deadlock(write_script, job_marker):
    script = write_script("fin_deadlock.py", """
        import numpy as np
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        win = MPI.Win.Create(np.zeros(4), comm=comm)
        win.Set_name("w0")
        if comm.rank == 1:
            comm.recv(source=0, tag=4)
    """)
    res = run_minimpi("-n", 2, "--deadlock-timeout", "1", *marker_args(job_marker), script,
                      timeout=60)
    assert res.returncode == 3, res.stderr
    assert ("rank 0: blocked in MPI finalize (serving the window, not freed) on window 'w0' "
            "(COMM_WORLD), passive target epoch, waiting for rank 1") in res.stderr, res.stderr
    assert re.search(r"wait-for cycle: rank 0 waits for rank 1 in MPI finalize \(serving the "
                     r"window, not freed\) on window 'w0' -> rank 1 waits for rank 0 in "
                     r"recv\(tag=4\) at fin_deadlock\.py:8 -> rank 0", res.stderr), res.stderr
