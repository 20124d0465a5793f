"""``MPI.Win`` exports this rank's window memory by the buffer protocol, as mpi4py's does:
``memoryview(win)``, ``np.frombuffer(win)`` and ``np.asarray(win)`` are the memory one-sided
operations read and write (one dimension of unsigned bytes, writable; a dynamic window has
none). Python 3.12+ through ``Win.__buffer__``; before, through the type's buffer slot
(:mod:`minimpi.rma.export`)."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from minimpi import MPI
from minimpi.rma import export
from minimpi.runtime.inproc import run_threads


def test_the_export_is_active_on_this_interpreter():
    assert export.ACTIVE, export.reason()


@pytest.mark.parametrize("flavor", ["allocate", "shared", "create"])
def test_frombuffer_and_memoryview_see_the_window_memory(flavor):
    def body(comm):
        if flavor == "allocate":
            win = MPI.Win.Allocate(16, 4, comm=comm)
        elif flavor == "shared":
            win = MPI.Win.Allocate_shared(16, 4, comm=comm)
        else:
            win = MPI.Win.Create(bytearray(16), 4, comm=comm)
        view = memoryview(win)
        at = np.frombuffer(view, np.uint8).ctypes.data == win.tomemory().address
        shape = (view.format, view.shape, view.readonly, view.nbytes, at)
        mine = np.frombuffer(win, dtype="i4")
        mine[:] = comm.rank                           # a store into the window ...
        win.Fence()
        got = np.zeros(4, "i4")
        win.Get(got, (comm.rank + 1) % comm.size)     # ... is what the neighbour reads
        win.Fence()
        win.Put(np.full(4, 10 + comm.rank, "i4"), (comm.rank + 1) % comm.size)
        win.Fence()
        after_put = np.asarray(win).view("i4").tolist()   # a Put lands in the same memory
        same = np.frombuffer(win.tomemory(), "i4").tolist()
        win.Free()
        return shape, got.tolist(), after_put, same

    results = run_threads(3, body, timeout=60)
    for rank, (shape, got, after_put, same) in enumerate(results):
        assert shape == ("B", (16,), False, 16, True)
        assert got == [(rank + 1) % 3] * 4
        assert after_put == same == [10 + (rank - 1) % 3] * 4


def test_a_dynamic_window_a_subclass_and_a_freed_window():
    def body(comm):
        dyn = MPI.Win.Create_dynamic(comm=comm)
        empty = memoryview(dyn).nbytes
        dyn.Free()

        class Mine(MPI.Win):
            pass

        win = MPI.Win.Allocate(8, 1, comm=comm)
        np.frombuffer(Mine(win), "u1")[:] = 7        # a subclass handle exports it too
        held = np.frombuffer(win, "u1")
        win.Free()
        kept = held.tolist()            # a view taken before Free keeps the memory alive
        return empty, kept

    assert run_threads(2, body, timeout=60) == [(0, [7] * 8)] * 2


@pytest.mark.skipif(sys.version_info < (3, 12), reason="before 3.12 a null window exports "
                                                       "0 bytes (a C slot cannot raise)")
def test_a_null_window_refuses_to_export_on_312():
    with pytest.raises(MPI.Exception):
        memoryview(MPI.WIN_NULL)


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12+ raises (above)")
def test_a_null_window_exports_nothing_before_312():
    assert memoryview(MPI.WIN_NULL).nbytes == 0
