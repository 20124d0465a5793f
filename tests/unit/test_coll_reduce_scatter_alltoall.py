"""Reduce_scatter(_block) and Alltoall(v)/alltoall: every algorithm, size and kind of data.

All on the in-process transport (run_threads); results are compared with numpy/Python.
"""
from __future__ import annotations

import numpy as np
import pytest

from minimpi.coll.blocks import running_sum
from minimpi.coll.registry import algorithms, choose
from minimpi.constants import IN_PLACE
from minimpi.data import ops
from minimpi.data.datatypes import DOUBLE, INT, INT64_T
from minimpi.data.ops import Op
from minimpi.errors import (
    AlgorithmError,
    CollectiveMismatchError,
    CountError,
    OpError,
    TruncationError,
)
from minimpi.runtime.inproc import RankFailed, run_threads

SIZES = [1, 2, 3, 4, 5, 7, 8]
RS_ALGS = ["binomial", "ring", "recursive_halving", "pairwise"]
RS_ORDERED = ["binomial", "pairwise"]
A2A_ALGS = ["ring", "scattered", "bruck"]
A2AV_ALGS = ["ring", "scattered"]


def test_registered():
    assert list(algorithms("reduce_scatter")) == RS_ALGS
    assert list(algorithms("alltoall")) == A2A_ALGS
    assert list(algorithms("alltoallv")) == A2AV_ALGS


# --------------------------------------------------------------------- reduce_scatter
def vector(rank, total, kind):
    return (np.arange(total) * (rank + 1) + 3 * rank).astype(kind)


def _counts(p):
    return [(2 * r + 1) % 4 for r in range(p)]   # zeros from p >= 2


@pytest.mark.parametrize("alg", RS_ALGS)
@pytest.mark.parametrize("p", SIZES)
@pytest.mark.parametrize("kind", ["int32", "float64"])
def test_reduce_scatter(alg, p, kind):
    counts = _counts(p)
    offs = running_sum(counts)
    total = offs[-1]

    def body(comm):
        r = comm.rank
        a = np.full(counts[r] + 2, -1, dtype=kind)        # larger than needed: tail untouched
        comm.Reduce_scatter(vector(r, total, kind), a, counts, op=ops.SUM, algorithm=alg)
        b = np.full(3, -1, dtype=kind)
        comm.Reduce_scatter_block(vector(r, 3 * p, kind), b, algorithm=alg)
        c = vector(r, total, kind)
        comm.Reduce_scatter(IN_PLACE, c, counts, op=ops.MAX, algorithm=alg)
        d = np.full(counts[r], -1, dtype=kind)
        comm.Reduce_scatter([vector(r, total, kind), kind], [d, kind], algorithm=alg)  # counts gathered
        e = vector(r, 2 * p, kind)
        comm.Reduce_scatter_block(IN_PLACE, e, op=ops.MIN, algorithm=alg)
        return a, b, c, d, e

    full = sum(vector(q, total, kind) for q in range(p)).astype(kind)
    fmax = vector(p - 1, total, kind)
    full3 = sum(vector(q, 3 * p, kind) for q in range(p)).astype(kind)
    fmin = vector(0, 2 * p, kind)
    for r, (a, b, c, d, e) in enumerate(run_threads(p, body)):
        np.testing.assert_array_equal(a[:counts[r]], full[offs[r]:offs[r + 1]])
        assert np.all(a[counts[r]:] == -1)
        np.testing.assert_array_equal(b, full3[3 * r:3 * r + 3])
        np.testing.assert_array_equal(c[:counts[r]], fmax[offs[r]:offs[r + 1]])
        np.testing.assert_array_equal(d, full[offs[r]:offs[r + 1]])
        np.testing.assert_array_equal(e[:2], fmin[2 * r:2 * r + 2])


def _matmul(inbuf, inoutbuf, datatype=None):
    b = inoutbuf.reshape(-1, 2, 2)
    b[...] = np.asarray(inbuf).reshape(-1, 2, 2) @ b


MATMUL = Op.Create(_matmul, commute=False)
MAT2x2 = INT64_T.Create_contiguous(4).Commit()


def _mats(rank, count):
    return np.random.default_rng(rank).integers(-2, 3, size=(count, 2, 2)).astype(np.int64)


@pytest.mark.parametrize("alg", RS_ORDERED + [None])
@pytest.mark.parametrize("p", [2, 3, 4, 5, 7, 8])
def test_reduce_scatter_non_commutative(alg, p):
    counts = [1 + r % 2 for r in range(p)]     # matrices per rank
    offs = running_sum(counts)

    def body(comm):
        out = np.zeros(4 * counts[comm.rank], np.int64)
        comm.Reduce_scatter([_mats(comm.rank, offs[-1]).reshape(-1), MAT2x2], [out, MAT2x2],
                            counts, op=MATMUL, algorithm=alg)
        return out

    expect = _mats(0, offs[-1])
    for q in range(1, p):
        expect = expect @ _mats(q, offs[-1])
    for r, out in enumerate(run_threads(p, body)):
        np.testing.assert_array_equal(out.reshape(-1, 2, 2), expect[offs[r]:offs[r + 1]])


