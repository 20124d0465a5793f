"""Alltoall: rank i sends its block j to rank j, and receives rank j's block i (a transpose).

    minimpi run -n 4 examples/coll_alltoall.py
    minimpi draw alltoall --algorithm ring -n 4      # `minimpi draw --list` shows the others
"""
import sys

import numpy as np

from minimpi import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()

send = np.array([100 * rank + j for j in range(size)], dtype=np.int64)   # block j is for rank j
recv = np.empty(size, dtype=np.int64)
comm.Alltoall(send, recv)

expected = np.array([100 * i + rank for i in range(size)])   # serial: column `rank` of the matrix
if not np.array_equal(recv, expected):
    sys.exit(f"rank {rank}: Alltoall gave {recv}, expected {expected}")
print(f"rank {rank} received {recv}")
