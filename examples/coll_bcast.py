"""Bcast: the root's buffer ends up on every rank.

    minimpi run -n 4 examples/coll_bcast.py
    minimpi draw bcast --algorithm binomial -n 4          # see who sends what, step by step
"""
import sys

import numpy as np

from minimpi import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
root = size - 1

data = np.arange(10, dtype=np.float64) * 1.5 if rank == root else np.zeros(10)
comm.Bcast(data, root=root)                        # every rank passes a buffer of the same size

expected = np.arange(10) * 1.5                     # what the root had
if not np.array_equal(data, expected):
    sys.exit(f"rank {rank}: Bcast gave {data}, expected {expected}")

config = comm.bcast({"lr": 0.1, "steps": 3} if rank == 0 else None, root=0)   # any Python object
if config != {"lr": 0.1, "steps": 3}:
    sys.exit(f"rank {rank}: bcast gave {config!r}")
if rank == 0:
    print(f"Bcast ok on {size} ranks: every rank has {data[:4]}... and {config}")
