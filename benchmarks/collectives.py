"""Collective benchmark: every collective x every registered algorithm x size x p.

    python benchmarks/collectives.py              # full sweep, p = 2, 4, 8 (about 10-15 min)
    python benchmarks/collectives.py --quick      # fewer sizes, shorter loops (under 2 min)
    python benchmarks/collectives.py --peers      # also Open MPI (TCP) and torch gloo, same run
    python benchmarks/collectives.py -c allreduce,bcast -n 4 --json results.json
    python benchmarks/collectives.py --transport tcp -c allreduce -n 4   # TCP only

Jobs run with ``minimpi run``'s default transport (shared memory between the ranks of one
host) unless ``--transport`` says otherwise.

Algorithms are discovered from the registry (:mod:`minimpi.coll.registry`): a newly
registered one is measured without any change here. Each (p, collective) is one job,
``python -m minimpi run -n P benchmarks/collectives.py --worker ...``, whose rank 0 writes
JSON after every measurement (a hung or failed algorithm loses only the rest of its job).

Sizes follow nccl-tests: S is the bytes of the largest per-rank buffer of the call -
Bcast/Reduce/Allreduce/Scan/Exscan: the buffer; Scatter/Gather: the root's whole buffer
(blocks of S/p); Allgather: the receive buffer (contributions of S/p); Reduce_scatter_block:
the send buffer (results of S/p); Alltoall: the send buffer (S/p per pair). Reductions are
MPI.SUM on float32; the others move uint8. Small S are rounded up to one element per block.

Timing (OSU style): a warm-up call, then a loop sized to last about ``--target`` seconds
(at least 2 calls), in ``--rounds`` rounds that interleave the algorithms (median over
rounds, so that a burst of load from other processes hits every algorithm alike); each call is timed alone and followed by a barrier (plain p2p, not the
code under test), so consecutive calls never overlap - a chain algorithm cannot pipeline
one call into the next. Each rank's average time per call, and the average, minimum and
maximum of those over the ranks. Bandwidth (nccl-tests): algbw = S / avg time,
busbw = algbw x factor (allreduce 2(p-1)/p; allgather, reduce_scatter, alltoall, gather,
scatter (p-1)/p; bcast, reduce 1).

``auto`` is judged by the algorithm it picks for each call (recorded by wrapping the chooser
inside the worker) against the fastest measured algorithm, both by their "max" time (the
slowest rank: when the call is complete everywhere, which is what the cost model predicts;
OSU's headline average flatters chain algorithms, whose first ranks leave early); > 1.2x
is flagged. p = 8 on a
2-core machine is oversubscribed: the model does not know that, and the tables show it.

``--peers`` (see benchmarks/peers/): Allreduce of 8 B and 64 MiB float32 at p = 4 by minimpi
(auto and every algorithm), by mpi4py on Open MPI restricted to TCP, and by torch.distributed
with gloo - each in its own virtualenv under ~/.cache/minimpi-peers (created on first use;
never a dependency of minimpi).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import List, Optional

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
FULL_SIZES = [8, 64, 512, 4 << 10, 32 << 10, 256 << 10, 2 << 20, 16 << 20, 64 << 20]
QUICK_SIZES = [8, 4 << 10, 256 << 10, 4 << 20]
NPROCS = [2, 4, 8]
FLAG = 1.2
#: how close to the fastest algorithm auto's pick counts as right in the summary's share
WITHIN = 1.25
#: what "fastest" means when auto is judged: the slowest rank's time, i.e. when the call is
#: complete everywhere (what the cost model predicts); OSU's headline "avg" flatters chains,
#: whose first ranks leave early
JUDGE = "max"

#: nccl-tests bus-bandwidth factor per collective (None: no bandwidth column)
BUS_FACTOR = {
    "allreduce": lambda p: 2 * (p - 1) / p,
    "allgather": lambda p: (p - 1) / p, "reduce_scatter": lambda p: (p - 1) / p,
    "alltoall": lambda p: (p - 1) / p, "gather": lambda p: (p - 1) / p,
    "scatter": lambda p: (p - 1) / p, "bcast": lambda p: 1.0, "reduce": lambda p: 1.0,
    "alltoallv": lambda p: (p - 1) / p,
}


# --------------------------------------------------------------------------- the calls
def make_call(comm, collective: str, size: int, algorithm: Optional[str]):
    """(callable doing one call, bytes S actually used) for a collective, or None if unknown."""
    from minimpi import MPI
    p, rank = comm.size, comm.rank
    alg = None if algorithm == "auto" else algorithm

    def u8(n):
        return np.ones(max(1, n), np.uint8)

    def f32(n):
        return np.ones(max(1, n // 4), np.float32)

    block = max(1, size // p)               # bytes per block, for the blocked collectives
    if collective == "barrier":
        return (lambda: comm.Barrier(algorithm=alg)), 0
    if collective == "bcast":
        buf = u8(size)
        return (lambda: comm.Bcast(buf, root=0, algorithm=alg)), buf.nbytes
    if collective == "scatter":
        send = np.ones(block * p, np.uint8) if rank == 0 else None
        recv = np.empty(block, np.uint8)
        return (lambda: comm.Scatter(send, recv, root=0, algorithm=alg)), block * p
    if collective == "gather":
        send = np.ones(block, np.uint8)
        recv = np.empty(block * p, np.uint8) if rank == 0 else None
        return (lambda: comm.Gather(send, recv, root=0, algorithm=alg)), block * p
    if collective == "allgather":
        send, recv = np.ones(block, np.uint8), np.empty(block * p, np.uint8)
        return (lambda: comm.Allgather(send, recv, algorithm=alg)), block * p
    if collective == "alltoall":
        send, recv = np.ones(block * p, np.uint8), np.empty(block * p, np.uint8)
        return (lambda: comm.Alltoall(send, recv, algorithm=alg)), block * p
    if collective == "alltoallv":             # equal counts, through the v-variant's code
        send, recv = np.ones(block * p, np.uint8), np.empty(block * p, np.uint8)
        spec = ([block] * p, [i * block for i in range(p)])
        return (lambda: comm.Alltoallv([send, spec, MPI.BYTE], [recv, spec, MPI.BYTE],
                                       algorithm=alg)), block * p
    if collective in ("reduce", "allreduce", "scan", "exscan"):
        send = f32(size)
        recv = np.empty_like(send)
        if collective == "reduce":
            return (lambda: comm.Reduce(send, recv, op=MPI.SUM, root=0, algorithm=alg)), send.nbytes
        method = {"allreduce": comm.Allreduce, "scan": comm.Scan, "exscan": comm.Exscan}[collective]
        return (lambda: method(send, recv, op=MPI.SUM, algorithm=alg)), send.nbytes
    if collective == "reduce_scatter":
        count = max(1, size // 4 // p)
        send, recv = np.ones(count * p, np.float32), np.empty(count, np.float32)
        return (lambda: comm.Reduce_scatter_block(send, recv, op=MPI.SUM, algorithm=alg)), count * p * 4
    return None


# --------------------------------------------------------------------------- worker side
class P2P:
    """Benchmark control messages over plain point-to-point (never the algorithms under test)."""

    def __init__(self, comm):
        self.comm = comm

    def sync(self) -> None:
        """A dissemination barrier: in round k, send to rank+2^k, receive from rank-2^k."""
        c = self.comm
        k = 1
        while k < c.size:
            c.sendrecv(None, (c.rank + k) % c.size, 901, None, (c.rank - k) % c.size, 901)
            k <<= 1

    def bcast(self, value):
        c = self.comm
        if c.rank == 0:
            for r in range(1, c.size):
                c.send(value, r, 903)
            return value
        return c.recv(None, 0, 903)

    def gather(self, value) -> Optional[list]:
        c = self.comm
        if c.rank == 0:
            return [value] + [c.recv(None, r, 904) for r in range(1, c.size)]
        c.send(value, 0, 904)
        return None


def measure(comm, ctl: P2P, call, target: float, max_iters: int,
            iters: Optional[int] = None) -> dict:
    """OSU style: each call timed alone, with a barrier (plain p2p) after it, so that calls
    never overlap; a warm-up sizes the loop (unless ``iters`` is given). Per rank the average
    over the loop; reported: the average, minimum and maximum of those over the ranks."""
    ctl.sync()
    if iters is None:
        t = time.perf_counter()
        call()
        t1 = time.perf_counter()
        ctl.sync()
        warm = ctl.bcast((t1 - t, time.perf_counter() - t))
        iters = int(min(max_iters, max(2, target / max(warm[1], 1e-7))))
        if warm[0] < 1e-3:                # small calls: a few more warm-up rounds
            for _ in range(min(iters, 10)):
                call()
                ctl.sync()
    total = 0.0
    for _ in range(iters):
        t = time.perf_counter()
        call()
        total += time.perf_counter() - t
        ctl.sync()
    times = ctl.gather(total / iters)
    if times is None:
        return {}
    return {"avg": sum(times) / len(times), "min": min(times), "max": max(times), "iters": iters}


def worker(args) -> None:
    from minimpi import MPI
    from minimpi.coll import registry
    from minimpi.coll.plan import Plan

    comm = MPI.COMM_WORLD
    ctl = P2P(comm)
    picks: List[str] = []
    real_algorithm = Plan.algorithm

    def recording_algorithm(*a, **k):       # what auto picked, as the call really ran it
        alg = real_algorithm(*a, **k)
        picks.append(alg.name)
        return alg

    Plan.algorithm = recording_algorithm
    collective = args.collective
    names = [name for name, alg in registry.algorithms(collective).items()
             if registry.INTRA in alg.kinds] + (["auto"] if args.measure_auto else [])
    sizes = [0] if collective == "barrier" else [int(s) for s in args.sizes.split(",")]
    out = {"collective": collective, "p": comm.size, "results": {}, "auto": {}, "errors": {}}

    def save():
        if comm.rank == 0:
            with open(args.worker + ".tmp", "w") as f:
                json.dump(out, f)
            os.replace(args.worker + ".tmp", args.worker)

    for size in sizes:
        # rounds interleave the algorithms, so that a burst of load on a shared machine
        # hits all of them alike; each statistic is the median over the rounds
        calls, rounds, iters, failed = {}, {n: [] for n in names}, {}, set()
        for name in names:
            made = make_call(comm, collective, size, name)
            if made is None:
                out["errors"]["*"] = f"no benchmark call for collective {collective!r}"
                save()
                return
            calls[name] = made
        for rnd in range(args.rounds):
            for name in names:
                if name in failed:
                    continue
                call, actual = calls[name]
                try:
                    r = measure(comm, ctl, call, args.target / args.rounds, args.max_iters,
                                iters.get(name))
                except Exception as e:  # refused (same on every rank) or broken
                    out["errors"][f"{size}/{name}"] = f"{type(e).__name__}: {e}"
                    failed.add(name)
                    save()
                    ctl.sync()
                    continue
                iters[name] = ctl.bcast(r.get("iters"))
                if comm.rank == 0:
                    rounds[name].append(r)
                    out["results"][f"{size}/{name}"] = dict(
                        {k: statistics.median(x[k] for x in rounds[name])
                         for k in ("avg", "min", "max")},
                        iters=sum(x["iters"] for x in rounds[name]), bytes=actual,
                        rounds=len(rounds[name]))
                save()
        # what auto picks for this size (one call, recorded by the wrapped chooser)
        picks.clear()
        call, _ = make_call(comm, collective, size, "auto")
        try:
            call()
            out["auto"][str(size)] = picks[0] if picks else None
        except Exception as e:
            out["errors"][f"{size}/auto"] = f"{type(e).__name__}: {e}"
        save()
        ctl.sync()


# --------------------------------------------------------------------------- parent side
def fmt_size(n: int) -> str:
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return f"{n}B"


def run_job(p: int, collective: str, sizes: List[int], args, measure_auto=False) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "out.json")
        cmd = [sys.executable, "-m", "minimpi", "run", "-n", str(p), "--no-prefix",
               "--transport", args.transport, "--progress", args.progress,
               os.path.abspath(__file__), "--worker", path, "--collective", collective,
               "--sizes", ",".join(map(str, sizes)), "--target", str(args.target),
               "--rounds", str(args.rounds),
               "--max-iters", str(args.max_iters)] + (["--measure-auto"] if measure_auto else [])
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, timeout=args.job_timeout, capture_output=True, text=True,
                                  cwd=REPO)
            failure = None if proc.returncode == 0 else (
                f"job exit {proc.returncode}: " + (proc.stderr or proc.stdout).strip()[-600:])
        except subprocess.TimeoutExpired:
            failure = f"job timed out after {args.job_timeout} s"
        data = {"results": {}, "auto": {}, "errors": {}}
        if os.path.exists(path):
            with open(path) as f:
                data = json.load(f)
        if failure:
            data["errors"]["job"] = failure
        data["seconds"] = time.perf_counter() - t0
        return data


def table_for(p: int, collective: str, data: dict, sizes: List[int], out) -> List[dict]:
    """Print the OSU-style table and return the auto-vs-best rows."""
    results = data["results"]
    names = []
    for key in results:
        name = key.split("/", 1)[1]
        if name not in names:
            names.append(name)
    factor = BUS_FACTOR.get(collective)
    print(f"\n# {collective}, p = {p}{' (oversubscribed: 2 cores)' if p > 2 else ''}"
          f"  [{data.get('seconds', 0):.0f} s]", file=out)
    head = f"{'size':>8} {'algorithm':<18} {'avg us':>11} {'min us':>11} {'max us':>11} {'iters':>6}"
    if factor:
        head += f" {'algbw GB/s':>10} {'busbw GB/s':>10}"
    print(head, file=out)
    verdicts = []
    for size in ([0] if collective == "barrier" else sizes):
        rows = [(n, results.get(f"{size}/{n}")) for n in names]
        rows = [(n, r) for n, r in rows if r]
        if not rows:
            continue
        best_name, best = min(rows, key=lambda nr: nr[1][JUDGE])
        pick = data["auto"].get(str(size))
        for n, r in rows:
            mark = ("*" if n == pick else " ") + ("+" if n == best_name else " ")
            line = (f"{fmt_size(size) if size else '-':>8} {mark}{n:<16} {r['avg'] * 1e6:11.1f} "
                    f"{r['min'] * 1e6:11.1f} {r['max'] * 1e6:11.1f} {r['iters']:6d}")
            if factor:
                algbw = r["bytes"] / r["avg"] / 1e9
                line += f" {algbw:10.3f} {algbw * factor(p):10.3f}"
            print(line, file=out)
        auto_r = results.get(f"{size}/{pick}") if pick else None
        measured_auto = results.get(f"{size}/auto")
        verdicts.append({"p": p, "collective": collective, "size": size, "best": best_name,
                         "best_us": best[JUDGE] * 1e6, "auto": pick,
                         "auto_us": auto_r[JUDGE] * 1e6 if auto_r else None,
                         "auto_measured_us": measured_auto[JUDGE] * 1e6 if measured_auto else None})
    for key, err in data.get("errors", {}).items():
        print(f"  ! {key}: {err.splitlines()[0] if err else err}", file=out)
    print(f"  (* = auto's pick, + = fastest by {JUDGE} time over ranks)", file=out)
    return verdicts


def print_auto_summary(verdicts: List[dict], sizes: List[int], out) -> None:
    print(f"\n# auto vs best: {JUDGE} time of auto's pick / {JUDGE} time of the fastest "
          f"algorithm (over ranks; ! = over {FLAG}x)", file=out)
    keys = []
    for v in verdicts:
        if (v["p"], v["collective"]) not in keys:
            keys.append((v["p"], v["collective"]))
    print(f"{'p':>2} {'collective':<15}" + "".join(f"{fmt_size(s):>9}" for s in sizes), file=out)
    for p, coll in keys:
        cells = []
        for s in sizes:
            v = next((v for v in verdicts if v["p"] == p and v["collective"] == coll
                      and v["size"] in (s, 0)), None)
            if v is None or v["auto_us"] is None:
                cells.append(f"{'-':>9}")
                continue
            ratio = v["auto_us"] / v["best_us"]
            cells.append(f"{ratio:8.2f}{'!' if ratio > FLAG else ' '}")
            if coll == "barrier":
                break
        print(f"{p:>2} {coll:<15}" + "".join(cells), file=out)
    wrong = [v for v in verdicts if v["auto_us"] and v["auto_us"] > FLAG * v["best_us"]]
    print(f"\n# where auto was wrong (> {FLAG}x the best): {len(wrong)} of "
          f"{sum(1 for v in verdicts if v['auto_us'])} cases", file=out)
    for v in wrong:
        print(f"  p={v['p']} {v['collective']:<15} {fmt_size(v['size']) if v['size'] else '-':>7}: "
              f"auto picked {v['auto']} {v['auto_us']:.1f} us, best {v['best']} "
              f"{v['best_us']:.1f} us ({v['auto_us'] / v['best_us']:.2f}x)", file=out)
    judged = [v for v in verdicts if v["auto_us"]]
    within = sum(1 for v in judged if v["auto_us"] <= WITHIN * v["best_us"])
    if judged:
        print(f"# auto within {WITHIN}x of the best: {within} of {len(judged)} cases "
              f"({100 * within / len(judged):.1f}%)", file=out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:7]))
    ap.add_argument("--quick", action="store_true", help="fewer sizes, shorter loops")
    ap.add_argument("--peers", action="store_true",
                    help="also measure Allreduce with Open MPI (TCP) and torch gloo")
    ap.add_argument("--peers-only", action="store_true", help="only the peer comparison")
    ap.add_argument("-c", "--collectives", help="comma-separated subset (default: all registered)")
    ap.add_argument("-n", "--nprocs", help="comma-separated p values (default 2,4,8)")
    ap.add_argument("--sizes", help="comma-separated byte sizes (default: 8 B .. 64 MiB)")
    ap.add_argument("--target", type=float, help="seconds per timed loop (default 0.2; quick 0.03)")
    ap.add_argument("--rounds", type=int, default=None,
                    help="rounds over the algorithms per size, median taken (default 3; quick 1)")
    ap.add_argument("--max-iters", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--job-timeout", type=float, default=300.0, help="seconds per (p, collective) job")
    ap.add_argument("--json", metavar="PATH", help="also write every result as JSON")
    ap.add_argument("--transport", default="auto", choices=("auto", "shm", "tcp"),
                    help="minimpi run --transport (default auto: shared memory on one host)")
    ap.add_argument("--progress", default="auto", choices=("auto", "spin", "yield", "block"),
                    help="minimpi run --progress (default auto)")
    ap.add_argument("--worker", metavar="RESULT_JSON", help=argparse.SUPPRESS)
    ap.add_argument("--collective", help=argparse.SUPPRESS)
    ap.add_argument("--measure-auto", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.target is None:
        args.target = 0.03 if args.quick else 0.2
    if args.rounds is None:
        args.rounds = 1 if args.quick else 3
    if args.max_iters is None:
        args.max_iters = 200 if args.quick else 2000
    if args.worker:
        worker(args)
        return 0
    sys.path.insert(0, REPO)
    from minimpi.coll import registry
    registry.algorithms("bcast")
    collectives = sorted(registry.REGISTRY)
    if args.collectives:
        collectives = [c for c in args.collectives.split(",")]
    nprocs = [int(x) for x in args.nprocs.split(",")] if args.nprocs else NPROCS
    sizes = ([int(s) for s in args.sizes.split(",")] if args.sizes
             else QUICK_SIZES if args.quick else FULL_SIZES)
    out = sys.stdout
    started = time.perf_counter()
    wire = "tcp" if args.transport == "tcp" else "shm"
    link = "TCP (loopback)" if wire == "tcp" else "shared memory"
    print(f"# minimpi collectives over {link}, {os.cpu_count()} cores; "
          f"command: {' '.join([os.path.basename(sys.executable)] + sys.argv)}", file=out)
    from minimpi.coll.cost import model_sources
    from minimpi.coll.plan import priced_model
    model, sources = model_sources()
    # (the model as a job over this link prices it: shared memory's own bandwidth)
    model = priced_model(model, wire)
    intra = model.intra
    print(f"# cost model: {model.describe()} ({', '.join(sorted(set(sources.values())))}); "
          f"within a host over {link}: alpha = {intra.alpha * 1e6:.1f} us, "
          f"beta = {1 / intra.beta / 1e9:.2f} GB/s", file=out)
    everything = {"model": model.__dict__, "jobs": [], "peers": None}
    verdicts = []
    if not args.peers_only:
        for p in nprocs:
            for collective in collectives:
                data = run_job(p, collective, sizes, args)
                data.update(p=p, collective=collective)
                everything["jobs"].append(data)
                verdicts += table_for(p, collective, data, sizes, out)
                out.flush()
        print_auto_summary(verdicts, sizes, out)
    if args.peers or args.peers_only:
        from peers import compare  # benchmarks/peers/compare.py
        everything["peers"] = compare.run(args, run_job, out)
    print(f"\n# total {time.perf_counter() - started:.0f} s", file=out)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(everything, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    sys.exit(main())
