"""mpi4py.util shim."""
