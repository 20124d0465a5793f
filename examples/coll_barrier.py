"""Barrier: nobody leaves until everybody has arrived.

    minimpi run -n 4 examples/coll_barrier.py
    minimpi draw barrier --algorithm dissemination -n 4
"""
import sys
import time

from minimpi import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()

time.sleep(0.05 * rank)                      # ranks arrive at different times
arrived = time.time()
comm.Barrier()
left = time.time()
# every rank leaves after the last one arrived: the latest arrival <= my departure
latest = comm.allreduce(arrived, op=MPI.MAX)
if left < latest - 0.002:                    # same host, same clock (2 ms tolerance)
    sys.exit(f"rank {rank} left the barrier at {left} before the last rank arrived at {latest}")
if rank == 0:
    print(f"Barrier ok on {size} ranks")
