"""Comm.Abort in an in-process world: every rank's waits end, none of them hangs."""
from __future__ import annotations

import time

import pytest

from minimpi.errors import JobAbortedError
from minimpi.runtime.inproc import RankFailed, run_threads


def test_abort_ends_every_rank_waiting_on_it():
    def body(comm):
        if comm.rank == 1:
            time.sleep(0.05)            # the others are already waiting in recv
            comm.Abort(5)
        return comm.recv(source=1)

    started = time.monotonic()
    with pytest.raises(RankFailed) as info:
        run_threads(3, body, timeout=10)
    assert time.monotonic() - started < 5
    assert isinstance(info.value.exc, JobAbortedError)
    assert "called Abort(5)" in str(info.value.exc)
