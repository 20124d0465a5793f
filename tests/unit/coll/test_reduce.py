"""Reduce/reduce: every algorithm, size, root and type, non-commutative ops in rank order,
chunking edge sizes, IN_PLACE, Ireduce, refusals and op errors.

All on the in-process transport (run_threads), compared with plain numpy/Python.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest
from coll_helpers import CONCAT, KINDS, MATMUL, ROOTED, algs, rank_error, rooted, summand

from minimpi.coll.registry import algorithms
from minimpi.constants import IN_PLACE
from minimpi.data import ops
from minimpi.data.datatypes import DOUBLE
from minimpi.errors import AlgorithmError, OpError
from minimpi.runtime.inproc import run_threads

REDUCE = algs("reduce")
OBJECTS = algs("reduce", objects=True)
ORDERED = algs("reduce", commutative_only=False)      # keep the ranks' order


def test_registered():
    red = algorithms("reduce")
    assert {"binomial", "ring", "rabenseifner"} <= set(red)
    assert red["ring"].commutative_only and not red["ring"].objects
    assert red["rabenseifner"].commutative_only and not red["rabenseifner"].objects
    assert not red["binomial"].commutative_only and red["binomial"].objects


def _matrices(rank):
    return MATMUL.operand(rank, 3, "f8").reshape(-1)


# algorithms that move buffers only refuse objects (tested below)
@pytest.mark.parametrize("alg,kind", [pytest.param(a, k, id=f"{a}-{k}") for a in REDUCE
                                      for k in KINDS if k != "object" or a in OBJECTS])
@pytest.mark.parametrize("p,root", ROOTED)
def test_reduce_sum(alg, kind, p, root):

    def body(comm):
        mine = summand(comm.rank, kind)
        if kind == "object":
            return comm.reduce(mine, op=ops.SUM, root=root, algorithm=alg)
        recv = np.full(mine.size, -1, dtype=kind) if comm.rank == root else None
        before = mine.copy()
        comm.Reduce(mine, recv, op=ops.SUM, root=root, algorithm=alg)
        assert np.array_equal(mine, before), "sendbuf must not change"
        return recv

    want = functools.reduce(lambda a, b: a + b, [summand(r, kind) for r in range(p)])
    for r, got in enumerate(run_threads(p, body)):
        if r != root:
            assert got is None
        elif kind == "object":
            assert got == want
        else:
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("alg", REDUCE)
@pytest.mark.parametrize("p,root", rooted([(3, 1), (5, 4), (8, 3)]))
@pytest.mark.parametrize("n", [0, 1, 2, 13], ids="n{}".format)
def test_reduce_chunking_edge_sizes(alg, p, root, n):
    """Fewer elements than ranks, empty buffers: ring/Rabenseifner chunks may be empty."""
    def body(comm):
        recv = np.zeros(n, "i4")
        comm.Reduce(np.arange(n, dtype="i4") + comm.rank, recv, op=ops.MAX, root=root,
                    algorithm=alg)
        return recv

    np.testing.assert_array_equal(run_threads(p, body)[root], np.arange(n) + p - 1)


@pytest.mark.parametrize("alg", ORDERED)
@pytest.mark.parametrize("p,root", ROOTED)
def test_reduce_non_commutative_buffers(alg, p, root):
    def body(comm):
        recv = np.zeros(12) if comm.rank == root else None
        comm.Reduce(_matrices(comm.rank), recv, op=MATMUL.op, root=root, algorithm=alg)
        return recv

    np.testing.assert_array_equal(run_threads(p, body)[root],
                                  MATMUL.product(p, 3, "f8").reshape(-1))


@pytest.mark.parametrize("p,root", ROOTED)
def test_reduce_non_commutative_objects(p, root):
    got = run_threads(p, lambda c: c.reduce(str(c.rank), op=CONCAT, root=root))   # auto
    assert got[root] == "".join(map(str, range(p)))


@pytest.mark.parametrize("p", [1, 4, 7], ids="p{}".format)
def test_reduce_auto_never_picks_a_reordering_algorithm(p):
    def body(comm):
        recv = np.zeros(12)
        comm.Reduce(_matrices(comm.rank), recv, op=MATMUL.op, root=p - 1)
        return recv

    np.testing.assert_array_equal(run_threads(p, body)[p - 1],
                                  MATMUL.product(p, 3, "f8").reshape(-1))


@pytest.mark.parametrize("alg", algs("reduce", commutative_only=True))
def test_reduce_refuses_non_commutative(alg):
    def body(comm):
        comm.Reduce(np.zeros(4), np.zeros(4), op=MATMUL.op, algorithm=alg)

    exc = rank_error(2, body, AlgorithmError)
    assert "commutative" in str(exc) and alg in str(exc)


@pytest.mark.parametrize("alg", algs("reduce", objects=False))
def test_reduce_refuses_objects(alg):
    exc = rank_error(2, lambda c: c.reduce(1, algorithm=alg), AlgorithmError)
    assert "buffers only" in str(exc) and alg in str(exc)


@pytest.mark.parametrize("alg", REDUCE)
@pytest.mark.parametrize("p,root", rooted([(1, 0), (4, 0), (5, 2)]))
def test_reduce_in_place(alg, p, root):
    def body(comm):
        mine = np.arange(6.0) * (comm.rank + 1)
        if comm.rank == root:
            comm.Reduce(IN_PLACE, mine, op=ops.SUM, root=root, algorithm=alg)
            return mine
        comm.Reduce(mine, None, op=ops.SUM, root=root, algorithm=alg)

    np.testing.assert_array_equal(run_threads(p, body)[root], np.arange(6.0) * p * (p + 1) / 2)


@pytest.mark.parametrize("alg", REDUCE)
def test_reduce_large_and_buffer_specs(alg):
    p, n = 5, 10_000

    def body(comm):
        recv = np.zeros(n)
        comm.Reduce([np.ones(n) * comm.rank, DOUBLE], [recv, n, DOUBLE], op=ops.SUM, root=3,
                    algorithm=alg)
        return recv

    np.testing.assert_array_equal(run_threads(p, body)[3], np.full(n, 10.0))


@pytest.mark.parametrize("alg", REDUCE)
def test_ireduce(alg):
    objects_alg = alg if alg in OBJECTS else None

    def body(comm):
        recv = np.zeros(3, "i4")
        req = comm.Ireduce(np.array([1, 2, 3], "i4"), recv, op=ops.PROD, root=1, algorithm=alg)
        oreq = comm.ireduce(comm.rank, op=ops.MAX, root=1, algorithm=objects_alg)
        req.wait()
        return recv.tolist(), oreq.wait()

    got = run_threads(4, body)
    assert got[1] == ([1, 16, 81], 3)


def test_reduce_op_errors_before_sending():
    exc = rank_error(3, lambda c: c.Reduce(np.zeros(2, "f8"), np.zeros(2, "f8"), op=ops.BAND),
                     OpError, timeout=5)
    assert "BAND" in str(exc) and "Reduce" in str(exc)
    exc = rank_error(2, lambda c: c.Reduce(np.zeros(2), np.zeros(2), op="sum"), OpError,
                     timeout=5)
    assert "rank 0" in str(exc)
