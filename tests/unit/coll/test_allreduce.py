"""Allreduce/allreduce: every algorithm, size and kind of data, non-commutative ops,
IN_PLACE, segmentation, Iallreduce, refusals and errors.

All on the in-process transport (run_threads); results are compared with numpy/Python.
"""
from __future__ import annotations

import numpy as np
import pytest
from coll_helpers import AUTO, CONCAT, KINDS, MATMUL, SIZES, algs, contribution, rank_error

from minimpi.coll.registry import algorithms, choose
from minimpi.constants import IN_PLACE
from minimpi.data import ops
from minimpi.data.datatypes import DOUBLE, DOUBLE_INT, INT
from minimpi.data.ops import Op
from minimpi.errors import AlgorithmError, CountError, OpError
from minimpi.runtime.inproc import run_threads

ALLREDUCE = algs("allreduce")
ORDERED = algs("allreduce", commutative_only=False)     # keep the ranks' order


def test_registered():
    table = algorithms("allreduce")
    assert {"binomial", "recursive_doubling", "rabenseifner", "ring"} <= set(table)
    assert table["ring"].commutative_only and not table["ring"].objects
    assert not table["rabenseifner"].objects
    # auto always has an algorithm for objects with a non-commutative op
    assert set(algs("allreduce", objects=True)) & set(ORDERED)


def _objsum(x, y):
    return {"a": x["a"] + y["a"], "b": x["b"] + y["b"]}


OBJ_SUM = Op.Create(_objsum, commute=True)


@pytest.mark.parametrize("alg", ALLREDUCE)
@pytest.mark.parametrize("p", SIZES, ids="p{}".format)
@pytest.mark.parametrize("kind", KINDS)
def test_allreduce(alg, p, kind):
    n = 13
    objects_ok = algorithms("allreduce")[alg].objects

    def body(comm):
        if kind == "object":
            return comm.allreduce(contribution(comm.rank, n, kind), op=OBJ_SUM, algorithm=alg)
        recv = np.full(n, -1, dtype=kind)
        comm.Allreduce(contribution(comm.rank, n, kind), recv, op=ops.SUM, algorithm=alg)
        return recv

    if kind == "object" and not objects_ok:
        assert "moves buffers only" in str(rank_error(p, body, AlgorithmError))
        return
    got = run_threads(p, body)
    if kind == "object":
        expect = contribution(0, n, kind)
        for r in range(1, p):
            expect = _objsum(expect, contribution(r, n, kind))
        assert all(g == expect for g in got)
    else:
        expect = sum(contribution(r, n, kind) for r in range(p)).astype(kind)
        for g in got:
            np.testing.assert_array_equal(g, expect)


@pytest.mark.parametrize("alg", ALLREDUCE)
@pytest.mark.parametrize("p", [1, 3, 4, 6], ids="p{}".format)
@pytest.mark.parametrize("n", [0, 1, 2, 5], ids="n{}".format)
def test_allreduce_tiny_vectors(alg, p, n):
    """Fewer elements than ranks: empty blocks and windows."""
    def body(comm):
        recv = np.empty(n, np.float64)
        comm.Allreduce(np.full(n, comm.rank + 1.0), recv, algorithm=alg)
        return recv

    for g in run_threads(p, body):
        np.testing.assert_array_equal(g, np.full(n, p * (p + 1) / 2))


@pytest.mark.parametrize("alg", ALLREDUCE)
def test_allreduce_buffer_forms_and_in_place(alg):
    p, n = 5, 10

    def body(comm):
        a = np.arange(n, dtype=np.float64) + comm.rank
        out1 = np.zeros(n)
        comm.Allreduce([a, DOUBLE], [out1, DOUBLE], op=ops.MAX, algorithm=alg)
        out2 = np.zeros(n + 4)
        comm.Allreduce([a, n, DOUBLE], [out2, n, DOUBLE], algorithm=alg)
        inplace = a.copy()
        comm.Allreduce(IN_PLACE, inplace, op=ops.SUM, algorithm=alg)
        ints = np.arange(6, dtype=np.int32) * (comm.rank + 1)
        comm.Allreduce(IN_PLACE, [ints, INT], op=ops.PROD, algorithm=alg)
        return out1, out2, inplace, ints

    base = np.arange(n, dtype=np.float64)
    for out1, out2, inplace, ints in run_threads(p, body):
        np.testing.assert_array_equal(out1, base + p - 1)
        np.testing.assert_array_equal(out2[:n], base * p + p * (p - 1) / 2)
        np.testing.assert_array_equal(out2[n:], 0)
        np.testing.assert_array_equal(inplace, base * p + p * (p - 1) / 2)
        np.testing.assert_array_equal(ints, np.arange(6) ** p * 120)


