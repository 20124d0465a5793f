"""Allreduce/allreduce and Allgather(v)/allgather: every algorithm, size and kind of data.

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
from minimpi.errors import AlgorithmError, CountError, OpError
from minimpi.runtime.inproc import RankFailed, run_threads

SIZES = [1, 2, 3, 4, 5, 7, 8]
KINDS = ["int32", "float64", "object"]
ALLREDUCE_ALGS = ["binomial", "recursive_doubling", "rabenseifner", "ring"]
ALLGATHER_ALGS = ["binomial", "ring", "recursive_doubling", "bruck"]
ORDERED_ALLREDUCE = ["binomial", "recursive_doubling", "rabenseifner"]


def contribution(rank, n, kind):
    if kind == "object":
        return {"a": rank + 1, "b": [rank] * (rank % 3)}
    return (np.arange(n) * (rank + 1) + rank).astype(kind)


def test_registered():
    assert list(algorithms("allreduce")) == ALLREDUCE_ALGS
    assert list(algorithms("allgather")) == ALLGATHER_ALGS


# -------------------------------------------------------------------------- allreduce
def _objsum(x, y):
    return {"a": x["a"] + y["a"], "b": x["b"] + y["b"]}


OBJ_SUM = Op.Create(_objsum, commute=True)


@pytest.mark.parametrize("alg", ALLREDUCE_ALGS)
@pytest.mark.parametrize("p", SIZES)
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
        with pytest.raises(RankFailed) as info:
            run_threads(p, body)
        assert isinstance(info.value.exc, AlgorithmError)
        assert "moves buffers only" in str(info.value.exc)
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


@pytest.mark.parametrize("alg", ALLREDUCE_ALGS)
@pytest.mark.parametrize("p", [1, 3, 4, 6])
@pytest.mark.parametrize("n", [0, 1, 2, 5])
def test_allreduce_tiny_vectors(alg, p, n):
    """Fewer elements than ranks: empty blocks and windows."""
    def body(comm):
        recv = np.empty(n, np.float64)
        comm.Allreduce(np.full(n, comm.rank + 1.0), recv, algorithm=alg)
        return recv

    for g in run_threads(p, body):
        np.testing.assert_array_equal(g, np.full(n, p * (p + 1) / 2))


@pytest.mark.parametrize("alg", ALLREDUCE_ALGS)
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


def _matmul(inbuf, inoutbuf, datatype=None):
    a = np.asarray(inbuf).reshape(-1, 2, 2)
    b = inoutbuf.reshape(-1, 2, 2)
    b[...] = a @ b


MATMUL = Op.Create(_matmul, commute=False)
MAT2x2 = INT64_T.Create_contiguous(4).Commit()
CONCAT = Op.Create(lambda a, b: a + b, commute=False)


def _matrices(rank, count):
    rng = np.random.default_rng(rank)
    return rng.integers(-2, 3, size=(count, 2, 2)).astype(np.int64)


@pytest.mark.parametrize("alg", ORDERED_ALLREDUCE + [None])
@pytest.mark.parametrize("p", [2, 3, 4, 5, 7, 8])
def test_allreduce_non_commutative(alg, p):
    count = 5

    def body(comm):
        recv = np.zeros(count * 4, np.int64)
        # one item = one 2x2 matrix, so blocks and windows are cut between matrices
        comm.Allreduce([_matrices(comm.rank, count).reshape(-1), MAT2x2], [recv, MAT2x2],
                       op=MATMUL, algorithm=alg)
        words = comm.allreduce(f"<{comm.rank}>", op=CONCAT,
                               algorithm=alg if algorithms("allreduce").get(alg, None) is None
                               or algorithms("allreduce")[alg].objects else None)
        return recv, words

    expect = _matrices(0, count)
    for r in range(1, p):
        expect = expect @ _matrices(r, count)
    for recv, words in run_threads(p, body):
        np.testing.assert_array_equal(recv.reshape(-1, 2, 2), expect)
        assert words == "".join(f"<{r}>" for r in range(p))


def test_allreduce_ring_refuses_non_commutative():
    def body(comm):
        comm.Allreduce(np.zeros(4, np.int64), np.zeros(4, np.int64), op=MATMUL, algorithm="ring")

    with pytest.raises(RankFailed) as info:
        run_threads(3, body)
    assert isinstance(info.value.exc, AlgorithmError)
    text = str(info.value.exc)
    assert "'ring'" in text and "commutative" in text and "Allreduce" in text
    # auto never picks it for a non-commutative op, whatever the size
    for n in (8, 1 << 20, 1 << 28):
        for p in (3, 4, 5):
            assert choose("allreduce", p, n, MATMUL).name != "ring"


@pytest.mark.parametrize("alg", ["ring", "rabenseifner", "recursive_doubling"])
@pytest.mark.parametrize("p", [3, 4])
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
    from minimpi.data.datatypes import DOUBLE_INT
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

    with pytest.raises(RankFailed) as info:
        run_threads(2, bad_op)
    assert isinstance(info.value.exc, OpError) and "BAND" in str(info.value.exc)

    def bad_count(comm):
        comm.Allreduce(np.zeros(3), np.zeros(4))

    with pytest.raises(RankFailed) as info:
        run_threads(2, bad_count)
    assert isinstance(info.value.exc, CountError)
    assert "rank 0" in str(info.value.exc) and "Allreduce" in str(info.value.exc)

    def not_an_op(comm):
        comm.allreduce(1, op="sum")

    with pytest.raises(RankFailed) as info:
        run_threads(2, not_an_op)
    assert isinstance(info.value.exc, OpError)


def test_allreduce_unknown_algorithm():
    with pytest.raises(RankFailed) as info:
        run_threads(2, lambda comm: comm.allreduce(1, algorithm="nope"))
    assert isinstance(info.value.exc, AlgorithmError) and "binomial" in str(info.value.exc)


@pytest.mark.parametrize("alg", ALLREDUCE_ALGS)
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


# -------------------------------------------------------------------------- allgather
@pytest.mark.parametrize("alg", ALLGATHER_ALGS)
@pytest.mark.parametrize("p", SIZES)
@pytest.mark.parametrize("kind", KINDS)
def test_allgather(alg, p, kind):
    n = 3

    def body(comm):
        if kind == "object":
            return comm.allgather(contribution(comm.rank, n, kind), algorithm=alg)
        recv = np.full(n * p, -1, dtype=kind)
        comm.Allgather(contribution(comm.rank, n, kind), recv, algorithm=alg)
        return recv

    for got in run_threads(p, body):
        if kind == "object":
            assert got == [contribution(r, n, kind) for r in range(p)]
        else:
            np.testing.assert_array_equal(got, np.concatenate([contribution(r, n, kind)
                                                               for r in range(p)]))


def _vcounts(p):
    return [(3 * r + 1) % 4 for r in range(p)]   # includes zeros from p >= 4


@pytest.mark.parametrize("alg", ALLGATHER_ALGS)
@pytest.mark.parametrize("p", SIZES)
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


@pytest.mark.parametrize("alg", ALLGATHER_ALGS)
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


@pytest.mark.parametrize("alg", ALLGATHER_ALGS)
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

    with pytest.raises(RankFailed) as info:
        run_threads(2, bad_send)
    assert isinstance(info.value.exc, CountError) and "Allgather" in str(info.value.exc)

    def uneven(comm):
        comm.Allgather(np.zeros(2), np.zeros(5))

    with pytest.raises(RankFailed) as info:
        run_threads(2, uneven)
    assert isinstance(info.value.exc, CountError) and "Allgatherv" in str(info.value.exc)
