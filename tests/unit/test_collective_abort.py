"""Issue 12: a collective that fails on some ranks only never leaves the others waiting.

A rank that rejects its own arguments (or fails midway) still consumes the call's slot and
sends every other member an abort marker (minimpi.coll.slots): the members that still need
something from it raise ``CollectiveAbortedError`` naming it, those whose part is done return,
and the next collective works on every rank. Every test runs ranks as threads with a hard
timeout, so a hang fails the test instead of blocking the run.
"""
from __future__ import annotations

import numpy as np
import pytest

from minimpi import MPI
from minimpi.errors import CollectiveAbortedError, CountError
from minimpi.runtime.inproc import run_threads


def run(n, fn, **kw):
    return run_threads(n, fn, timeout=20, **kw)


def outcome(call):
    """'ok' or the name of the exception ``call()`` raised."""
    try:
        call()
        return "ok"
    except Exception as exc:   # noqa: BLE001 - the class is what the tests check
        return type(exc).__name__


def test_root_only_count_error_in_gather_then_barrier_works():
    # the repro of TRIAGE.md S4: only the root can see that its recvbuf is too small
    def body(comm):
        rbuf = np.full(2, -1.0) if comm.rank == 0 else None
        first = outcome(lambda: comm.Gather(np.full(3, float(comm.rank)), rbuf, root=0))
        comm.Barrier()
        total = comm.allreduce(1)
        return first, total

    results = run(3, body)
    assert results[0] == ("CountError", 3)
    for first, total in results[1:]:          # senders either finished or were told
        assert first in ("ok", "CollectiveAbortedError") and total == 3


def test_bad_buffer_on_a_leaf_fails_the_bcast_everywhere_it_matters():
    def body(comm):
        buf = np.zeros(4) if comm.rank != 3 else [1, 2, 3]      # rank 3: not a buffer
        first = outcome(lambda: comm.Bcast(buf, root=0))
        again = np.arange(4.0) if comm.rank == 0 else np.zeros(4)
        comm.Bcast(again, root=0)
        return first, again.tolist()

    results = run(4, body)
    assert results[3][0] == "NotABufferError"
    for first, again in results:
        assert again == [0.0, 1.0, 2.0, 3.0]
    # rank 3 is a leaf of the binomial tree from 0: whoever waited for it (nobody here)
    # would have raised; nobody hung, and the next Bcast delivered everywhere


def test_root_error_releases_every_waiting_receiver():
    def body(comm):
        buf = np.zeros(5)
        if comm.rank == 0:
            spec = [buf, 7, MPI.DOUBLE]                  # count past the end: root only
        else:
            spec = buf
        first = outcome(lambda: comm.Bcast(spec, root=0))
        return first, comm.allreduce(comm.rank)

    results = run(4, body)
    assert results[0] == ("CountError", 6)
    assert all(r == ("CollectiveAbortedError", 6) for r in results[1:])


def test_aborted_error_names_the_failed_rank_and_the_call():
    def body(comm):
        spec = [np.zeros(2), 9, MPI.DOUBLE] if comm.rank == 1 else np.zeros(2)
        try:
            comm.Allreduce(MPI.IN_PLACE, spec)
        except CollectiveAbortedError as exc:
            return str(exc)
        except CountError:
            return "culprit"
        return "ok"

    results = run(3, body)
    assert results[1] == "culprit"
    for text in (results[0], results[2]):
        assert "Allreduce" in text and "rank 1 failed in this call" in text
        assert "Invalid count" in text


def test_user_op_raising_midway_on_one_rank_does_not_hang_the_others():
    def boom(a, b, dtype):
        if MPI.COMM_WORLD is not None and b.size and b[0] == -1:
            raise RuntimeError("user op failed")
        b += a

    op = MPI.Op.Create(boom, commute=True)

    def body(comm):
        x = np.full(3, -1.0 if comm.rank == 2 else float(comm.rank))
        first = outcome(lambda: comm.Reduce(x, np.zeros(3) if comm.rank == 0 else None,
                                            op=op, root=0, algorithm="binomial"))
        return first, comm.allreduce(1)

    results = run(4, body)
    assert all(total == 4 for _, total in results)
    assert any(first == "OpError" for first, _ in results)


