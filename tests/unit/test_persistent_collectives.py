"""MPI-4 persistent collectives (``*_init`` -> Prequest) on in-process worlds of 3 and 5."""
from __future__ import annotations

import numpy as np
import pytest

from minimpi import MPI
from minimpi.errors import CountError, OpError, RootError
from minimpi.runtime.inproc import run_threads


@pytest.mark.parametrize("size", [3, 5])
def test_restarts_read_the_buffers_anew(size):
    """One request started three times: each start sees the send buffer's current values."""
    def prog(comm):
        r, p = comm.rank, comm.size
        send = np.zeros(4)
        recv = np.zeros(4)
        req = comm.Allreduce_init(send, recv, op=MPI.SUM)
        sums = []
        for k in range(3):
            send[:] = r + 10 * k
            req.Start()
            req.Wait()
            sums.append(recv.copy())
        active_after_wait = bool(req)
        req.Free()
        return sums, active_after_wait, req == MPI.REQUEST_NULL, p

    for sums, alive, null_after_free, p in run_threads(size, prog):
        base = p * (p - 1) / 2
        for k, got in enumerate(sums):
            np.testing.assert_array_equal(got, np.full(4, base + 10 * k * p))
        assert alive and null_after_free


@pytest.mark.parametrize("size", [3, 5])
def test_rooted_and_vector_forms(size):
    def prog(comm):
        r, p = comm.rank, comm.size
        root = p - 1
        out = {}
        buf = np.full(3, r, dtype=np.int32)
        req = comm.Bcast_init(buf, root=root)
        req.Start(); req.Wait(); req.Free()
        out["bcast"] = buf.copy()

        gathered = np.zeros((p, 2), dtype=np.int64) if r == root else None
        req = comm.Gather_init(np.array([r, -r], dtype=np.int64), gathered, root)
        req.Start(); req.Wait()
        out["gather"] = None if gathered is None else gathered.copy()

        counts = [k + 1 for k in range(p)]
        displs = list(np.cumsum([0] + counts[:-1]))
        vbuf = np.zeros(sum(counts))
        req = comm.Allgatherv_init(np.full(r + 1, float(r)), [vbuf, (counts, displs), MPI.DOUBLE])
        req.Start(); req.Wait()
        out["allgatherv"] = vbuf.copy()

        red = np.zeros(2)
        req = comm.Reduce_init(np.array([1.0, r]), red if r == 0 else None, op=MPI.MAX, root=0)
        req.Start(); req.Wait()
        out["reduce"] = red.copy()

        scan = np.zeros(1, dtype=np.int64)
        req = comm.Scan_init(np.array([r + 1]), scan)
        req.Start(); req.Wait()
        out["scan"] = int(scan[0])

        a2a = np.zeros(p, dtype=np.int32)
        req = comm.Alltoall_init(np.arange(p, dtype=np.int32) + 100 * r, a2a)
        req.Start(); req.Wait()
        out["alltoall"] = a2a.copy()

        rsb = np.zeros(1)
        req = comm.Reduce_scatter_block_init(np.ones(p), rsb)
        req.Start(); req.Wait()
        out["rsb"] = float(rsb[0])

        b = comm.Barrier_init()
        MPI.Prequest.Startall([b])
        MPI.Request.Waitall([b])
        return out

    res = run_threads(size, prog)
    p = size
    for r, out in enumerate(res):
        np.testing.assert_array_equal(out["bcast"], np.full(3, p - 1))
        assert out["scan"] == (r + 1) * (r + 2) // 2
        np.testing.assert_array_equal(out["alltoall"], 100 * np.arange(p) + r)
        assert out["rsb"] == p
        expected = np.concatenate([np.full(k + 1, float(k)) for k in range(p)])
        np.testing.assert_array_equal(out["allgatherv"], expected)
    np.testing.assert_array_equal(res[p - 1]["gather"], [[k, -k] for k in range(p)])
    np.testing.assert_array_equal(res[0]["reduce"], [1.0, p - 1])


