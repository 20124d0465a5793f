"""Collective mismatch detection on the in-process transport (minimpi.coll.mismatch).

Each test runs ranks as threads. A rank that detects a mismatch raises
``CollectiveMismatchError``; like the launcher in a real job, the helper then aborts the other
ranks (they would otherwise wait for the failed one), so every test ends quickly.
"""
from __future__ import annotations

import threading

import numpy as np

from minimpi.coll import mismatch
from minimpi.data.ops import MAX, SUM
from minimpi.errors import CollectiveMismatchError, JobAbortedError, MinimpiError, PeerLostError
from minimpi.runtime.inproc import run_threads


def run_ranks(p, body, timeout=15):
    """Results per rank: the return value, or the MinimpiError it raised."""
    comms = {}
    lock = threading.Lock()
    everyone_in = threading.Barrier(p)

    def fn(comm):
        with lock:
            comms[comm.rank] = comm
        everyone_in.wait()
        try:
            return body(comm)
        except MinimpiError as exc:
            if isinstance(exc, CollectiveMismatchError):
                for c in comms.values():   # what the launcher does: end the others
                    c._ep.engine.abort("another rank found a collective mismatch")
            return exc

    return run_threads(p, fn, timeout=timeout)


def mismatch_errors(results):
    errs = [r for r in results if isinstance(r, CollectiveMismatchError)]
    for r in results:
        if isinstance(r, MinimpiError):
            assert isinstance(r, (CollectiveMismatchError, JobAbortedError, PeerLostError)), r
    assert errs, f"no rank detected the mismatch: {results}"
    return [str(e) for e in errs]


def test_bcast_vs_reduce():
    def body(comm):
        a = np.arange(4.0)
        comm.Bcast(a, root=0)
        if comm.rank == 2:
            comm.Reduce(a, None, op=SUM, root=0)
        else:
            comm.Bcast(a, root=0)
        return "ok"

    msgs = mismatch_errors(run_ranks(4, body))
    assert ("collective mismatch: rank 2 called Reduce(root=0, op=SUM) as collective #2 on "
            "COMM_WORLD while rank 0 called Bcast(root=0)") in msgs[0]


def test_different_roots():
    def body(comm):
        a = np.zeros(5)
        comm.Bcast(a, root=1 if comm.rank == 2 else 0, algorithm="binomial")
        return a

    msgs = mismatch_errors(run_ranks(3, body))
    assert ("rank 2 called Bcast(root=1) as collective #1 on COMM_WORLD while rank 0 called "
            "Bcast(root=0)") in msgs[0]


def test_different_ops():
    def body(comm):
        x = np.full(3, comm.rank + 1.0)
        out = np.zeros(3)
        comm.Reduce(x, out, op=MAX if comm.rank == 1 else SUM, root=0)
        return out

    msgs = mismatch_errors(run_ranks(2, body))
    assert ("rank 0 called Reduce(root=0, op=SUM) as collective #1 on COMM_WORLD while rank 1 "
            "called Reduce(root=0, op=MAX)") in msgs[0]


def test_different_ops_allreduce():
    def body(comm):
        x = np.full(3, comm.rank + 1.0)
        out = np.zeros(3)
        comm.Allreduce(x, out, op=MAX if comm.rank == 3 else SUM)
        return out

    msgs = mismatch_errors(run_ranks(4, body))
    assert any("called Allreduce(op=MAX)" in m for m in msgs), msgs
    assert all("as collective #1 on COMM_WORLD" in m for m in msgs)


def test_different_sizes():
    def body(comm):
        a = np.zeros(10 if comm.rank == 0 else 20)
        comm.Bcast(a, root=0)
        return a.size

    msgs = mismatch_errors(run_ranks(2, body))
    assert ("rank 1 called Bcast(root=0) with 160 bytes per rank as collective #1 on COMM_WORLD "
            "while rank 0 called Bcast(root=0) with 80 bytes per rank") in msgs[0]


def test_objects_vs_buffers():
    def body(comm):
        if comm.rank == 0:
            comm.Bcast(np.arange(3.0), root=0)
        else:
            return comm.bcast(None, root=0)

    msgs = mismatch_errors(run_ranks(2, body))
    assert "rank 1 called bcast(root=0)" in msgs[0]
    assert "while rank 0 called Bcast(root=0) with the buffer form" in msgs[0]


def test_late_message_fails_the_next_collective():
    # both ranks think they are the root: each only sends, returns, and finds out from the
    # other's message during the next collective
    def body(comm):
        comm.Bcast(np.zeros(2), root=comm.rank)
        comm.Barrier()
        comm.Barrier()
        return "ok"

    msgs = mismatch_errors(run_ranks(2, body))
    assert any("as collective #1 on COMM_WORLD" in m for m in msgs), msgs


def test_no_garbage_delivered():
    # the mismatched Bcast's data never lands in the Reduce's buffer
    def body(comm):
        if comm.rank == 0:
            comm.Bcast(np.full(4, 99.0), root=0)
            return None
        out = np.zeros(4)
        try:
            comm.Reduce(np.ones(4), out, op=SUM, root=1)
        finally:
            assert not (out == 99.0).any()
        return out

    mismatch_errors(run_ranks(2, body))


