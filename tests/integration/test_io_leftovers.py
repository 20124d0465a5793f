"""MPI-IO leaves no file of its own behind (issue 29): after ``Close``, ``Close`` with
``MODE_DELETE_ON_CLOSE``, shared-pointer calls, a program that never closes its file, and a
rank that dies with the file open, the data file's folder holds only what the program made
(and nothing at all with DELETE_ON_CLOSE), and no lock file is left in the host's temporary
folders. MPICH (ROMIO) leaves nothing in these cases but the crash one, where it leaves its
``.<name>.shfp.*`` file."""
from __future__ import annotations

import glob
import os
import time

import pytest
from jobhelpers import marker_args, run_minimpi

PROGRAM = """
import os, sys
import numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
folder, mode = sys.argv[1], sys.argv[2]
amode = MPI.MODE_CREATE | MPI.MODE_RDWR
if mode == "delete_on_close":
    amode |= MPI.MODE_DELETE_ON_CLOSE
fh = MPI.File.Open(comm, os.path.join(folder, "data.bin"), amode)
if mode in ("shared", "crash"):
    fh.Set_view(0, MPI.INT)
    fh.Write_shared(np.full(2, comm.rank, np.int32))
    fh.Write_ordered(np.full(1, comm.rank, np.int32))
    comm.Barrier()
if mode == "crash":
    if comm.rank == comm.size - 1:
        os._exit(3)              # dies with the file open; the launcher ends the others
    comm.Barrier()
if mode != "no_close":
    fh.Close()
comm.Barrier()
print("done", comm.rank, flush=True)
"""


def host_lock_files() -> set[str]:
    return set(glob.glob("/dev/shm/minimpi-shfp-*")) | set(glob.glob("/tmp/minimpi-shfp-*"))


def lasting(found: set[str]) -> set[str]:
    """Those of ``found`` still there a moment later (other jobs' lock files exist only
    while their File.Open runs)."""
    time.sleep(1.0)
    return found & host_lock_files()


CASES = [(mode, n, expected) for mode, expected in (
    ("close", ["data.bin"]), ("delete_on_close", []), ("shared", ["data.bin"]),
    ("no_close", ["data.bin"])) for n in (1, 3)] + [("crash", 3, ["data.bin"])]


@pytest.mark.parametrize("mode, n, expected", CASES)
def test_no_file_of_minimpi_is_left(write_script, job_marker, tmp_path, n, mode, expected):
    script = write_script("prog.py", PROGRAM)
    folder = tmp_path / "files"
    folder.mkdir()
    before = host_lock_files()
    proc = run_minimpi(*marker_args(job_marker), "-n", str(n), "--timeout", "40", script,
                       str(folder), mode, timeout=60)
    out = proc.stdout + proc.stderr
    if mode == "crash":
        assert proc.returncode != 0 and "exited with code 3" in out, out
    else:
        assert proc.returncode == 0 and out.count("done") == n, out
    assert sorted(os.listdir(folder)) == expected, out
    assert lasting(host_lock_files() - before) == set()
