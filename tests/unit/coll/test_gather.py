"""Gather/Gatherv/gather: every algorithm, size, root and type, uneven v-counts with zeros,
IN_PLACE at the root, segmentation, the I-variants and errors.

All on the in-process transport (run_threads); results are compared with plain numpy/Python.
"""
from __future__ import annotations

import numpy as np
import pytest
from coll_helpers import (
    KINDS,
    ROOTED,
    algs,
    contribution,
    everyone,
    for_objects,
    rank_error,
    rooted,
)

from minimpi.coll.registry import algorithms
from minimpi.constants import IN_PLACE
from minimpi.data.datatypes import DOUBLE, INT
from minimpi.errors import AlgorithmError, CollectiveMismatchError, RootError, TruncationError
from minimpi.runtime.inproc import run_threads

GATHER = algs("gather")


def test_registered():
    assert {"binomial", "ring", "linear"} <= set(algorithms("gather"))


@pytest.mark.parametrize("alg", GATHER)
@pytest.mark.parametrize("p,root", ROOTED)
@pytest.mark.parametrize("kind", KINDS)
def test_gather(alg, p, root, kind):
    n = 3
    if kind == "object" and not algorithms("gather")[alg].objects:
        exc = rank_error(p, lambda comm: comm.gather(1, root=root, algorithm=alg), AlgorithmError)
        assert "moves buffers only" in str(exc)
        return

    def body(comm):
        mine = contribution(comm.rank, n, kind)
        if kind == "object":
            return comm.gather(mine, root=root, algorithm=alg)
        recv = np.full(p * n, -1, dtype=kind) if comm.rank == root else None
        comm.Gather(mine, recv, root=root, algorithm=alg)
        return recv

    for r, got in enumerate(run_threads(p, body)):
        if r != root:
            assert got is None
        elif kind == "object":
            assert got == everyone(p, n, kind)
        else:
            np.testing.assert_array_equal(got, everyone(p, n, kind))


@pytest.mark.parametrize("alg", GATHER)
@pytest.mark.parametrize("p,root", ROOTED)
def test_gatherv_uneven_with_zeros(alg, p, root):
    counts = [(r * 3 + 1) % 4 for r in range(p)]      # 1, 0, 3, 2, 1, 0, ...
    displs = [sum(counts) - sum(counts[:r + 1]) for r in range(p)]   # reversed layout
    total = sum(counts) + 2

    def body(comm):
        r = comm.rank
        recv = np.full(total, -1, "i4") if r == root else None
        comm.Gatherv(np.arange(counts[r], dtype="i4") + 10 * r,
                     [recv, (counts, displs), INT] if r == root else None, root=root, algorithm=alg)
        return recv

    want = np.full(total, -1, "i4")
    for q in range(p):
        want[displs[q]:displs[q] + counts[q]] = np.arange(counts[q]) + 10 * q
    got = run_threads(p, body)
    np.testing.assert_array_equal(got[root], want)


@pytest.mark.parametrize("alg", GATHER)
@pytest.mark.parametrize("vector", [False, True], ids=["Gather", "Gatherv"])
def test_gather_in_place_at_root(alg, vector):
    p, root = 4, 1

    def body(comm):
        r = comm.rank
        if r == root:
            recv = np.full(p * 2, -1.0)
            recv[2 * r:2 * r + 2] = [2 * r, 2 * r + 1]
            if vector:
                comm.Gatherv(IN_PLACE, [recv, ([2] * p, None), DOUBLE], root=root, algorithm=alg)
            else:
                comm.Gather(IN_PLACE, recv, root=root, algorithm=alg)
            return recv
        (comm.Gatherv if vector else comm.Gather)(np.array([2.0 * r, 2 * r + 1]), None,
                                                  root=root, algorithm=alg)

    np.testing.assert_array_equal(run_threads(p, body)[root], np.arange(p * 2.0))


@pytest.mark.parametrize("alg", GATHER)
@pytest.mark.parametrize("p,root", rooted([(4, 2), (5, 0)]))
def test_gather_segmented(alg, p, root, monkeypatch):
    monkeypatch.setenv("MINIMPI_COST_SEGMENT", "256")
    n = 300                                            # 1200 B per block: 5 segments

    def body(comm):
        recv = np.zeros(p * n, "i4") if comm.rank == root else None
        comm.Gather(np.arange(n, dtype="i4") + n * comm.rank, recv, root=root, algorithm=alg)
        return recv

    np.testing.assert_array_equal(run_threads(p, body)[root], np.arange(p * n))


@pytest.mark.parametrize("alg", GATHER)
def test_igather(alg):
    def body(comm):
        r = comm.rank
        recv = np.zeros(3, "i4") if r == 0 else None
        req = comm.Igather(np.array([r], "i4"), recv, algorithm=alg)
        oreq = comm.igather(r * r, algorithm=for_objects("gather", alg))
        req.wait()
        return (recv.tolist() if recv is not None else None), oreq.wait()

    assert run_threads(3, body) == [([0, 1, 2], [0, 1, 4]), (None, None), (None, None)]


def test_gather_numpy_objects():
    """Object gather of numpy arrays: pickled, never confused with raw buffers."""
    got = run_threads(3, lambda c: c.gather(np.arange(c.rank + 1), root=1, algorithm="ring"))
    assert [a.tolist() for a in got[1]] == [[0], [0, 1], [0, 1, 2]]


def test_gather_invalid_root():
    assert "root=2" in str(rank_error(2, lambda c: c.gather(1, root=2), RootError))


@pytest.mark.parametrize("alg", GATHER)
def test_gatherv_count_mismatch_is_explained(alg):
    def body(comm):
        r = comm.rank
        mine = np.zeros(3 if r == 3 else 2)               # rank 3 sends one item too many
        recv = np.zeros(8) if r == 0 else None
        comm.Gatherv(mine, [recv, ([2] * 4, None), DOUBLE] if r == 0 else None, algorithm=alg)

    # a too-long raw block surfaces as the engine's TruncationError (see the report)
    exc = rank_error(4, body, CollectiveMismatchError, TruncationError, timeout=5)
    assert "rank 0" in str(exc) and "Gatherv" in str(exc)
