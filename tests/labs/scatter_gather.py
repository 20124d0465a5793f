"""Lab 5: scatter / gather / allgather / alltoall of Python objects and numpy arrays."""
import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size

# objects
data = [(i + 1) ** 2 for i in range(size)] if rank == 0 else None
mine = comm.scatter(data, root=0)
assert mine == (rank + 1) ** 2
gathered = comm.gather(mine * 2, root=0)
if rank == 0:
    assert gathered == [2 * (i + 1) ** 2 for i in range(size)]
else:
    assert gathered is None
assert comm.allgather(rank) == list(range(size))
got = comm.alltoall([(rank, j) for j in range(size)])
assert got == [(j, rank) for j in range(size)]

# arrays
sendbuf = None
if rank == 0:
    sendbuf = np.arange(size * 4, dtype="i").reshape(size, 4)
recvbuf = np.empty(4, dtype="i")
comm.Scatter(sendbuf, recvbuf, root=0)
assert (recvbuf == np.arange(rank * 4, rank * 4 + 4)).all()
recvbuf *= 10
out = np.empty((size, 4), dtype="i") if rank == 0 else None
comm.Gather(recvbuf, out, root=0)
if rank == 0:
    assert (out == np.arange(size * 4).reshape(size, 4) * 10).all()
every = np.empty(size, dtype="d")
comm.Allgather(np.array([rank * 0.5]), every)
assert (every == np.arange(size) * 0.5).all()
a2a_in = np.array([rank * 100 + j for j in range(size)], dtype="l")
a2a_out = np.empty(size, dtype="l")
comm.Alltoall(a2a_in, a2a_out)
assert (a2a_out == np.array([j * 100 + rank for j in range(size)])).all()
total = np.zeros(4, dtype="i")
comm.Allreduce(np.ones(4, dtype="i") * rank, total, op=MPI.SUM)
assert (total == size * (size - 1) // 2).all()
if rank == 0:
    print("scatter_gather: OK")
