"""Allgather(v)/allgather: every algorithm, size and kind of data, uneven v-counts with
zeros, IN_PLACE, large buffers, Iallgather(v) and errors.

All on the in-process transport (run_threads); results are compared with numpy/Python.
"""
from __future__ import annotations

import numpy as np
import pytest
from coll_helpers import KINDS, SIZES, algs, contribution, everyone, rank_error

from minimpi.coll.blocks import running_sum
from minimpi.coll.registry import algorithms
from minimpi.constants import IN_PLACE
from minimpi.data.datatypes import DOUBLE
from minimpi.errors import AlgorithmError, CountError
from minimpi.runtime.inproc import run_threads

ALLGATHER = algs("allgather")


def test_registered():
    assert {"binomial", "ring", "recursive_doubling", "bruck"} <= set(algorithms("allgather"))


@pytest.mark.parametrize("alg", ALLGATHER)
@pytest.mark.parametrize("p", SIZES, ids="p{}".format)
@pytest.mark.parametrize("kind", KINDS)
def test_allgather(alg, p, kind):
    n = 3
    if kind == "object" and not algorithms("allgather")[alg].objects:
        exc = rank_error(p, lambda comm: comm.allgather(1, algorithm=alg), AlgorithmError)
        assert "moves buffers only" in str(exc)
        return

    def body(comm):
        if kind == "object":
            return comm.allgather(contribution(comm.rank, n, kind), algorithm=alg)
        recv = np.full(n * p, -1, dtype=kind)
        comm.Allgather(contribution(comm.rank, n, kind), recv, algorithm=alg)
        return recv

    for got in run_threads(p, body):
        if kind == "object":
            assert got == everyone(p, n, kind)
        else:
            np.testing.assert_array_equal(got, everyone(p, n, kind))


def _vcounts(p):
    return [(3 * r + 1) % 4 for r in range(p)]   # includes zeros from p >= 4


@pytest.mark.parametrize("alg", ALLGATHER)
@pytest.mark.parametrize("p", SIZES, ids="p{}".format)
@pytest.mark.parametrize("kind", ["int32", "float64"])
def test_allgatherv_uneven(alg, p, kind):
    counts = _vcounts(p)
    displs = running_sum(counts)[:-1]
    # a second layout: blocks in reverse rank order with gaps between them
    rdispls, pos = [0] * p, 0
    for r in reversed(range(p)):
        rdispls[r] = pos
        pos += counts[r] + 1

    def body(comm):
        mine = contribution(comm.rank, counts[comm.rank], kind)
        a = np.full(sum(counts), -1, dtype=kind)
        comm.Allgatherv(mine, [a, (counts, displs), kind], algorithm=alg)
        b = np.full(pos, -1, dtype=kind)
        comm.Allgatherv(mine, [b, counts, rdispls, kind], algorithm=alg)
        c = np.full(sum(counts), -1, dtype=kind)
        c[displs[comm.rank]:displs[comm.rank] + counts[comm.rank]] = mine
        comm.Allgatherv(IN_PLACE, [c, (counts, None), kind], algorithm=alg)
        return a, b, c

    for a, b, c in run_threads(p, body):
        expect = np.concatenate([contribution(r, counts[r], kind) for r in range(p)])
        np.testing.assert_array_equal(a, expect)
        np.testing.assert_array_equal(c, expect)
        for r in range(p):
            np.testing.assert_array_equal(b[rdispls[r]:rdispls[r] + counts[r]],
                                          contribution(r, counts[r], kind))
            if counts[r] or r == 0:
                gap = rdispls[r] + counts[r]
                assert b[gap] == -1   # the gap after each block is untouched


@pytest.mark.parametrize("alg", ALLGATHER)
def test_allgather_forms_in_place_and_large(alg):
    p, n = 5, 20_000

    def body(comm):
        r = np.zeros(2 * p)
        comm.Allgather([np.full(2, comm.rank, np.float64), DOUBLE], [r, 2, DOUBLE], algorithm=alg)
        big = np.zeros(n * p, np.int32)
        big[comm.rank * n:(comm.rank + 1) * n] = comm.rank + 1
        comm.Allgather(IN_PLACE, big, algorithm=alg)
        return r, big

    for r, big in run_threads(p, body):
        np.testing.assert_array_equal(r, np.repeat(np.arange(p, dtype=np.float64), 2))
        np.testing.assert_array_equal(big, np.repeat(np.arange(1, p + 1), n))


@pytest.mark.parametrize("alg", ALLGATHER)
def test_iallgather_several_outstanding(alg):
    p = 4

    def body(comm):
        outs = [np.zeros(p * (i + 1)) for i in range(3)]
        reqs = [comm.Iallgather(np.full(i + 1, comm.rank * 10.0 + i), outs[i], algorithm=alg)
                for i in range(3)]
        counts = list(range(p))
        v = np.zeros(sum(counts))
        reqs.append(comm.Iallgatherv(np.full(comm.rank, float(comm.rank)), [v, counts],
                                     algorithm=alg))
        for r in reversed(reqs):
            r.Wait()
        return outs, v

    for outs, v in run_threads(p, body):
        for i, o in enumerate(outs):
            np.testing.assert_array_equal(o, np.repeat(np.arange(p) * 10.0 + i, i + 1))
        np.testing.assert_array_equal(v, np.repeat(np.arange(p, dtype=float), range(p)))


def test_allgather_errors():
    def bad_send(comm):
        comm.Allgather(np.zeros(3), np.zeros(2 * comm.size))

    assert "Allgather" in str(rank_error(2, bad_send, CountError))

    def uneven(comm):
        comm.Allgather(np.zeros(2), np.zeros(5))

    assert "Allgatherv" in str(rank_error(2, uneven, CountError))
