"""The fused fast path of Put/Get/Flush into memory a rank reaches directly
(minimpi.rma.direct): which origins it takes, values through it, its errors (the general
path's, naming rank, window, offset and size), and that a rank spinning on it still serves
its peers."""
from __future__ import annotations

import time

import numpy as np
import pytest

from minimpi import MPI
from minimpi.rma import direct
from minimpi.rma.operations import Operations
from minimpi.runtime.inproc import RankFailed, run_threads


def run(n, fn, wire="inproc"):
    return run_threads(n, fn, transport=wire, timeout=60)


def test_origin_view_takes_contiguous_named_origins_only():
    a = np.arange(4, dtype="i")
    assert bytes(direct.origin_view(a, False)) == a.tobytes()
    assert bytes(direct.origin_view([a, 2, MPI.INT], False)) == a[:2].tobytes()
    assert len(direct.origin_view([a, 16, MPI.BYTE], True)) == 16
    assert direct.origin_view([a, 5, MPI.INT], False) is None          # more than it holds
    assert direct.origin_view(a[::2], False) is None                   # not contiguous
    vec = MPI.INT.Create_vector(2, 1, 2).Commit()
    assert direct.origin_view([a, 1, vec], False) is None              # derived type
    vec.Free()
    assert direct.origin_view([a, 2, MPI.DOUBLE_INT], False) is None   # padded pair type
    ro = np.arange(4, dtype="i")
    ro.flags.writeable = False
    assert direct.origin_view(ro, False) is not None
    assert direct.origin_view(ro, True) is None                        # a Get's landing
    assert direct.origin_view(bytearray(4), False) is None             # general path
    assert direct.origin_view(np.zeros(2, "O"), False) is None


def test_a_handle_of_another_size_with_a_freed_handles_id_gets_its_own_size():
    """Handle objects on named types come and go; one made where a freed one of another
    size lived must not be taken for it (8 of 16 bytes were sent before)."""
    a = np.zeros(4, np.float64)
    for _ in range(50):          # CPython hands a freed object's memory to the next one
        small = MPI.Datatype(MPI.INT)
        assert len(direct.origin_view([a, 2, small], False)) == 8
        del small
        big = MPI.Datatype(MPI.DOUBLE)
        assert len(direct.origin_view([a, 2, big], False)) == 16
        del big


@pytest.mark.parametrize("n", [2, 3])
def test_put_get_flush_values_through_the_fast_path(n, monkeypatch):
    taken = []

    def general(name):
        real = getattr(Operations, name)

        def spy(self, *args):
            taken.append(name)
            return real(self, *args)
        return spy

    monkeypatch.setattr(Operations, "_put", general("_put"))
    monkeypatch.setattr(Operations, "_get", general("_get"))

    def body(comm):
        r, size = comm.rank, comm.size
        win = MPI.Win.Allocate(8 * 4, 4, None, comm)
        mine = np.frombuffer(win.tomemory(), "i")
        mine[:] = -1
        comm.Barrier()
        right, left = (r + 1) % size, (r - 1) % size
        win.Lock_all()
        win.Put(np.array([r, 10 * r], "i"), right, 2)           # plain array, disp in ints
        win.Put([np.array([7, 100 + r, 9], "i"), 1, MPI.INT], right, 5)
        win.Flush(right)
        win.Unlock_all()
        comm.Barrier()
        win.Lock_all()
        got = np.zeros(8, "i")
        win.Get(got, left)                                      # the whole window
        part = np.zeros(2, "i")
        win.Get([part, 2, MPI.INT], r, 2)                       # its own part
        win.Flush(left)
        win.Unlock_all()
        win.Free()
        return mine.tolist(), got.tolist(), part.tolist()

    for r, (mine, got, part) in enumerate(run(n, body)):
        left = (r - 1) % n
        assert mine == [-1, -1, left, 10 * left, -1, 7, -1, -1]
        assert part == [left, 10 * left]
        ll = (left - 1) % n
        assert got == [-1, -1, ll, 10 * ll, -1, 7, -1, -1]
    assert taken == []          # every call above went the fast way


