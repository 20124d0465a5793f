from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
right = (rank + 1) % size
left = (rank - 1) % size

# Pass a token once around the ring: rank 0 starts it, every rank adds its rank.
if rank == 0:
    comm.send(0, dest=right)
    token = comm.recv(source=left)
    print(f"the token came back to rank 0 holding {token} (= 0 + 1 + ... + {size - 1})")
else:
    token = comm.recv(source=left)
    comm.send(token + rank, dest=right)

# Everybody at once: send right and receive from the left in one call (no deadlock).
from_left = comm.sendrecv(rank, dest=right, source=left)
assert from_left == left
