"""Non-contiguous datatypes in point-to-point and collective calls (3 in-process ranks)."""
from __future__ import annotations

import numpy as np
import pytest

from minimpi import MPI
from minimpi.runtime.inproc import run_threads

N = 6


def column(n: int = N, stride: int = N):
    return MPI.DOUBLE.Create_vector(n, 1, stride).Commit()


def numbered(rank: int, shape=(N, N)) -> np.ndarray:
    return np.arange(np.prod(shape), dtype=np.float64).reshape(shape) + 1000 * rank


def test_p2p_vector_and_subarray_columns():
    def prog(comm):
        r = comm.rank
        u = numbered(r)
        col = column()
        sub = MPI.DOUBLE.Create_subarray([N, N], [N, 1], [0, N - 1]).Commit()
        got = {}
        if r == 0:
            comm.Send([u[0, 2:], 1, col], 1, tag=1)          # column 2 through a row view
            comm.Send([u, 1, sub], 1, tag=2)
            comm.Send([u, sub], 2, tag=3)                    # count inferred: one extent
        elif r == 1:
            v = np.zeros((N, N))
            st = MPI.Status()
            comm.Recv([v[0, 3:], 1, col], 0, tag=1, status=st)
            got["counts"] = (st.Get_count(col), st.Get_elements(col), st.Get_count(MPI.DOUBLE))
            comm.Recv([v, 1, sub], 0, tag=2)
            got["v"] = v
        else:
            v = np.zeros((N, N))
            req = comm.Irecv([v, 1, sub], 0, tag=3)
            req.Wait()
            got["v"] = v
        return got

    res = run_threads(3, prog)
    u0 = numbered(0)
    v = res[1]["v"]
    assert res[1]["counts"] == (1, N, N)
    np.testing.assert_array_equal(v[:, 3], u0[:, 2])
    np.testing.assert_array_equal(v[:, N - 1], u0[:, N - 1])
    assert not v[:, [0, 1, 2, 4]].any()
    np.testing.assert_array_equal(res[2]["v"][:, N - 1], u0[:, N - 1])
    assert not res[2]["v"][:, :N - 1].any()


def test_sendrecv_halo_exchange_and_replace():
    def prog(comm):
        r, p = comm.rank, comm.size
        u = numbered(r)
        u[:, 0] = u[:, -1] = 0
        col = column()
        right, left = (r + 1) % p, (r - 1) % p
        # send my column N-2 to the right, receive my left neighbour's into column 0
        comm.Sendrecv([u[0, N - 2:], 1, col], right, 5, [u, 1, col], left, 5)
        w = numbered(r)
        comm.Sendrecv_replace([w[0, 1:], 1, col], right, 6, left, 6)
        return u, w

    res = run_threads(3, prog)
    for r in range(3):
        u, w = res[r]
        left = numbered((r - 1) % 3)
        np.testing.assert_array_equal(u[:, 0], left[:, N - 2])
        np.testing.assert_array_equal(w[:, 1], left[:, 1])
        np.testing.assert_array_equal(np.delete(w, 1, axis=1), np.delete(numbered(r), 1, axis=1))


def test_partial_receive_only_touches_received_items():
    def prog(comm):
        if comm.rank == 0:
            comm.Send(np.array([1.0, 2.0, 3.0]), 1)
            return None
        v = np.full((4, 4), -1.0)
        st = MPI.Status()
        comm.Recv([v, 1, MPI.DOUBLE.Create_vector(4, 1, 4).Commit()], 0, status=st)
        return v, st.Get_elements(MPI.DOUBLE)

    v, n = run_threads(2, prog)[1]
    assert n == 3
    np.testing.assert_array_equal(v[:, 0], [1, 2, 3, -1])
    assert (v[:, 1:] == -1).all()


def test_collectives_with_resized_column_types():
    def prog(comm):
        r, p = comm.rank, comm.size
        # Scatterv / Gatherv: root's (N, p) matrix, one column per rank
        coltype = MPI.DOUBLE.Create_vector(N, 1, p).Create_resized(0, 8).Commit()
        whole = np.arange(N * p, dtype=np.float64).reshape(N, p) if r == 0 else None
        mine = np.zeros(N)
        comm.Scatterv([whole, [1] * p, list(range(p)), coltype] if r == 0 else None, mine, root=0)
        back = np.zeros((N, p)) if r == 0 else None
        comm.Gatherv(mine * 2, [back, [1] * p, list(range(p)), coltype] if r == 0 else None,
                     root=0)
        allcols = np.zeros((N, p))
        comm.Allgather([np.full(N, r + 0.5), MPI.DOUBLE], [allcols, 1, coltype])
        b = numbered(r)
        comm.Bcast([b[0, 1:], 1, column()], root=2)
        total = np.zeros((N, N))
        comm.Allreduce([numbered(r), 1, column()], [total, 1, column()], op=MPI.SUM)
        return mine, back, allcols, b, total

    res = run_threads(3, prog)
    whole = np.arange(18.0).reshape(N, 3)
    for r in range(3):
        mine, back, allcols, b, total = res[r]
        np.testing.assert_array_equal(mine, whole[:, r])
        np.testing.assert_array_equal(allcols, np.tile([0.5, 1.5, 2.5], (N, 1)))
        np.testing.assert_array_equal(b[:, 1], numbered(2)[:, 1])
        np.testing.assert_array_equal(np.delete(b, 1, axis=1), np.delete(numbered(r), 1, axis=1))
        np.testing.assert_array_equal(total[:, 0], sum(numbered(k)[:, 0] for k in range(3)))
        assert not total[:, 1:].any()
    np.testing.assert_array_equal(res[0][1], whole * 2)


