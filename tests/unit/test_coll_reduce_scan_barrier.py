"""Reduce/reduce, Scan/scan, Exscan/exscan and Barrier: every algorithm, size, root and type,
non-commutative ops in rank order, IN_PLACE, segmentation, I-variants, refusals.

All on the in-process transport (run_threads), compared with plain numpy/Python.
"""
from __future__ import annotations

import functools
import threading

import numpy as np
import pytest

from minimpi.coll.registry import algorithms
from minimpi.constants import IN_PLACE
from minimpi.data import ops
from minimpi.data.datatypes import DOUBLE
from minimpi.errors import AlgorithmError, OpError
from minimpi.runtime.inproc import RankFailed, run_threads

SIZES = [1, 2, 3, 4, 5, 7, 8]
REDUCE_ALGS = ["binomial", "ring", "rabenseifner"]
SCAN_ALGS = ["binomial", "ring"]
BARRIER_ALGS = ["binomial", "ring", "dissemination"]
KINDS = ["int32", "float64", "object"]


def roots(p):
    return sorted({0, p // 2, p - 1})


CASES = [(p, root) for p in SIZES for root in roots(p)]


def contribution(rank, kind, n=7):
    if kind == "object":
        return rank * 3 + 1
    return (np.arange(n) * (rank + 1) + rank).astype(kind)


def matmul(inbuf, inoutbuf, datatype):
    """inoutbuf = inbuf @ inoutbuf on 2x2 matrices (inbuf: the lower ranks)."""
    a = np.asarray(inbuf).reshape(-1, 2, 2)
    b = np.asarray(inoutbuf).reshape(-1, 2, 2)
    b[...] = a @ b


MATMUL = ops.Op.Create(matmul, commute=False)
CONCAT = ops.Op.Create(lambda a, b, dt: a + b, commute=False)   # objects: string concatenation


def matrices(rank, count=3):
    rng = np.random.default_rng(rank)
    return rng.integers(0, 3, size=(count, 2, 2)).astype("f8").reshape(-1)


def matmul_ref(p, count=3):
    out = matrices(0, count).reshape(-1, 2, 2)
    for r in range(1, p):
        out = out @ matrices(r, count).reshape(-1, 2, 2)
    return out.reshape(-1)


def test_registered():
    assert set(algorithms("reduce")) == set(REDUCE_ALGS)
    assert set(algorithms("scan")) == set(algorithms("exscan")) == set(SCAN_ALGS)
    assert set(algorithms("barrier")) == set(BARRIER_ALGS)
    red = algorithms("reduce")
    assert red["ring"].commutative_only and not red["ring"].objects
    assert red["rabenseifner"].commutative_only and not red["rabenseifner"].objects
    assert not red["binomial"].commutative_only and red["binomial"].objects


# ------------------------------------------------------------------------------ reduce
# ring and Rabenseifner move buffers only (their refusal of objects is tested below)
@pytest.mark.parametrize("alg,kind", [(a, k) for a in REDUCE_ALGS for k in KINDS
                                      if k != "object" or a == "binomial"])
@pytest.mark.parametrize("p,root", CASES)
def test_reduce_sum(alg, kind, p, root):

    def body(comm):
        mine = contribution(comm.rank, kind)
        if kind == "object":
            return comm.reduce(mine, op=ops.SUM, root=root, algorithm=alg)
        recv = np.full(mine.size, -1, dtype=kind) if comm.rank == root else None
        before = mine.copy()
        comm.Reduce(mine, recv, op=ops.SUM, root=root, algorithm=alg)
        assert np.array_equal(mine, before), "sendbuf must not change"
        return recv

    want = functools.reduce(lambda a, b: a + b, [contribution(r, kind) for r in range(p)])
    for r, got in enumerate(run_threads(p, body)):
        if r != root:
            assert got is None
        elif kind == "object":
            assert got == want
        else:
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("alg", REDUCE_ALGS)
@pytest.mark.parametrize("p,root", [(3, 1), (5, 4), (8, 3)])
@pytest.mark.parametrize("n", [0, 1, 2, 13])
def test_reduce_chunking_edge_sizes(alg, p, root, n):
    """Fewer elements than ranks, empty buffers: ring/Rabenseifner chunks may be empty."""
    def body(comm):
        recv = np.zeros(n, "i4")
        comm.Reduce(np.arange(n, dtype="i4") + comm.rank, recv, op=ops.MAX, root=root, algorithm=alg)
        return recv

    np.testing.assert_array_equal(run_threads(p, body)[root], np.arange(n) + p - 1)


@pytest.mark.parametrize("p,root", CASES)
def test_reduce_non_commutative_buffers(p, root):
    def body(comm):
        recv = np.zeros(12) if comm.rank == root else None
        comm.Reduce(matrices(comm.rank), recv, op=MATMUL, root=root, algorithm="binomial")
        return recv

    np.testing.assert_array_equal(run_threads(p, body)[root], matmul_ref(p))


@pytest.mark.parametrize("p,root", CASES)
def test_reduce_non_commutative_objects(p, root):
    got = run_threads(p, lambda c: c.reduce(str(c.rank), op=CONCAT, root=root))   # auto
    assert got[root] == "".join(map(str, range(p)))


@pytest.mark.parametrize("p", [1, 4, 7])
def test_reduce_auto_never_picks_a_reordering_algorithm(p):
    def body(comm):
        recv = np.zeros(12)
        comm.Reduce(matrices(comm.rank), recv, op=MATMUL, root=p - 1)
        return recv

    np.testing.assert_array_equal(run_threads(p, body)[p - 1], matmul_ref(p))


@pytest.mark.parametrize("alg", ["ring", "rabenseifner"])
def test_reduce_refusals(alg):
    with pytest.raises(RankFailed) as info:
        run_threads(2, lambda c: c.Reduce(np.zeros(4), np.zeros(4), op=MATMUL, algorithm=alg))
    assert isinstance(info.value.exc, AlgorithmError)
    assert "commutative" in str(info.value.exc) and alg in str(info.value.exc)
    with pytest.raises(RankFailed) as info:
        run_threads(2, lambda c: c.reduce(1, algorithm=alg))
    assert isinstance(info.value.exc, AlgorithmError)
    assert "buffers only" in str(info.value.exc)


@pytest.mark.parametrize("alg", REDUCE_ALGS)
@pytest.mark.parametrize("p,root", [(1, 0), (4, 0), (5, 2)])
def test_reduce_in_place(alg, p, root):
    def body(comm):
        mine = np.arange(6.0) * (comm.rank + 1)
        if comm.rank == root:
            comm.Reduce(IN_PLACE, mine, op=ops.SUM, root=root, algorithm=alg)
            return mine
        comm.Reduce(mine, None, op=ops.SUM, root=root, algorithm=alg)

    np.testing.assert_array_equal(run_threads(p, body)[root], np.arange(6.0) * p * (p + 1) / 2)


@pytest.mark.parametrize("alg", REDUCE_ALGS)
def test_reduce_large_and_buffer_specs(alg):
    p, n = 5, 10_000

    def body(comm):
        recv = np.zeros(n)
        comm.Reduce([np.ones(n) * comm.rank, DOUBLE], [recv, n, DOUBLE], op=ops.SUM, root=3,
                    algorithm=alg)
        return recv

    np.testing.assert_array_equal(run_threads(p, body)[3], np.full(n, 10.0))


@pytest.mark.parametrize("alg", REDUCE_ALGS)
def test_ireduce(alg):
    def body(comm):
        recv = np.zeros(3, "i4")
        req = comm.Ireduce(np.array([1, 2, 3], "i4"), recv, op=ops.PROD, root=1, algorithm=alg)
        oreq = comm.ireduce(comm.rank, op=ops.MAX, root=1, algorithm="binomial")
        req.wait()
        return recv.tolist(), oreq.wait()

    got = run_threads(4, body)
    assert got[1] == ([1, 16, 81], 3)


def test_reduce_op_errors_before_sending():
    with pytest.raises(RankFailed) as info:
        run_threads(3, lambda c: c.Reduce(np.zeros(2, "f8"), np.zeros(2, "f8"), op=ops.BAND),
                    timeout=5)
    assert isinstance(info.value.exc, OpError)
    assert "BAND" in str(info.value.exc) and "Reduce" in str(info.value.exc)
    with pytest.raises(RankFailed) as info:
        run_threads(2, lambda c: c.Reduce(np.zeros(2), np.zeros(2), op="sum"), timeout=5)
    assert "rank 0" in str(info.value.exc)


# -------------------------------------------------------------------------- scan/exscan
def _scan_ref(p, kind, exclusive):
    vals = [contribution(r, kind) for r in range(p)]
    out = []
    for r in range(p):
        part = vals[:r] if exclusive else vals[:r + 1]
        out.append(functools.reduce(lambda a, b: a + b, part) if part else None)
    return out


@pytest.mark.parametrize("alg", SCAN_ALGS)
@pytest.mark.parametrize("p", SIZES)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("exclusive", [False, True])
def test_scan_sum(alg, p, kind, exclusive):
    def body(comm):
        mine = contribution(comm.rank, kind)
        if kind == "object":
            fn = comm.exscan if exclusive else comm.scan
            return fn(mine, op=ops.SUM, algorithm=alg)
        recv = np.full(mine.size, -5, dtype=kind)
        (comm.Exscan if exclusive else comm.Scan)(mine, recv, op=ops.SUM, algorithm=alg)
        return recv

    for r, (got, want) in enumerate(zip(run_threads(p, body), _scan_ref(p, kind, exclusive))):
        if kind == "object":
            assert got == want
        elif want is None:                       # Exscan on rank 0: recvbuf untouched
            np.testing.assert_array_equal(got, np.full(7, -5))
        else:
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("alg", SCAN_ALGS)
@pytest.mark.parametrize("p", SIZES)
@pytest.mark.parametrize("exclusive", [False, True])
def test_scan_non_commutative(alg, p, exclusive):
    def body(comm):
        recv = np.full(12, -1.0)
        (comm.Exscan if exclusive else comm.Scan)(matrices(comm.rank), recv, op=MATMUL,
                                                   algorithm=alg)
        fn = comm.exscan if exclusive else comm.scan
        return recv, fn(str(comm.rank), op=CONCAT, algorithm=alg)

    for r, (buf, text) in enumerate(run_threads(p, body)):
        upto = r if exclusive else r + 1
        if upto == 0:
            assert text is None
            np.testing.assert_array_equal(buf, np.full(12, -1.0))
        else:
            assert text == "".join(map(str, range(upto)))
            np.testing.assert_array_equal(buf, matmul_ref(upto))


@pytest.mark.parametrize("alg", SCAN_ALGS)
@pytest.mark.parametrize("exclusive", [False, True])
def test_scan_in_place(alg, exclusive):
    p = 5

    def body(comm):
        buf = np.arange(4) + comm.rank * 10
        (comm.Exscan if exclusive else comm.Scan)(IN_PLACE, buf, op=ops.SUM, algorithm=alg)
        return buf

    for r, got in enumerate(run_threads(p, body)):
        ranks = range(r) if exclusive else range(r + 1)
        want = np.arange(4) + r * 10 if exclusive and r == 0 else \
            sum(np.arange(4) + q * 10 for q in ranks)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("alg", SCAN_ALGS)
@pytest.mark.parametrize("exclusive", [False, True])
def test_scan_segmented(alg, exclusive, monkeypatch):
    monkeypatch.setenv("MINIMPI_COST_SEGMENT", "64")       # 1000 doubles: 125 segments
    p, n = 4, 1000

    def body(comm):
        recv = np.zeros(n)
        (comm.Exscan if exclusive else comm.Scan)(np.arange(n) * (comm.rank + 1.0), recv,
                                                   op=ops.SUM, algorithm=alg)
        return recv

    for r, got in enumerate(run_threads(p, body)):
        k = sum(range(1, r + 1)) if exclusive else sum(range(1, r + 2))
        if exclusive and r == 0:
            np.testing.assert_array_equal(got, np.zeros(n))
        else:
            np.testing.assert_array_equal(got, np.arange(n) * float(k))


@pytest.mark.parametrize("alg", SCAN_ALGS)
def test_iscan_iexscan(alg):
    def body(comm):
        a, b = np.zeros(2, "i4"), np.zeros(2, "i4")
        reqs = [comm.Iscan(np.full(2, comm.rank + 1, "i4"), a, algorithm=alg),
                comm.Iexscan(np.full(2, comm.rank + 1, "i4"), b, algorithm=alg),
                comm.iscan(comm.rank, algorithm=alg), comm.iexscan(comm.rank, algorithm=alg)]
        res = [req.wait() for req in reqs]
        return a.tolist(), b.tolist(), res[2], res[3]

    assert run_threads(3, body) == [([1, 1], [0, 0], 0, None), ([3, 3], [1, 1], 1, 0),
                                    ([6, 6], [3, 3], 3, 1)]


def test_scan_numpy_objects():
    got = run_threads(3, lambda c: c.scan(np.full(2, c.rank + 1), algorithm="ring"))
    assert [g.tolist() for g in got] == [[1, 1], [3, 3], [6, 6]]


# ----------------------------------------------------------------------------- barrier
@pytest.mark.parametrize("alg", BARRIER_ALGS)
@pytest.mark.parametrize("p", SIZES)
def test_barrier(alg, p):
    arrived = []
    lock = threading.Lock()

    def body(comm):
        for i in range(3):
            with lock:
                arrived.append((i, comm.rank))
            (comm.Barrier if i % 2 else comm.barrier)(algorithm=alg)
            with lock:   # nobody leaves round i before everyone entered it
                assert sum(1 for j, _ in arrived if j == i) == p
        req = comm.Ibarrier(algorithm=alg)
        req.wait()
        return True

    assert run_threads(p, body) == [True] * p


def test_barrier_env_choice(monkeypatch):
    monkeypatch.setenv("MINIMPI_BARRIER", "nonexistent")
    with pytest.raises(RankFailed) as info:
        run_threads(2, lambda c: c.Barrier())
    assert "MINIMPI_BARRIER" in str(info.value.exc)