@pytest.mark.parametrize("alg", ["ring", "recursive_halving"])
def test_reduce_scatter_refuses_non_commutative(alg):
    def body(comm):
        comm.Reduce_scatter_block(np.zeros(8, np.int64), np.zeros(4, np.int64), op=MATMUL,
                                  algorithm=alg)

    with pytest.raises(RankFailed) as info:
        run_threads(2, body)
    assert isinstance(info.value.exc, AlgorithmError)
    assert f"'{alg}'" in str(info.value.exc) and "commutative" in str(info.value.exc)
    for n in (8, 1 << 24):
        assert choose("reduce_scatter", 4, n, MATMUL).name in RS_ORDERED


@pytest.mark.parametrize("alg", RS_ALGS)
def test_reduce_scatter_large_and_nonblocking(alg):
    p, n = 4, 30_000

    def body(comm):
        big = np.empty(n, np.float64)
        reqs = [comm.Ireduce_scatter_block(np.arange(n * p, dtype=np.float64), big, algorithm=alg)]
        small = [np.zeros(2, np.int32) for _ in range(3)]
        for i, s in enumerate(small):
            reqs.append(comm.Ireduce_scatter(np.full(2 * p, comm.rank + i, np.int32), s,
                                             [2] * p, algorithm=alg))
        for r in reversed(reqs):
            r.Wait()
        return big, small

    for r, (big, small) in enumerate(run_threads(p, body)):
        np.testing.assert_array_equal(big, np.arange(r * n, (r + 1) * n, dtype=np.float64) * p)
        for i, s in enumerate(small):
            assert np.all(s == p * (p - 1) // 2 + p * i)


def test_reduce_scatter_errors():
    def bad_total(comm):
        comm.Reduce_scatter(np.zeros(5), np.zeros(2), [2, 2])

    with pytest.raises(RankFailed) as info:
        run_threads(2, bad_total)
    assert isinstance(info.value.exc, CountError)
    assert "Reduce_scatter" in str(info.value.exc) and "rank 0" in str(info.value.exc)

    def bad_op(comm):
        comm.Reduce_scatter_block(np.zeros(4), np.zeros(2), op=ops.BOR)

    with pytest.raises(RankFailed) as info:
        run_threads(2, bad_op)
    assert isinstance(info.value.exc, OpError) and "BOR" in str(info.value.exc)

    def in_place_no_counts(comm):
        comm.Reduce_scatter(IN_PLACE, np.zeros(4))

    with pytest.raises(RankFailed) as info:
        run_threads(2, in_place_no_counts)
    assert isinstance(info.value.exc, CountError)


def test_no_lowercase_reduce_scatter_objects():
    """mpi4py has no lowercase reduce_scatter; every algorithm is buffer-only."""
    assert all(not a.objects for a in algorithms("reduce_scatter").values())


# --------------------------------------------------------------------------- alltoall
def a2a_block(src, dst, n, kind):
    if kind == "object":
        return f"{src}->{dst}" * (1 + (src + dst) % 3)
    return (np.arange(n) + 100 * src + dst).astype(kind)


@pytest.mark.parametrize("alg", A2A_ALGS)
@pytest.mark.parametrize("p", SIZES)
@pytest.mark.parametrize("kind", ["int32", "float64", "object"])
def test_alltoall(alg, p, kind):
    n = 3

    def body(comm):
        r = comm.rank
        if kind == "object":
            return comm.alltoall([a2a_block(r, d, n, kind) for d in range(p)], algorithm=alg)
        send = np.concatenate([a2a_block(r, d, n, kind) for d in range(p)])
        recv = np.full(n * p, -1, dtype=kind)
        comm.Alltoall(send, recv, algorithm=alg)
        inplace = send.copy()
        comm.Alltoall(IN_PLACE, inplace, algorithm=alg)
        return recv, inplace

    for r, got in enumerate(run_threads(p, body)):
        if kind == "object":
            assert got == [a2a_block(s, r, n, kind) for s in range(p)]
        else:
            expect = np.concatenate([a2a_block(s, r, n, kind) for s in range(p)])
            np.testing.assert_array_equal(got[0], expect)
            np.testing.assert_array_equal(got[1], expect)


def _a2av_count(src, dst):
    return (src + 2 * dst) % 4      # zeros included


@pytest.mark.parametrize("alg", A2AV_ALGS + [None])
@pytest.mark.parametrize("p", SIZES)
@pytest.mark.parametrize("kind", ["int32", "float64"])
def test_alltoallv_uneven(alg, p, kind):
    def body(comm):
        r = comm.rank
        scounts = [_a2av_count(r, d) for d in range(p)]
        rcounts = [_a2av_count(s, r) for s in range(p)]
        # send blocks in reverse order with gaps; receive with default displacements
        sdispls, pos = [0] * p, 1
        send = np.full(sum(scounts) + p + 1, -7, dtype=kind)
        for d in reversed(range(p)):
            sdispls[d] = pos
            send[pos:pos + scounts[d]] = a2a_block(r, d, scounts[d], kind)
            pos += scounts[d] + 1
        recv = np.full(sum(rcounts), -1, dtype=kind)
        comm.Alltoallv([send, (scounts, sdispls), kind], [recv, (rcounts, None), kind],
                       algorithm=alg)
        return recv

    for r, recv in enumerate(run_threads(p, body)):
        expect = [a2a_block(s, r, _a2av_count(s, r), kind) for s in range(p)]
        np.testing.assert_array_equal(recv, np.concatenate(expect))


@pytest.mark.parametrize("alg", A2AV_ALGS)
@pytest.mark.parametrize("p", [3, 4])
def test_alltoallv_in_place_symmetric(alg, p):
    def count(a, b):
        return (a + b) % 3                     # symmetric, zeros included

    def body(comm):
        r = comm.rank
        counts = [count(r, d) for d in range(p)]
        buf = np.concatenate([np.full(counts[d], 10 * r + d, np.int32) for d in range(p)])
        comm.Alltoallv(IN_PLACE, [buf, counts, INT], algorithm=alg)
        return buf

    for r, buf in enumerate(run_threads(p, body)):
        expect = np.concatenate([np.full(count(s, r), 10 * s + r, np.int32) for s in range(p)])
        np.testing.assert_array_equal(buf, expect)


def test_alltoallv_refuses_bruck():
    def body(comm):
        comm.Alltoallv(np.zeros(comm.size), np.zeros(comm.size), algorithm="bruck")

    with pytest.raises(RankFailed) as info:
        run_threads(2, body)
    assert isinstance(info.value.exc, AlgorithmError) and "bruck" in str(info.value.exc)


@pytest.mark.parametrize("alg", A2A_ALGS)
def test_ialltoall_several_outstanding_and_large(alg):
    p, n = 4, 20_000

    def body(comm):
        r = comm.rank
        big_send = np.repeat(np.arange(p, dtype=np.float64) + 10 * r, n)
        big = np.zeros(n * p)
        reqs = [comm.Ialltoall([big_send, DOUBLE], [big, n, DOUBLE], algorithm=alg)]
        smalls = [np.zeros(p, np.int32) for _ in range(3)]
        for i, s in enumerate(smalls):
            reqs.append(comm.Ialltoall(np.arange(p, dtype=np.int32) + 100 * r + i, s, algorithm=alg))
        for q in reversed(reqs):
            q.Wait()
        return big, smalls

    for r, (big, smalls) in enumerate(run_threads(p, body)):
        np.testing.assert_array_equal(big, np.repeat(np.arange(p) * 10.0 + r, n))
        for i, s in enumerate(smalls):
            np.testing.assert_array_equal(s, np.arange(p) * 100 + r + i)


def test_ialltoallv_outstanding():
    p = 3

    def body(comm):
        reqs, outs = [], []
        for i in range(3):
            counts = [i + 1] * p
            out = np.zeros((i + 1) * p)
            reqs.append(comm.Ialltoallv([np.full((i + 1) * p, comm.rank + 0.5), counts],
                                        [out, counts]))
            outs.append(out)
        for q in reqs:
            q.Wait()
        return outs

    for outs in run_threads(p, body):
        for i, o in enumerate(outs):
            np.testing.assert_array_equal(o, np.repeat(np.arange(p) + 0.5, i + 1))


def test_alltoall_errors():
    with pytest.raises(RankFailed) as info:
        run_threads(2, lambda comm: comm.alltoall([1, 2, 3]))
    assert isinstance(info.value.exc, CountError) and "alltoall" in str(info.value.exc)

    with pytest.raises(RankFailed) as info:
        run_threads(2, lambda comm: comm.Alltoall(np.zeros(4), np.zeros(6)))
    assert isinstance(info.value.exc, CountError)

    def mismatch(comm):
        # rank 0 sends 2 items to rank 1, rank 1 expects 3
        if comm.rank == 0:
            comm.Alltoallv([np.zeros(3), [1, 2]], [np.zeros(2), [1, 1]], algorithm="ring")
        else:
            comm.Alltoallv([np.zeros(2), [1, 1]], [np.zeros(4), [3, 1]], algorithm="ring")

    with pytest.raises(RankFailed) as info:
        run_threads(2, mismatch, timeout=10)
    assert isinstance(info.value.exc, (CollectiveMismatchError, TruncationError))
