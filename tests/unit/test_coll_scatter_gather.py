"""Scatter/Scatterv/scatter and Gather/Gatherv/gather: every algorithm, size, root and type.

All on the in-process transport (run_threads); results are compared with plain numpy/Python.
"""
from __future__ import annotations

import numpy as np
import pytest

from minimpi.coll.registry import algorithms
from minimpi.constants import IN_PLACE
from minimpi.data.datatypes import DOUBLE, INT
from minimpi.errors import AlgorithmError, CountError, RootError
from minimpi.runtime.inproc import RankFailed, run_threads

SIZES = [1, 2, 3, 4, 5, 7, 8]
SCATTER_ALGS = ["binomial", "ring", "linear"]
GATHER_ALGS = ["binomial", "ring", "linear"]
KINDS = ["int32", "float64", "object"]


def roots(p):
    return sorted({0, p // 2, p - 1})


CASES = [(p, root) for p in SIZES for root in roots(p)]


def block(rank, n, kind, salt=0):
    if kind == "object":
        return {"rank": rank, "data": [salt + rank] * (rank % 3), "s": "x" * rank}
    return (np.arange(n) + 100 * rank + salt).astype(kind)


def test_registered():
    assert set(algorithms("scatter")) == set(SCATTER_ALGS)
    assert set(algorithms("gather")) == set(GATHER_ALGS)


# ----------------------------------------------------------------------------- scatter
@pytest.mark.parametrize("alg", SCATTER_ALGS)
@pytest.mark.parametrize("p,root", CASES)
@pytest.mark.parametrize("kind", KINDS)
def test_scatter(alg, p, root, kind):
    n = 3

    def body(comm):
        if kind == "object":
            objs = [block(r, n, kind) for r in range(p)] if comm.rank == root else None
            return comm.scatter(objs, root=root, algorithm=alg)
        send = np.concatenate([block(r, n, kind) for r in range(p)]) if comm.rank == root else None
        recv = np.full(n, -1, dtype=kind)
        comm.Scatter(send, recv, root=root, algorithm=alg)
        return recv

    for r, got in enumerate(run_threads(p, body)):
        if kind == "object":
            assert got == block(r, n, kind)
        else:
            np.testing.assert_array_equal(got, block(r, n, kind))


@pytest.mark.parametrize("alg", SCATTER_ALGS)
@pytest.mark.parametrize("p,root", CASES)
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


@pytest.mark.parametrize("alg", SCATTER_ALGS)
@pytest.mark.parametrize("vector", [False, True])
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


@pytest.mark.parametrize("alg", SCATTER_ALGS)
@pytest.mark.parametrize("p,root", [(4, 1), (5, 4)])
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


@pytest.mark.parametrize("alg", SCATTER_ALGS)
def test_iscatter(alg):
    def body(comm):
        send = np.arange(8, dtype="i4") if comm.rank == 2 else None
        recv = np.zeros(2, "i4")
        req = comm.Iscatter(send, recv, root=2, algorithm=alg)
        oreq = comm.iscatter(list("abcd") if comm.rank == 2 else None, root=2, algorithm=alg)
        vreq = comm.Iscatterv([np.arange(4.0), ([1, 0, 2, 1], None), DOUBLE] if comm.rank == 2 else None,
                              np.zeros([1, 0, 2, 1][comm.rank]), root=2, algorithm=alg)
        req.wait()
        vreq.wait()
        return recv.tolist(), oreq.wait()

    assert run_threads(4, body) == [([0, 1], "a"), ([2, 3], "b"), ([4, 5], "c"), ([6, 7], "d")]


# ------------------------------------------------------------------------------ gather
@pytest.mark.parametrize("alg", GATHER_ALGS)
@pytest.mark.parametrize("p,root", CASES)
@pytest.mark.parametrize("kind", KINDS)
def test_gather(alg, p, root, kind):
    n = 3

    def body(comm):
        mine = block(comm.rank, n, kind)
        if kind == "object":
            return comm.gather(mine, root=root, algorithm=alg)
        recv = np.full(p * n, -1, dtype=kind) if comm.rank == root else None
        comm.Gather(mine, recv, root=root, algorithm=alg)
        return recv

    for r, got in enumerate(run_threads(p, body)):
        if r != root:
            assert got is None
        elif kind == "object":
            assert got == [block(q, n, kind) for q in range(p)]
        else:
            np.testing.assert_array_equal(got, np.concatenate([block(q, n, kind) for q in range(p)]))


@pytest.mark.parametrize("alg", GATHER_ALGS)
@pytest.mark.parametrize("p,root", CASES)
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


@pytest.mark.parametrize("alg", GATHER_ALGS)
@pytest.mark.parametrize("vector", [False, True])
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


@pytest.mark.parametrize("alg", GATHER_ALGS)
@pytest.mark.parametrize("p,root", [(4, 2), (5, 0)])
def test_gather_segmented(alg, p, root, monkeypatch):
    monkeypatch.setenv("MINIMPI_COST_SEGMENT", "256")
    n = 300                                            # 1200 B per block: 5 segments

    def body(comm):
        recv = np.zeros(p * n, "i4") if comm.rank == root else None
        comm.Gather(np.arange(n, dtype="i4") + n * comm.rank, recv, root=root, algorithm=alg)
        return recv

    np.testing.assert_array_equal(run_threads(p, body)[root], np.arange(p * n))


@pytest.mark.parametrize("alg", GATHER_ALGS)
def test_igather(alg):
    def body(comm):
        r = comm.rank
        recv = np.zeros(3, "i4") if r == 0 else None
        req = comm.Igather(np.array([r], "i4"), recv, algorithm=alg)
        oreq = comm.igather(r * r, algorithm=alg)
        req.wait()
        return (recv.tolist() if recv is not None else None), oreq.wait()

    assert run_threads(3, body) == [([0, 1, 2], [0, 1, 4]), (None, None), (None, None)]


def test_gather_numpy_objects():
    """Object gather of numpy arrays: pickled, never confused with raw buffers."""
    got = run_threads(3, lambda c: c.gather(np.arange(c.rank + 1), root=1, algorithm="ring"))
    assert [a.tolist() for a in got[1]] == [[0], [0, 1], [0, 1, 2]]


# ------------------------------------------------------------------------------ errors
def test_invalid_root():
    with pytest.raises(RankFailed) as info:
        run_threads(2, lambda c: c.gather(1, root=2))
    assert isinstance(info.value.exc, RootError)
    assert "root=2" in str(info.value.exc)


def test_unknown_algorithm():
    with pytest.raises(RankFailed) as info:
        run_threads(2, lambda c: c.scatter([1, 2], algorithm="nope"))
    assert isinstance(info.value.exc, AlgorithmError)
    assert "binomial" in str(info.value.exc)


def test_scatter_uneven_sendbuf_is_an_error():
    with pytest.raises(RankFailed) as info:
        run_threads(1, lambda c: c.Scatter(np.arange(5.0), np.zeros(2)))
    assert isinstance(info.value.exc, CountError)


def test_scatter_object_count_mismatch():
    with pytest.raises(RankFailed) as info:
        run_threads(1, lambda c: c.scatter([1, 2, 3]))
    assert "sequence of 1 objects" in str(info.value.exc)


@pytest.mark.parametrize("alg", GATHER_ALGS)
def test_gatherv_count_mismatch_is_explained(alg):
    from minimpi.errors import CollectiveMismatchError, TruncationError

    def body(comm):
        r = comm.rank
        mine = np.zeros(3 if r == 3 else 2)               # rank 3 sends one item too many
        recv = np.zeros(8) if r == 0 else None
        comm.Gatherv(mine, [recv, ([2] * 4, None), DOUBLE] if r == 0 else None, algorithm=alg)

    with pytest.raises(RankFailed) as info:
        run_threads(4, body, timeout=5)
    # a too-long raw block surfaces as the engine's TruncationError (see the report)
    assert isinstance(info.value.exc, (CollectiveMismatchError, TruncationError))
    assert "rank 0" in str(info.value.exc) and "Gatherv" in str(info.value.exc)
