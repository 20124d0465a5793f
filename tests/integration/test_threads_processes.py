"""THREAD_MULTIPLE between real processes (``minimpi run``, shared memory and TCP, 2 and 3
ranks): threads that send, receive and run collectives at once, requests that cross
threads, the deadlock detector beside threads, and finalize with a thread still waiting.

Before the engine had its lock and progress owner, these programs failed with
``RuntimeError: concurrent poll() invocation`` (two threads in shm's poll),
``CollectiveAbortedError`` (collectives of two communicators from two threads), a false
deadlock (a receiving thread beside a computing one, ``--deadlock-timeout``), or a
``Barrier`` that a daemon listener thread broke.
"""
from __future__ import annotations

import sys

import pytest
from jobhelpers import marker_args, run_minimpi

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux launcher tests")

EXIT_DEADLOCK = 3

#: every pattern at once, checked in the ranks (a failed check is an AssertionError that
#: ends the job with its line)
THREADS = """
    import threading, time
    import numpy as np
    from mpi4py import MPI

    assert MPI.Query_thread() == MPI.THREAD_MULTIPLE
    assert MPI.Init_thread(MPI.THREAD_MULTIPLE) == MPI.THREAD_MULTIPLE
    comm = MPI.COMM_WORLD
    rank, size = comm.rank, comm.size
    peers = [r for r in range(size) if r != rank]
    prev, nxt = (rank - 1) % size, (rank + 1) % size
    failures = []

    def run_all(*fns):
        out = [None] * len(fns)
        def wrap(i, fn):
            try:
                out[i] = fn()
            except BaseException as exc:
                failures.append(f"{fns[i].__name__}: {type(exc).__name__}: {exc}")
        ts = [threading.Thread(target=wrap, args=(i, fn)) for i, fn in enumerate(fns)]
        for t in ts: t.start()
        for t in ts: t.join(60)
        assert not any(t.is_alive() for t in ts), "a thread is stuck"
        assert not failures, failures
        return out

    # 1. a receiving thread beside one that computes and sends
    N = 400
    def receiver():
        return [comm.recv(source=prev, tag=1) for _ in range(N)]
    def computer():
        for i in range(N):
            sum(range(300))
            comm.send((rank, i), dest=nxt, tag=1)
    got, _ = run_all(receiver, computer)
    assert got == [(prev, i) for i in range(N)]

    # 2. threads with distinct tags, objects and buffers both ways
    M = 30
    def tagged(k):
        def exchange():
            for i in range(M):
                reqs = [comm.isend((rank, k, i), dest=p, tag=k) for p in peers]
                for p in peers:
                    assert comm.recv(source=p, tag=k) == (p, k, i)
                for p in peers:
                    comm.Send(np.full(8, rank * 100 + k, "i4"), dest=p, tag=50 + k)
                for p in peers:
                    b = np.empty(8, "i4")
                    comm.Recv(b, source=p, tag=50 + k)
                    assert (b == p * 100 + k).all()
                MPI.Request.waitall(reqs)
        exchange.__name__ = f"tagged{k}"
        return exchange
    run_all(*(tagged(k) for k in range(3)))

    # 3. ANY_SOURCE / ANY_TAG receivers beside sending threads: each message exactly once
    S, R, K = 3, 2, 40
    def sender(k):
        def send():
            for i in range(K):
                for p in peers:
                    comm.send((rank, k, i), dest=p, tag=20 + k)
        send.__name__ = f"sender{k}"
        return send
    per_receiver = len(peers) * S * K // R
    def any_receiver():
        return [comm.recv(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG) for _ in range(per_receiver)]
    out = run_all(*(sender(k) for k in range(S)), any_receiver, any_receiver)
    received = out[S] + out[S + 1]
    assert sorted(received) == sorted((p, k, i) for p in peers for k in range(S)
                                      for i in range(K))
    for mine in out[S:]:
        for p in peers:
            for k in range(S):
                seq = [i for src, kk, i in mine if (src, kk) == (p, k)]
                assert seq == sorted(seq), (p, k, seq)
    comm.Barrier()

    # 4. collectives on Dup'd communicators from threads at the same time
    comms = [comm.Dup() for _ in range(3)]
    def collectives(k):
        c = comms[k]
        def go():
            for i in range(20):
                assert c.allreduce(rank + k * i) == size * (size - 1) // 2 + size * k * i
                buf = np.empty(3)
                c.Allreduce(np.full(3, float(k + rank)), buf, op=MPI.MAX)
                assert (buf == k + size - 1).all()
                assert c.bcast(("b", k, i) if c.rank == i % size else None, root=i % size) \\
                    == ("b", k, i)
                assert c.gather(rank, root=0) == (list(range(size)) if c.rank == 0 else None)
        go.__name__ = f"collectives{k}"
        return go
    run_all(*(collectives(k) for k in range(3)))

    # 5. requests started in one thread, completed in another
    a = np.empty(2)
    reqs = [comm.irecv(source=prev, tag=7), comm.Irecv(a, source=prev, tag=8),
            comm.isend(("x", rank), dest=nxt, tag=7),
            comm.Isend(np.full(2, float(rank)), dest=nxt, tag=8)]
    total = np.empty(1)
    coll = comm.Iallreduce(np.ones(1), total, op=MPI.SUM)
    def completer():
        return reqs[0].wait(), MPI.Request.Waitall(reqs[1:] + [coll])
    (obj, _), = run_all(completer)
    assert obj == ("x", prev) and (a == prev).all() and total[0] == size
    for c in comms:
        c.Free()
    print("threads ok", rank)
"""