def test_neighbour_persistent_on_a_ring():
    def prog(comm):
        cart = comm.Create_cart([comm.size], periods=[True])
        r = cart.rank
        recv = np.zeros(2, dtype=np.int64)
        req = cart.Neighbor_allgather_init(np.array([r], dtype=np.int64), recv)
        got = []
        for _ in range(2):
            req.Start(); req.Wait()
            got.append(recv.copy())
        return got

    p = 5
    for r, got in enumerate(run_threads(p, prog)):
        for g in got:
            np.testing.assert_array_equal(g, [(r - 1) % p, (r + 1) % p])


def test_bad_arguments_raise_at_init():
    def prog(comm):
        errors = []
        for make in (lambda: comm.Bcast_init(np.zeros(1), root=comm.size),
                     lambda: comm.Allreduce_init(np.zeros(1), np.zeros(1), op=None),
                     lambda: comm.Reduce_scatter_init(np.zeros(3), np.zeros(1), [1, 1]),
                     lambda: comm.Barrier_init(info="hints")):
            try:
                make()
            except Exception as exc:   # noqa: BLE001 - the kind is asserted below
                errors.append(type(exc))
        # a started request cannot be started again before it completes
        req = comm.Barrier_init()
        req.Start()
        try:
            req.Start()
        except MPI.Exception:
            errors.append("restart refused")
        req.Wait()
        return errors

    for errors in run_threads(3, prog):
        assert errors[0] is RootError and errors[1] is OpError and errors[2] is CountError
        assert issubclass(errors[3], MPI.Exception) and errors[4] == "restart refused"


# -- the compiled op: prepared at *_init, only started by Start ---------------------------
def test_start_runs_the_compiled_call_without_parsing_or_looking_it_up():
    """After ``Allreduce_init`` a ``Start`` neither parses a buffer, checks the op again,
    prepares the call nor looks up its compiled call: it starts what init built."""
    import sys

    def prog(comm):
        send, recv = np.zeros(2), np.zeros(2)
        req = comm.Allreduce_init(send, recv)
        called = set()

        def profile(frame, event, arg):
            if event == "call":
                called.add(frame.f_code.co_name)
        results = []
        for k in range(3):
            send[:] = comm.rank + k
            if k == 2:
                sys.setprofile(profile)
            req.Start()
            req.Wait()
            sys.setprofile(None)
            results.append(recv.copy())
        return results, called

    p = 3
    for results, called in run_threads(p, prog):
        for k, got in enumerate(results):
            np.testing.assert_array_equal(got, np.full(2, p * (p - 1) / 2 + p * k))
        assert not called & {"parse_buffer", "prepare_allreduce", "compiled_call",
                             "check_reduction", "check_op"}, sorted(called)
        assert "begin" in called                   # (the profile saw the Start)


def _reference(p, k):
    """Rank r's input of start k, in the test below: 3 values."""
    return [np.array([r + 1, 10 * k, r * k], dtype=np.float64) for r in range(p)]


