"""Rank program for tests/integration/test_io.py: ``io_checks.py CHECK FOLDER``.

Every check asserts its outcome on every rank and prints ``CHECK ok`` on rank 0."""
from __future__ import annotations

import os
import sys

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(__file__))
from strided_type import HAVE_SEAM, strided_bytes  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
check, folder = sys.argv[1], sys.argv[2]
path = os.path.join(folder, f"{check}.dat")
RW = MPI.MODE_CREATE | MPI.MODE_RDWR


def expect_error(error_class: int, fn, *words: str) -> str:
    try:
        fn()
    except MPI.Exception as e:
        assert e.Get_error_class() == error_class, (e.Get_error_class(), str(e))
        for w in words:
            assert w in str(e), (w, str(e))
        return str(e)
    raise AssertionError(f"rank {rank}: no error raised, expected class {error_class}")


def blocks(info=None, reverse=False):
    """Every rank writes its block of one shared file, then all read it all back."""
    n = 10007                                 # not a multiple of the 4 KiB domain alignment
    fh = MPI.File.Open(comm, path, RW, info or MPI.INFO_NULL)
    mine = (size - 1 - rank) if reverse else rank
    data = np.arange(n, dtype=np.float64) + 1e6 * mine
    fh.Write_at_all(mine * data.nbytes, data)
    fh.Sync()
    assert fh.Get_size() == size * data.nbytes
    everything = np.empty(size * n)
    st = MPI.Status()
    fh.Read_at_all(0, everything, st)
    assert st.Get_count(MPI.DOUBLE) == size * n
    expect = np.concatenate([np.arange(n) + 1e6 * r for r in range(size)])
    assert np.array_equal(everything, expect)
    back = np.empty(n)
    fh.Read_at(mine * data.nbytes, back)       # independent read of the same bytes
    assert np.array_equal(back, data)
    fh.Close()
    comm.Barrier()
    if rank == 0:
        raw = np.fromfile(path)
        assert np.array_equal(raw, expect)
        MPI.File.Delete(path)


def pointers():
    """Individual and shared pointers, ordered access, views of etypes."""
    fh = MPI.File.Open(comm, path, RW | MPI.MODE_DELETE_ON_CLOSE)
    fh.Set_view(0, MPI.INT)
    fh.Seek(rank * 5)
    fh.Write_all(np.full(5, rank, np.int32))
    assert fh.Get_position() == rank * 5 + 5
    fh.Seek_shared(0, MPI.SEEK_END)                          # after everybody's blocks
    assert fh.Get_position_shared() == size * 5
    fh.Write_ordered(np.full(3, 100 + rank, np.int32))
    assert fh.Get_position_shared() == size * 5 + 3 * size, fh.Get_position_shared()
    comm.Barrier()                        # (before anyone moves it again)
    fh.Write_shared(np.full(2, 200 + rank, np.int32))        # some order, no overlap
    fh.Sync()
    comm.Barrier()
    allints = np.empty(size * 5 + 3 * size + 2 * size, np.int32)
    fh.Read_at_all(0, allints)
    assert np.array_equal(allints[:size * 5], np.repeat(np.arange(size), 5))
    assert np.array_equal(allints[size * 5:size * 8], np.repeat(100 + np.arange(size), 3))
    tail = allints[size * 8:].reshape(size, 2)
    assert sorted(tail[:, 0]) == list(200 + np.arange(size))
    assert (tail[:, 0] == tail[:, 1]).all()
    req = fh.Iread_at(rank * 5, got := np.empty(5, np.int32))
    req.Wait()
    assert (got == rank).all()
    assert fh.Get_byte_offset(3) == 12
    fh.Close()
    assert not os.path.exists(path)


def strided(hints=None):
    """Each rank owns every size-th block of 24 bytes (a vector view): written with
    Write_all, read back by everybody through the plain byte view."""
    blen, nblocks = 24, 300
    ftype = strided_bytes(nblocks, blen, blen * size)
    info = MPI.Info.Create(hints or {})
    fh = MPI.File.Open(comm, path, RW, info)
    fh.Set_view(rank * blen, MPI.BYTE, ftype)
    mine = np.full(nblocks * blen, rank + 1, np.uint8)
    mine[::blen] = np.arange(nblocks) % 251            # tell the blocks apart
    fh.Write_all(mine)
    fh.Sync()
    back = np.zeros_like(mine)
    fh.Set_view(rank * blen, MPI.BYTE, ftype)
    fh.Read_all(back)
    assert np.array_equal(back, mine)
    fh.Set_view(0, MPI.BYTE, MPI.BYTE)
    whole = np.empty(nblocks * blen * size, np.uint8)
    fh.Read_at_all(0, whole)
    rows = whole.reshape(nblocks, size, blen)
    for r in range(size):
        assert (rows[:, r, 1:] == r + 1).all()
        assert np.array_equal(rows[:, r, 0], np.arange(nblocks) % 251)
    fh.Close()
    comm.Barrier()
    if rank == 0:
        MPI.File.Delete(path)


