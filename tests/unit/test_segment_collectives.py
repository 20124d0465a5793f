"""Collectives that meet in one shared segment (minimpi/coll/segment.py) and their fused
form (minimpi/coll/fused.py), over the real shared-memory transport between threads:
results, interleaving with the general path, calls in flight, mismatches, and the cost of a
repeated small Allreduce in Python calls."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from minimpi import MPI
from minimpi.data import ops
from minimpi.errors import CollectiveMismatchError
from minimpi.p2p.progress import ProgressPolicy
from minimpi.runtime.inproc import RankFailed, run_threads

#: Python calls one repeated 8 B Allreduce at p = 2 may cost (issue: at most 25; measured 14)
ALLREDUCE_CALLS = 25


def spinning(comm) -> None:
    comm.endpoint.engine.set_progress_policy(ProgressPolicy("yield", max_spin=0.05))


@pytest.mark.parametrize("p", [2, 3, 5])
def test_auto_meets_in_the_segment_and_fused_and_general_calls_interleave(p):
    """Auto picks the segment for small calls on one host; the fused form (same signature
    again), the general form (another size, an Iallreduce, a forced tree algorithm) and a
    Barrier/Bcast in between all give the right results in order."""
    def body(comm):
        spinning(comm)
        r = comm.rank
        out = []
        for i in range(12):
            a = np.full(3, r + i, dtype=np.float64)
            b = np.empty(3)
            comm.Allreduce(a, b)                                   # fused after the first
            out.append(b[0])
            big = np.full(3000, float(r))                           # 24 KB: two pieces
            big_out = np.empty(3000)
            comm.Allreduce(big, big_out, op=ops.MAX)
            assert (big_out == p - 1).all()
            req_out = np.empty(2, dtype=np.int64)
            req = comm.Iallreduce(np.full(2, r, dtype=np.int64), req_out)
            c = np.full(4, i if r == i % p else -1, dtype=np.int32)
            comm.Bcast(c, root=i % p)
            assert (c == i).all()
            req.Wait()
            assert (req_out == sum(range(p))).all()
            comm.Barrier()
            tree = np.empty(3)
            comm.Allreduce(a, tree, algorithm="recursive_doubling")
            assert tree[0] == out[-1]
        fused = comm._plan.fused
        return out, sorted({k[0] for k in fused})

    for out, fused in run_threads(p, body, timeout=120, transport="shm"):
        assert out == [sum(r + i for r in range(p)) for i in range(12)]
        assert fused == ["allreduce", "barrier", "bcast"]


def test_a_mismatch_in_the_segment_is_an_error_not_a_hang():
    def body(comm):
        spinning(comm)
        if comm.rank == 0:
            comm.Allreduce(np.ones(2), np.empty(2))
        else:
            comm.Bcast(np.zeros(2), root=1)

    with pytest.raises(RankFailed) as info:
        run_threads(2, body, timeout=60, transport="shm")
    assert isinstance(info.value.__cause__, CollectiveMismatchError)
    assert "collective mismatch" in str(info.value.__cause__)


def test_a_type_mismatch_of_equal_size_is_caught_on_the_fused_path_too():
    """float64 on one rank, int64 on the other, after the fused form exists: the signatures
    in the slots differ (the element type is part of them)."""
    def body(comm):
        spinning(comm)
        for _ in range(3):
            comm.Allreduce(np.ones(1), np.empty(1))
        if comm.rank == 0:
            comm.Allreduce(np.ones(1), np.empty(1))
        else:
            comm.Allreduce(np.ones(1, dtype=np.int64), np.empty(1, dtype=np.int64))

    with pytest.raises(RankFailed) as info:
        run_threads(2, body, timeout=60, transport="shm")
    assert isinstance(info.value.__cause__, CollectiveMismatchError)


@pytest.mark.parametrize("p", [3, 5])
def test_the_communicators_of_one_split_meet_in_segments_of_their_own(p):
    """Split gives its communicators one context: each group must still get its own segment
    (a shared one mixed the groups' sums)."""
    def body(comm):
        spinning(comm)
        sub = comm.Split(color=comm.rank % 2, key=comm.rank)
        sums = []
        for i in range(6):
            out = np.empty(1, dtype=np.int64)
            sub.Allreduce(np.array([comm.rank + i]), out)
            sums.append(int(out[0]))
        return comm.rank % 2, sums

    for color, sums in run_threads(p, body, timeout=60, transport="shm"):
        mine = [r for r in range(p) if r % 2 == color]
        assert sums == [sum(mine) + i * len(mine) for i in range(6)]


def test_dup_and_free_in_a_loop_each_communicator_meets_in_its_own_segment():
    """Dup, Allreduce, Free, again, with a different number of calls each time: a new
    communicator never meets in a freed one's memory (whose call numbers would let it read
    early), and a freed one's segment is let go."""
    def body(comm):
        spinning(comm)
        sums = []
        for i in range(4):
            dup = comm.Dup()
            out = np.empty(1, dtype=np.int64)
            for j in range(3 + i):                      # a different count each time
                dup.Allreduce(np.array([comm.rank * 10 + i + j]), out)
            sums.append(int(out[0]))
            dup.Free()
        return sums

    for sums in run_threads(3, body, timeout=60, transport="shm"):
        assert sums == [30 + 3 * (i + 2 + i) for i in range(4)]


def test_set_info_keeps_the_call_numbers_of_the_segment():
    def body(comm):
        spinning(comm)
        out = np.empty(1)
        got = []
        for i in range(6):
            if i == 3:
                info = MPI.Info.Create()
                info.Set("minimpi_cost_alpha", "2e-6")
                comm.Set_info(info)
            comm.Allreduce(np.array([float(comm.rank + i)]), out)
            got.append(out[0])
        return got

    for got in run_threads(3, body, timeout=60, transport="shm"):
        assert got == [3.0 + 3 * i for i in range(6)]


def test_two_ranks_that_both_take_themselves_for_the_root_are_told():
    """Bcast(root=0) on rank 0, Bcast(root=1) on rank 1: each root publishes without waiting,
    so neither call can see the other - the next calls of that parity must."""
    def body(comm):
        spinning(comm)
        buf = np.full(2, float(comm.rank))
        comm.Bcast(buf, root=comm.rank)
        for _ in range(3):
            comm.Barrier()

    with pytest.raises(RankFailed) as info:
        run_threads(2, body, timeout=60, transport="shm")
    assert isinstance(info.value.__cause__, CollectiveMismatchError)
    assert "root" in str(info.value.__cause__)



class _Members:
    """Two members of one segment in this process (no transport: fences and wake-ups are
    no-ops), to stop one of them halfway through a publish."""

    class Transport:
        needs_fence = False

        def host_memory(self):
            return self

        def fence(self):
            pass

        def wake_peers(self, ranks, fenced=False):
            pass

        def release_segment(self, key):
            pass

    class Engine:
        def __init__(self):
            self.transport = _Members.Transport()

    class Endpoint:
        def __init__(self, rank, engine):
            self.size, self.rank, self.group = 2, rank, [0, 1]
            self.engine, self.context, self.name = engine, 4, "COMM_WORLD"

    class Call:
        tag, watch = 7, None

    def __init__(self):
        from minimpi.coll.segment import HostSegment, segment_bytes
        mem = memoryview(bytearray(segment_bytes(2, 64)))
        engine = self.Engine()
        self.seg = [HostSegment(self.Endpoint(r, engine), mem, "c4r0", 64) for r in (0, 1)]

    def publish(self, r, k, sig):
        self.seg[r].publish(k, sig, call=self.Call())


def test_a_member_caught_halfway_through_a_publish_is_no_mismatch():
    """A member stores its signature word before its seq: the other member's look at the
    call two back (its cross-check) must not take the new word for the old call's (it did:
    a job at n=5 ended in a false 'Reduce ... while rank 2 called Alltoall')."""
    from minimpi.coll.segment import signed_call
    reduce_sig, allgather_sig, alltoall_sig = 0x111, 0x222, 0x333
    m = _Members()
    for r in (0, 1):
        m.publish(r, 1, reduce_sig)
        m.publish(r, 2, allgather_sig)
    # member 1 is publishing call 3: its word is there, its seq still says 2
    m.seg[1].sigs[1, 1] = signed_call(3, alltoall_sig)
    m.publish(0, 3, alltoall_sig)                   # no error: call 1 agreed
    # the same look does see a real difference in call 1
    m = _Members()
    m.publish(0, 1, reduce_sig)
    m.publish(1, 1, 0x444)
    m.publish(0, 2, allgather_sig)
    with pytest.raises(CollectiveMismatchError):
        m.publish(0, 3, alltoall_sig)


def _noncommutative():
    """``a (op) b = 2·a + b`` elementwise: the order of the operands shows in the result."""
    def fn(invec, inoutvec, datatype):
        a = np.frombuffer(invec, dtype=np.float64)
        b = np.frombuffer(inoutvec, dtype=np.float64)
        b[...] = 2 * a + b
    return MPI.Op.Create(fn, commute=False)


@pytest.mark.parametrize("p", [2, 3, 5])
@pytest.mark.parametrize("n", [3, 2500])          # 2500 float64: 20 KB, two pieces
def test_gather_scatter_scan_exscan_and_reduce_scatter_in_the_segment(p, n):
    """The segment forms of the rooted and prefix collectives, forced by name, against
    numpy: every root, IN_PLACE at the root, a non-commutative op kept in rank order, and a
    v-variant (which runs the tree under the same name)."""
    def body(comm):
        spinning(comm)
        r = comm.rank
        x = np.arange(n, dtype=np.float64) + 100 * r
        op = _noncommutative()
        out = {}
        for root in range(p):
            got = np.zeros(p * n) if r == root else None
            comm.Gather(x, got, root=root, algorithm="segment")
            if r == root:
                out["gather"] = got.copy()
            mine = np.empty(n)
            send = np.concatenate([np.arange(n) + 1000 * q for q in range(p)]).astype(float) \
                if r == root else None
            comm.Scatter(send, mine, root=root, algorithm="segment")
            out.setdefault("scatter", []).append(mine.copy())
        inplace = np.zeros(p * n)
        inplace[r * n:(r + 1) * n] = x
        comm.Gather(MPI.IN_PLACE if r == 0 else x, inplace if r == 0 else None, root=0,
                    algorithm="segment")
        out["gather_in_place"] = inplace if r == 0 else None
        scan, exscan = np.zeros(n), np.full(n, -1.0)
        comm.Scan(x, scan, op=op, algorithm="segment")
        comm.Exscan(x, exscan, op=op, algorithm="segment")
        out["scan"], out["exscan"] = scan, exscan
        block = np.zeros(n)
        comm.Reduce_scatter_block(np.tile(x, p), block, op=op, algorithm="segment")
        out["reduce_scatter"] = block
        counts = [q + 1 for q in range(p)]
        v = np.zeros(counts[r])
        comm.Reduce_scatter(np.arange(sum(counts), dtype=np.float64) * (r + 1), v,
                            recvcounts=counts, op=MPI.SUM, algorithm="segment")
        out["reduce_scatter_v"] = v
        got_v = np.zeros(sum(range(1, p + 1))) if r == 0 else None
        comm.Gatherv(np.full(r + 1, float(r)), [got_v, [q + 1 for q in range(p)]] if r == 0
                     else None, root=0, algorithm="segment")
        out["gatherv"] = got_v
        op.Free()
        return out

    def fold(values):                      # left to right: ((x0 op x1) op x2)...
        acc = values[0].copy()
        for v in values[1:]:
            acc = 2 * acc + v
        return acc

    xs = [np.arange(n, dtype=np.float64) + 100 * q for q in range(p)]
    for r, out in enumerate(run_threads(p, body, timeout=120, transport="shm")):
        for root in range(p):
            if r == root:
                assert np.array_equal(out["gather"], np.concatenate(xs))
            assert np.array_equal(out["scatter"][root], np.arange(n) + 1000 * r)
        if r == 0:
            assert np.array_equal(out["gather_in_place"], np.concatenate(xs))
            assert np.array_equal(out["gatherv"], np.concatenate(
                [np.full(q + 1, float(q)) for q in range(p)]))
        assert np.array_equal(out["scan"], fold(xs[:r + 1]))
        if r > 0:
            assert np.array_equal(out["exscan"], fold(xs[:r]))
        assert np.array_equal(out["reduce_scatter"], fold(xs))
        lo = sum(range(1, r + 1))
        expected = np.arange(lo, lo + r + 1, dtype=np.float64) * sum(range(1, p + 1))
        assert np.array_equal(out["reduce_scatter_v"], expected)


#: a repeated small call of each fused collective at p = 2: its buffers, and the call
CALLS = {
    "Allreduce": (lambda: (np.ones(1), np.empty(1)),
                  lambda comm, send, recv: comm.Allreduce(send, recv, op=ops.SUM)),
    "Allgather": (lambda: (np.ones(1), np.empty(2)),
                  lambda comm, send, recv: comm.Allgather(send, recv)),
    "Alltoall": (lambda: (np.ones(2), np.empty(2)),
                 lambda comm, send, recv: comm.Alltoall(send, recv)),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_repeated_small_collective_costs_few_python_calls(name):
    """8 B from each rank, repeated: the fused form, within the issue's bound of 25 calls
    per 8 B Allreduce (Allgather and Alltoall alike)."""
    buffers, call = CALLS[name]

    def body(comm):
        spinning(comm)
        send, recv = buffers()
        for _ in range(30):
            call(comm, send, recv)
        comm.Barrier()
        count = [0]

        def profile(frame, event, arg):
            if event == "call":
                count[0] += 1

        # the peer thread keeps this one's GIL for its own calls: count ours alone, per call;
        # the median, since a call that finds the other rank late (a loaded machine) polls
        per_call = []
        for _ in range(100):
            count[0] = 0
            sys.setprofile(profile)
            try:
                call(comm, send, recv)
            finally:
                sys.setprofile(None)
            per_call.append(count[0])
        return sorted(per_call)[len(per_call) // 2]

    counts = run_threads(2, body, timeout=60, transport="shm")
    assert max(counts) <= ALLREDUCE_CALLS, counts


@pytest.mark.parametrize("p", [2, 3, 5])
def test_fused_allgather_and_alltoall_repeat_right_and_step_aside(p):
    """Repeated small Allgather and Alltoall take their fused form after the first call and
    give what the general path gives: IN_PLACE, another block size, another dtype, a forced
    algorithm and overlapping buffers (Alltoall) in between, in any order."""
    def body(comm):
        spinning(comm)
        r = comm.rank
        for i in range(10):
            send = np.arange(3, dtype=np.int64) + 10 * r + i
            for _ in range(2):                  # (the second call: the fused form)
                got = np.empty(3 * p, dtype=np.int64)
                comm.Allgather(send, got)
                assert got.tolist() == [10 * s + i + j for s in range(p) for j in range(3)]
            inplace = np.zeros((p, 2))
            inplace[r] = r + i
            comm.Allgather(MPI.IN_PLACE, inplace)
            assert (inplace == (np.arange(p) + i)[:, None]).all()
            other = np.empty(5 * p, dtype=np.float32)
            comm.Allgather(np.full(5, r, dtype=np.float32), other)
            assert (other.reshape(p, 5) == np.arange(p)[:, None]).all()
            a2a_send = (np.arange(p * 2, dtype=np.int32) + 100 * r + i).reshape(p, 2)
            for _ in range(2):
                a2a_recv = np.empty((p, 2), dtype=np.int32)
                comm.Alltoall(a2a_send, a2a_recv)
                assert a2a_recv.tolist() == [[100 * s + i + 2 * r, 100 * s + i + 2 * r + 1]
                                             for s in range(p)]
            tree = np.empty((p, 2), dtype=np.int32)
            comm.Alltoall(a2a_send, tree, algorithm="bruck")
            assert (tree == a2a_recv).all()
            same = a2a_send.copy()
            comm.Alltoall(MPI.IN_PLACE, same)
            assert (same == a2a_recv).all()
        return sorted({k[0] for k in comm._plan.fused})

    for fused in run_threads(p, body, timeout=120, transport="shm"):
        assert fused == ["allgather", "alltoall"]


def test_a_fused_allgather_against_an_alltoall_is_a_mismatch():
    def body(comm):
        spinning(comm)
        for _ in range(3):
            comm.Allgather(np.ones(2), np.empty(2 * comm.size))
        if comm.rank == 0:
            comm.Allgather(np.ones(2), np.empty(2 * comm.size))
        else:
            comm.Alltoall(np.ones(2 * comm.size), np.empty(2 * comm.size))

    with pytest.raises(RankFailed) as info:
        run_threads(2, body, timeout=60, transport="shm")
    assert isinstance(info.value.__cause__, CollectiveMismatchError)


@pytest.mark.parametrize("p", [3, 4])
def test_a_bcast_root_ahead_of_its_readers_waits_on_the_fused_path(p):
    """The root of a repeated Bcast waits for no one and runs ahead; two calls ahead, its
    area is still being read: it waits for the readers there (every value arrives, in
    order) and never leaves the call to the general path."""
    import time

    def body(comm):
        spinning(comm)
        buf = np.zeros(4)
        comm.Bcast(buf, root=0)
        comm.Bcast(buf, root=0)                   # the fused form from here on
        general = []

        def profile(frame, event, arg):
            if event == "call" and frame.f_code.co_name == "execute":
                general.append(1)
        got = []
        if comm.rank == 0:
            sys.setprofile(profile)
        for i in range(12):
            if comm.rank == 0:
                buf[:] = i
            else:
                time.sleep(0.002)                 # the readers lag behind
            comm.Bcast(buf, root=0)
            got.append(buf[0])
        sys.setprofile(None)
        return got, len(general)

    for r, (got, general) in enumerate(run_threads(p, body, timeout=120, transport="shm")):
        assert got == list(range(12))
        if r == 0:
            assert general == 0
