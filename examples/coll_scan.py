"""Scan and Exscan: prefix sums over ranks (inclusive and exclusive).

A classic use: each rank has a variable number of items and needs its offset in the whole.

    minimpi run -n 4 examples/coll_scan.py
    minimpi draw scan --algorithm binomial -n 4
"""
import sys

import numpy as np

from minimpi import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()

count = np.array([rank + 1], dtype=np.int64)        # rank r owns r+1 items
upto = np.empty(1, dtype=np.int64)
comm.Scan(count, upto, op=MPI.SUM)
offset = np.zeros(1, dtype=np.int64)               # Exscan leaves rank 0's buffer untouched
comm.Exscan(count, offset, op=MPI.SUM)

counts = [r + 1 for r in range(size)]
if upto[0] != sum(counts[:rank + 1]) or offset[0] != sum(counts[:rank]):
    sys.exit(f"rank {rank}: Scan {upto[0]} / Exscan {offset[0]}")
print(f"rank {rank}: my items are [{offset[0]}, {upto[0]}) of {sum(counts)}")