def test_alltoall_and_alltoallw_with_subarrays():
    def prog(comm):
        r, p = comm.rank, comm.size
        # Alltoall: column j of my (N, p) grid goes to rank j
        coltype = MPI.DOUBLE.Create_vector(N, 1, p).Create_resized(0, 8).Commit()
        src = numbered(r, (N, p))
        dst = np.zeros((N, p))
        comm.Alltoall([src, 1, coltype], [dst, 1, coltype])
        # Alltoallw: block row j of my (p*2, 3) grid as a subarray to rank j
        rows = np.arange(p * 2 * 3, dtype=np.float64).reshape(p * 2, 3) + 100 * r
        subs = [MPI.DOUBLE.Create_subarray([p * 2, 3], [2, 3], [2 * j, 0]).Commit()
                for j in range(p)]
        out = np.zeros((p * 2, 3))
        comm.Alltoallw([rows, [1] * p, [0] * p, subs], [out, [1] * p, [0] * p, subs])
        return dst, out

    res = run_threads(3, prog)
    for r in range(3):
        dst, out = res[r]
        for j in range(3):
            np.testing.assert_array_equal(dst[:, j], numbered(j, (N, 3))[:, r])
            sender = np.arange(18.0).reshape(6, 3) + 100 * j
            np.testing.assert_array_equal(out[2 * j:2 * j + 2], sender[2 * r:2 * r + 2])


def test_reduction_of_mixed_struct_is_refused():
    def prog(comm):
        s = MPI.Datatype.Create_struct([1, 1], [0, 8], [MPI.DOUBLE, MPI.INT]).Commit()
        buf = np.zeros(16, np.uint8)
        comm.Allreduce([buf, 1, s], [np.zeros(16, np.uint8), 1, s], op=MPI.SUM)

    with pytest.raises(Exception, match="mixes basic types"):
        run_threads(3, prog)


def test_struct_of_absolute_addresses_with_bottom():
    def prog(comm):
        a = np.arange(4.0) + 10 * comm.rank
        b = np.arange(3, dtype=np.intc) + 100 * comm.rank
        t = MPI.Datatype.Create_struct([4, 3], [MPI.Get_address(a), MPI.Get_address(b)],
                                       [MPI.DOUBLE, MPI.INT]).Commit()
        if comm.rank == 0:
            comm.Send([MPI.BOTTOM, 1, t], 1)
        else:
            comm.Recv([MPI.BOTTOM, 1, t], 0)
        return a.tolist(), b.tolist()

    assert run_threads(2, prog)[1] == ([0.0, 1.0, 2.0, 3.0], [0, 1, 2])


def test_numpy_float64_and_complex128_scalars_are_buffers():
    def prog(comm):
        if comm.rank == 0:
            comm.Send(np.float64(2.5), 1, tag=1)
            comm.Send(np.complex128(1 - 2j), 1, tag=2)
            return None
        x, z = np.zeros(1), np.zeros(1, np.complex128)
        comm.Recv(x, 0, tag=1)
        comm.Recv(z, 0, tag=2)
        total = np.zeros(1)
        return x[0], z[0], total

    assert run_threads(2, prog)[1][:2] == (2.5, 1 - 2j)
    sums = run_threads(3, lambda comm: comm.allreduce(0) or _allreduce_scalar(comm))
    assert sums == [6.0, 6.0, 6.0]


def _allreduce_scalar(comm):
    out = np.zeros(1)
    comm.Allreduce(np.float64(comm.rank + 1.0), out, op=MPI.SUM)
    return float(out[0])


def test_in_place_collectives_read_the_current_items_of_derived_types():
    def prog(comm):
        r, p = comm.rank, comm.size
        col = column()
        u = numbered(r)
        comm.Allreduce(MPI.IN_PLACE, [u, 1, col], op=MPI.SUM)       # column 0 summed
        coltype = MPI.DOUBLE.Create_vector(N, 1, p).Create_resized(0, 8).Commit()
        g = np.zeros((N, p))
        g[:, r] = r + 0.25
        comm.Allgather(MPI.IN_PLACE, [g, 1, coltype])
        a = numbered(r, (N, p))
        comm.Alltoall(MPI.IN_PLACE, [a, 1, coltype])
        root_grid = np.zeros((N, p))
        if r == 0:
            root_grid[:, 0] = 42.0
        comm.Gather(MPI.IN_PLACE if r == 0 else np.full(N, r + 0.5),
                    [root_grid, 1, coltype] if r == 0 else None, root=0)
        return u, g, a, root_grid

    res = run_threads(3, prog)
    for r in range(3):
        u, g, a, root_grid = res[r]
        np.testing.assert_array_equal(u[:, 0], sum(numbered(k)[:, 0] for k in range(3)))
        np.testing.assert_array_equal(np.delete(u, 0, axis=1), np.delete(numbered(r), 0, axis=1))
        np.testing.assert_array_equal(g, np.tile([0.25, 1.25, 2.25], (N, 1)))
        for j in range(3):
            np.testing.assert_array_equal(a[:, j], numbered(j, (N, 3))[:, r])
    np.testing.assert_array_equal(res[0][3], np.column_stack([np.full(N, 42.0),
                                                              np.full(N, 1.5), np.full(N, 2.5)]))
