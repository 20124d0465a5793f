"""Intercommunicators over real processes: ``minimpi run -n 5`` splits the world into
groups of 2 and 3, joins them with ``Create_intercomm``, broadcasts and reduces across,
merges them back, and checks every value (mpi4py's spelling, through the shim)."""
from __future__ import annotations

import pytest
from jobhelpers import assert_no_leftovers, marker_args, run_minimpi

PROGRAM = r'''
import numpy as np
from mpi4py import MPI

world = MPI.COMM_WORLD
rank = world.Get_rank()
color = 0 if rank < 2 else 1
local = world.Split(color, key=rank)
inter = local.Create_intercomm(0, world, 2 if color == 0 else 0, tag=17)
assert isinstance(inter, MPI.Intercomm) and inter.Is_inter()
assert (inter.Get_size(), inter.Get_remote_size()) == ((2, 3) if color == 0 else (3, 2))

# Bcast from group A's rank 1 to group B
buf = np.arange(4, dtype=np.float64) * 10 if rank == 1 else np.full(4, -1.0)
if color == 0:
    inter.Bcast(buf, root=MPI.ROOT if inter.rank == 1 else MPI.PROC_NULL)
else:
    inter.Bcast(buf, root=1)
    assert buf.tolist() == [0.0, 10.0, 20.0, 30.0], buf

# Allreduce across: each group gets the sum of the other group's world ranks
out = np.zeros(3, dtype=np.int64)
inter.Allreduce(np.full(3, rank, dtype=np.int64), out, op=MPI.SUM)
assert out.tolist() == [9] * 3 if color == 0 else [1] * 3, out
assert inter.allreduce(rank, op=MPI.MAX) == (4 if color == 0 else 1)

# point-to-point addresses the remote group
if color == 0:
    inter.send(("hello", rank), dest=inter.rank, tag=3)
elif inter.rank < 2:
    assert inter.recv(source=inter.rank, tag=3) == ("hello", inter.rank)

merged = inter.Merge(high=(color == 1))
assert (merged.Get_rank(), merged.Get_size()) == (rank, 5)
assert merged.allreduce(rank) == 10
gathered = merged.allgather(color)
assert gathered == [0, 0, 1, 1, 1], gathered
for comm in (merged, inter, local):
    comm.Free()
print(f"rank {rank} ok")
'''


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_intercomm_across_processes(tmp_path, transport):
    prog = tmp_path / "intercomm.py"
    prog.write_text(PROGRAM)
    marker = f"intercomm-{tmp_path.name}"
    result = run_minimpi("-n", "5", "--timeout", "60", "--transport", transport,
                         *marker_args(marker), str(prog), timeout=90)
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(line for line in result.stdout.splitlines() if "ok" in line) == \
        [f"[{r}] rank {r} ok" for r in range(5)]
    assert_no_leftovers(marker)


FORCED = r'''
import numpy as np
from mpi4py import MPI

world = MPI.COMM_WORLD
rank = world.Get_rank()
buf = np.full(2, float(rank))
world.Bcast(buf, root=0)                       # --coll bcast=binomial serves this one
color = rank % 2
local = world.Split(color, key=rank)
inter = local.Create_intercomm(0, world, 1 - color, tag=5)
root = 0 if color == 1 else (MPI.ROOT if inter.rank == 0 else MPI.PROC_NULL)
try:
    inter.Bcast(buf, root=root)
    print(f"rank {rank} ran it")
except MPI.Exception as exc:
    print(f"rank {rank} refused: {exc}")
inter.Barrier()                                # and the next call works
print(f"rank {rank} ok")
'''


def test_a_job_wide_algorithm_of_the_other_kind_is_refused_on_an_intercomm(tmp_path):
    """``minimpi run --coll bcast=binomial`` forces an intracommunicator algorithm: an
    intercommunicator's Bcast refuses it on every rank with the names that can serve,
    and nothing hangs."""
    prog = tmp_path / "forced.py"
    prog.write_text(FORCED)
    marker = f"intercomm-forced-{tmp_path.name}"
    result = run_minimpi("-n", "4", "--timeout", "60", "--coll", "bcast=binomial",
                         *marker_args(marker), str(prog), timeout=90)
    assert result.returncode == 0, result.stdout + result.stderr
    refused = [line for line in result.stdout.splitlines() if "refused" in line]
    assert len(refused) == 4, result.stdout
    for line in refused:
        assert ("algorithm 'binomial' (from MINIMPI_BCAST) cannot serve this call: it serves "
                "intracommunicators only, and this call is on an intercommunicator (bcast on "
                "an intercommunicator has: via_leader, auto)") in line, line
    assert sorted(line for line in result.stdout.splitlines() if line.endswith(" ok")) == \
        [f"[{r}] rank {r} ok" for r in range(4)]
    assert_no_leftovers(marker)
