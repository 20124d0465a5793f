"""A program with a user-defined data representation (``MPI.Register_datarep``, issue 29:
refused before) over real processes at n = 1 and 3: every rank registers a byte-swapping
representation, writes its block with ``Write_at_all`` and reads the whole file back. The
file must hold the big-endian values (what external32 writes for int32), and a second
registration of the name must be ERR_DUP_DATAREP, as mpi4py's test_io checks. MPICH 5.0.2
cannot run it: it refuses conversion functions (ERR_UNSUPPORTED_DATAREP)."""
from __future__ import annotations

import numpy as np
import pytest
from jobhelpers import marker_args, run_minimpi

PROGRAM = """
import sys
import numpy as np
from mpi4py import MPI
from mpi4py.util import dtlib
comm = MPI.COMM_WORLD


def swap(userbuf, datatype, count, filebuf, position, to_file):
    dt = dtlib.to_numpy_dtype(datatype)
    user = np.frombuffer(userbuf, dt, count, position * datatype.extent)
    file = np.frombuffer(filebuf, dt, count)
    if to_file:
        file[...] = user.byteswap()
    else:
        user[...] = file.byteswap()


MPI.Register_datarep("swap", lambda *a: swap(*a, False), lambda *a: swap(*a, True),
                     lambda datatype: datatype.extent)
try:
    MPI.Register_datarep("swap", None, None, lambda datatype: datatype.extent)
except MPI.Exception as exc:
    assert exc.Get_error_class() == MPI.ERR_DUP_DATAREP
fh = MPI.File.Open(comm, sys.argv[1], MPI.MODE_CREATE | MPI.MODE_RDWR)
fh.Set_view(0, MPI.INT, MPI.INT, datarep="swap")
fh.Write_at_all(4 * comm.rank, np.arange(4, dtype=np.int32) + 100 * comm.rank)
fh.Sync()
back = np.zeros(4 * comm.size, np.int32)
fh.Read_at_all(0, back)
fh.Close()
print("BACK", comm.rank, back.tolist(), flush=True)
"""


@pytest.mark.parametrize("n", [1, 3])
def test_a_byte_swapping_representation_over_real_processes(write_script, job_marker,
                                                             tmp_path, n):
    script = write_script("swap.py", PROGRAM)
    path = tmp_path / "swapped.dat"
    proc = run_minimpi(*marker_args(job_marker), "-n", str(n), "--timeout", "40", script,
                       str(path), timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    want = [v + 100 * r for r in range(n) for v in range(4)]
    for r in range(n):
        assert f"BACK {r} {want}" in proc.stdout, proc.stdout + proc.stderr
    assert path.read_bytes() == np.array(want, ">i4").tobytes()
