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
