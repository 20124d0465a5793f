"""One-sided communication between real processes (`minimpi run`), over TCP (requests
served by the target's progress) and shared memory, at 3 and 5 ranks."""
from __future__ import annotations

import glob

import pytest
from jobhelpers import marker_args, run_minimpi

EXERCISE = """
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank, size = comm.rank, comm.size
    right, left = (rank + 1) % size, (rank - 1) % size

    # ring Put, then a Fence-separated Get of what the left neighbour received
    mem = np.full(4, -1, "i")
    win = MPI.Win.Create(mem, mem.itemsize, comm=comm)
    win.Fence()
    win.Put(np.array([rank, rank * 10], "i"), right, 1)
    win.Fence()
    got = np.zeros(2, "i")
    win.Get(got, left, 1)
    win.Fence()
    assert mem.tolist() == [-1, left, left * 10, -1], mem
    ll = (left - 1) % size
    assert got.tolist() == [ll, ll * 10], got

    # a counter on rank 0: Fetch_and_op from every rank under locks
    tickets = []
    counter = MPI.Win.Allocate(8 if rank == 0 else 0, 8, comm=comm)
    counter.Fence()
    for _ in range(10):
        old = np.zeros(1, "l")
        counter.Lock(0, MPI.LOCK_SHARED)
        counter.Fetch_and_op(np.ones(1, "l"), old, 0)
        counter.Unlock(0)
        tickets.append(int(old[0]))
    every = sorted(sum(comm.allgather(tickets), []))
    assert every == list(range(10 * size)), every

    # Accumulate SUM from everybody into everybody
    acc = MPI.Win.Allocate(3 * 8, 8, comm=comm)
    np.frombuffer(acc.tomemory(), "d")[:] = 0
    acc.Fence()
    for t in range(size):
        acc.Accumulate(np.array([1.0, rank, 2.0 * rank]), t, 0, MPI.SUM)
    acc.Fence()
    s = sum(range(size))
    assert np.frombuffer(acc.tomemory(), "d").tolist() == [size, s, 2.0 * s]

    # Allocate_shared: read the right neighbour's part straight from memory
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    sh = MPI.Win.Allocate_shared(16, 8, comm=node)
    np.frombuffer(sh.tomemory(), "l")[:] = [node.rank, node.rank * 7]
    node.Barrier()
    other, unit = sh.Shared_query((node.rank + 1) % node.size)
    assert np.frombuffer(other, "l").tolist() == [(node.rank + 1) % node.size,
                                                 ((node.rank + 1) % node.size) * 7]

    # post/start/complete/wait: everybody writes its rank into rank 0's window
    pscw = MPI.Win.Create(np.zeros(size, "i"), 4, comm=comm)
    group = pscw.Get_group()
    if rank == 0:
        pscw.Post(group.Excl([0]))
        pscw.Wait()
        assert np.frombuffer(pscw.tomemory(), "i").tolist() == list(range(size))
    else:
        pscw.Start(group.Incl([0]))
        pscw.Put(np.array([rank], "i"), 0, rank)
        pscw.Complete()

    for w in (win, counter, acc, sh, pscw):
        w.Free()
    node.Free()
    print("rma ok", rank)
"""


@pytest.mark.parametrize("transport", ["tcp", "shm"])
@pytest.mark.parametrize("n", [3, 5])
def test_rma_exercise_between_processes(n, transport, write_script, job_marker):
    script = write_script("rma_exercise.py", EXERCISE)
    r = run_minimpi("-n", str(n), "--transport", transport, *marker_args(job_marker), script,
                    timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in range(n):
        assert f"[{rank}] rma ok {rank}" in r.stdout
    assert not glob.glob("/dev/shm/minimpi-win-*-*"), "a shared window outlived its job"


def test_epoch_misuse_names_the_rank_and_the_error_class(write_script, job_marker):
    script = write_script("rma_misuse.py", """
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        win = MPI.Win.Create(bytearray(8), 1, comm=comm)
        try:
            win.Put(bytearray(4), (comm.rank + 1) % comm.size)
        except MPI.Exception as exc:
            assert exc.Get_error_class() == MPI.ERR_RMA_SYNC
            print("caught", comm.rank, str(exc).split(":")[0])
        win.Free()
    """)
    r = run_minimpi("-n", "3", *marker_args(job_marker), script, timeout=60)
    assert r.returncode == 0, r.stderr
    for rank in range(3):
        assert f"[{rank}] caught {rank} rank {rank}" in r.stdout


def test_mpi4py_util_sync_over_windows(write_script, job_marker):
    script = write_script("rma_sync.py", """
        from mpi4py import MPI
        from mpi4py.util import sync
        comm = MPI.COMM_WORLD
        counter = sync.Counter(start=10, comm=comm)
        mine = [next(counter) for _ in range(4)]
        assert sorted(sum(comm.allgather(mine), [])) == list(range(10, 10 + 4 * comm.size))
        mutex = sync.Mutex(comm=comm)
        inside = sync.Counter(comm=comm)
        for _ in range(3):
            with mutex:                      # nobody else between these two increments
                a, b = next(inside), next(inside)
                assert b == a + 1, (a, b)
        cv = sync.Condition(comm=comm)
        if comm.rank == 0:
            woken = 0
            while woken < comm.size - 1:
                with cv:
                    woken += cv.notify()
        else:
            with cv:
                cv.wait()
        sem = sync.Semaphore(2, comm=comm)
        with sem:
            pass
        order = []
        with sync.Sequential(comm):
            order.append(next(counter))
        assert comm.allgather(order[0]) == sorted(comm.allgather(order[0]))
        for obj in (sem, cv, mutex, inside, counter):
            obj.free()
        print("sync ok", comm.rank)
    """)
    r = run_minimpi("-n", "3", *marker_args(job_marker), script, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    assert all(f"[{rank}] sync ok {rank}" in r.stdout for rank in range(3))
