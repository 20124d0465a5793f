"""'What am I blocked on' for one-sided windows: a wait inside a window's synchronisation
call is reported with the call, the window, its communicator and the epoch, and the
deadlock report names the window's ranks that have not reached a Fence."""
from __future__ import annotations

import sys
import threading

import numpy as np

from minimpi import MPI
from minimpi.bus import Subscriber
from minimpi.runtime.diagnose import (
    blocked_state,
    edge_text,
    epoch_text,
    format_state,
    window_stragglers,
)
from minimpi.runtime.inproc import run_threads


class Capture(Subscriber):
    """Keeps the state of the first wait that lasts, and says so."""

    def __init__(self, engine, seen: threading.Event) -> None:
        self.engine, self.seen, self.state = engine, seen, None

    def blocked(self, waiting_on) -> None:
        if self.state is None:
            self.state = blocked_state(self.engine, waiting_on, sys._getframe(1))
            self.seen.set()


def test_a_fence_some_ranks_reach_late_is_reported_with_its_window():
    """Ranks 0 and 1 wait in Fence; rank 2 comes only once both were reported blocked."""
    seen = [threading.Event(), threading.Event()]

    def body(comm):
        win = MPI.Win.Allocate(8, comm=comm)
        win.Set_name("w0")
        engine = comm.endpoint.engine
        capture = None
        if comm.rank < 2:
            capture = Capture(engine, seen[comm.rank])
            engine.block_report_after = 0.05
            engine.bus.subscribe(capture)
        else:
            assert all(e.wait(20) for e in seen), "ranks 0 and 1 never reported their wait"
        win.Fence()
        after = engine.activities.current()
        win.Free()
        return capture.state if capture else None, after

    (s0, after0), (s1, _), (_none, after2) = run_threads(3, body)
    assert after0 is None and after2 is None        # the activity ends with the call
    for state in (s0, s1):
        epoch = state["epoch"]
        assert (epoch["call"], epoch["win"], epoch["comm"], epoch["epoch"]) == (
            "Win.Fence", "w0", "COMM_WORLD", "fence")
        assert epoch["group"] == [0, 1, 2] and epoch["collective"]
    stragglers = window_stragglers({0: s0, 1: s1})
    assert stragglers == {0: [2], 1: [2]}
    text = format_state(s0, stragglers[0])
    assert text.startswith("blocked in Win.Fence on window 'w0' (COMM_WORLD), fence epoch, "
                           "rank 2 has not reached it at test_rma_diagnose.py:"), text
    assert "win.Fence()" in text
    # two missing ranks; a rank not in a window call is described as before
    assert window_stragglers({0: s0}) == {0: [1, 2]}
    assert "ranks 1, 2 have not reached it" in format_state(s0, [1, 2])
    assert "Win.Fence" not in format_state({**s0, "epoch": None})
    assert edge_text(0, s0, {}, 2).startswith("rank 0 waits for rank 2 in Win.Fence on "
                                               "window 'w0'")


def test_a_wait_for_an_origin_that_never_completes_names_it():
    """Post/Wait on rank 0 for origins 1 and 2: rank 2 completes, rank 1 comes late."""
    seen = threading.Event()

    def body(comm):
        win = MPI.Win.Create(np.zeros(4), comm=comm)
        engine = comm.endpoint.engine
        state = None
        if comm.rank == 0:
            capture = Capture(engine, seen)
            engine.block_report_after = 0.05
            engine.bus.subscribe(capture)
            win.Post(comm.Get_group().Incl([1, 2]))
            win.Wait()
            state = capture.state
        else:
            if comm.rank == 1:
                assert seen.wait(20), "rank 0 never reported its wait"
            win.Start(comm.Get_group().Incl([0]))
            win.Put(np.ones(1), 0)
            win.Complete()
        win.Free()
        return state

    state = run_threads(3, body)[0]
    epoch = state["epoch"]
    assert epoch["call"] == "Win.Wait" and epoch["win"].startswith("win#")
    assert epoch_text(epoch) == (f"Win.Wait on window {epoch['win']!r} (COMM_WORLD), exposure "
                                 f"(post/start/complete/wait) epoch, waiting for ranks 1, 2")
    assert window_stragglers({0: state}) == {}      # a targeted call: no stragglers
