"""Scatter: the root cuts its buffer into `size` equal blocks; rank i gets block i.

    minimpi run -n 4 examples/coll_scatter.py
    minimpi draw scatter --algorithm binomial -n 4
"""
import sys

import numpy as np

from minimpi import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()

everything = np.arange(size * 3, dtype=np.int64) if rank == 0 else None   # only the root's matters
mine = np.empty(3, dtype=np.int64)
comm.Scatter(everything, mine, root=0)

expected = np.arange(size * 3).reshape(size, 3)[rank]      # serial: row `rank` of the whole
if not np.array_equal(mine, expected):
    sys.exit(f"rank {rank}: Scatter gave {mine}, expected {expected}")
print(f"rank {rank} got block {mine}")
