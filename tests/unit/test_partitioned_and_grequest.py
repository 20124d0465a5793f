"""Partitioned point-to-point (Psend_init/Precv_init, Pready*, Parrived) on in-process
worlds of 3 and 5, and generalized requests (Grequest) completed from a thread."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from minimpi import MPI
from minimpi.runtime.inproc import run_threads


@pytest.mark.parametrize("size", [3, 5])
def test_ring_of_partitioned_requests_restarted(size):
    def prog(comm):
        r, p = comm.rank, comm.size
        send = np.zeros(8, dtype=np.int64)
        recv = np.full(8, -1, dtype=np.int64)
        sreq = comm.Psend_init(send, 4, (r + 1) % p, tag=7)
        rreq = comm.Precv_init(recv, 4, (r - 1) % p, tag=7)
        # an ordinary ANY_TAG message in flight at the same time must not be taken for a part
        plain = np.zeros(1, dtype=np.int64)
        got = []
        for k in range(3):
            comm.Barrier()
            rreq.Start()
            early = [rreq.Parrived(i) for i in range(4)]
            comm.Barrier()                          # nobody has sent a part yet
            sreq.Start()
            send[:] = 100 * k + r
            comm.Send(np.array([-5]), (r + 1) % p, tag=7)
            sreq.Pready_list([3, 1])                # 3 and 1 wait for 0 (parts leave in order)
            sreq.Pready(0)
            sreq.Pready_range(2, 2)
            comm.Recv(plain, (r - 1) % p, tag=MPI.ANY_TAG)
            MPI.Request.Waitall([rreq, sreq])
            arrived = rreq.Parrived(0)              # inactive now: True, as MPI says
            got.append((early, recv.copy(), int(plain[0]), arrived))
        sreq.Free()
        rreq.Free()
        return got, sreq == MPI.REQUEST_NULL

    for r, (got, freed) in enumerate(run_threads(size, prog)):
        left = (r - 1) % size
        assert freed
        for k, (early, recv, plain, arrived) in enumerate(got):
            assert early == [False] * 4 and arrived is True
            np.testing.assert_array_equal(recv, np.full(8, 100 * k + left))
            assert plain == -5


def test_partitioned_argument_errors():
    def prog(comm):
        errors = []
        calls = (lambda: comm.Psend_init(np.zeros(5), 2, 0),          # 40 bytes into 2: ok
                 lambda: comm.Psend_init(np.zeros(5, dtype=np.int8), 2, 0),   # 5 bytes into 2
                 lambda: comm.Precv_init(np.zeros(4), 2),            # wildcards refused
                 lambda: comm.Psend_init(np.zeros(4), 0, 0))         # no partitions
        for call in calls:
            try:
                call().Free()
                errors.append("ok")
            except MPI.Exception as exc:
                errors.append(exc.Get_error_class())
        req = comm.Psend_init(np.zeros(4), 2, MPI.PROC_NULL)
        for misuse in (lambda: req.Pready(0),                        # not started
                       lambda: req.Parrived(0)):                     # a send has no Parrived
            try:
                misuse()
            except MPI.Exception as exc:
                errors.append(exc.Get_error_class())
        req.Start()
        for misuse in (lambda: req.Pready(2), lambda: (req.Pready(0), req.Pready(0))):
            try:
                misuse()
            except MPI.Exception as exc:
                errors.append(exc.Get_error_class())
        req.Pready(1)
        req.Wait()
        try:
            comm.Send_init(np.zeros(1), 0).Pready(0)
        except MPI.Exception as exc:
            errors.append(exc.Get_error_class())
        return errors

    for errors in run_threads(3, prog):
        assert errors == ["ok", MPI.ERR_COUNT, MPI.ERR_ARG, MPI.ERR_ARG, MPI.ERR_REQUEST,
                          MPI.ERR_REQUEST, MPI.ERR_ARG, MPI.ERR_REQUEST, MPI.ERR_REQUEST]


def test_grequest_completed_by_a_thread():
    calls = []

    def query(status, tag):
        status.Set_source(2)
        status.Set_tag(tag)
        calls.append("query")

    greq = MPI.Grequest.Start(query, lambda tag: calls.append("free"),
                              lambda done, tag: calls.append(("cancel", done)), args=(9,))
    assert not greq.Test()
    greq.Cancel()
    worker = threading.Timer(0.2, greq.complete, args=("result",))
    worker.start()
    status = MPI.Status()
    assert greq.wait(status) == "result"
    worker.join()
    assert (status.Get_source(), status.Get_tag()) == (2, 9)
    assert calls == [("cancel", False), "query", "free"]
    assert not greq and greq.test() == (True, None)
    with pytest.raises(MPI.Exception):
        greq.Complete()

    def bad_query(status):
        raise ValueError("no status")

    failing = MPI.Grequest.Start(bad_query)
    failing.Complete()
    with pytest.raises(MPI.Exception) as info:
        MPI.Request.Waitall([failing])
    assert info.value.Get_error_class() == MPI.ERR_OTHER
    with pytest.raises(TypeError):
        MPI.Prequest(MPI.Grequest.Start())
