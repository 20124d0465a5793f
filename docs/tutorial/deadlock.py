import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
other = 1 - rank                              # run with 2 ranks

big = np.zeros(1 << 20)                       # 8 MiB: above the eager limit
comm.Send(big, dest=other, tag=7)             # both ranks send first ...
comm.Recv(big, source=other, tag=7)           # ... so neither reaches its receive