@pytest.mark.parametrize("size", [3, 5])
def test_every_start_reads_the_buffers_as_they_are_then(size):
    """Calls whose data moves before the algorithm runs (an IN_PLACE input taken from
    recvbuf, the root's own block, this rank's Allgather block, a non-root's read-only
    Reduce input) see the buffers' contents of each Start, not those of the first."""
    def prog(comm):
        r, p = comm.rank, comm.size
        root = p - 1
        got = {name: [] for name in ("allreduce_inplace", "reduce", "reduce_root_inplace",
                                     "scan_inplace", "exscan", "allgather", "gather",
                                     "alltoall_inplace", "rsb_inplace", "reduce_scatter",
                                     "bcast", "scatter")}
        b = {}
        b["ar"] = np.zeros(3)
        b["red_send"], b["red_recv"] = np.zeros(3), np.zeros(3)
        b["redip"] = np.zeros(3)
        b["scan"] = np.zeros(3)
        b["ex_send"], b["ex_recv"] = np.zeros(3), np.full(3, -7.0)
        b["ag_send"], b["ag_recv"] = np.zeros(3), np.zeros(3 * p)
        b["g_send"], b["g_recv"] = np.zeros(3), np.zeros(3 * p)
        b["a2a"] = np.zeros(p)
        b["rsb"] = np.zeros(2 * p)
        b["rs_send"], b["rs_recv"] = np.zeros(sum(range(1, p + 1))), np.zeros(r + 1)
        b["bc"] = np.zeros(3)
        b["sc_send"], b["sc_recv"] = np.zeros(2 * p), np.zeros(2)
        reqs = {
            "allreduce_inplace": comm.Allreduce_init(MPI.IN_PLACE, b["ar"]),
            "reduce": comm.Reduce_init(b["red_send"], b["red_recv"], root=root),
            "reduce_root_inplace": comm.Reduce_init(
                MPI.IN_PLACE if r == root else b["redip"], b["redip"], root=root),
            "scan_inplace": comm.Scan_init(MPI.IN_PLACE, b["scan"]),
            "exscan": comm.Exscan_init(b["ex_send"], b["ex_recv"]),
            "allgather": comm.Allgather_init(b["ag_send"], b["ag_recv"]),
            "gather": comm.Gather_init(b["g_send"], b["g_recv"], root=root),
            "alltoall_inplace": comm.Alltoall_init(MPI.IN_PLACE, b["a2a"]),
            "rsb_inplace": comm.Reduce_scatter_block_init(MPI.IN_PLACE, b["rsb"]),
            "reduce_scatter": comm.Reduce_scatter_init(b["rs_send"], b["rs_recv"],
                                                       list(range(1, p + 1))),
            "bcast": comm.Bcast_init(b["bc"], root=root),
            "scatter": comm.Scatter_init(b["sc_send"], b["sc_recv"], root=root),
        }
        for k in range(3):
            mine = _reference(p, k)[r]
            b["ar"][:] = mine
            b["red_send"][:] = mine
            b["redip"][:] = mine
            b["scan"][:] = mine
            b["ex_send"][:] = mine
            b["ag_send"][:] = mine
            b["g_send"][:] = mine
            b["a2a"][:] = [100 * r + 10 * k + j for j in range(p)]
            b["rsb"][:] = [r + k + j for j in range(2 * p)]
            b["rs_send"][:] = np.arange(b["rs_send"].size) * (k + 1) + r
            b["bc"][:] = mine
            b["sc_send"][:] = np.arange(2 * p) + 100 * k + r
            for req in reqs.values():
                req.Start()
                req.Wait()
            got["allreduce_inplace"].append(b["ar"].copy())
            got["reduce"].append((b["red_recv"].copy(), b["red_send"].copy()))
            got["reduce_root_inplace"].append(b["redip"].copy())
            got["scan_inplace"].append(b["scan"].copy())
            got["exscan"].append(b["ex_recv"].copy())
            got["allgather"].append(b["ag_recv"].copy())
            got["gather"].append(b["g_recv"].copy())
            got["alltoall_inplace"].append(b["a2a"].copy())
            got["rsb_inplace"].append(b["rsb"][:2].copy())
            got["reduce_scatter"].append(b["rs_recv"].copy())
            got["bcast"].append(b["bc"].copy())
            got["scatter"].append(b["sc_recv"].copy())
        for req in reqs.values():
            req.Free()
        return got

    p = size
    root = p - 1
    counts = list(range(1, p + 1))
    offsets = np.cumsum([0] + counts)
    for r, got in enumerate(run_threads(p, prog)):
        for k in range(3):
            ref = _reference(p, k)
            total = sum(ref)
            np.testing.assert_array_equal(got["allreduce_inplace"][k], total)
            recv, send = got["reduce"][k]
            np.testing.assert_array_equal(send, ref[r])          # the input left as it was
            if r == root:
                np.testing.assert_array_equal(recv, total)
                np.testing.assert_array_equal(got["reduce_root_inplace"][k], total)
                np.testing.assert_array_equal(got["gather"][k], np.concatenate(ref))
            np.testing.assert_array_equal(got["scan_inplace"][k], sum(ref[:r + 1]))
            if r > 0:
                np.testing.assert_array_equal(got["exscan"][k], sum(ref[:r]))
            np.testing.assert_array_equal(got["allgather"][k], np.concatenate(ref))
            np.testing.assert_array_equal(got["alltoall_inplace"][k],
                                          [100 * j + 10 * k + r for j in range(p)])
            np.testing.assert_array_equal(got["rsb_inplace"][k],
                                          [sum(q + k + 2 * r + i for q in range(p))
                                           for i in range(2)])
            full = sum(np.arange(offsets[-1]) * (k + 1) + q for q in range(p))
            np.testing.assert_array_equal(got["reduce_scatter"][k],
                                          full[offsets[r]:offsets[r + 1]])
            np.testing.assert_array_equal(got["bcast"][k], ref[root])
            np.testing.assert_array_equal(got["scatter"][k],
                                          np.arange(2 * r, 2 * r + 2) + 100 * k + root)