def test_rank_local_error_in_a_nonblocking_collective_start():
    def body(comm):
        buf = np.zeros(3) if comm.rank != 1 else b"read-only"
        first = outcome(lambda: comm.Ibcast(buf, root=0).Wait())
        return first, comm.allreduce(2)

    results = run(3, body)
    assert results[1][0] == "BufferAccessError"
    assert all(total == 6 for _, total in results)


def test_a_late_marker_for_a_finished_call_changes_nothing():
    # Every rank fails identically (bad root): all consume the slot, markers cross and are
    # dropped, and nothing is left over for the following calls.
    def body(comm):
        bad = [outcome(lambda: comm.bcast(1, root=comm.size)) for _ in range(3)]
        x = np.full(2, float(comm.rank))
        comm.Allreduce(MPI.IN_PLACE, x)
        return bad, x.tolist(), comm.gather(comm.rank, root=1)

    results = run(3, body)
    for rank, (bad, x, gathered) in enumerate(results):
        assert bad == ["RootError"] * 3
        assert x == [3.0, 3.0]
        assert gathered == ([0, 1, 2] if rank == 1 else None)


def test_split_with_a_bad_color_on_one_rank():
    def body(comm):
        color = -7 if comm.rank == 2 else 0
        first = outcome(lambda: comm.Split(color, comm.rank))
        sub = comm.Split(comm.rank % 2, comm.rank)
        return first, sub.size

    results = run(4, body)
    assert results[2][0] == "ArgumentError"
    assert all(first in ("ok", "ArgumentError", "CollectiveAbortedError")
               for first, _ in results)
    assert [size for _, size in results] == [2, 2, 2, 2]


def test_create_group_tags_never_collide_with_aborted_slots():
    from minimpi.coll.slots import SEQ_MASK, create_group_tag, in_slot, is_marker, marker_tag
    for user_tag in (0, 5, 16383, 16384 + 5, 2**25 + 5, 2**30 - 1):
        tag = create_group_tag(user_tag)
        assert 0 <= tag < 2**31
        for low in (0, 5, user_tag & SEQ_MASK):
            assert not in_slot(tag, low)
    for low in (1, 5, SEQ_MASK):
        for cls in range(60):
            t = marker_tag(low, cls)
            assert is_marker(t, 0) and not is_marker(t, 8) and in_slot(t, low)
            assert not t & (1 << 30)


def test_registry_first_use_from_many_threads_sees_every_collective():
    # ranks as threads used the algorithm registry before its modules had all registered
    # (an AlgorithmError "unknown collective 'reduce'" on one rank, the others hung)
    import subprocess
    import sys
    code = """
import importlib, threading, time
real = importlib.import_module
def slow(name, *a, **k):
    time.sleep(0.02)
    return real(name, *a, **k)
importlib.import_module = slow
from minimpi.coll import registry
errors = []
def use():
    try:
        registry.algorithms("alltoall")
    except Exception as exc:
        errors.append(exc)
ts = [threading.Thread(target=use) for _ in range(4)]
[t.start() for t in ts]
[t.join() for t in ts]
print("errors", len(errors))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.strip() == "errors 0", out.stdout + out.stderr


@pytest.mark.parametrize("n", [2, 3])
def test_many_failed_calls_keep_the_slots_in_step(n):
    def body(comm):
        fails = 0
        for i in range(20):
            spec = [np.zeros(2), 5, MPI.DOUBLE] if (i + comm.rank) % n == 0 else np.zeros(2)
            if outcome(lambda: comm.Bcast(spec, root=i % comm.size)) != "ok":
                fails += 1
        return fails, comm.allreduce(comm.rank)

    results = run(n, body)
    assert all(total == n * (n - 1) // 2 for _, total in results)
