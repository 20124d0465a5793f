import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()

# 1. Active target: every rank exposes one slot; between two fences each rank Puts its
#    value into its right neighbour's slot. The neighbour makes no call to receive it.
win = MPI.Win.Allocate(8, disp_unit=8, comm=comm)
slot = np.frombuffer(win.tomemory(), dtype="i8")
slot[0] = -1
win.Fence()
win.Put(np.array([10 * (rank + 1)], dtype="i8"), target_rank=(rank + 1) % size)
win.Fence()
from_left = int(slot[0])
win.Free()

# 2. Passive target: a counter on rank 0 that every rank increments under a lock.
#    Fetch_and_op is atomic: every rank gets a different ticket.
counter = MPI.Win.Allocate(8 if rank == 0 else 0, disp_unit=8, comm=comm)
if rank == 0:
    np.frombuffer(counter.tomemory(), dtype="i8")[0] = 0
comm.Barrier()
ticket = np.empty(1, dtype="i8")
counter.Lock(0)
counter.Fetch_and_op(np.array([1], dtype="i8"), ticket, target_rank=0, op=MPI.SUM)
counter.Unlock(0)
comm.Barrier()

got = comm.gather((from_left, int(ticket[0])), root=0)
if rank == 0:
    print("slots after the fence:", [g[0] for g in got])
    print("tickets drawn:", sorted(g[1] for g in got),
          "counter:", int(np.frombuffer(counter.tomemory(), dtype="i8")[0]))
counter.Free()
