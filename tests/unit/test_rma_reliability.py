"""One-sided windows that are never wrong and never stuck, on ranks that are threads: a lock
protects plain loads and stores on a window in shared memory, a lock whose holder failed is
given back to the waiters, calls that need a failed rank raise ERR_PROC_FAILED, and a rank
that finalizes with a window not freed serves it until the others finish."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from minimpi import MPI
from minimpi.rma import finish_windows
from minimpi.rma.locks import LockTable
from minimpi.runtime.inproc import RankFailed, run_threads


@pytest.mark.parametrize("n", [3, 4])
def test_an_exclusive_lock_excludes_every_ranks_loads_and_stores(n):
    """Read, give the processor away, write: under a lock that excludes, nothing is lost;
    the owner of the memory takes part."""
    rounds = 40

    def body(comm):
        win = MPI.Win.Allocate_shared(8 if comm.rank == 0 else 0, 8, comm=comm)
        a = np.frombuffer(win.Shared_query(0)[0], "q")
        comm.Barrier()
        for _ in range(rounds):
            win.Lock(0, MPI.LOCK_EXCLUSIVE)
            v = int(a[0])
            time.sleep(0)                   # the other threads run here if they can get in
            a[0] = v + 1
            win.Unlock(0)
        comm.Barrier()
        total = int(a[0])
        win.Free()
        return total

    assert run_threads(n, body, timeout=60) == [rounds * n] * n


def test_a_shared_lock_excludes_an_exclusive_one():
    rounds = 40

    def body(comm):
        win = MPI.Win.Allocate_shared(16 if comm.rank == 0 else 0, 8, comm=comm)
        a = np.frombuffer(win.Shared_query(0)[0], "q")
        comm.Barrier()
        torn = 0
        for i in range(rounds):
            if comm.rank == 1:                  # the writer keeps the pair equal
                win.Lock(0, MPI.LOCK_EXCLUSIVE)
                a[0] = i
                time.sleep(0)
                a[1] = i
                win.Unlock(0)
            else:                               # readers, the owner among them
                win.Lock(0, MPI.LOCK_SHARED)
                first = int(a[0])
                time.sleep(0)
                torn += int(a[1]) != first
                win.Unlock(0)
        comm.Barrier()
        win.Free()
        return torn

    assert run_threads(3, body, timeout=60) == [0, 0, 0]


def test_a_lock_table_forgets_an_origin_that_is_gone():
    granted = []
    table = LockTable()
    table.request(1, MPI.LOCK_EXCLUSIVE, lambda: granted.append(1))
    table.request(2, MPI.LOCK_SHARED, lambda: granted.append(2))
    table.request(3, MPI.LOCK_SHARED, lambda: granted.append(3))
    table.request(4, MPI.LOCK_EXCLUSIVE, lambda: granted.append(4))
    assert granted == [1] and table.waiters() == ((2, MPI.LOCK_SHARED), (3, MPI.LOCK_SHARED),
                                                  (4, MPI.LOCK_EXCLUSIVE))
    assert table.forget(3)                       # a waiter: only dropped from the queue
    assert granted == [1] and [o for o, _ in table.waiters()] == [2, 4]
    assert table.forget(1)                       # the holder: the next ones are granted
    assert granted == [1, 2] and table.holders() == ("shared", (2,))
    assert not table.forget(7)                   # neither held nor wanted anything
    assert table.release(2) and granted == [1, 2, 4]
    assert table.holders() == ("exclusive", (4,))


@pytest.mark.parametrize("flavor", ["create", "allocate"])
def test_the_lock_of_a_failed_origin_is_given_back_to_the_waiters(flavor):
    """Rank 1 fails holding an exclusive lock on rank 0 (after its Put landed); rank 2's
    Lock(0)/Get/Unlock then completes and sees that Put."""
    got = {}
    holding = threading.Event()

    def body(comm):
        if flavor == "create":
            win = MPI.Win.Create(np.zeros(2, "q") if comm.rank == 0 else None, 8, comm=comm)
        else:
            win = MPI.Win.Allocate(16 if comm.rank == 0 else 0, 8, comm=comm)
        comm.Barrier()
        if comm.rank == 1:
            win.Lock(0, MPI.LOCK_EXCLUSIVE)
            win.Put(np.full(1, 7, "q"), 0)
            win.Flush(0)
            holding.set()
            raise RuntimeError("rank 1 fails holding the lock")
        if comm.rank == 2:
            assert holding.wait(10)
            out = np.zeros(2, "q")
            win.Lock(0, MPI.LOCK_EXCLUSIVE)
            win.Get(out, 0)
            win.Unlock(0)
            got["out"] = out.tolist()
            comm.send("done", dest=0)
        else:
            got["heard"] = comm.recv(source=2)

    with pytest.raises(RankFailed) as info:
        run_threads(3, body, timeout=30, fault_tolerant=True)
    assert info.value.rank == 1 and "fails holding the lock" in str(info.value)
    assert got == {"out": [7, 0], "heard": "done"}


def _error_class(call):
    try:
        call()
    except MPI.Exception as exc:
        return exc.Get_error_class(), str(exc)
    return MPI.SUCCESS, ""


@pytest.mark.parametrize("case", ["lock", "accumulate", "wait"])
def test_calls_that_need_a_failed_rank_raise_proc_failed(case):
    seen = {}

    def body(comm):
        win = MPI.Win.Create(np.zeros(2, "q"), 8, comm=comm)
        if comm.rank == 0 and case == "wait":
            win.Post(comm.Get_group().Incl([1, 2]))
        comm.Barrier()
        if comm.rank == 1:
            raise RuntimeError("rank 1 fails")
        if comm.rank == 2 and case == "wait":
            win.Start(comm.Get_group().Incl([0]))
            win.Put(np.ones(1, "q"), 0)
            win.Complete()
        if comm.rank != 0:
            return
        deadline = time.monotonic() + 10
        while comm.Get_failed().Get_size() == 0 and time.monotonic() < deadline:
            time.sleep(0.01)

        def lock():
            win.Lock(1, MPI.LOCK_EXCLUSIVE)
            win.Unlock(1)

        def accumulate():
            win.Lock(1, MPI.LOCK_SHARED, MPI.MODE_NOCHECK)
            win.Accumulate(np.ones(1, "q"), 1, [0, 1, MPI.INT64_T], MPI.SUM)
            win.Flush(1)

        seen[case] = _error_class({"lock": lock, "accumulate": accumulate,
                                   "wait": win.Wait}[case])

    with pytest.raises(RankFailed) as info:
        run_threads(3, body, timeout=30, fault_tolerant=True)
    assert info.value.rank == 1
    error_class, text = seen[case]
    assert error_class == MPI.ERR_PROC_FAILED, text
    assert "world rank 1" in text or "rank 1" in text, text


def test_a_rank_that_finishes_first_serves_its_window_until_the_others_finish():
    """Rank 0 reaches the end (finish_windows is what finalize runs) while ranks 1 and 2
    are still to Lock/Get/Unlock it: both get their data, and nobody is warned."""
    warnings = []
    started = threading.Event()

    def body(comm):
        win = MPI.Win.Create(np.arange(3, dtype="q") if comm.rank == 0 else None, 8,
                             comm=comm)
        win.Set_name("w0")
        comm.Barrier()
        engine = comm.endpoint.engine
        if comm.rank == 0:
            started.set()
            finish_windows(engine, 20.0, warnings.append)
            return None
        assert started.wait(10)
        time.sleep(0.2 * comm.rank)
        out = np.zeros(3, "q")
        win.Lock(0, MPI.LOCK_SHARED)
        win.Get(out, 0)
        win.Unlock(0)
        finish_windows(engine, 20.0, warnings.append)
        return out.tolist()

    assert run_threads(3, body, timeout=60) == [None, [0, 1, 2], [0, 1, 2]]
    assert warnings == []


def test_finalize_tells_which_epochs_were_left_open_and_gives_the_locks_back():
    warnings = []

    def body(comm):
        win = MPI.Win.Create(np.zeros(2, "q") if comm.rank == 0 else None, 8, comm=comm)
        win.Set_name("left")
        comm.Barrier()
        engine = comm.endpoint.engine
        out = None
        if comm.rank == 1:
            win.Lock(0, MPI.LOCK_EXCLUSIVE)
            win.Put(np.full(1, 5, "q"), 0)
            win.Flush(0)
            comm.Barrier()                  # rank 2 asks for the lock after this
        elif comm.rank == 2:
            comm.Barrier()
            out = np.zeros(2, "q")
            win.Lock(0, MPI.LOCK_EXCLUSIVE)  # granted once rank 1 finished
            win.Get(out, 0)
            win.Unlock(0)
            out = out.tolist()
        else:
            comm.Barrier()
        finish_windows(engine, 20.0, lambda text: warnings.append((comm.rank, text)))
        return out

    assert run_threads(3, body, timeout=60) == [None, None, [5, 0]]
    assert warnings == [(1, "window 'left' (COMM_WORLD) reaches finalize with Lock(0) still "
                            "open (Unlock, Unlock_all, Complete or Wait missing); the targets "
                            "apply what it sent, then give its locks back")]


def test_a_rank_that_finishes_holding_the_lock_on_itself_lets_the_others_in():
    warnings = []

    def body(comm):
        win = MPI.Win.Create(np.full(2, 3, "q") if comm.rank == 0 else None, 8, comm=comm)
        engine = comm.endpoint.engine
        out = None
        if comm.rank == 0:
            win.Lock(0, MPI.LOCK_EXCLUSIVE)        # ... never unlocked
            comm.Barrier()
        else:
            comm.Barrier()
            out = np.zeros(2, "q")
            win.Lock(0, MPI.LOCK_SHARED)
            win.Get(out, 0)
            win.Unlock(0)
            out = out.tolist()
        finish_windows(engine, 20.0, warnings.append)
        return out

    assert run_threads(2, body, timeout=60) == [None, [3, 3]]
    assert len(warnings) == 1 and "Lock(0) still open" in warnings[0]
