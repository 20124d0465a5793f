import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
other = 1 - rank

out = np.full(1 << 20, float(rank))
into = np.empty_like(out)
comm.Sendrecv(out, dest=other, sendtag=7, recvbuf=into, source=other, recvtag=7)
print(f"rank {rank} received rank {int(into[0])}'s 8 MiB")
