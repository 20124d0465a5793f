from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()          # who am I: 0 .. size-1
size = comm.Get_size()          # how many of us

print(f"hello from rank {rank} of {size}")

comm.Barrier()                  # nobody goes on before everybody got here
if rank == 0:
    print("everybody said hello")
