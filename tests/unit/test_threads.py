"""THREAD_MULTIPLE: several threads of one rank call MPI at once (ranks are threads here, each
starting threads of its own; run_threads' real transports in one process: shm rings, TCP).

What failed before the engine had its lock and its progress owner: two threads waiting at
once ran the transport's progress together (``RuntimeError: concurrent poll() invocation``
from shm's poller, or frames delivered twice / lost on TCP and in-process), collectives on
two communicators from two threads aborted each other (``CollectiveAbortedError``), and a
receive posted while another thread matched could be lost.
"""
from __future__ import annotations

import signal
import sys
import threading
import time
from typing import Callable, List

import numpy as np
import pytest

from minimpi import errors
from minimpi.comm.communicator import Intracomm
from minimpi.constants import ANY_SOURCE, ANY_TAG
from minimpi.data import ops
from minimpi.p2p.engine import Engine
from minimpi.runtime import diagnose
from minimpi.runtime.inproc import run_threads

#: how long any thread of these tests may take (a hang fails the test with a message)
LIMIT = 30.0


@pytest.fixture(params=["inproc", "shm", "tcp"])
def run(request):
    def runner(*args, **kwargs):
        kwargs.setdefault("timeout", 60)
        return run_threads(*args, transport=request.param, **kwargs)
    return runner


