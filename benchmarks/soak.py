"""Soak: random collectives and a random point-to-point storm, every result checked.

    python benchmarks/soak.py --minutes M -n P [--seed S] [--max-bytes 4MiB]

Starts ``minimpi run -n P`` on this same file (``--worker``). Every rank draws the same
sequence of calls from one seeded generator: every collective, through both APIs (buffers
and Python objects), blocking and nonblocking, sizes from 0 to ``--max-bytes`` (log-uniform
over element counts and four dtypes, so thousands of distinct byte sizes), random roots,
ops and algorithms (each one the registry has for the collective, or auto); every few calls
a storm of point-to-point messages between random pairs. Inputs are integers derived from
(call, rank), so each rank computes every expected result with numpy and compares exactly.

Every ``--report`` seconds rank 0 prints each rank's RSS and open file descriptors; the
last line is ``SOAK calls=... distinct_sizes=... wrong=... rss_growth_mib=... fd_growth=...``
and the exit status is 0 only when nothing was wrong, fds did not grow and RSS grew less
than ``--max-rss-growth`` MiB after the first report (warm-up). A short run is part of CI
(``tests/faults/test_soak.py``).
"""
from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import time
from typing import Any, Callable, List, Tuple

HERE = os.path.abspath(__file__)
DTYPES = ("int64", "int32", "uint8", "float64")


