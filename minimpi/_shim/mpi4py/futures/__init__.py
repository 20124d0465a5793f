"""mpi4py.futures shim: not implemented (it needs dynamic process management)."""
from minimpi.comm.handles import unsupported

raise unsupported("Spawn", "mpi4py.futures (MPIPoolExecutor, MPICommExecutor)")