def in_threads(*fns: Callable[[], object], names: List[str] = ()) -> list:
    """Run each ``fn`` in a thread of its own; their results in order; the first error of
    any thread is raised here, and a thread still running after LIMIT s fails."""
    results: list = [None] * len(fns)
    failures: list = []

    def body(i: int, fn: Callable[[], object]) -> None:
        try:
            results[i] = fn()
        except BaseException as exc:   # noqa: BLE001 - reported below, with the thread
            failures.append((i, exc))

    threads = [threading.Thread(target=body, args=(i, fn), daemon=True,
                                name=names[i] if i < len(names) else f"worker-{i}")
               for i, fn in enumerate(fns)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + LIMIT
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    stuck = [t.name for t in threads if t.is_alive()]
    if failures:
        i, exc = failures[0]
        raise AssertionError(f"thread {threads[i].name} raised {type(exc).__name__}: {exc}") from exc
    assert not stuck, f"threads still running after {LIMIT} s: {stuck}"
    return results


def test_a_receiving_thread_beside_one_that_computes_and_sends(run):
    """The classic pattern: one thread receives everything the previous rank sends while
    the main thread computes and sends to the next rank; both at full speed, in order."""
    n = 300

    def body(comm):
        prev, nxt = (comm.rank - 1) % comm.size, (comm.rank + 1) % comm.size

        def receive():
            return [comm.recv(source=prev, tag=1) for _ in range(n)]

        def compute_and_send():
            total = 0
            for i in range(n):
                total += sum(range(200))          # some computing between sends
                comm.send((comm.rank, i), dest=nxt, tag=1)
            return total

        got, _ = in_threads(receive, compute_and_send)
        assert got == [(prev, i) for i in range(n)]
        return True

    assert run(3, body) == [True] * 3


def test_threads_with_distinct_tags_send_and_receive_at_once(run):
    """T threads per rank; thread k exchanges M messages of tag k with every other rank
    (buffers and objects): every message arrives once, in order, at the right thread."""
    threads, m = 3, 40

    def body(comm):
        peers = [r for r in range(comm.size) if r != comm.rank]

        def worker(k):
            def go():
                reqs, got = [], {p: [] for p in peers}
                for i in range(m):
                    for p in peers:
                        reqs.append(comm.isend((comm.rank, k, i), dest=p, tag=k))
                    for p in peers:
                        got[p].append(comm.recv(source=p, tag=k))
                    buf = np.full(4, comm.rank * 1000 + k * 100 + i, dtype="i8")
                    for p in peers:
                        comm.Send(buf, dest=p, tag=100 + k)
                    for p in peers:
                        into = np.empty(4, dtype="i8")
                        comm.Recv(into, source=p, tag=100 + k)
                        assert (into == p * 1000 + k * 100 + i).all(), (into, p, k, i)
                for r in reqs:
                    r.wait()
                for p in peers:
                    assert got[p] == [(p, k, i) for i in range(m)], (p, k)
                return k
            return go

        assert in_threads(*(worker(k) for k in range(threads))) == list(range(threads))
        return True

    assert run(3, body) == [True] * 3


def test_any_source_any_tag_receivers_get_every_message_once_in_order(run):
    """Several sending threads per rank, several receiving threads with ANY_SOURCE/ANY_TAG:
    every message is received exactly once, and each receiving thread sees the messages of
    one sending thread in the order they were sent."""
    senders, receivers, m = 3, 2, 60

    def body(comm):
        peers = [r for r in range(comm.size) if r != comm.rank]
        total = len(peers) * senders * m          # what this rank receives in all
        assert total % receivers == 0

        def send(k):
            def go():
                for i in range(m):
                    for p in peers:
                        comm.send((comm.rank, k, i), dest=p, tag=10 + k)
            return go

        def receive():
            out = []
            status_tags = []
            from minimpi.p2p.request import Status
            for _ in range(total // receivers):
                st = Status()
                out.append(comm.recv(source=ANY_SOURCE, tag=ANY_TAG, status=st))
                status_tags.append((st.Get_source(), st.Get_tag()))
            assert [(src, 10 + k) for src, k, _ in out] == status_tags
            return out

        results = in_threads(*(send(k) for k in range(senders)),
                             *(receive for _ in range(receivers)))
        got = [msg for r in results[senders:] for msg in r]
        assert sorted(got) == sorted((p, k, i) for p in peers for k in range(senders)
                                     for i in range(m))           # each exactly once
        for per_thread in results[senders:]:
            for p in peers:
                for k in range(senders):
                    seq = [i for src, kk, i in per_thread if (src, kk) == (p, k)]
                    assert seq == sorted(seq), (p, k, seq)
        comm.Barrier()
        return True

    assert run(3, body) == [True] * 3


def test_collectives_on_dup_communicators_from_threads_at_once(run):
    """One Dup'd communicator per thread, collectives on all of them at the same time
    (MPI: legal on different communicators): every result is right."""
    threads, rounds = 3, 25

    def body(comm):
        comms = [comm.Dup() for _ in range(threads)]
        p = comm.size

        def worker(k):
            c = comms[k]

            def go():
                for i in range(rounds):
                    assert c.allreduce(c.rank + k + i) == p * (k + i) + p * (p - 1) // 2
                    out = np.empty(2)
                    c.Allreduce(np.array([c.rank, k * i], dtype="f8"), out, op=ops.SUM)
                    assert out.tolist() == [p * (p - 1) / 2, p * k * i]
                    assert c.bcast(("from root", k, i) if c.rank == i % p else None,
                                   root=i % p) == ("from root", k, i)
                    assert c.allgather((k, c.rank)) == [(k, r) for r in range(p)]
                c.Barrier()
                return k
            return go

        assert in_threads(*(worker(k) for k in range(threads))) == list(range(threads))
        for c in comms:
            c.Free()
        return True

    assert run(3, body) == [True] * 3


def test_request_started_in_one_thread_completes_in_another(run):
    """Isend/Irecv/Iallreduce started by the main thread are waited for by a worker, and
    a worker's requests by the main thread."""
    def body(comm):
        peer = (comm.rank + 1) % comm.size
        prev = (comm.rank - 1) % comm.size
        rreq = comm.irecv(source=prev, tag=3)
        into = np.empty(3)
        breq = comm.Irecv(into, source=prev, tag=4)
        sreqs = [comm.isend(("obj", comm.rank), dest=peer, tag=3),
                 comm.Isend(np.full(3, float(comm.rank)), dest=peer, tag=4)]
        total = np.empty(1)
        coll = comm.Iallreduce(np.array([comm.rank + 1.0]), total, op=ops.SUM)

        def worker():
            out = (rreq.wait(), coll.wait())
            for s in sreqs:
                s.wait()
            breq.wait()
            mine = comm.irecv(source=prev, tag=5)
            return out, mine

        (obj, _), mine = in_threads(worker)[0]
        comm.send("second", dest=peer, tag=5)
        assert mine.wait() == "second"        # a worker's request, completed by main
        assert obj == ("obj", prev) and (into == prev).all()
        assert total[0] == comm.size * (comm.size + 1) // 2
        return True

    assert run(3, body) == [True] * 3


def test_a_nonblocking_collective_advances_in_another_threads_wait(run):
    """Thread A starts an Iallreduce and never touches it again until B is done; B's
    blocking receive (the progress owner) advances it meanwhile: B's message comes from a
    peer only after that peer's Iallreduce completed, which needs this rank's part."""
    def body(comm):
        peer = (comm.rank + 1) % comm.size
        prev = (comm.rank - 1) % comm.size
        started = threading.Event()
        done_by_b = threading.Event()
        box = {}

        def a():
            out = np.empty(1)
            box["req"] = comm.Iallreduce(np.array([float(comm.rank)]), out, op=ops.SUM)
            started.set()
            assert done_by_b.wait(LIMIT)           # no MPI call of A's meanwhile
            box["req"].wait()
            return out[0]

        def b():
            assert started.wait(LIMIT)
            # the ring: each rank waits for its predecessor's "done" while its own part
            # of the Iallreduce only moves through this wait's progress
            if comm.rank == 0:
                while not box["req"].Test():
                    time.sleep(0.001)
                comm.send("done", dest=peer, tag=8)
                comm.recv(source=prev, tag=8)
            else:
                comm.recv(source=prev, tag=8)
                assert box["req"].Get_status()     # completed while b waited
                comm.send("done", dest=peer, tag=8)
            done_by_b.set()

        total, _ = in_threads(a, b)
        assert total == comm.size * (comm.size - 1) // 2
        return True

    assert run(3, body) == [True] * 3


def test_concurrent_communicator_creation_is_refused_not_mixed():
    """Two threads creating communicators at once could agree on one context id for both:
    the second is refused (UnsupportedError), its peers get CollectiveAbortedError, and the
    first communicator works."""
    def body(comm):
        a, b = comm.Dup(), comm.Dup()
        if comm.rank == 0:
            in_flight = threading.Event()

            def first():
                in_flight.set()
                new = a.Dup()                   # waits for rank 1, which comes late
                return new.allreduce(1)

            def second():
                assert in_flight.wait(LIMIT)
                time.sleep(0.3)                 # first() is inside its Dup by now
                with pytest.raises(errors.UnsupportedError, match="another thread"):
                    b.Dup()
                return "refused"

            return in_threads(first, second)
        time.sleep(0.6)
        new = a.Dup()
        with pytest.raises(errors.CollectiveAbortedError, match="rank 0 failed"):
            b.Dup()
        return [new.allreduce(1), "aborted"]

    assert run_threads(2, body, timeout=60) == [[2, "refused"], [2, "aborted"]]


def test_a_world_of_one_waits_for_its_other_thread():
    """Size 1 (no transport): a receive from itself waits while another thread may still
    send it (it used to fail at once: 'this process is alone'); with no other thread it
    still fails at once."""
    engine = Engine(0, 1, None)
    comm = Intracomm(engine, range(1), 0, 0, "COMM_WORLD")

    def late_sender():
        time.sleep(0.3)
        comm.send("to myself", dest=0, tag=2)

    before = set(threading.enumerate())     # (earlier tests' executors may live on)
    got, _ = in_threads(lambda: comm.recv(source=0, tag=2), late_sender)
    assert got == "to myself"
    others = [t.name for t in threading.enumerate()
              if t not in before and not t.daemon and t.is_alive()]
    assert not others, others
    with pytest.raises(errors.MPITimeoutError, match="alone"):
        comm.recv(source=0, tag=3)      # (this thread is the only one)


def test_close_ends_the_waits_of_other_threads():
    """MPI.Finalize while another thread still waits (erroneous, but it must not hang):
    that wait raises JobAbortedError saying why."""
    def body(comm):
        engine = comm._ep.engine

        def waiter():
            with pytest.raises(errors.JobAbortedError, match="finalized while it waited"):
                comm.recv(source=ANY_SOURCE, tag=99)
            return "ended"

        def closer():
            time.sleep(0.3)
            engine.close("finalized while it waited")
            return "closed"

        return in_threads(waiter, closer)

    assert run_threads(2, body) == [["ended", "closed"]] * 2


def test_close_ends_a_wait_that_begins_after_it():
    """A thread whose receive had not reached its wait when MPI.Finalize closed the engine
    (it was in the express lane, which holds the engine lock, or between it and the general
    path's wait - nobody is waiting yet) must not then wait forever: the wait it begins
    raises JobAbortedError saying why."""
    def body(comm):
        engine = comm._ep.engine
        closed = threading.Event()

        def late_waiter():
            closed.wait(10)
            with pytest.raises(errors.JobAbortedError, match="finalized before it waited"):
                comm.recv(source=ANY_SOURCE, tag=98)
            return "ended"

        def closer():
            engine.close("finalized before it waited")
            closed.set()
            return "closed"

        return in_threads(late_waiter, closer)

    assert run_threads(2, body) == [["ended", "closed"]] * 2


def test_threads_that_wait_in_mpi_block_signals_and_leave_the_main_mask_alone():
    """A thread other than the main one blocks asynchronous signals on its first wait (the
    kernel then gives them to the main thread, whose holds keep handlers out of frame
    delivery); the main thread's mask is not touched."""
    def body(comm):
        def worker():
            before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
            comm.sendrecv(comm.rank, dest=1 - comm.rank, source=1 - comm.rank)
            after = signal.pthread_sigmask(signal.SIG_BLOCK, [])
            return signal.SIGINT in before, signal.SIGINT in after
        return in_threads(worker)[0]

    main_before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    # (run_threads' rank threads may start blocked or not; the worker's own first wait
    # blocks them in it either way)
    for before, after in run_threads(2, body):
        assert after
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == main_before


class _Sent(list):
    """What a BlockReporter sends to the launcher, kept."""

    def blocked_states(self):
        return [s for s in self if s.get("blocked")]


def test_reporter_a_waiting_thread_beside_a_computing_one_is_not_blocked():
    """The deadlock reporter: rank 0's receiving thread waits (long enough to be reported)
    while another thread computes - the rank must not be told blocked; once that thread
    only joins, it is, naming both threads."""
    sent = _Sent()
    computing = threading.Event()

    def body(comm):
        if comm.rank == 1:
            assert computing.wait(LIMIT)
            time.sleep(1.0)                      # rank 0 is reported meanwhile, or not
            comm.send("late", dest=0, tag=4)
            time.sleep(2.0)                      # (1.5 s of rank 0 blocked: reported)
            comm.send("later", dest=0, tag=5)
            return None
        engine = comm._ep.engine
        engine.block_report_after = 0.1
        diagnose.BlockReporter(engine, sent.append).install()

        def receive():
            return comm.recv(source=1, tag=4), comm.recv(source=1, tag=5)

        def compute():
            computing.set()
            end = time.monotonic() + 1.5
            x = 0
            while time.monotonic() < end:         # computes past rank 1's first send
                x += 1
            return x

        holder = {}

        def joiner():                            # then only waits for the receiver
            t = threading.Thread(target=lambda: holder.setdefault("got", receive()),
                                 name="receiver")
            t.start()
            t.join(LIMIT)
            return holder["got"]

        got, _ = in_threads(joiner, compute, names=["joiner", "computer"])
        return got

    assert run_threads(2, body, timeout=60)[0] == ("late", "later")
    blocked = sent.blocked_states()
    assert blocked, sent
    # every blocked state came after the computing thread had finished: none names it
    for state in blocked:
        names = [t.get("thread") for t in state.get("threads") or []]
        assert "computer" not in names, state
        assert "receiver" in names and "joiner" in names, state
        assert any(t.get("idle") for t in state["threads"]), state
    text = diagnose.format_state(blocked[-1])
    assert "thread 'receiver': blocked in recv(source=1, tag=5)" in text, text
    assert "thread 'joiner' waits for another thread at test_threads.py" in text, text
    assert sent[-1] == {"blocked": False, "n": sent[-1]["n"]}


def test_one_thread_costs_no_python_calls():
    """The single-threaded hot path: the lock adds no Python function call to a Send or a
    Recv (counted as tests/unit/coll/test_plan.py counts them)."""
    def count(op, repeats=200):
        calls = [0]

        def profile(frame, event, arg):
            if event == "call":
                calls[0] += 1
        sys.setprofile(profile)
        try:
            for _ in range(repeats):
                op()
        finally:
            sys.setprofile(None)
        return calls[0] / repeats

    def body(comm):
        a, b = np.ones(1), np.empty(1)
        if comm.rank == 0:
            for _ in range(220):
                comm.Send(a, 1, 3)
            comm.Barrier()
            # the least of 5 batches: a garbage collection's finalizers may land in one
            return min(count(lambda: comm.Send(a, 1, 4)) for _ in range(5))
        comm.Barrier()
        for _ in range(220):
            comm.Recv(b, 0, 3)
        for _ in range(1000):
            comm.Recv(b, 0, 4)
        return None

    # measured: 5 per Send over the in-process transport (the express lane; 17 on the
    # general path, 20 before its queue; the engine lock itself adds none)
    per_send = run_threads(2, body)[0]
    assert per_send <= 6, per_send