@pytest.mark.parametrize("transport, n", [("shm", 2), ("shm", 3), ("tcp", 2), ("tcp", 3)])
def test_threads_send_receive_and_run_collectives_at_once(transport, n, write_script,
                                                          job_marker):
    script = write_script("threads.py", THREADS)
    res = run_minimpi("-n", n, "--transport", transport, "--deadlock-timeout", "10",
                      *marker_args(job_marker), script, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    for r in range(n):
        assert f"[{r}] threads ok {r}" in res.stdout, res.stdout + res.stderr


#: each rank's receiving thread waits while its main thread computes for longer than the
#: deadlock timeout, then sends what the other rank's receiving thread waits for
WAIT_BESIDE_COMPUTE = """
    import threading, time
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    other = (comm.rank + 1) % comm.size
    got = []
    t = threading.Thread(target=lambda: got.append(
        comm.recv(source=(comm.rank - 1) % comm.size, tag=5)), name="receiver")
    t.start()
    end = time.monotonic() + 3.0
    x = 0
    while time.monotonic() < end:
        x += 1
    comm.send(f"from {comm.rank}", dest=other, tag=5)
    t.join()
    print("got", got[0])
"""


@pytest.mark.parametrize("transport, n", [("shm", 2), ("tcp", 3)])
def test_a_thread_waiting_beside_a_computing_one_is_no_deadlock(transport, n, write_script,
                                                                 job_marker):
    script = write_script("beside.py", WAIT_BESIDE_COMPUTE)
    res = run_minimpi("-n", n, "--transport", transport, "--deadlock-timeout", "1",
                      *marker_args(job_marker), script, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "deadlock" not in res.stderr
    for r in range(n):
        assert f"[{r}] got from {(r - 1) % n}" in res.stdout, res.stdout + res.stderr


def test_a_deadlock_among_threads_is_still_reported(write_script, job_marker):
    script = write_script("stuck.py", """
        import threading
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        other = 1 - comm.rank
        t = threading.Thread(target=lambda: comm.recv(source=other, tag=5), name="receiver")
        t.start()
        t.join()
    """)
    res = run_minimpi("-n", 2, "--deadlock-timeout", "1", *marker_args(job_marker), script,
                      timeout=60)
    assert res.returncode == EXIT_DEADLOCK, res.stderr
    err = res.stderr
    for r in (0, 1):
        assert (f"rank {r}: thread 'receiver': blocked in recv(source={1 - r}, tag=5) on "
                f"COMM_WORLD at stuck.py:6") in err, err
        assert "thread 'MainThread' waits for another thread at stuck.py:8 (t.join())" in err
    assert "wait-for cycle: rank 0 waits for rank 1 in recv(tag=5)" in err, err


def test_two_threads_of_a_rank_blocked_in_mpi_are_a_deadlock(write_script, job_marker):
    """Both threads of each rank wait in MPI (none computes): the job is stuck."""
    script = write_script("both.py", """
        import threading
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        other = 1 - comm.rank
        t = threading.Thread(target=lambda: comm.recv(source=other, tag=6), name="second")
        t.start()
        comm.recv(source=other, tag=7)
    """)
    res = run_minimpi("-n", 2, "--deadlock-timeout", "1", *marker_args(job_marker), script,
                      timeout=60)
    assert res.returncode == EXIT_DEADLOCK, res.stderr
    assert "thread 'MainThread': blocked in recv(source=1, tag=7)" in res.stderr, res.stderr
    assert "thread 'second': blocked in recv(source=1, tag=6)" in res.stderr, res.stderr


def test_a_daemon_thread_still_waiting_at_the_end_does_not_spoil_the_run(write_script,
                                                                          job_marker):
    """A daemon listener thread is still in recv when the program ends: the program's own
    collectives and sends work, finalize names the receive that never matched, nothing
    prints a traceback, and the job exits 0."""
    script = write_script("listener.py", """
        import threading
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        got = []
        def listen():
            while True:
                got.append(comm.recv(source=MPI.ANY_SOURCE, tag=9))
        threading.Thread(target=listen, daemon=True, name="listener").start()
        comm.send(comm.rank, dest=(comm.rank + 1) % comm.size, tag=9)
        comm.Barrier()
        while not got:
            pass
        comm.Barrier()
        print("got", got)
    """)
    res = run_minimpi("-n", 3, "--transport", "shm", *marker_args(job_marker), script, timeout=60)
    assert res.returncode == 0, res.stderr
    for r in range(3):
        assert f"[{r}] got [{(r - 1) % 3}]" in res.stdout, res.stdout + res.stderr
    assert "receive never matched a message" in res.stderr
    assert "Traceback" not in res.stderr and "Exception in thread" not in res.stderr, res.stderr


def test_finalize_ends_the_wait_of_a_thread_still_in_mpi(write_script, job_marker):
    """MPI.Finalize() while another (non-daemon) thread waits: that thread's receive raises
    JobAbortedError saying why, instead of the job hanging."""
    script = write_script("finalize.py", """
        import threading
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        err = []
        def waiter():
            try:
                comm.recv(source=MPI.ANY_SOURCE, tag=77)
            except MPI.Exception as exc:
                err.append(f"{type(exc).__name__}: {exc}")
        t = threading.Thread(target=waiter)
        t.start()
        comm.Barrier()
        MPI.Finalize()
        t.join(20)
        print("ended" if not t.is_alive() else "still waiting", err)
    """)
    res = run_minimpi("-n", 2, *marker_args(job_marker), script, timeout=60)
    assert res.returncode == 0, res.stderr
    for r in range(2):
        assert (f"[{r}] ended [\"JobAbortedError: rank {r}: MPI was finalized (by thread "
                f"'MainThread', MPI.Finalize) while this thread was still in an MPI call")\
            in res.stdout, res.stdout + res.stderr
