"""Lab 3: a ring with Sendrecv (periodic), and a chain with MPI.PROC_NULL at both ends."""
import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size

# periodic ring: pass a token around, accumulating the sum of ranks
right, left = (rank + 1) % size, (rank - 1) % size
sendbuf = np.array([rank], dtype="i")
recvbuf = np.empty(1, dtype="i")
total = rank
for _ in range(size - 1):
    comm.Sendrecv(sendbuf, dest=right, sendtag=7, recvbuf=recvbuf, source=left, recvtag=7)
    total += int(recvbuf[0])
    sendbuf[:] = recvbuf
assert total == size * (size - 1) // 2, total

# chain: shift values right; the ends talk to PROC_NULL
right = rank + 1 if rank < size - 1 else MPI.PROC_NULL
left = rank - 1 if rank > 0 else MPI.PROC_NULL
st = MPI.Status()
got = comm.sendrecv(rank * 10, dest=right, source=left, status=st)
if rank == 0:
    assert got is None and st.Get_source() == MPI.PROC_NULL and st.Get_count() == 0
else:
    assert got == (rank - 1) * 10 and st.Get_source() == rank - 1

# Sendrecv_replace around the ring
buf = np.full(3, rank, dtype="l")
comm.Sendrecv_replace(buf, dest=(rank + 1) % size, source=(rank - 1) % size)
assert (buf == (rank - 1) % size).all()

# a lowercase ring of objects with isend/recv
req = comm.isend(("token", rank), dest=(rank + 1) % size, tag=3)
msg = comm.recv(source=(rank - 1) % size, tag=3)
req.wait()
assert msg == ("token", (rank - 1) % size)
print(f"ring: OK rank {rank}")
