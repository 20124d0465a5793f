"""Allgather: like Gather, but every rank ends up with all the blocks.

    minimpi run -n 4 examples/coll_allgather.py
    minimpi draw allgather --algorithm ring -n 4
"""
import sys

import numpy as np

from minimpi import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()

mine = np.array([rank, 10 * rank], dtype=np.int32)
everyone = np.empty(2 * size, dtype=np.int32)
comm.Allgather(mine, everyone)

expected = np.array([[r, 10 * r] for r in range(size)], dtype=np.int32).ravel()
if not np.array_equal(everyone, expected):
    sys.exit(f"rank {rank}: Allgather gave {everyone}, expected {expected}")
if rank == 0:
    print(f"Allgather ok: every rank has {everyone}")
