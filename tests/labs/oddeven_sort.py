"""Lab 10: odd-even transposition sort of a distributed array."""
import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
N_LOCAL = 8

rng = np.random.default_rng(1234 + rank)
local = np.sort(rng.integers(0, 1000, N_LOCAL).astype("i"))
everything = comm.allgather(local.copy())

other = np.empty(N_LOCAL, dtype="i")
for phase in range(size):
    if (phase + rank) % 2 == 0:
        partner = rank + 1
    else:
        partner = rank - 1
    if partner < 0 or partner >= size:
        partner = MPI.PROC_NULL
    comm.Sendrecv(local, dest=partner, sendtag=phase, recvbuf=other, source=partner, recvtag=phase)
    if partner == MPI.PROC_NULL:
        continue
    merged = np.sort(np.concatenate([local, other]))
    local = merged[:N_LOCAL].copy() if rank < partner else merged[N_LOCAL:].copy()

result = comm.gather(local, root=0)
if rank == 0:
    result = np.concatenate(result)
    expected = np.sort(np.concatenate(everything))
    assert (result == expected).all()
    print("oddeven_sort: OK")
