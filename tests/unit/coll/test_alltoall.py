"""Alltoall(v)/alltoall: every algorithm, size and kind of data, uneven v-counts with
zeros and gaps, IN_PLACE, large buffers, several outstanding I-calls, refusals and errors.

All on the in-process transport (run_threads); results are compared with numpy/Python.
"""
from __future__ import annotations

import numpy as np
import pytest
from coll_helpers import AUTO, SIZES, algs, rank_error

from minimpi.coll.registry import algorithms
from minimpi.constants import IN_PLACE
from minimpi.data.datatypes import DOUBLE, INT
from minimpi.errors import AlgorithmError, CollectiveMismatchError, CountError, TruncationError
from minimpi.runtime.inproc import run_threads

A2A = algs("alltoall")
A2AV = algs("alltoallv")


def test_registered():
    assert {"ring", "scattered", "bruck"} <= set(algorithms("alltoall"))
    assert {"ring", "scattered"} <= set(algorithms("alltoallv"))


def a2a_block(src, dst, n, kind):
    """What rank src sends rank dst."""
    if kind == "object":
        return f"{src}->{dst}" * (1 + (src + dst) % 3)
    return (np.arange(n) + 100 * src + dst).astype(kind)


@pytest.mark.parametrize("alg", A2A)
@pytest.mark.parametrize("p", SIZES, ids="p{}".format)
@pytest.mark.parametrize("kind", ["int32", "float64", "object"])
def test_alltoall(alg, p, kind):
    n = 3
    if kind == "object" and not algorithms("alltoall")[alg].objects:
        exc = rank_error(p, lambda comm: comm.alltoall(list(range(p)), algorithm=alg),
                         AlgorithmError)
        assert "moves buffers only" in str(exc)
        return

    def body(comm):
        r = comm.rank
        if kind == "object":
            return comm.alltoall([a2a_block(r, d, n, kind) for d in range(p)], algorithm=alg)
        send = np.concatenate([a2a_block(r, d, n, kind) for d in range(p)])
        recv = np.full(n * p, -1, dtype=kind)
        comm.Alltoall(send, recv, algorithm=alg)
        inplace = send.copy()
        comm.Alltoall(IN_PLACE, inplace, algorithm=alg)
        return recv, inplace

    for r, got in enumerate(run_threads(p, body)):
        if kind == "object":
            assert got == [a2a_block(s, r, n, kind) for s in range(p)]
        else:
            expect = np.concatenate([a2a_block(s, r, n, kind) for s in range(p)])
            np.testing.assert_array_equal(got[0], expect)
            np.testing.assert_array_equal(got[1], expect)


def _a2av_count(src, dst):
    return (src + 2 * dst) % 4      # zeros included


@pytest.mark.parametrize("alg", A2AV + [AUTO])
@pytest.mark.parametrize("p", SIZES, ids="p{}".format)
@pytest.mark.parametrize("kind", ["int32", "float64"])
def test_alltoallv_uneven(alg, p, kind):
    def body(comm):
        r = comm.rank
        scounts = [_a2av_count(r, d) for d in range(p)]
        rcounts = [_a2av_count(s, r) for s in range(p)]
        # send blocks in reverse order with gaps; receive with default displacements
        sdispls, pos = [0] * p, 1
        send = np.full(sum(scounts) + p + 1, -7, dtype=kind)
        for d in reversed(range(p)):
            sdispls[d] = pos
            send[pos:pos + scounts[d]] = a2a_block(r, d, scounts[d], kind)
            pos += scounts[d] + 1
        recv = np.full(sum(rcounts), -1, dtype=kind)
        comm.Alltoallv([send, (scounts, sdispls), kind], [recv, (rcounts, None), kind],
                       algorithm=alg)
        return recv

    for r, recv in enumerate(run_threads(p, body)):
        expect = [a2a_block(s, r, _a2av_count(s, r), kind) for s in range(p)]
        np.testing.assert_array_equal(recv, np.concatenate(expect))


@pytest.mark.parametrize("alg", A2AV)
@pytest.mark.parametrize("p", [3, 4], ids="p{}".format)
def test_alltoallv_in_place_symmetric(alg, p):
    def count(a, b):
        return (a + b) % 3                     # symmetric, zeros included

    def body(comm):
        r = comm.rank
        counts = [count(r, d) for d in range(p)]
        buf = np.concatenate([np.full(counts[d], 10 * r + d, np.int32) for d in range(p)])
        comm.Alltoallv(IN_PLACE, [buf, counts, INT], algorithm=alg)
        return buf

    for r, buf in enumerate(run_threads(p, body)):
        expect = np.concatenate([np.full(count(s, r), 10 * s + r, np.int32) for s in range(p)])
        np.testing.assert_array_equal(buf, expect)


@pytest.mark.parametrize("alg", [a for a in A2A if a not in A2AV])
def test_alltoallv_refuses_alltoall_only_algorithm(alg):
    def body(comm):
        comm.Alltoallv(np.zeros(comm.size), np.zeros(comm.size), algorithm=alg)

    assert alg in str(rank_error(2, body, AlgorithmError))


@pytest.mark.parametrize("alg", A2A)
def test_ialltoall_several_outstanding_and_large(alg):
    p, n = 4, 20_000

    def body(comm):
        r = comm.rank
        big_send = np.repeat(np.arange(p, dtype=np.float64) + 10 * r, n)
        big = np.zeros(n * p)
        reqs = [comm.Ialltoall([big_send, DOUBLE], [big, n, DOUBLE], algorithm=alg)]
        smalls = [np.zeros(p, np.int32) for _ in range(3)]
        for i, s in enumerate(smalls):
            reqs.append(comm.Ialltoall(np.arange(p, dtype=np.int32) + 100 * r + i, s,
                                       algorithm=alg))
        for q in reversed(reqs):
            q.Wait()
        return big, smalls

    for r, (big, smalls) in enumerate(run_threads(p, body)):
        np.testing.assert_array_equal(big, np.repeat(np.arange(p) * 10.0 + r, n))
        for i, s in enumerate(smalls):
            np.testing.assert_array_equal(s, np.arange(p) * 100 + r + i)


def test_ialltoallv_outstanding():
    p = 3

    def body(comm):
        reqs, outs = [], []
        for i in range(3):
            counts = [i + 1] * p
            out = np.zeros((i + 1) * p)
            reqs.append(comm.Ialltoallv([np.full((i + 1) * p, comm.rank + 0.5), counts],
                                        [out, counts]))
            outs.append(out)
        for q in reqs:
            q.Wait()
        return outs

    for outs in run_threads(p, body):
        for i, o in enumerate(outs):
            np.testing.assert_array_equal(o, np.repeat(np.arange(p) + 0.5, i + 1))


def test_alltoall_errors():
    exc = rank_error(2, lambda comm: comm.alltoall([1, 2, 3]), CountError)
    assert "alltoall" in str(exc)
    rank_error(2, lambda comm: comm.Alltoall(np.zeros(4), np.zeros(6)), CountError)

    def mismatch(comm):
        # rank 0 sends 2 items to rank 1, rank 1 expects 3
        if comm.rank == 0:
            comm.Alltoallv([np.zeros(3), [1, 2]], [np.zeros(2), [1, 1]], algorithm="ring")
        else:
            comm.Alltoallv([np.zeros(2), [1, 1]], [np.zeros(4), [3, 1]], algorithm="ring")

    rank_error(2, mismatch, CollectiveMismatchError, TruncationError, timeout=10)
