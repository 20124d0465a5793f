"""One-sided windows when a rank dies, over real processes (``minimpi run``): under
``--fault-tolerant`` a lock whose holder died is given back to the waiters, the calls that
need the dead rank raise ``ERR_PROC_FAILED``, and nothing waits by spinning; without the
flag the job ends naming the dead rank. Small timeouts; every job's processes are checked
gone afterwards (``job_marker``)."""
from __future__ import annotations

import re
import sys

import pytest
from jobhelpers import marker_args, run_minimpi

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux launcher tests")

#: rank 1 is killed while it holds an exclusive lock on rank 0 (its Put landed); rank 2
#: then locks rank 0; rank 0 waits in a receive meanwhile, and says how much CPU that took
LOCK_HOLDER_DIES = """
    import os, signal, sys, time
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank = comm.rank
    if sys.argv[1] == "create":
        win = MPI.Win.Create(np.zeros(4, "q") if rank == 0 else None, 8, comm=comm)
    else:
        win = MPI.Win.Allocate(32 if rank == 0 else 0, 8, comm=comm)
    comm.Barrier()
    if rank == 1:
        win.Lock(0, MPI.LOCK_EXCLUSIVE)
        win.Put(np.full(1, 7, "q"), 0)
        win.Flush(0)
        os.kill(os.getpid(), signal.SIGKILL)
    elif rank == 2:
        time.sleep(1.5)
        out = np.zeros(4, "q")
        win.Lock(0, MPI.LOCK_EXCLUSIVE)
        win.Get(out, 0)
        win.Unlock(0)
        print("rank 2 got", out.tolist(), flush=True)
        comm.send("done", dest=0)
    else:
        cpu = time.process_time()
        msg = comm.recv(source=2)
        print(f"rank 0 heard {msg} using {time.process_time() - cpu:.2f} s of CPU", flush=True)
"""


@pytest.mark.parametrize("flavor", ["create", "allocate"])
def test_a_lock_whose_holder_died_is_given_back_to_the_waiters(flavor, write_script,
                                                              job_marker):
    script = write_script("holder_dies.py", LOCK_HOLDER_DIES)
    res = run_minimpi("-n", 3, "--fault-tolerant", *marker_args(job_marker), script, flavor,
                      timeout=40)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "[2] rank 2 got [7, 0, 0, 0]" in res.stdout, res.stdout + res.stderr
    cpu = re.search(r"\[0\] rank 0 heard done using ([\d.]+) s of CPU", res.stdout)
    assert cpu, res.stdout + res.stderr
    # it waited about 1.5 s, asleep: a wait that spins would use about as much CPU
    assert float(cpu.group(1)) < 0.5, res.stdout


def test_without_the_flag_a_death_in_a_lock_epoch_ends_the_job_naming_it(write_script,
                                                                         job_marker):
    script = write_script("holder_dies.py", LOCK_HOLDER_DIES)
    res = run_minimpi("-n", 3, *marker_args(job_marker), script, "allocate", timeout=40)
    assert res.returncode != 0
    assert "rank 1 killed by signal 9 (SIGKILL)" in res.stderr, res.stderr
    assert "rank 2 got" not in res.stdout


#: rank 1 is killed; rank 0 then needs it as a target (Lock, Accumulate + Flush) or as the
#: origin of a post/start/complete/wait epoch
DEAD_TARGET = """
    import os, signal, sys, time
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank = comm.rank
    flavor, case = sys.argv[1], sys.argv[2]
    if flavor == "create":
        win = MPI.Win.Create(np.zeros(4, "q"), 8, comm=comm)
    else:
        win = MPI.Win.Allocate(32, 8, comm=comm)
    if rank == 0 and case == "wait":
        win.Post(comm.Get_group().Incl([1, 2]))
    comm.Barrier()
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    if rank == 2 and case == "wait":
        win.Start(comm.Get_group().Incl([0]))
        win.Put(np.ones(1, "q"), 0)
        win.Complete()
    if rank == 0:
        time.sleep(1.0)
        cpu = time.process_time()
        try:
            if case == "wait":
                win.Wait()
            else:
                win.Lock(1, MPI.LOCK_EXCLUSIVE)
                if case == "accumulate":
                    win.Accumulate(np.ones(1, "q"), 1, [0, 1, MPI.INT64_T], MPI.SUM)
                    win.Flush(1)
                win.Unlock(1)
            print("rank 0: no error", flush=True)
        except MPI.Exception as exc:
            failed = exc.Get_error_class() == MPI.ERR_PROC_FAILED
            print(f"rank 0: ERR_PROC_FAILED {failed}: {exc}", flush=True)
        print(f"rank 0 used {time.process_time() - cpu:.2f} s of CPU", flush=True)
"""


@pytest.mark.parametrize("flavor,case", [("create", "lock"), ("allocate", "lock"),
                                         ("create", "accumulate"), ("create", "wait")])
def test_calls_that_need_a_dead_rank_raise_proc_failed(flavor, case, write_script,
                                                       job_marker):
    script = write_script("dead_target.py", DEAD_TARGET)
    res = run_minimpi("-n", 3, "--fault-tolerant", *marker_args(job_marker), script, flavor,
                      case, timeout=40)
    assert res.returncode == 0, res.stdout + res.stderr
    line = re.search(r"\[0\] rank 0: ERR_PROC_FAILED (\w+): (.*)", res.stdout)
    assert line and line.group(1) == "True", res.stdout + res.stderr
    assert "world rank 1" in line.group(2) or "rank 1" in line.group(2), line.group(2)
    cpu = re.search(r"\[0\] rank 0 used ([\d.]+) s of CPU", res.stdout)
    assert cpu and float(cpu.group(1)) < 0.5, res.stdout
