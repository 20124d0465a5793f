"""The public completion seam (minimpi.p2p.completion): a request kind another layer builds
holds a Completion, and every mpi4py request call works on it - alone, beside
point-to-point requests in Waitall/Waitany/Testsome, through a second handle."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from minimpi import MPI
from minimpi.errors import MinimpiError, RequestError, TruncationError
from minimpi.p2p.completion import Completion, LayeredRequest, layered
from minimpi.runtime.inproc import run_threads


def test_a_completed_request_gives_its_result_once_then_is_null():
    how2 = Completion()
    req2 = layered(how2, "an operation of another layer")
    assert req2 and req2 != MPI.REQUEST_NULL
    assert req2.Test() is False                 # not complete yet: still active
    how2.complete({"answer": 42})
    status = MPI.Status()
    assert req2.test(status) == (True, {"answer": 42})
    assert req2 == MPI.REQUEST_NULL and not req2          # completed by a test: null
    assert req2.wait() == {"answer": 42}                  # a repeated wait: the same result
    assert req2.test() == (True, None)                    # a null request's test


def test_a_failed_operation_raises_in_the_wait_and_waitall_completes_the_others():
    bad, good = Completion(), Completion()
    bad.fail(TruncationError("rank 0: it went wrong"))
    bad.fail(RequestError("a second error is not kept"))
    good.complete("fine")
    reqs = [layered(bad, "bad"), layered(good, "good")]
    with pytest.raises(TruncationError, match="it went wrong"):
        MPI.Request.Waitall(reqs)
    assert not reqs[1]                          # completed anyway
    assert reqs[1].wait() == "fine"


def test_on_complete_runs_once_in_the_waiter_and_its_error_is_the_requests():
    ran = []
    how = Completion()
    how.on_complete(lambda: ran.append("finish") or len(ran))
    req = layered(how, "finishing")
    how.complete("ignored: the finishing work's value wins")
    assert ran == []                            # not inside complete(): in the waiter
    assert req.wait() == 1 and req.wait() == 1 and ran == ["finish"]

    failing = Completion()
    failing.on_complete(lambda: (_ for _ in ()).throw(RequestError("bad finish")))
    freq = layered(failing, "failing finish")
    failing.complete()
    with pytest.raises(RequestError, match="bad finish"):
        freq.Wait()
    assert isinstance(freq.error, RequestError)

    skipped = Completion()
    skipped.on_complete(lambda: ran.append("must not run"))
    skipped.fail(MinimpiError("failed first"))
    with pytest.raises(MinimpiError, match="failed first"):
        layered(skipped, "failed").wait()
    assert ran == ["finish"]


def test_free_second_handles_and_handle_kinds():
    how = Completion()
    req = layered(how, "freed")
    other = LayeredRequest(req)                 # a second handle: the same completion
    assert other == req and other.completion is how
    other.Free()
    assert not req and req == MPI.REQUEST_NULL
    with pytest.raises(RequestError, match="already null"):
        req.Free()
    with pytest.raises(TypeError, match="expected a request"):
        LayeredRequest(MPI.Status())

    class Special(Completion):
        kind = "special request"

    with pytest.raises(TypeError, match="expected a special request"):
        LayeredRequest(layered(Completion(), "plain"), completion_type=Special)
    assert not LayeredRequest(completion_type=Special)     # a null handle


class AllOf(Completion):
    """A kind whose state comes from other requests (as a partitioned round's does)."""

    __slots__ = ("parts",)

    def __init__(self, engine, parts):
        super().__init__(engine)
        self.parts = parts
        self.on_complete(self._collect_parts)

    @property
    def done(self):
        return all(p.done for p in self.parts)

    def _collect_parts(self):
        return [p.wait() for p in self.parts]


@pytest.mark.parametrize("size", [3, 5])
def test_a_derived_completion_is_waited_for_beside_point_to_point_requests(size):
    def body(comm):
        r, p = comm.rank, comm.size
        engine = comm.endpoint.engine
        comm.Barrier()
        if r == 0:
            parts = [comm.irecv(source=s, tag=5) for s in range(1, p)]
            req = layered(AllOf(engine, parts), "all of the workers' objects")
            plain = comm.irecv(source=1, tag=6)
            assert req.Get_status() in (True, False)        # (does not complete it)
            index = MPI.Request.Waitany([MPI.REQUEST_NULL, req, plain])
            assert index in (1, 2)
            # (the one Waitany completed gives its result again)
            got = MPI.Request.waitall([req, plain])
            return sorted(got[0]), got[1]
        comm.send(r * 10, dest=0, tag=5)
        if r == 1:
            comm.send("plain", dest=0, tag=6)
        return None

    results = run_threads(size, body, timeout=60)
    assert results[0] == (sorted(r * 10 for r in range(1, size)), "plain")


def test_a_completion_completed_from_another_thread_ends_a_blocking_wait():
    class Threaded(Completion):
        __slots__ = ("event",)

        def __init__(self):
            super().__init__(None)
            self.event = threading.Event()

        def complete(self, result=None):
            super().complete(result)
            self.event.set()

        def wait(self, request):
            while not self.done:
                self.event.wait(0.05)

    how = Threaded()
    req = layered(how, "done by a thread")
    threading.Timer(0.05, how.complete, args=(np.arange(3),)).start()
    assert list(req.wait()) == [0, 1, 2]
    assert MPI.Request.Testsome([req]) is None      # no active request left
