"""Reduce_scatter_block: reduce p blocks over all ranks; rank i keeps only the sum of block i.

(The first half of a ring allreduce - and the reason tensor parallelism can split a sum.)

    minimpi run -n 4 examples/coll_reduce_scatter.py
    minimpi draw reduce_scatter --algorithm ring -n 4
"""
import sys

import numpy as np

from minimpi import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()

x = np.arange(size * 2, dtype=np.float64) * (rank + 1)   # p blocks of 2
mine = np.empty(2)
comm.Reduce_scatter_block(x, mine, op=MPI.SUM)

total = sum(np.arange(size * 2, dtype=np.float64) * (r + 1) for r in range(size))
expected = total.reshape(size, 2)[rank]
if not np.array_equal(mine, expected):
    sys.exit(f"rank {rank}: Reduce_scatter_block gave {mine}, expected {expected}")
print(f"rank {rank} holds summed block {mine}")
