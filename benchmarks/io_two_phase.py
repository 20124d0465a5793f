"""MPI-IO benchmark: collective writes and reads, two-phase vs independent.

    python benchmarks/io_two_phase.py                      # p = 4, 64 MiB, both patterns
    python benchmarks/io_two_phase.py --mib 256 --block 1024 --rounds 7
    python benchmarks/io_two_phase.py --pattern subarray --mib 256
    python benchmarks/io_two_phase.py --dir /dev/shm       # where the file goes (default: tmp)
    python benchmarks/io_two_phase.py --mpiexec "/path/to/mpiexec -n 4" \
        --peer-python /path/to/venv/bin/python             # the same program under another
                                                           # MPI (ROMIO), its own mpi4py

Patterns:

* ``strided``: the file is ``--mib`` MiB cut into blocks of ``--block`` bytes dealt
  round-robin to the ``p`` ranks (rank r owns blocks r, r+p, r+2p...): a vector file view
  (``Create_vector`` resized to ``p`` blocks, displacement ``r x block``).
* ``subarray``: a square float64 array of ``--mib`` MiB, block-distributed over a 2-D
  process grid (``Compute_dims``), each rank's block a ``Create_subarray`` view.

Each rank calls ``Write_all`` with its whole share, then ``Read_all`` reads it back
(checked). The collective path is forced with the ROMIO hints
``romio_cb_write``/``romio_cb_read`` = ``enable`` (two-phase) or ``disable``
(independent: one ``pwrite`` per file run per rank); ``auto`` is minimpi's own choice
(``automatic``; another MPI may read the hint its own way).

Timing: ``--rounds`` rounds, alternating the methods in an order that goes through all six
permutations (``--rounds 6`` gives each method each place and each predecessor); each measurement is barrier,
``Wtime``, the call, barrier, ``Wtime`` on rank 0 (the time until every rank is done).
Medians are reported, in seconds and MiB/s of file data.

"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile


def worker(args: argparse.Namespace) -> None:
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, p = comm.Get_rank(), comm.Get_size()
    total = args.mib * 2**20
    if args.pattern == "strided":
        block = args.block
        nblocks = total // (block * p)                 # blocks per rank
        vec = MPI.BYTE.Create_vector(nblocks, block, block * p)
        ftype = vec.Create_resized(0, nblocks * block * p).Commit()
        disp, etype, nbytes = rank * block, MPI.BYTE, nblocks * block
    else:
        n = int((total // 8) ** 0.5)
        dims = MPI.Compute_dims(p, 2)
        coords = (rank // dims[1], rank % dims[1])
        sub = [n // dims[0], n // dims[1]]
        ftype = MPI.DOUBLE.Create_subarray([n, n], sub, [coords[0] * sub[0],
                                                         coords[1] * sub[1]]).Commit()
        disp, etype, nbytes = 0, MPI.DOUBLE, sub[0] * sub[1] * 8
        block = n
    path = os.path.join(args.dir, f"io_two_phase_{os.getpid() if rank == 0 else 0}.dat")
    path = comm.bcast(path, 0)
    mine = np.full(nbytes, rank + 1, np.uint8)
    back = np.empty_like(mine)
    methods = (("two_phase", "enable"), ("independent", "disable"), ("auto", "automatic"))
    results = {m: {"write": [], "read": []} for m, _hint in methods}
    orders = list(itertools.permutations(methods))
    for rnd in range(args.rounds + 1):              # round 0 warms up
        # the order changes from round to round through all six: what the method before
        # left behind (pages being written back, a fragmented page cache) must not fall on
        # one method (a rotation would keep who follows whom)
        for method, hint in orders[rnd % len(orders)]:
            info = MPI.Info.Create({"romio_cb_write": hint, "romio_cb_read": hint})
            fh = MPI.File.Open(comm, path, MPI.MODE_CREATE | MPI.MODE_RDWR, info)
            fh.Set_view(disp, etype, ftype, "native", info)
            for kind in ("write", "read"):
                comm.Barrier()
                t0 = MPI.Wtime()
                if kind == "write":
                    fh.Write_all(mine)
                else:
                    fh.Read_all(back)
                comm.Barrier()
                if rnd:
                    results[method][kind].append(MPI.Wtime() - t0)
                if kind == "write":
                    fh.Sync()
                    fh.Set_view(disp, etype, ftype, "native", info)
            assert (back == rank + 1).all(), f"rank {rank}: read back wrong data ({method})"
            fh.Close()
            back[:] = 0
            comm.Barrier()
            if rank == 0:
                os.unlink(path)
    if rank == 0:
        print(json.dumps({"p": p, "mib": args.mib, "block": block, "pattern": args.pattern,
                          "results": results}))


def run(launcher: list, python: str, args: argparse.Namespace, pattern: str,
        block: int) -> dict:
    cmd = launcher + [python, os.path.abspath(__file__), "--worker", "--mib",
                      str(args.mib), "--block", str(block), "--rounds", str(args.rounds),
                      "--dir", args.dir, "--pattern", pattern]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}")
    line = [x for x in out.stdout.splitlines() if x.lstrip("[0] ").startswith("{")][-1]
    return json.loads(line[line.index("{"):])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("-n", type=int, default=4, help="ranks (default 4)")
    ap.add_argument("--mib", type=int, default=64, help="file size in MiB (default 64)")
    ap.add_argument("--block", type=int, action="append",
                    help="block bytes (repeatable; default 256 and 4096)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pattern", choices=["strided", "subarray", "both"], default="both")
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--mpiexec", help="also run under this launcher, e.g. 'mpiexec -n 4'")
    ap.add_argument("--peer-python", default=sys.executable,
                    help="the Python (with the peer's mpi4py) that --mpiexec starts")
    ap.add_argument("--timeout", type=float, default=900)
    args = ap.parse_args()
    if args.worker:
        args.block = args.block[0]
        worker(args)
        return
    blocks = args.block or [256, 4096]
    launchers = [("minimpi", [sys.executable, "-m", "minimpi", "run", "-n", str(args.n)],
                  sys.executable)]
    if args.mpiexec:
        launchers.append(("peer", shlex.split(args.mpiexec), args.peer_python))
    print(f"collective I/O, p = {args.n}, {args.mib} MiB file, {args.rounds} rounds "
          f"(medians), file in {args.dir}")
    print(f"{'runtime':8} {'pattern':16} {'op':6} {'two-phase s':>12} {'indep. s':>10} "
          f"{'auto s':>8} {'two-phase MiB/s':>16} {'indep. MiB/s':>13} {'speed-up':>9}")
    cases = ([("strided", b) for b in blocks] if args.pattern in ("strided", "both") else [])
    if args.pattern in ("subarray", "both"):
        cases.append(("subarray", 0))
    for name, launcher, python in launchers:
        for pattern, block in cases:
            res = run(launcher, python, args, pattern, block)["results"]
            label = f"strided {block} B" if pattern == "strided" else "subarray 2-D"
            for op in ("write", "read"):
                tp = statistics.median(res["two_phase"][op])
                ind = statistics.median(res["independent"][op])
                auto = statistics.median(res["auto"][op])
                print(f"{name:8} {label:16} {op:6} {tp:12.3f} {ind:10.3f} {auto:8.3f} "
                      f"{args.mib / tp:16.1f} {args.mib / ind:13.1f} {ind / tp:8.1f}x")


if __name__ == "__main__":
    main()
