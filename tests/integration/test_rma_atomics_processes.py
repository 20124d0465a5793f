"""Accumulate atomicity between real processes on one host: origins apply the accumulates
straight in the shared-memory window under its byte-range lock (minimpi.rma.atomics).
Exact totals, at 3 and 5 ranks."""
from __future__ import annotations

import glob

import pytest
from jobhelpers import marker_args, run_minimpi

ATOMICS = """
    import sys, time
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank, size = comm.rank, comm.size
    rounds = int(sys.argv[1])
    flavor = sys.argv[2]
    make = MPI.Win.Allocate_shared if flavor == "shared" else MPI.Win.Allocate

    # 1. Fetch_and_op(SUM) on one element: every ticket handed out once, in order per origin
    win = make(8 if rank == 0 else 0, 8, comm=comm)
    comm.Barrier()
    one, old = np.ones(1, "q"), np.zeros(1, "q")
    tickets = []
    t0 = time.perf_counter()
    win.Lock_all()
    for _ in range(rounds):
        win.Fetch_and_op(one, old, 0, 0, MPI.SUM)
        tickets.append(int(old[0]))
    win.Unlock_all()
    per_op = (time.perf_counter() - t0) / rounds
    assert tickets == sorted(tickets), "one origin's fetches went out of order"
    every = sorted(sum(comm.allgather(tickets), []))
    assert every == list(range(rounds * size)), (len(every), every[-3:])
    comm.Barrier()
    if rank == 0:
        assert int(np.frombuffer(win.tomemory(), "q")[0]) == rounds * size

    # 2. Accumulate / Get_accumulate on overlapping ranges of rank 0's window
    width, length, reps = 8, 8 + size, rounds // 10
    acc = make(length * 8 if rank == 0 else 0, 8, comm=comm)
    comm.Barrier()
    add, got = np.full(width, rank + 1, "q"), np.zeros(width, "q")
    acc.Lock(0, MPI.LOCK_SHARED)
    for i in range(reps):
        if i % 2:
            acc.Accumulate(add, 0, [rank, width, MPI.INT64_T], MPI.SUM)
        else:
            acc.Get_accumulate(add, got, 0, [rank, width, MPI.INT64_T], MPI.SUM)
    acc.Unlock(0)
    comm.Barrier()
    if rank == 0:
        expect = [sum(r + 1 for r in range(size) if r <= e < r + width) * reps
                  for e in range(length)]
        assert np.frombuffer(acc.tomemory(), "q").tolist() == expect

    # 3. a Compare_and_swap mutex guarding a plain Get/+1/Put counter: no lost update
    mtx = make(16 if rank == 0 else 0, 8, comm=comm)
    comm.Barrier()
    mine, free, value = np.array([rank + 1], "q"), np.zeros(1, "q"), np.zeros(1, "q")
    held = 0
    mtx.Lock_all()
    for _ in range(reps):
        while True:
            mtx.Compare_and_swap(mine, free, old, 0, 0)
            if old[0] == 0:
                break
            time.sleep(0.0002)              # the holder runs meanwhile: never spin
        mtx.Get(value, 0, [1, 1, MPI.INT64_T])
        mtx.Flush(0)
        value += 1
        mtx.Put(value, 0, [1, 1, MPI.INT64_T])
        mtx.Flush(0)
        mtx.Fetch_and_op(free, old, 0, 0, MPI.REPLACE)
        held += int(old[0] == rank + 1)
    mtx.Unlock_all()
    comm.Barrier()
    assert held == reps, (held, reps)
    if rank == 0:
        assert np.frombuffer(mtx.tomemory(), "q").tolist() == [0, reps * size]
    for w in (win, acc, mtx):
        w.Free()
    print(f"atomics ok {rank} {per_op * 1e6:.0f} us")
"""


@pytest.mark.parametrize("flavor", ["shared", "allocate"])
@pytest.mark.parametrize("n", [3, 5])
def test_accumulate_family_is_atomic_between_processes(n, flavor, write_script, job_marker):
    rounds = 2000 if n == 5 else 500
    script = write_script("rma_atomics.py", ATOMICS)
    r = run_minimpi("-n", str(n), "--transport", "shm", *marker_args(job_marker), script,
                    str(rounds), flavor, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in range(n):
        assert f"[{rank}] atomics ok {rank}" in r.stdout, r.stdout + r.stderr
    assert not glob.glob("/dev/shm/minimpi-win-*-*"), "a shared window outlived its job"
