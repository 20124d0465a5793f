"""Lab 1: hello world (every rank reports; rank 0 checks the environment functions)."""
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
size = comm.Get_size()
name = MPI.Get_processor_name()
print(f"Hello, World! I am process {rank} of {size} on {name}.")

assert MPI.Is_initialized() and not MPI.Is_finalized()
assert comm.rank == rank and comm.size == size
assert MPI.Get_version() >= (3, 0)
assert isinstance(MPI.Get_library_version(), str)
assert comm.Get_attr(MPI.TAG_UB) >= 32767
assert MPI.Wtick() > 0 and MPI.Wtime() > 0
assert comm.Is_intra() and not comm.Is_inter()
assert MPI.COMM_SELF.Get_size() == 1 and MPI.COMM_SELF.Get_rank() == 0
assert MPI.COMM_NULL != comm
if rank == 0:
    print("hello: OK")
MPI.Finalize()
assert MPI.Is_finalized()
