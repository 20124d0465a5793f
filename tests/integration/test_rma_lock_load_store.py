"""A passive-target lock protects plain loads and stores on a window in shared memory
(MPI 3.1 §11.5.3: "to protect load/store accesses to a locked local or shared memory
window executed between the lock and unlock calls"), between real processes (``minimpi
run``), the owner of the locked memory included.

Each rank's critical section reads, gives the processor away and writes, so any two ranks
inside it at once lose an update (or a reader sees a half-done write): with a lock that
does not exclude, a run loses hundreds, not one in a thousand."""
from __future__ import annotations

import pytest
from jobhelpers import marker_args, run_minimpi

LOAD_STORE = """
    import sys, time
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank, size = comm.rank, comm.size
    rounds, flavor, owner_works = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "1"
    make = MPI.Win.Allocate_shared if flavor == "shared" else MPI.Win.Allocate
    win = make(24 if rank == 0 else 0, 8, comm=comm)
    buf, unit = win.Shared_query(0)
    a = np.frombuffer(buf, "q")
    workers = [r for r in range(size) if owner_works or r != 0]
    comm.Barrier()

    # 1. exclusive locks: read, yield, write - no increment may be lost
    if rank in workers:
        for _ in range(rounds):
            win.Lock(0, MPI.LOCK_EXCLUSIVE)
            win.Sync()
            v = int(a[0])
            time.sleep(0)                   # another rank runs here if it can get in
            a[0] = v + 1
            win.Sync()
            win.Unlock(0)
    comm.Barrier()
    total = int(a[0])

    # 2. shared locks exclude exclusive ones: readers never see a writer's half-done pair
    torn = 0
    for i in range(rounds):
        if rank % 2 == 0:
            win.Lock(0, MPI.LOCK_EXCLUSIVE)
            a[1] = rank * rounds + i
            time.sleep(0)
            a[2] = rank * rounds + i
            win.Unlock(0)
        else:
            win.Lock(0, MPI.LOCK_SHARED)
            first = int(a[1])
            time.sleep(0)
            torn += int(a[2]) != first
            win.Unlock(0)
    torn = comm.allreduce(torn)
    comm.Barrier()
    win.Free()
    print(f"total {total} of {rounds * len(workers)} torn {torn}")
"""


@pytest.mark.parametrize("flavor,owner_works", [("shared", True), ("shared", False),
                                                ("allocate", True)])
@pytest.mark.parametrize("n", [3, 4])
def test_a_lock_excludes_every_ranks_loads_and_stores(n, flavor, owner_works, write_script,
                                                      job_marker):
    rounds = 150
    script = write_script("lock_load_store.py", LOAD_STORE)
    r = run_minimpi("-n", str(n), *marker_args(job_marker), script, str(rounds), flavor,
                    "1" if owner_works else "0", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    expect = rounds * (n if owner_works else n - 1)
    assert f"[0] total {expect} of {expect} torn 0" in r.stdout, r.stdout + r.stderr
