"""``python -m mpi4py.futures prog.py [args]`` under ``minimpi run -n N``: rank 0 runs the
program, whose ``MPIPoolExecutor`` uses ranks 1..N-1 as its workers (a static pool: nothing
is spawned); those ranks serve until the program ends."""
import os
import runpy
import sys

from minimpi import MPI

from .pool import close_static_pool, open_static_pool, serve_static


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit("usage: python -m mpi4py.futures prog.py [args...] | -m module [args...]")
    comm = MPI.COMM_WORLD
    if comm.Get_rank() != 0:
        serve_static(comm, 0)
        return
    if comm.Get_size() > 1:
        open_static_pool(comm, 0)
    try:
        args = sys.argv[1:]
        if args[0] == "-m":
            sys.argv = args[1:]
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = args
            sys.path[0] = os.path.dirname(os.path.abspath(args[0]))
            runpy.run_path(args[0], run_name="__main__")
    finally:
        close_static_pool()


if __name__ == "__main__":
    main()
