"""Column halo exchange of a 4096 x 4096 float64 grid: derived datatypes vs a hand copy.

    python benchmarks/halo_datatypes.py                  # p = 2 and 4, minimpi
    python benchmarks/halo_datatypes.py --mpich /tmp/mpich-venv   # also mpi4py + MPICH
    python benchmarks/halo_datatypes.py -n 2 --rounds 5 --json out.json

The global grid is split by columns (rows stay whole, as in a 1-D decomposed heat or
Jacobi solver); each rank holds its columns plus a ghost column on each side. One exchange
is what every iteration of such a solver does: send the first owned column to the left
neighbour and the last to the right (``Sendrecv`` twice), receiving into the ghost columns.
A column of a C-order array is strided (4096 doubles, 32 KiB apart), so it has to be
gathered for the wire and scattered on arrival. Three ways, same program:

* ``hand``: ``np.ascontiguousarray(u[:, j])`` + ``Sendrecv`` of contiguous buffers, then
  ``u[:, 0] = tmp`` (what people write without derived datatypes);
* ``vector``: ``MPI.DOUBLE.Create_vector(4096, 1, width)``, buffer ``[u[0, j:], 1, column]``;
* ``subarray``: ``MPI.DOUBLE.Create_subarray([4096, width], [4096, 1], [0, j])`` per column.

Timing: per round, a barrier, then ``--iterations`` exchanges timed together; the time per
exchange is the slowest rank's (MAX over ranks); the table shows the median over
``--rounds`` rounds, methods interleaved within each round so that load from other
processes hits them alike. The same worker runs under MPICH's ``mpiexec`` with real mpi4py
when ``--mpich VENV`` names a virtualenv holding ``mpi4py`` and ``mpich``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROWS = COLS = 4096
METHODS = ("hand", "vector", "subarray")


# ----------------------------------------------------------------------------- worker
def worker(iterations: int, rounds: int) -> None:
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    owned = COLS // size
    width = owned + 2
    u = np.random.default_rng(rank).random((ROWS, width))
    left = rank - 1 if rank > 0 else MPI.PROC_NULL
    right = rank + 1 if rank < size - 1 else MPI.PROC_NULL
    column = MPI.DOUBLE.Create_vector(ROWS, 1, width).Commit()
    subs = [MPI.DOUBLE.Create_subarray([ROWS, width], [ROWS, 1], [0, j]).Commit()
            for j in range(width)]
    send_tmp, recv_tmp = np.empty(ROWS), np.empty(ROWS)

    def hand() -> None:
        for j_send, j_recv, dest, source in ((1, width - 1, left, right),
                                             (width - 2, 0, right, left)):
            send_tmp[...] = u[:, j_send]               # np.ascontiguousarray, reusing memory
            comm.Sendrecv(send_tmp, dest, 0, recv_tmp, source, 0)
            if source != MPI.PROC_NULL:
                u[:, j_recv] = recv_tmp

    def vector() -> None:
        comm.Sendrecv([u[0, 1:], 1, column], left, 0, [u[0, width - 1:], 1, column], right, 0)
        comm.Sendrecv([u[0, width - 2:], 1, column], right, 0, [u, 1, column], left, 0)

    def subarray() -> None:
        comm.Sendrecv([u, 1, subs[1]], left, 0, [u, 1, subs[width - 1]], right, 0)
        comm.Sendrecv([u, 1, subs[width - 2]], right, 0, [u, 1, subs[0]], left, 0)

    run = {"hand": hand, "vector": vector, "subarray": subarray}
    # the three must move the same data: check once before timing
    check = {}
    for name in METHODS:
        u[:, 0] = u[:, -1] = -1.0
        run[name]()
        check[name] = (u[:, 0].copy(), u[:, -1].copy())
    for name in METHODS[1:]:
        assert all(np.array_equal(a, b) for a, b in zip(check[name], check["hand"])), name
    times = {name: [] for name in METHODS}
    for name in METHODS:
        run[name]()                                    # warm-up
    for _ in range(rounds):
        for name in METHODS:
            comm.Barrier()
            t0 = time.perf_counter()
            for _ in range(iterations):
                run[name]()
            mine = (time.perf_counter() - t0) / iterations
            times[name].append(comm.allreduce(mine, op=MPI.MAX))
    if rank == 0:
        print(json.dumps({"p": size, "median_s": {k: statistics.median(v)
                                                   for k, v in times.items()},
                          "runs_s": times}), flush=True)


# ----------------------------------------------------------------------------- driver
def run_job(launcher: list[str], python: list[str], p: int, iterations: int, rounds: int,
            env: dict) -> dict:
    """One job of ``p`` processes: ``launcher -n p python this_file --worker ...``."""
    cmd = [*launcher, "-n", str(p), *python, os.path.abspath(__file__), "--worker",
           "--iterations", str(iterations), "--rounds", str(rounds)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}")
    line = next(ln for ln in out.stdout.splitlines() if "{" in ln)
    return json.loads(line[line.index("{"):])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("-n", "--procs", default="2,4", help="process counts (default 2,4)")
    ap.add_argument("--iterations", type=int, default=20, help="exchanges per timed round")
    ap.add_argument("--rounds", type=int, default=7, help="rounds (the median is shown)")
    ap.add_argument("--mpich", metavar="VENV", help="virtualenv with mpi4py and mpich")
    ap.add_argument("--json", metavar="FILE", help="write all results here")
    args = ap.parse_args()
    if args.worker:
        worker(args.iterations, args.rounds)
        return
    runtimes = [("minimpi", [sys.executable, "-m", "minimpi", "run"], [], dict(os.environ))]
    if args.mpich:
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)
        runtimes.append(("MPICH", [os.path.join(args.mpich, "bin", "mpiexec")],
                         [os.path.join(args.mpich, "bin", "python")], env))
    results = []
    for p in [int(x) for x in args.procs.split(",")]:
        for label, launcher, python, env in runtimes:
            res = run_job(launcher, python, p, args.iterations, args.rounds, env)
            res["runtime"] = label
            results.append(res)
    print(f"column halo exchange, {ROWS}x{COLS} float64 grid split by columns; time per "
          f"exchange (2 Sendrecv, 2 columns of 32 KiB each way), median of {args.rounds} "
          f"rounds x {args.iterations}, slowest rank")
    print(f"{'runtime':8} {'p':>2} " + " ".join(f"{m:>12}" for m in METHODS)
          + "   vector/hand subarray/hand")
    for r in results:
        med = r["median_s"]
        print(f"{r['runtime']:8} {r['p']:>2} "
              + " ".join(f"{med[m] * 1e6:>10.1f}us" for m in METHODS)
              + f"   {med['vector'] / med['hand']:>11.2f} {med['subarray'] / med['hand']:>13.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
