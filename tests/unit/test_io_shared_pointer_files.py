"""Where the shared file pointer's lock file lives, and that none is left (issue 29: an empty
``.<name>.<random>.shfp`` was left beside the data file by a job that ended without ``Close``
or lost a rank). Ranks are threads here; tests/integration/test_io_leftovers.py runs the same
over real processes."""
from __future__ import annotations

import glob
import os

import numpy as np

from minimpi import MPI
from minimpi.runtime.inproc import run_threads

RW = MPI.MODE_CREATE | MPI.MODE_RDWR


def lock_files(folder) -> list[str]:
    return sorted(n for n in os.listdir(folder) if "shfp" in n)


def host_lock_files() -> set[str]:
    return set(glob.glob("/dev/shm/minimpi-shfp-*")) | set(glob.glob("/tmp/minimpi-shfp-*"))


def test_on_one_host_no_lock_file_has_a_name_once_open_returns(tmp_path):
    before = host_lock_files()
    path = str(tmp_path / "one.dat")

    def body(comm):
        fh = MPI.File.Open(comm, path, RW)
        comm.Barrier()
        seen_open = lock_files(tmp_path) + sorted(host_lock_files() - before)
        fh.Set_view(0, MPI.INT)
        fh.Write_shared(np.array([comm.rank], np.int32))
        comm.Barrier()
        where = fh.Get_position_shared()
        comm.Barrier()
        fh.Close()
        return seen_open, where

    results = run_threads(3, body, timeout=30)
    assert all(seen == [] for seen, _ in results), results
    assert all(where == 3 for _, where in results), results    # one shared pointer
    assert sorted(np.fromfile(path, np.int32).tolist()) == [0, 1, 2]
    assert lock_files(tmp_path) == [] and host_lock_files() - before == set()


def test_on_several_hosts_the_lock_file_is_made_by_the_first_use_and_removed_at_close(tmp_path):
    path = str(tmp_path / "many.dat")

    def body(comm):
        fh = MPI.File.Open(comm, path, RW)
        fh.Set_view(0, MPI.INT)              # (resetting a pointer nobody made needs no file)
        comm.Barrier()
        before_use = lock_files(tmp_path)
        comm.Barrier()
        if comm.rank == 2:
            fh.Write_shared(np.array([7, 7], np.int32))
        comm.Barrier()
        after_use = lock_files(tmp_path)
        where = fh.Get_position_shared()
        comm.Barrier()
        fh.Close()
        return before_use, after_use, where

    results = run_threads(3, body, timeout=30, hosts=["a", "b", "a"])
    for before_use, after_use, where in results:
        assert before_use == [] and len(after_use) == 1 and where == 2, results
        assert after_use[0].startswith(".many.dat.") and after_use[0].endswith(".shfp")
    assert lock_files(tmp_path) == []


def test_on_several_hosts_a_file_whose_pointer_is_never_used_makes_no_lock_file(tmp_path):
    path = str(tmp_path / "unused.dat")

    def body(comm):
        fh = MPI.File.Open(comm, path, RW | MPI.MODE_APPEND)   # (APPEND sets the pointer)
        fh.Write_at_all(4 * comm.rank, np.array([comm.rank], np.int32))
        seen = lock_files(tmp_path)
        fh.Close()
        return seen

    assert run_threads(3, body, timeout=30, hosts=["a", "b", "c"]) == [[]] * 3
    assert lock_files(tmp_path) == []
