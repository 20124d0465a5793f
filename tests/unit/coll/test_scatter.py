"""Scatter/Scatterv/scatter: every algorithm, size, root and type, uneven v-counts with
zeros, IN_PLACE at the root, segmentation, buffer forms, the I-variants and errors.

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
from minimpi.errors import AlgorithmError, CountError
from minimpi.runtime.inproc import run_threads

SCATTER = algs("scatter")


def test_registered():
    assert {"binomial", "ring", "linear"} <= set(algorithms("scatter"))


@pytest.mark.parametrize("alg", SCATTER)
@pytest.mark.parametrize("p,root", ROOTED)
@pytest.mark.parametrize("kind", KINDS)
def test_scatter(alg, p, root, kind):
    n = 3
    if kind == "object" and not algorithms("scatter")[alg].objects:
        exc = rank_error(p, lambda comm: comm.scatter(list(range(p)), root=root, algorithm=alg),
                         AlgorithmError)
        assert "moves buffers only" in str(exc)
        return

    def body(comm):
        send = everyone(p, n, kind) if comm.rank == root else None
        if kind == "object":
            return comm.scatter(send, root=root, algorithm=alg)
        recv = np.full(n, -1, dtype=kind)
        comm.Scatter(send, recv, root=root, algorithm=alg)
        return recv

    for r, got in enumerate(run_threads(p, body)):
        if kind == "object":
            assert got == contribution(r, n, kind)
        else:
            np.testing.assert_array_equal(got, contribution(r, n, kind))


@pytest.mark.parametrize("alg", SCATTER)
@pytest.mark.parametrize("p,root", ROOTED)
def test_scatterv_uneven_with_zeros(alg, p, root):
    counts = [(r * 2) % 5 for r in range(p)]          # 0, 2, 4, 1, 3, 0, 2, ...
    displs = list(np.cumsum([0] + counts[:-1]) + 1)   # a gap at the start
    total = sum(counts) + 1

    def body(comm):
        r = comm.rank
        send = None
        if r == root:
            buf = np.full(total, -7.0)
            for q in range(p):
                buf[displs[q]:displs[q] + counts[q]] = 10 * q + np.arange(counts[q])
            send = [buf, (counts, displs), DOUBLE]
        recv = np.full(counts[r], -1.0)
        comm.Scatterv(send, [recv, DOUBLE], root=root, algorithm=alg)
        return recv

    for r, got in enumerate(run_threads(p, body)):
        np.testing.assert_array_equal(got, 10 * r + np.arange(counts[r]))


@pytest.mark.parametrize("alg", SCATTER)
@pytest.mark.parametrize("vector", [False, True], ids=["Scatter", "Scatterv"])
def test_scatter_in_place_at_root(alg, vector):
    p, root = 5, 3

    def body(comm):
        r = comm.rank
        if r == root:
            send = np.arange(p * 2, dtype="i4")
            before = send.copy()
            if vector:
                comm.Scatterv([send, ([2] * p, None), INT], IN_PLACE, root=root, algorithm=alg)
            else:
                comm.Scatter(send, IN_PLACE, root=root, algorithm=alg)
            assert np.array_equal(send, before)
            return send[2 * r:2 * r + 2]
        recv = np.zeros(2, "i4")
        (comm.Scatterv if vector else comm.Scatter)(None, recv, root=root, algorithm=alg)
        return recv

    for r, got in enumerate(run_threads(p, body)):
        np.testing.assert_array_equal(got, [2 * r, 2 * r + 1])


@pytest.mark.parametrize("alg", SCATTER)
@pytest.mark.parametrize("p,root", rooted([(4, 1), (5, 4)]))
def test_scatter_segmented(alg, p, root, monkeypatch):
    monkeypatch.setenv("MINIMPI_COST_SEGMENT", "200")     # blocks of 800 B: 4 segments
    n = 100

    def body(comm):
        send = np.arange(p * n, dtype="f8") if comm.rank == root else None
        recv = np.zeros(n)
        comm.Scatter([send, DOUBLE] if send is not None else None, recv, root=root, algorithm=alg)
        return recv

    for r, got in enumerate(run_threads(p, body)):
        np.testing.assert_array_equal(got, np.arange(r * n, (r + 1) * n))


def test_scatter_buffer_spec_forms():
    p = 3

    def body(comm):
        buf = np.arange(12, dtype="f8")          # count 2 per rank out of 12 items
        recv = np.zeros(2)
        comm.Scatter([buf, 2, DOUBLE] if comm.rank == 0 else None, [recv, 2, DOUBLE])
        return recv

    assert [g.tolist() for g in run_threads(p, body)] == [[0, 1], [2, 3], [4, 5]]


@pytest.mark.parametrize("alg", SCATTER)
def test_iscatter(alg):
    def body(comm):
        root = comm.rank == 2
        send = np.arange(8, dtype="i4") if root else None
        recv = np.zeros(2, "i4")
        req = comm.Iscatter(send, recv, root=2, algorithm=alg)
        oreq = comm.iscatter(list("abcd") if root else None, root=2,
                            algorithm=for_objects("scatter", alg))
        vrecv = np.full([1, 0, 2, 1][comm.rank], -1.0)
        vreq = comm.Iscatterv([np.arange(4.0), ([1, 0, 2, 1], None), DOUBLE] if root else None,
                              vrecv, root=2, algorithm=alg)
        req.wait()
        vreq.wait()
        return recv.tolist(), oreq.wait(), vrecv.tolist()

    assert run_threads(4, body) == [([0, 1], "a", [0]), ([2, 3], "b", []),
                                    ([4, 5], "c", [1, 2]), ([6, 7], "d", [3])]


def test_scatter_unknown_algorithm():
    exc = rank_error(2, lambda c: c.scatter([1, 2], algorithm="nope"), AlgorithmError)
    assert "binomial" in str(exc)


def test_scatter_uneven_sendbuf_is_an_error():
    rank_error(1, lambda c: c.Scatter(np.arange(5.0), np.zeros(2)), CountError)


def test_scatter_object_count_mismatch():
    # CountError (a ValueError, as in mpi4py), like alltoall's list of the wrong length
    exc = rank_error(1, lambda c: c.scatter([1, 2, 3]), CountError)
    assert "sequence of 1 objects" in str(exc)
