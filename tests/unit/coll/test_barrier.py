"""Barrier/barrier/Ibarrier: every algorithm and size (nobody leaves before all entered),
and the choice by environment variable.

All on the in-process transport (run_threads).
"""
from __future__ import annotations

import threading

import pytest
from coll_helpers import SIZES, algs, rank_error

from minimpi.coll.registry import algorithms
from minimpi.errors import AlgorithmError
from minimpi.runtime.inproc import run_threads


def test_registered():
    assert {"binomial", "ring", "dissemination"} <= set(algorithms("barrier"))


@pytest.mark.parametrize("alg", algs("barrier"))
@pytest.mark.parametrize("p", SIZES, ids="p{}".format)
def test_barrier(alg, p):
    arrived = []
    lock = threading.Lock()

    def body(comm):
        for i in range(3):
            with lock:
                arrived.append((i, comm.rank))
            (comm.Barrier if i % 2 else comm.barrier)(algorithm=alg)
            with lock:   # nobody leaves round i before everyone entered it
                assert sum(1 for j, _ in arrived if j == i) == p
        req = comm.Ibarrier(algorithm=alg)
        req.wait()
        return True

    assert run_threads(p, body) == [True] * p


def test_barrier_env_choice(monkeypatch):
    monkeypatch.setenv("MINIMPI_BARRIER", "nonexistent")
    exc = rank_error(2, lambda c: c.Barrier(), AlgorithmError)
    assert "MINIMPI_BARRIER" in str(exc)
