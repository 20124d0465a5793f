"""Accumulates applied by the origin straight in a shared-memory window (minimpi.rma.atomics):
the byte-range lock itself, then exact totals from ranks as threads (each rank has its own
descriptor of the segment, so the ranks exclude each other as processes would), at 3 and 5
ranks, with the target not calling MPI."""
from __future__ import annotations

import os
import tempfile
import threading
import time

import numpy as np
import pytest

from minimpi import MPI
from minimpi.rma.atomics import RangeLock
from minimpi.rma.exposed import Exposed
from minimpi.rma.layout import Layout
from minimpi.runtime.inproc import run_threads

SIZES = [3, 5]


# ----------------------------------------------------------------------------- the lock
@pytest.fixture
def segment_file():
    fd, path = tempfile.mkstemp(prefix="minimpi-test-seg-")
    os.ftruncate(fd, 4096)
    os.close(fd)
    opened = []

    def open_one():
        d = os.open(path, os.O_RDWR)
        opened.append(d)
        return d

    yield open_one
    for d in opened:
        try:
            os.close(d)
        except OSError:
            pass
    os.unlink(path)


def _entered_while(first: RangeLock, first_range, second: RangeLock, second_range,
                   write_first=True, write_second=True) -> bool:
    """Does ``second`` get its range while ``first`` holds its own? (waits 0.3 s for it)"""
    holding, entered, release = threading.Event(), threading.Event(), threading.Event()

    def hold_first():
        with first.hold(*first_range, write=write_first):
            holding.set()
            release.wait(10)

    def take_second():
        holding.wait(10)
        with second.hold(*second_range, write=write_second):
            entered.set()

    a, b = threading.Thread(target=hold_first), threading.Thread(target=take_second)
    a.start()
    b.start()
    got_it = entered.wait(0.3)
    release.set()
    a.join(10)
    b.join(10)
    assert entered.is_set(), "the second holder never got the range after the first left"
    return got_it


def test_overlapping_ranges_exclude_each_other_across_descriptors(segment_file):
    offsets = [0, 64, 128]
    a, b = RangeLock(segment_file(), offsets), RangeLock(segment_file(), offsets)
    # rank 1's bytes 4..12 and 8..16 overlap: the second waits for the first
    assert not _entered_while(a, (1, 4, 12), b, (1, 8, 16))
    # disjoint bytes of the same part, or another rank's part: no waiting
    assert _entered_while(a, (1, 0, 8), b, (1, 8, 16))
    assert _entered_while(a, (1, 0, 64), b, (2, 0, 64))


def test_readers_share_a_range_and_writers_exclude_them(segment_file):
    offsets = [0]
    a, b = RangeLock(segment_file(), offsets), RangeLock(segment_file(), offsets)
    assert _entered_while(a, (0, 0, 8), b, (0, 0, 8), write_first=False, write_second=False)
    assert not _entered_while(a, (0, 0, 8), b, (0, 0, 8), write_first=False, write_second=True)


def test_the_servers_path_takes_the_segments_lock(segment_file):
    """A request served by the target (Exposed.atomic) waits for an origin that holds the
    range, and holds nothing for memory outside a segment."""
    offsets = [0, 64]
    memory = np.zeros(64, np.uint8)
    origin_side = RangeLock(segment_file(), offsets)
    target = Exposed(1, "win#t", memory, dynamic=False,
                     range_lock=RangeLock(segment_file(), offsets))
    layout = Layout(8, 8, np.zeros(0, np.int64), np.zeros(0, np.int64), True)

    class ServerSide:                      # the same interface as RangeLock.hold
        @staticmethod
        def hold(rank, low, high, write=True):
            return target.atomic(memory, Layout(low, high - low, layout.offsets,
                                                layout.lengths, True), write)

    assert not _entered_while(origin_side, (1, 8, 16), ServerSide, (1, 8, 16))
    assert _entered_while(origin_side, (1, 0, 8), ServerSide, (1, 8, 16))
    private = Exposed(0, "win#p", memory, dynamic=False)
    with private.atomic(memory, layout, True):      # no segment: nothing to wait for
        pass


# ----------------------------------------------------------------------------- windows
def _shared_window(comm, nbytes, unit, flavor):
    if flavor == "shared":
        return MPI.Win.Allocate_shared(nbytes, unit, None, comm)
    return MPI.Win.Allocate(nbytes, unit, None, comm)