def full_disk():
    """A write that does not fit: every rank raises ERR_NO_SPACE; none reports success."""
    fh = MPI.File.Open(comm, path, RW)
    block = np.ones(48 * 1024, np.uint8)        # size x 48 KiB > the 64 KiB file system
    msg = expect_error(MPI.ERR_NO_SPACE, lambda: fh.Write_at_all(rank * block.nbytes, block),
                       path)
    assert "rank" in msg
    # independent: the ranks whose bytes do not fit raise, naming the offset and ENOSPC
    # (or EFBIG under a file-size limit)
    outcome = "ok"
    try:
        fh.Write_at(rank * block.nbytes, block)
    except MPI.Exception as e:
        assert e.Get_error_class() == MPI.ERR_NO_SPACE, str(e)
        assert "byte offset" in str(e) and ("ENOSPC" in str(e) or "EFBIG" in str(e)), str(e)
        outcome = "failed"
    outcomes = comm.allgather(outcome)
    assert "failed" in outcomes
    fh.Close()
    comm.Barrier()
    if rank == 0:
        MPI.File.Delete(path)


def read_only():
    """A file opened read-only refuses writes (ERR_READ_ONLY) on every rank, collective
    and independent; missing files and existing ones under MODE_EXCL are clear errors."""
    if rank == 0:
        np.arange(100, dtype=np.int32).tofile(path)
    comm.Barrier()
    fh = MPI.File.Open(comm, path, MPI.MODE_RDONLY)
    data = np.zeros(4, np.int32)
    expect_error(MPI.ERR_READ_ONLY, lambda: fh.Write_at_all(rank * 16, data), "MODE_RDONLY")
    expect_error(MPI.ERR_READ_ONLY, lambda: fh.Write_at(rank * 16, data), "MODE_RDONLY")
    expect_error(MPI.ERR_READ_ONLY, lambda: fh.Set_size(0), "MODE_RDONLY")
    got = np.empty(4, np.int32)
    fh.Read_at_all(rank * 16, got)
    assert np.array_equal(got, np.arange(4 * rank, 4 * rank + 4))
    fh.Close()
    assert np.array_equal(np.fromfile(path, np.int32), np.arange(100))    # untouched
    expect_error(MPI.ERR_FILE_EXISTS,
                 lambda: MPI.File.Open(comm, path, RW | MPI.MODE_EXCL), path)
    missing = os.path.join(folder, "no-such-file.dat")
    expect_error(MPI.ERR_NO_SUCH_FILE, lambda: MPI.File.Open(comm, missing, MPI.MODE_RDONLY),
                 missing, "ENOENT")
    expect_error(MPI.ERR_AMODE, lambda: MPI.File.Open(comm, path, MPI.MODE_RDONLY |
                                                       MPI.MODE_CREATE))
    comm.Barrier()
    if rank == 0:
        os.unlink(path)


def read_only_fs():
    """A file on a read-only file system: opening it for writing is ERR_READ_ONLY."""
    expect_error(MPI.ERR_READ_ONLY, lambda: MPI.File.Open(comm, path, MPI.MODE_RDWR),
                 "EROFS")


CHECKS = {"blocks": blocks,
          "blocks_two_phase": lambda: blocks(MPI.Info.Create({"romio_cb_write": "enable",
                                                              "romio_cb_read": "enable",
                                                              "cb_nodes": "2"}), True),
          "pointers": pointers, "strided": strided,
          "strided_independent": lambda: strided({"romio_cb_write": "disable",
                                                  "romio_cb_read": "disable"}),
          "strided_two_phase": lambda: strided({"romio_cb_write": "enable",
                                                "romio_cb_read": "enable"}),
          "strided_rounds": lambda: strided({"romio_cb_write": "enable",
                                             "romio_cb_read": "enable",
                                             "cb_buffer_size": "4096"}),
          "full_disk": full_disk, "read_only": read_only, "read_only_fs": read_only_fs}

if check == "full_disk" and os.environ.get("IO_TEST_FSIZE"):
    import resource
    import signal
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)      # EFBIG instead of a killed rank
    limit = int(os.environ["IO_TEST_FSIZE"])
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
CHECKS[check]()
comm.Barrier()
if rank == 0:
    print(f"{check} ok" + (" (seam)" if HAVE_SEAM else ""))