def test_other_target_forms_take_the_general_path(monkeypatch):
    taken = []
    real = Operations._put

    def spy(self, *args):
        taken.append(args[-1])
        return real(self, *args)

    monkeypatch.setattr(Operations, "_put", spy)

    def body(comm):
        win = MPI.Win.Allocate(16, 4, None, comm)
        win.Fence()
        if comm.rank == 0:
            win.Put(np.array([5, 6], "i"), 1, [1, 2, MPI.INT])     # [disp, count, type]
        win.Fence()
        out = np.frombuffer(win.tomemory(), "i").tolist()
        win.Free()
        return out

    assert run(2, body)[1][1:3] == [5, 6]
    assert taken == ["Put"]


def _error_of(fn, n=2):
    with pytest.raises(RankFailed) as info:
        run(n, fn)
    return info.value.__cause__


@pytest.mark.parametrize("op", ["Put", "Get"])
def test_out_of_window_names_rank_window_offset_and_size(op):
    def body(comm):
        win = MPI.Win.Allocate(4 * (4 + comm.rank), 4, None, comm)    # rank 1: 20 bytes
        win.Lock_all()
        if comm.rank == 0:
            getattr(win, op)(np.zeros(3, "i"), 1, 3)                   # bytes 12..24
        win.Unlock_all()                # (rank 1 leaves without a collective Free)

    exc = _error_of(body)
    assert isinstance(exc, MPI.Exception) and exc.Get_error_class() == MPI.ERR_RMA_RANGE
    text = str(exc)
    assert f"Win.{op}" in text and "rank 0" in text and "of rank 1" in text
    assert "12 bytes at offset 12" in text and "20 bytes" in text and "win#" in text


def test_fast_put_and_flush_outside_an_epoch_are_err_rma_sync():
    def put(comm):
        win = MPI.Win.Allocate(8, 1, None, comm)
        win.Put(np.zeros(2, "i"), 1 - comm.rank)

    exc = _error_of(put)
    assert exc.Get_error_class() == MPI.ERR_RMA_SYNC and "Win.Put" in str(exc)

    def flush(comm):
        win = MPI.Win.Allocate(8, 1, None, comm)
        win.Flush(1 - comm.rank)

    exc = _error_of(flush)
    assert exc.Get_error_class() == MPI.ERR_RMA_SYNC and "Flush needs" in str(exc)


def test_freed_window_leaves_the_fast_path():
    def body(comm):
        win = MPI.Win.Allocate(8, 1, None, comm)
        handle = MPI.Win(win)
        win.Free()
        try:
            handle.Put(np.zeros(2, "i"), 0)
        except MPI.Exception as exc:
            return exc.Get_error_class()
        return None

    assert run(2, body) == [MPI.ERR_WIN] * 2


@pytest.mark.parametrize("wire", ["inproc", "tcp"])
def test_a_rank_spinning_on_fast_gets_still_grants_its_lock(wire):
    """Rank 0 polls its own memory with Get (fast path, no other MPI call) until rank 1 has
    written it under an exclusive lock - which rank 0's progress must grant."""
    def body(comm):
        win = MPI.Win.Allocate(8, 4, None, comm)
        np.frombuffer(win.tomemory(), "i")[:] = 0
        comm.Barrier()
        seen = None
        if comm.rank == 0:
            win.Lock_all(MPI.MODE_NOCHECK)              # no lock taken: rank 1 may lock 0
            box = np.zeros(1, "i")
            deadline = time.monotonic() + 20
            while box[0] != 42 and time.monotonic() < deadline:
                win.Get(box, 0, 1)
                win.Flush(0)
            win.Unlock_all()
            seen = int(box[0])
        else:
            win.Lock(0, MPI.LOCK_EXCLUSIVE)             # granted by rank 0's server
            win.Put(np.array([42], "i"), 0, 1)
            win.Unlock(0)
        comm.Barrier()
        win.Free()
        return seen

    assert run(2, body, wire)[0] == 42