@pytest.mark.parametrize("flavor", ["shared", "allocate"])
@pytest.mark.parametrize("n", SIZES)
def test_fetch_and_op_sum_from_every_rank_hands_out_each_ticket_once(n, flavor):
    rounds = 300

    def body(comm):
        win = _shared_window(comm, 8 if comm.rank == 0 else 0, 8, flavor)
        comm.Barrier()
        one, old = np.ones(1, "q"), np.zeros(1, "q")
        seen = []
        win.Lock_all(MPI.MODE_NOCHECK)
        for _ in range(rounds):
            win.Fetch_and_op(one, old, 0, 0, MPI.SUM)
            seen.append(int(old[0]))
        win.Unlock_all()
        comm.Barrier()
        final = int(np.frombuffer(win.tomemory(), "q")[0]) if comm.rank == 0 else None
        win.Free()
        return seen, final

    results = run_threads(n, body, timeout=120)
    assert results[0][1] == n * rounds
    assert sorted(v for seen, _ in results for v in seen) == list(range(n * rounds))
    for seen, _ in results:                 # one origin's fetches are ordered
        assert seen == sorted(seen)


@pytest.mark.parametrize("n", SIZES)
def test_accumulates_on_overlapping_ranges_give_exact_totals(n):
    """Rank r adds r+1 to elements r..r+9 of rank 0's window, 50 times, with Accumulate,
    Raccumulate and Get_accumulate mixed; every element's total is exact."""
    rounds, width, length = 50, 10, 16

    def body(comm):
        r = comm.rank
        win = MPI.Win.Allocate_shared(length * 8 if r == 0 else 0, 8, None, comm)
        comm.Barrier()
        add = np.full(width, r + 1, "q")
        fetched = np.zeros(width, "q")
        win.Lock_all()
        for i in range(rounds):
            if i % 3 == 0:
                win.Accumulate(add, 0, [r, width, MPI.INT64_T], MPI.SUM)
            elif i % 3 == 1:
                win.Raccumulate(add, 0, [r, width, MPI.INT64_T], MPI.SUM).Wait()
            else:
                win.Get_accumulate(add, fetched, 0, [r, width, MPI.INT64_T], MPI.SUM)
        win.Flush(0)
        win.Unlock_all()
        comm.Barrier()
        memory = np.frombuffer(win.tomemory(), "q").tolist() if r == 0 else None
        win.Free()
        return memory

    memory = run_threads(n, body, timeout=120)[0]
    expected = [sum(r + 1 for r in range(n) if r <= e < r + width) * rounds
                for e in range(length)]
    assert memory == expected


@pytest.mark.parametrize("n", SIZES)
def test_compare_and_swap_lock_handover_protects_a_plain_get_put_counter(n):
    """A mutex made of Compare_and_swap (0 -> rank+1, released by Accumulate REPLACE 0)
    guards a Get/+1/Put counter: no increment is lost, every holder saw the mutex free."""
    rounds = 40

    def body(comm):
        r = comm.rank
        win = MPI.Win.Allocate_shared(16 if r == 0 else 0, 8, None, comm)
        comm.Barrier()
        mine, free = np.array([r + 1], "q"), np.zeros(1, "q")
        old, value = np.zeros(1, "q"), np.zeros(1, "q")
        handovers = 0
        win.Lock_all()
        for _ in range(rounds):
            while True:
                win.Compare_and_swap(mine, free, old, 0, 0)
                if old[0] == 0:
                    break
                time.sleep(0.0005)          # wait for the holder without spinning
            win.Get(value, 0, [1, 1, MPI.INT64_T])
            win.Flush(0)
            value += 1
            win.Put(value, 0, [1, 1, MPI.INT64_T])
            win.Flush(0)
            win.Fetch_and_op(free, old, 0, 0, MPI.REPLACE)   # release, and check we held it
            handovers += int(old[0] == r + 1)
        win.Unlock_all()
        comm.Barrier()
        memory = np.frombuffer(win.tomemory(), "q").tolist() if r == 0 else None
        win.Free()
        return handovers, memory

    results = run_threads(n, body, timeout=120)
    assert [h for h, _ in results] == [rounds] * n
    assert results[0][1] == [0, n * rounds]


def test_accumulate_on_one_host_needs_no_mpi_call_from_the_target():
    """Rank 0 computes without calling MPI while the others accumulate into its shared
    window: the accumulates land anyway (applied by the origins)."""

    def body(comm):
        win = MPI.Win.Allocate_shared(8 if comm.rank == 0 else 0, 8, None, comm)
        mem = np.frombuffer(win.tomemory(), "q") if comm.rank == 0 else None
        comm.Barrier()
        seen = None
        if comm.rank == 0:
            deadline = time.monotonic() + 10
            while mem[0] != 3 * (comm.size - 1) and time.monotonic() < deadline:
                time.sleep(0.001)
            seen = int(mem[0])
        else:
            win.Lock(0, MPI.LOCK_SHARED, MPI.MODE_NOCHECK)
            old = np.zeros(1, "q")
            win.Accumulate(np.array([1], "q"), 0, 0, MPI.SUM)
            win.Fetch_and_op(np.array([2], "q"), old, 0, 0, MPI.SUM)
            win.Unlock(0)
        comm.Barrier()
        win.Free()
        return seen

    assert run_threads(3, body, transport="tcp", timeout=60)[0] == 6
