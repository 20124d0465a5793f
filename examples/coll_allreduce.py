"""Allreduce: Reduce, with the result on every rank (the workhorse of data-parallel training).

    minimpi run -n 4 examples/coll_allreduce.py
    minimpi run -n 4 --coll allreduce=ring examples/coll_allreduce.py   # pick the algorithm
    minimpi draw allreduce --algorithm ring -n 4
"""
import sys

import numpy as np

from minimpi import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()

x = np.arange(8, dtype=np.float64) + rank
out = np.empty_like(x)
comm.Allreduce(x, out, op=MPI.SUM)

expected = sum(np.arange(8, dtype=np.float64) + r for r in range(size))
if not np.array_equal(out, expected):
    sys.exit(f"rank {rank}: Allreduce gave {out}, expected {expected}")

x[:] = rank                                        # in place: the input is replaced by the result
comm.Allreduce(MPI.IN_PLACE, x, op=MPI.MAX)
if not (x == size - 1).all():
    sys.exit(f"rank {rank}: in-place MAX gave {x}")
if rank == 0:
    print(f"Allreduce ok: {out}")