def test_matching_programs_never_trip():
    # roots racing ahead (Bcast/Scatter roots only send), every rooted collective with every
    # root, object and buffer forms, nonblocking ones, well past the history window
    def body(comm):
        p, r = comm.size, comm.rank
        total = 0.0
        for i in range(2 * mismatch.HISTORY + 10):
            root = i % p
            a = np.full(8, float(i)) if r == root else np.zeros(8)
            comm.Bcast(a, root=root)
            assert a[0] == i
            x = comm.bcast({"i": i} if r == root else None, root=root)
            assert x == {"i": i}
            got = comm.scatter(list(range(p)) if r == root else None, root=root)
            assert got == r
            s = comm.reduce(r, op=SUM, root=root)
            if r == root:
                assert s == p * (p - 1) // 2
            total += comm.allreduce(1.0)
            req = comm.Ibcast(a, root=root)
            req.Wait()
        comm.Barrier()
        return total

    results = run_ranks(3, body, timeout=60)
    assert all(not isinstance(res, Exception) for res in results), results
    assert results == [3.0 * (2 * mismatch.HISTORY + 10)] * 3


def test_signature_fields_decode():
    sig = mismatch.signature("reduce", "binomial", 3, SUM, 80, False)
    kind, root, op, _ = mismatch.decode(sig)
    assert (mismatch.KINDS[kind - 1], root, op) == ("reduce", 3, "SUM")
    assert mismatch.describe_signature(sig) == "Reduce(root=3, op=SUM)"
    assert mismatch.describe_signature(mismatch.signature("barrier", "x", None, None, 0, False)) \
        == "Barrier()"
    big = mismatch.signature("bcast", "binomial", 40, None, 8, False)
    assert mismatch.describe_signature(big) == "Bcast(root>=14)"
    # tags stay valid non-negative 31-bit values
    for s in (sig, big, (1 << 17) - 1):
        tag = mismatch.SEQ_MASK | s << mismatch.SEQ_BITS
        assert 0 <= tag < 2 ** 31


def test_signature_is_deterministic_and_separates():
    a = mismatch.signature("allreduce", "ring", None, SUM, 4096, False)
    assert a == mismatch.signature("allreduce", "ring", None, SUM, 4096, False)
    assert a != mismatch.signature("allreduce", "ring", None, MAX, 4096, False)
    assert a != mismatch.signature("bcast", "ring", None, SUM, 4096, False)
    assert a != mismatch.signature("allreduce", "ring", 0, SUM, 4096, False)


def test_launcher_names_the_first_real_failure():
    # a rank that failed only because a peer vanished is attributed to the peer's error,
    # even when another peer that merely finished first is "lost" too
    import io

    from minimpi.launcher.coordinator import RankState
    from minimpi.launcher.job import Job, JobSpec
    from minimpi.launcher.processes import RankProcess

    from minimpi.errors import PeerLostError
    from minimpi.runtime.diagnose import failure_state, format_state

    first = failure_state(CollectiveMismatchError("collective mismatch: rank 2 called Reduce"))
    later = failure_state(PeerLostError("rank 1: recv cannot complete: world rank 2 is gone"),
                          {0: "exited", 2: "exited"})
    assert later["consequence"] and not first["consequence"] and later["lost"] == [2]
    job = Job(JobSpec(nprocs=3, program="x.py"), io.BytesIO(), io.BytesIO())
    job.coord = type("C", (), {"ranks": [RankState(r) for r in range(3)], "table_sent": True})
    job.ranks = [RankProcess(r, type("P", (), {"pid": 1})()) for r in range(3)]
    job.terminate_all = lambda sig: None
    job.coord.ranks[2].failure, job.coord.ranks[2].state_time = first, 1.0
    job.coord.ranks[1].failure, job.coord.ranks[1].lost = later, later["lost"]
    for r, rc in ((0, 0), (1, 1)):           # rank 0 finished; rank 1 failed; 2 still exiting
        job.ranks[r].returncode = rc
        job.reap_order.append(r)
        job._judge(10.0)
    assert job.failure is None               # waits for rank 2, which reported its error
    job.ranks[2].returncode = 1
    job.reap_order.append(2)
    job._judge(10.5)
    assert job.failure.rank == 2
    assert job.failure.summary == ("minimpi: rank 2 exited with code 1: CollectiveMismatchError: "
                                   "collective mismatch: rank 2 called Reduce")
    assert format_state(first).startswith("failed with CollectiveMismatchError")


def test_bookkeeping_does_not_keep_user_ops_alive():
    """The signature cache and call history keep op names, not ops: a program that creates
    a user op per call (never freeing it) must not run into mpi4py's 32-live-ops limit."""
    import gc

    from minimpi.data.ops import Op

    def body(comm):
        for i in range(40):
            op = Op.Create(lambda a, b: a + b, commute=True)
            assert comm.allreduce(i, op=op) == i * comm.size
        return True

    assert run_threads(3, body) == [True] * 3
    gc.collect()
    assert len(Op._live_user) < Op.MAX_USER_OPS