@pytest.mark.parametrize("size", [3, 5])
def test_a_derived_datatype_is_packed_and_scattered_at_every_start(size):
    """A non-contiguous datatype's items are copied at each Start (a send's packed into a
    temporary, a receive's scattered from one): the call is prepared anew each time."""
    def prog(comm):
        r = comm.rank
        every_other = MPI.DOUBLE.Create_vector(2, 1, 2).Commit()
        send = np.zeros(3)
        total = np.full(3, -1.0)
        ar = comm.Allreduce_init([send, 1, every_other], [total, 1, every_other])
        bc_buf = np.full(3, -1.0)
        bc = comm.Bcast_init([bc_buf, 1, every_other], root=0)
        every_other.Free()               # (the requests keep what they need)
        out = []
        for k in range(3):
            send[:] = [r + k, 99, 10 * r]
            if r == 0:
                bc_buf[:] = [k, -1, 2 * k]
            ar.Start(); ar.Wait()
            bc.Start(); bc.Wait()
            out.append((total.copy(), bc_buf.copy()))
        return out

    p = size
    for r, out in enumerate(run_threads(p, prog)):
        for k, (total, bcast) in enumerate(out):
            np.testing.assert_array_equal(total, [sum(q + k for q in range(p)), -1,
                                                  sum(10 * q for q in range(p))])
            np.testing.assert_array_equal(bcast, [k, -1, 2 * k])


def test_persistent_collectives_of_an_intercommunicator_restart():
    def prog(world):
        color = 0 if world.rank < 2 else 1
        local = world.Split(color, 0)
        inter = local.Create_intercomm(0, world, 2 if color == 0 else 0, 5)
        send, recv = np.zeros(2), np.zeros(2)
        req = inter.Allreduce_init(send, recv)
        out = []
        for k in range(3):
            send[:] = [world.rank, k]
            req.Start(); req.Wait()
            out.append(recv.copy())
        req.Free()
        inter.Free()
        local.Free()
        return out

    for r, out in enumerate(run_threads(5, prog)):
        remote = [2, 3, 4] if r < 2 else [0, 1]
        for k, got in enumerate(out):
            np.testing.assert_array_equal(got, [sum(remote), k * len(remote)])


def test_reduce_scatter_init_without_counts_gathers_them_at_each_start():
    """Reduce_scatter_init(recvcounts=None): the counts are each rank's recvbuf count,
    gathered from every member - a collective of its own, made at each Start."""
    def prog(comm):
        r, p = comm.rank, comm.size
        send = np.zeros(sum(range(1, p + 1)))
        recv = np.zeros(r + 1)
        req = comm.Reduce_scatter_init(send, recv)
        out = []
        for k in range(2):
            send[:] = np.arange(send.size) + k
            req.Start(); req.Wait()
            out.append(recv.copy())
        return out

    p = 3
    offsets = np.cumsum([0] + list(range(1, p + 1)))
    for r, out in enumerate(run_threads(p, prog)):
        for k, got in enumerate(out):
            np.testing.assert_array_equal(got, p * (np.arange(offsets[r], offsets[r + 1]) + k))
