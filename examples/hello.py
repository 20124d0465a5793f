"""Hello from every rank: run with `minimpi run -n 4 examples/hello.py`."""
from minimpi import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()

# Pass a token around the ring so every rank proves it can talk to its neighbours.
token = comm.sendrecv(f"greetings from rank {rank}", dest=(rank + 1) % size, source=(rank - 1) % size)
print(f"Hello from rank {rank} of {size} on {MPI.Get_processor_name()}; my left neighbour says: {token!r}")
