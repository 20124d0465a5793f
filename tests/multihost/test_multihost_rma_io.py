"""One-sided windows and MPI-IO across two network-namespace hosts, through real ssh.

Four ranks, two per host: between hosts one-sided operations travel over TCP as requests
the target's engine serves, within a host through shared memory; the file lives on the one
file system both "hosts" see (as an NFS mount would be), written through a file view with
collective (two-phase) and independent access. Every value is checked on the rank that
receives it, and the file's bytes are checked by the test itself after the job."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import numpy as np
import pytest
from infra_common import pids_with_env

MARKER = "MINIMPI_TEST_MARKER"

PROGRAM = r'''
import sys
import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, p = comm.Get_rank(), comm.Get_size()
right, left = (rank + 1) % p, (rank - 1) % p

# --- active target: each rank puts its rank into its right neighbour's window (Fence)
mem = np.full(4, -1, np.int64)
win = MPI.Win.Create(mem, disp_unit=8, comm=comm)
win.Fence()
win.Put(np.array([rank, 10 * rank], np.int64), right, target=1)
win.Fence()
assert mem.tolist() == [-1, left, 10 * left, -1], (rank, mem.tolist())
comm.Barrier()      # every rank has looked before anyone starts the next epoch

# --- passive target: every rank adds into rank 0's slot 0 and fetches a ticket
win.Lock_all()
win.Accumulate(np.array([rank + 1], np.int64), 0, target=0, op=MPI.SUM)
ticket = np.zeros(1, np.int64)
win.Fetch_and_op(np.array([1], np.int64), ticket, 0, target_disp=3, op=MPI.SUM)
win.Unlock_all()
comm.Barrier()
tickets = comm.allgather(int(ticket[0]))
win.Lock(0, MPI.LOCK_SHARED)
got = np.zeros(4, np.int64)
win.Get(got, 0)
win.Unlock(0)
assert sorted(tickets) == [-1 + i for i in range(p)], tickets       # each ticket once
assert got[0] == -1 + p * (p + 1) // 2 and got[3] == -1 + p, got.tolist()
win.Free()

# --- MPI-IO: rank r owns blocks r, r+p, ... of 1000 bytes (a vector file view)
path = sys.argv[1]
block, nblocks = 1000, 50
ftype = MPI.BYTE.Create_vector(nblocks, block, block * p)
ftype = ftype.Create_resized(0, nblocks * block * p).Commit()
mine = np.full(nblocks * block, rank + 1, np.uint8)
for hint in ("enable", "disable"):       # two-phase, then independent
    info = MPI.Info.Create({"romio_cb_write": hint, "romio_cb_read": hint})
    fh = MPI.File.Open(comm, path, MPI.MODE_CREATE | MPI.MODE_RDWR, info)
    fh.Set_view(rank * block, MPI.BYTE, ftype, "native", info)
    fh.Write_all(mine)
    fh.Sync()
    comm.Barrier()
    fh.Sync()
    back = np.zeros_like(mine)
    fh.Set_view(right * block, MPI.BYTE, ftype, "native", info)   # the neighbour's blocks
    fh.Read_all(back)
    assert (back == right + 1).all(), (rank, hint, np.unique(back).tolist())
    fh.Close()
print(f"rank {rank} on {MPI.Get_processor_name()}: ok", flush=True)
'''


@pytest.mark.netns_hosts(n=2)
def test_windows_and_files_across_hosts(netns_hosts, tmp_path):
    marker = uuid.uuid4().hex
    prog = tmp_path / "rma_io.py"
    prog.write_text(textwrap.dedent(PROGRAM))
    data = tmp_path / "shared.dat"
    argv = [sys.executable, "-m", "minimpi", "run", "--rsh", " ".join(netns_hosts.rsh),
            "-x", f"{MARKER}={marker}", "-n", "4", "--hosts", "h1:2,h2:2",
            "--timeout", "90", str(prog), str(data)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"the job did not finish within 120 s\n{out}\n{err}")
    finally:
        left = pids_with_env(MARKER, marker)
        deadline = time.monotonic() + 5
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = pids_with_env(MARKER, marker)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out}\n{err}"
    done = sorted(line.split("] ")[-1] for line in out.splitlines() if line.endswith(": ok"))
    assert [d.split(" on ")[0] for d in done] == [f"rank {r}" for r in range(4)], out
    assert len({d.split(" on ")[1] for d in done}) == 2, f"not on two hosts:\n{out}"
    assert not left, f"processes left behind on the hosts: {left}"
    # the file as the last (independent) pass wrote it: block b belongs to rank b % 4
    raw = np.fromfile(data, np.uint8).reshape(-1, 1000)
    assert raw.shape == (200, 1000)
    assert (raw == (np.arange(200) % 4 + 1)[:, None]).all()