# ---------------------------------------------------------------------------------------
# the driver
# ---------------------------------------------------------------------------------------
def main(argv: List[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=1.0)
    p.add_argument("-n", type=int, default=4, dest="nprocs")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--max-bytes", default="4MiB")
    p.add_argument("--report", type=float, default=10.0, help="seconds between RSS/fd lines")
    p.add_argument("--max-rss-growth", type=float, default=64.0, metavar="MIB")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker(args)
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    seconds = args.minutes * 60
    cmd = [sys.executable, "-m", "minimpi", "run", "-n", str(args.nprocs),
           "--timeout", str(int(seconds + 120)), HERE, "--worker", "--minutes", str(args.minutes),
           "--seed", str(seed), "--max-bytes", args.max_bytes, "--report", str(args.report),
           "--max-rss-growth", str(args.max_rss_growth)]
    print(f"soak: {' '.join(cmd[2:])}", flush=True)
    return subprocess.call(cmd)


# ---------------------------------------------------------------------------------------
# the worker (one per rank)
# ---------------------------------------------------------------------------------------
def _usage() -> Tuple[int, int]:
    with open("/proc/self/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))
    return rss, len(os.listdir("/proc/self/fd"))


def worker(args: argparse.Namespace) -> int:
    import numpy as np

    from minimpi import MPI
    from minimpi.coll import registry
    from minimpi.data.units import parse_size

    comm = MPI.COMM_WORLD
    rank, p = comm.Get_rank(), comm.Get_size()
    rng = np.random.default_rng(args.seed)          # the same draws on every rank
    max_bytes = parse_size(args.max_bytes)
    end = time.monotonic() + args.minutes * 60
    wrong: List[str] = []
    sizes: set = set()
    calls = 0
    first_usage = None   # at the second report: the first one comes before any warm-up
    last_usage = None
    reports = 0
    next_report = time.monotonic()

    ops = {"SUM": (MPI.SUM, np.add), "MAX": (MPI.MAX, np.maximum), "MIN": (MPI.MIN, np.minimum),
           "PROD": (MPI.PROD, np.multiply), "BXOR": (MPI.BXOR, np.bitwise_xor)}

    def data(call: int, r: int, n: int, dtype: str):
        """Rank r's input of call ``call``: small integers, so every reduction is exact."""
        base = (np.arange(n, dtype=np.int64) * (r + 3) + call * 7 + r) % 5 + 1
        return base.astype(dtype)

    def check(what: str, got: Any, want: Any) -> None:
        if isinstance(want, list):
            ok = isinstance(got, list) and len(got) == len(want) and all(
                _equal(np, g, w) for g, w in zip(got, want))
        else:
            ok = _equal(np, got, want)
        if not ok:
            wrong.append(what)
            if len(wrong) <= 5:
                print(f"soak rank {rank}: WRONG result of {what}", file=sys.stderr, flush=True)

    def pick_alg(collective: str, objects: bool) -> Any:
        names = [a.name for a in registry.algorithms(collective).values()
                 if a.refusal(p, 0, None, objects) is None]
        choice = int(rng.integers(0, len(names) + 1))
        return names[choice] if choice < len(names) else None   # None: auto

    def reduce_all(fn, arrays):
        out = arrays[0].copy()
        for a in arrays[1:]:
            out = fn(out, a)
        return out

    while True:
        now = time.monotonic()
        flags = comm.bcast((now < end, now >= next_report) if rank == 0 else None, root=0)
        if flags[1]:
            usage = comm.gather(_usage(), root=0)
            reports += 1
            if rank == 0:
                last_usage = usage
                if reports == 2:
                    first_usage = usage
                print(f"soak t={args.minutes * 60 - (end - now):7.1f}s calls={calls:7d} "
                      f"distinct_sizes={len(sizes):6d} wrong={len(wrong)} "
                      f"rss_mib={[round(u[0] / 1024, 1) for u in usage]} "
                      f"fds={[u[1] for u in usage]}", flush=True)
                next_report = now + args.report
        if not flags[0]:
            break
        call = calls
        calls += 1
        dtype = DTYPES[int(rng.integers(0, len(DTYPES)))]
        itemsize = np.dtype(dtype).itemsize
        # mostly small (fast, many calls), some up to max_bytes; half log-uniform (the
        # small sizes every protocol edge lives at), half uniform (many distinct sizes)
        big = rng.random() < 0.05
        top = max_bytes // itemsize // max(1, p) if big else max(1, 262144 // itemsize // p)
        if rng.random() < 0.5:
            n = int(math.exp(rng.uniform(0, math.log(top + 1)))) - 1
        else:
            n = int(rng.integers(0, top + 1))
        sizes.add(n * itemsize)
        root = int(rng.integers(0, p))
        op_name = list(ops)[int(rng.integers(0, len(ops)))]
        if dtype == "float64" and op_name == "BXOR":
            op_name = "SUM"
        op, fn = ops[op_name]
        blocking = rng.random() < 0.5
        objects = rng.random() < 0.3
        kind = ["bcast", "reduce", "allreduce", "gather", "scatter", "allgather", "alltoall",
                "reduce_scatter", "scan", "exscan", "barrier", "p2p"][int(rng.integers(0, 12))]
        mine = data(call, rank, n, dtype)
        every = [data(call, r, n, dtype) for r in range(p)] if kind != "p2p" else []
        alg = pick_alg(kind, objects) if kind != "p2p" else None
        tag = f"#{call} {kind}({'obj' if objects else 'buf'}, {'blk' if blocking else 'nb'}, " \
              f"n={n}, {dtype}, root={root}, {op_name}, {alg or 'auto'})"

        def run(blocking_call: Callable, start: Callable) -> Any:
            if blocking or start is None:
                return blocking_call()
            req = start()
            return req.wait() if objects else req.Wait()

        if kind == "bcast":
            if objects:
                got = run(lambda: comm.bcast(mine if rank == root else None, root, algorithm=alg),
                          lambda: comm.ibcast(mine if rank == root else None, root, algorithm=alg))
            else:
                buf = mine if rank == root else np.empty(n, dtype)
                run(lambda: comm.Bcast(buf, root, algorithm=alg),
                    lambda: comm.Ibcast(buf, root, algorithm=alg))
                got = buf
            check(tag, got, every[root])
        elif kind in ("reduce", "allreduce"):
            if objects:
                op, fn = MPI.SUM, np.add   # object reductions of arrays: elementwise +
            want = reduce_all(fn, every)
            if objects and kind == "reduce":
                got = run(lambda: comm.reduce(mine, op, root, algorithm=alg),
                          lambda: comm.ireduce(mine, op, root, algorithm=alg))
            elif objects:
                got = comm.allreduce(mine, op, algorithm=alg)
            elif kind == "reduce":
                out = np.empty(n, dtype)
                run(lambda: comm.Reduce(mine, out, op, root, algorithm=alg),
                    lambda: comm.Ireduce(mine, out, op, root, algorithm=alg))
                got = out
            else:
                out = np.empty(n, dtype)
                run(lambda: comm.Allreduce(mine, out, op, algorithm=alg),
                    lambda: comm.Iallreduce(mine, out, op, algorithm=alg))
                got = out
            if kind == "allreduce" or rank == root:
                check(tag, got, want)
        elif kind in ("gather", "allgather"):
            if objects:
                got = (run(lambda: comm.gather(mine, root, algorithm=alg),
                           lambda: comm.igather(mine, root, algorithm=alg)) if kind == "gather"
                       else comm.allgather(mine, algorithm=alg))
            else:
                out = np.empty(n * p, dtype)
                if kind == "gather":
                    run(lambda: comm.Gather(mine, out, root, algorithm=alg),
                        lambda: comm.Igather(mine, out, root, algorithm=alg))
                else:
                    run(lambda: comm.Allgather(mine, out, algorithm=alg),
                        lambda: comm.Iallgather(mine, out, algorithm=alg))
                got = out
            if kind == "allgather" or rank == root:
                check(tag, got, every if objects else np.concatenate(every))
        elif kind == "scatter":
            chunks = [data(call, root * p + r, n, dtype) for r in range(p)]
            if objects:
                got = run(lambda: comm.scatter(chunks if rank == root else None, root, algorithm=alg),
                          lambda: comm.iscatter(chunks if rank == root else None, root,
                                                algorithm=alg))
            else:
                out = np.empty(n, dtype)
                send = np.concatenate(chunks) if rank == root else None
                run(lambda: comm.Scatter(send, out, root, algorithm=alg),
                    lambda: comm.Iscatter(send, out, root, algorithm=alg))
                got = out
            check(tag, got, chunks[rank])
        elif kind == "alltoall":
            blocks = [data(call, rank * p + r, n, dtype) for r in range(p)]
            want = [data(call, r * p + rank, n, dtype) for r in range(p)]
            if objects:
                got = comm.alltoall(blocks, algorithm=alg)
            else:
                out = np.empty(n * p, dtype)
                run(lambda: comm.Alltoall(np.concatenate(blocks), out, algorithm=alg),
                    lambda: comm.Ialltoall(np.concatenate(blocks), out, algorithm=alg))
                got, want = out, np.concatenate(want)
            check(tag, got, want)
        elif kind == "reduce_scatter":
            full = [np.concatenate([data(call, r * p + b, n, dtype) for b in range(p)])
                    for r in range(p)]
            out = np.empty(n, dtype)
            run(lambda: comm.Reduce_scatter_block(full[rank], out, op, algorithm=alg),
                lambda: comm.Ireduce_scatter_block(full[rank], out, op, algorithm=alg))
            check(tag, out, reduce_all(fn, full)[rank * n:(rank + 1) * n])
        elif kind in ("scan", "exscan"):
            if objects:
                op, fn = MPI.SUM, np.add
            upto = every[:rank + 1] if kind == "scan" else every[:rank]
            if objects:
                got = run(lambda: getattr(comm, kind)(mine, op, algorithm=alg),
                          lambda: getattr(comm, "i" + kind)(mine, op, algorithm=alg))
            else:
                out = np.empty(n, dtype)
                name = kind.capitalize()
                run(lambda: getattr(comm, name)(mine, out, op, algorithm=alg),
                    lambda: getattr(comm, "I" + kind)(mine, out, op, algorithm=alg))
                got = out
            if upto:
                check(tag, got, reduce_all(fn, upto))
        elif kind == "barrier":
            run(lambda: comm.Barrier(algorithm=alg), lambda: comm.Ibarrier(algorithm=alg))
        else:
            _storm(np, comm, rng, call, rank, p, objects, data, check, tag)
    if rank == 0 and first_usage is not None:
        growth = max(last[0] - first[0] for first, last in zip(first_usage, last_usage)) / 1024
        fds = max(last[1] - first[1] for first, last in zip(first_usage, last_usage))
    else:
        growth, fds = 0.0, 0
    total_wrong = comm.allreduce(len(wrong))
    total_sizes = comm.allreduce(len(sizes), op=MPI.MAX)
    if rank == 0:
        print(f"SOAK calls={calls} distinct_sizes={total_sizes} wrong={total_wrong} "
              f"rss_growth_mib={growth:.1f} fd_growth={fds} ranks={p} seed={args.seed}",
              flush=True)
        if total_wrong or fds > 0 or growth > args.max_rss_growth:
            return 1
    return 0


def _storm(np, comm, rng, call, rank, p, objects, data, check, tag) -> None:
    """Up to 4p messages between random pairs (the same list on every rank), mixed sizes,
    objects and buffers, all posted at once and completed with Waitall."""
    from minimpi import MPI

    messages = []
    for i in range(int(rng.integers(1, 4 * p + 1))):
        src, dst = int(rng.integers(0, p)), int(rng.integers(0, p))
        n = int(math.exp(rng.uniform(0, math.log(200_000)))) - 1
        messages.append((src, dst, i, n, bool(rng.random() < 0.3)))
    recvs, sends, expect = [], [], []
    for src, dst, i, n, obj in messages:
        payload = data(call, 1000 + i, n, "int64")
        if dst == rank:
            if obj:
                recvs.append(comm.irecv(source=src, tag=i))
                expect.append((None, payload, f"{tag} msg {i} from {src} (obj)"))
            else:
                buf = np.empty(n, "int64")
                recvs.append(comm.Irecv(buf, source=src, tag=i))
                expect.append((buf, payload, f"{tag} msg {i} from {src}"))
        if src == rank:
            sends.append(comm.isend(payload, dst, tag=i) if obj else comm.Isend(payload, dst, tag=i))
    got = MPI.Request.waitall(recvs) if recvs else []
    MPI.Request.Waitall(sends)
    for (buf, want, what), obj_value in zip(expect, got):
        check(what, obj_value if buf is None else buf, want)


def _equal(np, got: Any, want: Any) -> bool:
    return isinstance(got, np.ndarray) and got.dtype == want.dtype and np.array_equal(got, want)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