@pytest.mark.parametrize("alg", ORDERED + [AUTO])
@pytest.mark.parametrize("p", [2, 3, 4, 5, 7, 8], ids="p{}".format)
def test_allreduce_non_commutative(alg, p):
    count = 5
    objects_alg = alg if alg is None or algorithms("allreduce")[alg].objects else None

    def body(comm):
        recv = np.zeros(count * 4, np.int64)
        mine = MATMUL.operand(comm.rank, count).reshape(-1)
        comm.Allreduce([mine, MATMUL.datatype], [recv, MATMUL.datatype], op=MATMUL.op,
                       algorithm=alg)
        words = comm.allreduce(f"<{comm.rank}>", op=CONCAT, algorithm=objects_alg)
        return recv, words

    expect = MATMUL.product(p, count)
    for recv, words in run_threads(p, body):
        np.testing.assert_array_equal(recv.reshape(-1, 2, 2), expect)
        assert words == "".join(f"<{r}>" for r in range(p))


@pytest.mark.parametrize("alg", algs("allreduce", commutative_only=True))
def test_allreduce_refuses_non_commutative(alg):
    def body(comm):
        comm.Allreduce(np.zeros(4, np.int64), np.zeros(4, np.int64), op=MATMUL.op, algorithm=alg)

    text = str(rank_error(3, body, AlgorithmError))
    assert f"'{alg}'" in text and "commutative" in text and "Allreduce" in text
    # auto never picks it for a non-commutative op, whatever the size
    for n in (8, 1 << 20, 1 << 28):
        for p in (3, 4, 5):
            assert choose("allreduce", p, n, MATMUL.op).name != alg


@pytest.mark.parametrize("alg", ALLREDUCE)
@pytest.mark.parametrize("p", [3, 4], ids="p{}".format)
def test_allreduce_large_segmented(alg, p, monkeypatch):
    """Large enough for many ring segments (segment forced to 8 KiB) and rendezvous."""
    monkeypatch.setenv("MINIMPI_COST_SEGMENT", "8192")
    n = 50_001

    def body(comm):
        a = np.arange(n, dtype=np.float32) * (comm.rank + 1)
        recv = np.empty(n, np.float32)
        comm.Allreduce(a, recv, algorithm=alg)
        return recv

    expect = np.arange(n, dtype=np.float32) * (p * (p + 1) // 2)
    for g in run_threads(p, body):
        np.testing.assert_allclose(g, expect, rtol=1e-6)


def test_allreduce_maxloc_pairs():
    p = 4

    def body(comm):
        data = np.zeros(3, dtype=DOUBLE_INT.dtype)
        data["value"] = [comm.rank % 2, -comm.rank, 5.0]   # the name of the fields may vary
        data[data.dtype.names[1]] = comm.rank
        recv = np.zeros_like(data)
        comm.Allreduce([data, DOUBLE_INT], [recv, DOUBLE_INT], op=ops.MAXLOC, algorithm="ring")
        return recv

    for g in run_threads(p, body):
        assert list(g[g.dtype.names[1]]) == [1, 0, 0]


def test_allreduce_errors():
    def bad_op(comm):
        comm.Allreduce(np.zeros(3), np.zeros(3), op=ops.BAND)

    assert "BAND" in str(rank_error(2, bad_op, OpError))

    def bad_count(comm):
        comm.Allreduce(np.zeros(3), np.zeros(4))

    text = str(rank_error(2, bad_count, CountError))
    assert "rank 0" in text and "Allreduce" in text

    rank_error(2, lambda comm: comm.allreduce(1, op="sum"), OpError)


def test_allreduce_unknown_algorithm():
    exc = rank_error(2, lambda comm: comm.allreduce(1, algorithm="nope"), AlgorithmError)
    assert "binomial" in str(exc)


@pytest.mark.parametrize("alg", ALLREDUCE)
def test_iallreduce_several_outstanding(alg):
    p = 5

    def body(comm):
        bufs = [np.full(7 + i, comm.rank + i, np.float64) for i in range(4)]
        outs = [np.zeros_like(b) for b in bufs]
        reqs = [comm.Iallreduce(b, o, algorithm=alg) for b, o in zip(bufs, outs)]
        reqs.reverse()
        for r in reqs:
            r.Wait()
        return outs

    for outs in run_threads(p, body):
        for i, o in enumerate(outs):
            np.testing.assert_array_equal(o, np.full(7 + i, p * (p - 1) / 2 + p * i))


def test_allreduce_auto_any_size():
    def body(comm):
        out = []
        for n in (0, 1, 100, 70_000):
            r = np.empty(n)
            comm.Allreduce(np.ones(n), r)
            out.append(r)
        return out, comm.allreduce(comm.rank)

    for p in (1, 3, 4):
        for arrays, total in run_threads(p, body):
            assert total == p * (p - 1) // 2
            for a in arrays:
                assert np.all(a == p)
