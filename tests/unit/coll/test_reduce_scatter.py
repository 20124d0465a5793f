"""Reduce_scatter(_block): every algorithm, size and type, uneven counts with zeros,
IN_PLACE, non-commutative ops in rank order, large buffers, the I-variants, refusals and
errors.

All on the in-process transport (run_threads); results are compared with numpy.
"""
from __future__ import annotations

import numpy as np
import pytest
from coll_helpers import AUTO, MATMUL, SIZES, algs, contribution, rank_error

from minimpi.coll.blocks import running_sum
from minimpi.coll.registry import algorithms, choose
from minimpi.constants import IN_PLACE
from minimpi.data import ops
from minimpi.errors import AlgorithmError, CountError, OpError
from minimpi.runtime.inproc import run_threads

RS = algs("reduce_scatter")
ORDERED = algs("reduce_scatter", commutative_only=False)     # keep the ranks' order


def test_registered():
    table = algorithms("reduce_scatter")
    assert {"binomial", "ring", "recursive_halving", "pairwise"} <= set(table)
    assert table["ring"].commutative_only and table["recursive_halving"].commutative_only
    assert not table["binomial"].commutative_only and not table["pairwise"].commutative_only


def _counts(p):
    return [(2 * r + 1) % 4 for r in range(p)]   # zeros from p >= 2


@pytest.mark.parametrize("alg", RS)
@pytest.mark.parametrize("p", SIZES, ids="p{}".format)
@pytest.mark.parametrize("kind", ["int32", "float64"])
def test_reduce_scatter(alg, p, kind):
    counts = _counts(p)
    offs = running_sum(counts)
    total = offs[-1]

    def body(comm):
        r = comm.rank
        a = np.full(counts[r] + 2, -1, dtype=kind)        # larger than needed: tail untouched
        comm.Reduce_scatter(contribution(r, total, kind), a, counts, op=ops.SUM, algorithm=alg)
        b = np.full(3, -1, dtype=kind)
        comm.Reduce_scatter_block(contribution(r, 3 * p, kind), b, algorithm=alg)
        c = contribution(r, total, kind)
        comm.Reduce_scatter(IN_PLACE, c, counts, op=ops.MAX, algorithm=alg)
        d = np.full(counts[r], -1, dtype=kind)
        comm.Reduce_scatter([contribution(r, total, kind), kind], [d, kind],   # counts gathered
                            algorithm=alg)
        e = contribution(r, 2 * p, kind)
        comm.Reduce_scatter_block(IN_PLACE, e, op=ops.MIN, algorithm=alg)
        return a, b, c, d, e

    full = sum(contribution(q, total, kind) for q in range(p)).astype(kind)
    fmax = contribution(p - 1, total, kind)
    full3 = sum(contribution(q, 3 * p, kind) for q in range(p)).astype(kind)
    fmin = contribution(0, 2 * p, kind)
    for r, (a, b, c, d, e) in enumerate(run_threads(p, body)):
        np.testing.assert_array_equal(a[:counts[r]], full[offs[r]:offs[r + 1]])
        assert np.all(a[counts[r]:] == -1)
        np.testing.assert_array_equal(b, full3[3 * r:3 * r + 3])
        np.testing.assert_array_equal(c[:counts[r]], fmax[offs[r]:offs[r + 1]])
        np.testing.assert_array_equal(d, full[offs[r]:offs[r + 1]])
        np.testing.assert_array_equal(e[:2], fmin[2 * r:2 * r + 2])


@pytest.mark.parametrize("alg", ORDERED + [AUTO])
@pytest.mark.parametrize("p", [2, 3, 4, 5, 7, 8], ids="p{}".format)
def test_reduce_scatter_non_commutative(alg, p):
    counts = [1 + r % 2 for r in range(p)]     # matrices per rank
    offs = running_sum(counts)

    def body(comm):
        out = np.zeros(4 * counts[comm.rank], np.int64)
        mine = MATMUL.operand(comm.rank, offs[-1]).reshape(-1)
        comm.Reduce_scatter([mine, MATMUL.datatype], [out, MATMUL.datatype], counts,
                            op=MATMUL.op, algorithm=alg)
        return out

    expect = MATMUL.product(p, offs[-1])
    for r, out in enumerate(run_threads(p, body)):
        np.testing.assert_array_equal(out.reshape(-1, 2, 2), expect[offs[r]:offs[r + 1]])


@pytest.mark.parametrize("alg", algs("reduce_scatter", commutative_only=True))
def test_reduce_scatter_refuses_non_commutative(alg):
    def body(comm):
        comm.Reduce_scatter_block(np.zeros(8, np.int64), np.zeros(4, np.int64), op=MATMUL.op,
                                  algorithm=alg)

    exc = rank_error(2, body, AlgorithmError)
    assert f"'{alg}'" in str(exc) and "commutative" in str(exc)
    for n in (8, 1 << 24):
        assert choose("reduce_scatter", 4, n, MATMUL.op).name in ORDERED


@pytest.mark.parametrize("alg", RS)
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

    exc = rank_error(2, bad_total, CountError)
    assert "Reduce_scatter" in str(exc) and "rank 0" in str(exc)

    def bad_op(comm):
        comm.Reduce_scatter_block(np.zeros(4), np.zeros(2), op=ops.BOR)

    assert "BOR" in str(rank_error(2, bad_op, OpError))

    def in_place_no_counts(comm):
        comm.Reduce_scatter(IN_PLACE, np.zeros(4))

    rank_error(2, in_place_no_counts, CountError)


def test_no_lowercase_reduce_scatter_objects():
    """mpi4py has no lowercase reduce_scatter; every algorithm is buffer-only."""
    assert all(not a.objects for a in algorithms("reduce_scatter").values())
