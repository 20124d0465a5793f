"""Lab 6: Scatterv/Gatherv with uneven counts, explicit displacements and omitted counts."""
import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
N = 2 * size + 1                      # not divisible by size: uneven split

counts = [N // size + (1 if r < N % size else 0) for r in range(size)]
displs = [sum(counts[:r]) for r in range(size)]

data = np.arange(N, dtype="d") if rank == 0 else None
local = np.empty(counts[rank], dtype="d")
comm.Scatterv([data, counts, displs, MPI.DOUBLE] if rank == 0 else None, local, root=0)
assert (local == np.arange(displs[rank], displs[rank] + counts[rank])).all(), local

# counts only (displacements follow from them)
local2 = np.empty(counts[rank], dtype="d")
comm.Scatterv([data, counts] if rank == 0 else None, local2, root=0)
assert (local2 == local).all()

# counts omitted: split as evenly as possible, earlier ranks take the extra items
local3 = np.empty(counts[rank], dtype="d")
comm.Scatterv([data, MPI.DOUBLE] if rank == 0 else None, local3, root=0)
assert (local3 == local).all()

# Gatherv back, squared, with (counts, displs) as a tuple
result = np.empty(N, dtype="d") if rank == 0 else None
comm.Gatherv(local ** 2, [result, (counts, displs), MPI.DOUBLE] if rank == 0 else None, root=0)
if rank == 0:
    assert (result == np.arange(N) ** 2).all(), result

# variable-length contributions: rank r sends r+1 ints
mine = np.full(rank + 1, rank, dtype="i")
rc = [r + 1 for r in range(size)]
allv = np.empty(sum(rc), dtype="i")
comm.Allgatherv(mine, [allv, rc])
assert (allv == np.repeat(np.arange(size), rc)).all()
if rank == 0:
    print("scatterv_gatherv: OK")
