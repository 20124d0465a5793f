"""``python -m mpi4py.futures.server``: a worker that ``MPIPoolExecutor`` spawned."""
from minimpi import MPI

from .protocol import serve


def main() -> None:
    parent = MPI.Comm.Get_parent()
    if parent == MPI.COMM_NULL:
        raise SystemExit("mpi4py.futures.server: not started by an MPIPoolExecutor (no parent)")
    serve(parent, 0)
    parent.Disconnect()


if __name__ == "__main__":
    main()
