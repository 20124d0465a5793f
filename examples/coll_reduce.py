"""Reduce: combine every rank's buffer element-wise with an op; the result goes to the root.

    minimpi run -n 4 examples/coll_reduce.py
    minimpi draw reduce --algorithm binomial -n 4
"""
import sys

import numpy as np

from minimpi import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()

x = np.array([rank, rank * rank, 1], dtype=np.float64)
total = np.zeros(3) if rank == 0 else None
comm.Reduce(x, total, op=MPI.SUM, root=0)
biggest = comm.reduce(rank * 7 % size, op=MPI.MAX, root=0)     # objects work too

if rank == 0:
    expected = np.array([sum(range(size)), sum(r * r for r in range(size)), size])
    if not np.array_equal(total, expected) or biggest != max(r * 7 % size for r in range(size)):
        sys.exit(f"Reduce gave {total} / {biggest}")
    print(f"Reduce ok: sum {total}, max {biggest}")
