"""Freeing a datatype while an operation still uses it (issue 29): MPI's ``MPI_Type_free``
only marks the handle; an operation that was given the type completes with it, and a
persistent request keeps it for every ``Start`` (MPICH does so: the same programs run under
mpi4py 4.1.2 + MPICH 5.0.2). minimpi raised "has been freed" at the Wait or the Start. The
freed handle itself stays unusable for new calls."""
from __future__ import annotations

import numpy as np
import pytest

from minimpi import MPI
from minimpi.runtime.inproc import run_threads


def every_other():
    return MPI.DOUBLE.Create_vector(3, 1, 2).Commit()     # items 0, 2, 4 of 6 doubles


def run(n, body):
    return run_threads(n, body, timeout=30)


def test_irecv_then_free_then_wait():
    def body(comm):
        vec = every_other()
        a = np.arange(6.0) if comm.rank == 0 else np.full(6, -1.0)
        if comm.rank == 0:
            comm.Send([a, 1, vec], dest=1)
        else:
            req = comm.Irecv([a, 1, vec], source=0)
            vec.Free()
            req.Wait()
        return a.tolist()

    assert run(2, body)[1] == [0.0, -1.0, 2.0, -1.0, 4.0, -1.0]


def test_isend_and_ibcast_then_free_then_wait():
    def body(comm):
        vec = every_other()
        a = np.arange(6.0) if comm.rank == 0 else np.full(6, -1.0)
        req = comm.Ibcast([a, 1, vec], root=0)
        vec.Free()
        req.Wait()
        vec2 = every_other()
        out = np.zeros(6)
        reqs = [comm.Isend([a, 1, vec2], dest=(comm.rank + 1) % comm.size),
                comm.Irecv([out, 1, vec2], source=(comm.rank - 1) % comm.size)]
        vec2.Free()
        MPI.Request.Waitall(reqs)
        return a.tolist(), out.tolist()

    for a, out in run(3, body):
        assert a == [0.0, -1.0, 2.0, -1.0, 4.0, -1.0] or a == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
        assert out == [0.0, 0.0, 2.0, 0.0, 4.0, 0.0]


def test_persistent_point_to_point_requests_keep_working_after_free():
    def body(comm):
        vec = every_other()
        a = np.zeros(6)
        if comm.rank == 0:
            req = comm.Send_init([a, 1, vec], dest=1)
        else:
            req = comm.Recv_init([a, 1, vec], source=0)
        vec.Free()
        got = []
        for i in range(3):
            if comm.rank == 0:
                a[:] = np.arange(6.0) + 10 * i
            req.Start()
            req.Wait()
            got.append(a.tolist())
        req.Free()
        return got

    _, received = run(2, body)
    assert received == [[10.0 * i, 0.0, 10.0 * i + 2, 0.0, 10.0 * i + 4, 0.0] for i in range(3)]


def test_persistent_collectives_keep_working_after_free():
    def body(comm):
        vec = every_other()
        a = np.zeros(6)
        req = comm.Bcast_init([a, 1, vec], root=0)
        vec.Free()
        got = []
        for i in range(2):
            if comm.rank == 0:
                a[:] = np.arange(6.0) + i
            req.Start()
            req.Wait()
            got.append(a[::2].tolist())
        req.Free()
        return got

    for got in run(3, body):
        assert got == [[0.0, 2.0, 4.0], [1.0, 3.0, 5.0]]


def test_a_freed_handle_is_refused_by_new_calls():
    def body(comm):
        vec = every_other()
        vec.Free()
        with pytest.raises(MPI.Exception, match="freed"):
            comm.Isend([np.zeros(6), 1, vec], dest=comm.rank)
        with pytest.raises(MPI.Exception, match="freed"):
            comm.Send_init([np.zeros(6), 1, vec], dest=comm.rank).Start()
        with pytest.raises(MPI.Exception):
            vec.Get_size()
        return "ok"

    assert run(1, body) == ["ok"]


def test_a_file_view_outlives_the_freed_filetype(tmp_path):
    path = tmp_path / "view.dat"
    fh = MPI.File.Open(MPI.COMM_SELF, path, MPI.MODE_CREATE | MPI.MODE_RDWR)
    filetype = MPI.INT.Create_vector(2, 1, 2).Commit()
    fh.Set_view(0, MPI.INT, filetype)
    filetype.Free()
    _, _, shown, _ = fh.Get_view()
    shown.Free()                                 # the program frees what Get_view gave it
    fh.Write(np.array([1, 2, 3, 4], np.int32))
    fh.Close()
    # tiles of 3 ints (extent of VECTOR(2, 1, 2)), data at ints 0 and 2 of each
    assert np.fromfile(path, np.int32)[[0, 2, 3, 5]].tolist() == [1, 2, 3, 4]
