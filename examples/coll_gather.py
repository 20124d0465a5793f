"""Gather: every rank's block lands, in rank order, in the root's buffer.

    minimpi run -n 4 examples/coll_gather.py
    minimpi draw gather --algorithm binomial -n 4
"""
import sys

import numpy as np

from minimpi import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()

mine = np.full(2, rank * rank, dtype=np.float64)           # each rank computes something
whole = np.empty(2 * size) if rank == 0 else None
comm.Gather(mine, whole, root=0)

names = comm.gather(f"rank-{rank}", root=0)                # objects: a list on the root, None elsewhere
if rank == 0:
    expected = np.repeat([r * r for r in range(size)], 2)
    if not np.array_equal(whole, expected) or names != [f"rank-{r}" for r in range(size)]:
        sys.exit(f"Gather gave {whole} / {names}")
    print(f"Gather ok: {whole} from {names}")
elif names is not None:
    sys.exit(f"rank {rank}: gather should return None off the root")
