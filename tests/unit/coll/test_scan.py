"""Scan/scan and Exscan/exscan: every algorithm, size and type, non-commutative ops in rank
order, IN_PLACE, segmentation and the I-variants.

All on the in-process transport (run_threads), compared with plain numpy/Python.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest
from coll_helpers import CONCAT, KINDS, MATMUL, SIZES, algs, for_objects, rank_error, summand

from minimpi.coll.registry import algorithms
from minimpi.constants import IN_PLACE
from minimpi.data import ops
from minimpi.errors import AlgorithmError
from minimpi.runtime.inproc import run_threads

#: (collective, algorithm): every registered scan and exscan algorithm
SCANS = [pytest.param(coll, alg, id=f"{coll}-{alg}")
         for coll in ("scan", "exscan") for alg in algs(coll)]


def test_registered():
    assert {"binomial", "ring"} <= set(algorithms("scan"))
    # test_iscan_iexscan runs both with the same algorithm name
    assert set(algorithms("scan")) == set(algorithms("exscan"))


def _call(comm, coll, objects=False):
    """comm's Scan/Exscan (or scan/exscan in object mode)."""
    name = coll if objects else coll.capitalize()
    return getattr(comm, name)


def _scan_ref(p, kind, exclusive):
    vals = [summand(r, kind) for r in range(p)]
    out = []
    for r in range(p):
        part = vals[:r] if exclusive else vals[:r + 1]
        out.append(functools.reduce(lambda a, b: a + b, part) if part else None)
    return out


@pytest.mark.parametrize("coll,alg", SCANS)
@pytest.mark.parametrize("p", SIZES, ids="p{}".format)
@pytest.mark.parametrize("kind", KINDS)
def test_scan_sum(coll, alg, p, kind):
    if kind == "object" and not algorithms(coll)[alg].objects:
        exc = rank_error(p, lambda comm: _call(comm, coll, objects=True)(1, algorithm=alg),
                         AlgorithmError)
        assert "moves buffers only" in str(exc)
        return

    def body(comm):
        mine = summand(comm.rank, kind)
        if kind == "object":
            return _call(comm, coll, objects=True)(mine, op=ops.SUM, algorithm=alg)
        recv = np.full(mine.size, -5, dtype=kind)
        _call(comm, coll)(mine, recv, op=ops.SUM, algorithm=alg)
        return recv

    wants = _scan_ref(p, kind, exclusive=coll == "exscan")
    for r, (got, want) in enumerate(zip(run_threads(p, body), wants)):
        if kind == "object":
            assert got == want
        elif want is None:                       # Exscan on rank 0: recvbuf untouched
            np.testing.assert_array_equal(got, np.full(7, -5))
        else:
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("coll,alg", SCANS)
@pytest.mark.parametrize("p", SIZES, ids="p{}".format)
def test_scan_non_commutative(coll, alg, p):
    def body(comm):
        recv = np.full(12, -1.0)
        _call(comm, coll)(MATMUL.operand(comm.rank, 3, "f8").reshape(-1), recv, op=MATMUL.op,
                          algorithm=alg)
        return recv, _call(comm, coll, objects=True)(str(comm.rank), op=CONCAT,
                                                     algorithm=for_objects(coll, alg))

    for r, (buf, text) in enumerate(run_threads(p, body)):
        upto = r if coll == "exscan" else r + 1
        if upto == 0:
            assert text is None
            np.testing.assert_array_equal(buf, np.full(12, -1.0))
        else:
            assert text == "".join(map(str, range(upto)))
            np.testing.assert_array_equal(buf, MATMUL.product(upto, 3, "f8").reshape(-1))


@pytest.mark.parametrize("coll,alg", SCANS)
def test_scan_in_place(coll, alg):
    p = 5

    def body(comm):
        buf = np.arange(4) + comm.rank * 10
        _call(comm, coll)(IN_PLACE, buf, op=ops.SUM, algorithm=alg)
        return buf

    exclusive = coll == "exscan"
    for r, got in enumerate(run_threads(p, body)):
        ranks = range(r) if exclusive else range(r + 1)
        want = np.arange(4) + r * 10 if exclusive and r == 0 else \
            sum(np.arange(4) + q * 10 for q in ranks)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("coll,alg", SCANS)
def test_scan_segmented(coll, alg, monkeypatch):
    monkeypatch.setenv("MINIMPI_COST_SEGMENT", "64")       # 1000 doubles: 125 segments
    p, n = 4, 1000

    def body(comm):
        recv = np.zeros(n)
        _call(comm, coll)(np.arange(n) * (comm.rank + 1.0), recv, op=ops.SUM, algorithm=alg)
        return recv

    exclusive = coll == "exscan"
    for r, got in enumerate(run_threads(p, body)):
        k = sum(range(1, r + 1)) if exclusive else sum(range(1, r + 2))
        if exclusive and r == 0:
            np.testing.assert_array_equal(got, np.zeros(n))
        else:
            np.testing.assert_array_equal(got, np.arange(n) * float(k))


@pytest.mark.parametrize("alg", algs("scan"))
def test_iscan_iexscan(alg):
    def body(comm):
        a, b = np.zeros(2, "i4"), np.zeros(2, "i4")
        reqs = [comm.Iscan(np.full(2, comm.rank + 1, "i4"), a, algorithm=alg),
                comm.Iexscan(np.full(2, comm.rank + 1, "i4"), b, algorithm=alg),
                comm.iscan(comm.rank, algorithm=for_objects("scan", alg)),
                comm.iexscan(comm.rank, algorithm=for_objects("exscan", alg))]
        res = [req.wait() for req in reqs]
        return a.tolist(), b.tolist(), res[2], res[3]

    assert run_threads(3, body) == [([1, 1], [0, 0], 0, None), ([3, 3], [1, 1], 1, 0),
                                    ([6, 6], [3, 3], 3, 1)]


def test_scan_numpy_objects():
    got = run_threads(3, lambda c: c.scan(np.full(2, c.rank + 1), algorithm="ring"))
    assert [g.tolist() for g in got] == [[1, 1], [3, 3], [6, 6]]
