"""Flat vs hierarchical allreduce over several hosts: measured times next to the cost model's.

    python benchmarks/hierarchical.py --hosts h1:2,h2:2 --run-args "ARGS FOR minimpi run"
    python benchmarks/hierarchical.py --hosts h1:2,h2:2 --calibrate     # measure both links first
    python benchmarks/hierarchical.py -n 4                               # one host (a baseline)
    python benchmarks/hierarchical.py --hosts h1:2,h2:2 --sizes 1MiB,64MiB --json out.json

One job, ``python -m minimpi run -n P [--hosts HOSTS] RUN_ARGS benchmarks/hierarchical.py
--worker ...``: ``--hosts`` and ``--run-args`` (how ``minimpi run`` reaches the hosts: an rsh
command, ...) go to ``minimpi run`` as they are. Every rank needs this repository at the
same path (a shared file system, or the same checkout on every host).

For each size (default 1 MiB and 64 MiB, float32 SUM) the job runs Allreduce with every
registered algorithm - flat and hierarchical - and with ``auto`` (recording what it picked),
in rounds that interleave the algorithms (a burst of load, or a change in the network,
hits all of them alike). Each call is timed alone and followed by a point-to-point barrier
(never the code under test); the loop is sized by a first call to last about ``--target``
seconds per round, at least one call, so 64 MiB over a 100 Mbit/s link (about 5 s a call)
stays affordable. Reported: the slowest rank's average time per call (when the call is
complete everywhere, as the model predicts), median over rounds; bus bandwidth
(nccl-tests: size / time x 2(p-1)/p); and the cost model's prediction for the layout the
ranks themselves report (``Endpoint.hosts`` from the rendezvous: check it says what you
meant).

``--calibrate`` first measures the intra- and inter-host links with the same hosts and run
arguments (``minimpi explain --calibrate --hosts``, not saved) and hands the numbers to
every rank (``-x MINIMPI_COST_ALPHA_INTER=...``), so ``auto`` and the predictions use them;
without it they come from the cost model as configured (calibration file, environment).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from typing import Dict, List, Optional

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESULT_MARK = "minimpi-hierarchical-benchmark: "
LINK_VARS = {"alpha_intra": "MINIMPI_COST_ALPHA_INTRA", "beta_intra": "MINIMPI_COST_BETA_INTRA",
             "alpha_inter": "MINIMPI_COST_ALPHA_INTER", "beta_inter": "MINIMPI_COST_BETA_INTER",
             "alpha": "MINIMPI_COST_ALPHA", "beta": "MINIMPI_COST_BETA",
             "gamma": "MINIMPI_COST_GAMMA"}


# --------------------------------------------------------------------------- worker side
class Control:
    """The benchmark's own messages, over plain point-to-point (never the code under test)."""

    def __init__(self, comm) -> None:
        self.comm = comm

    def sync(self) -> None:
        """A dissemination barrier: in round k, send to rank+2^k, receive from rank-2^k."""
        c, k = self.comm, 1
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


def timed_calls(ctl: Control, call, calls: int) -> Optional[float]:
    """The slowest rank's average seconds per call over ``calls`` calls, each timed alone
    and followed by a barrier (rank 0 gets it; the others None)."""
    total = 0.0
    for _ in range(calls):
        t = time.perf_counter()
        call()
        total += time.perf_counter() - t
        ctl.sync()
    per_rank = ctl.gather(total / calls)
    return None if per_rank is None else max(per_rank)


def worker(args) -> None:
    from minimpi import MPI
    from minimpi.coll import cost, registry
    from minimpi.coll.plan import Plan

    comm = MPI.COMM_WORLD
    ctl = Control(comm)
    picks: List[str] = []
    real_algorithm = Plan.algorithm

    def recording_algorithm(*a, **k):         # what auto picked, as the call really ran it
        alg = real_algorithm(*a, **k)
        picks.append(alg.name)
        return alg

    Plan.algorithm = recording_algorithm
    layout = cost.Layout.of(comm._ep.hosts)
    model = (comm._plan or comm._make_plan()).model
    table = registry.algorithms("allreduce")
    names = [n for n in args.algorithms.split(",") if n] or list(table)
    out: Dict = {"p": comm.size, "layout": str(layout), "counts": list(layout.counts),
                 "model": {k: getattr(model, k) for k in LINK_VARS}, "sizes": {}}
    for size in [int(s) for s in args.sizes.split(",")]:
        send = np.ones(max(1, size // 4), np.float32)
        recv = np.empty_like(send)
        entry: Dict = {"times": {}, "rounds": {}, "predicted": {}, "refused": {}}
        calls: Dict[str, int] = {}
        for name in names + ["auto"]:
            alg = table.get(name)
            why = alg.refusal(comm.size, send.nbytes, MPI.SUM, False, layout) if alg else None
            if why:
                entry["refused"][name] = why
                continue
            if alg is not None:
                entry["predicted"][name] = alg.predict(model, comm.size, send.nbytes, layout)[0]
            # one call: warms up, checks the result, and sizes the loop
            ctl.sync()
            picks.clear()
            t = time.perf_counter()
            comm.Allreduce(send, recv, op=MPI.SUM, algorithm=None if name == "auto" else name)
            first = ctl.bcast(time.perf_counter() - t)
            if not np.all(recv == comm.size):
                raise SystemExit(f"rank {comm.rank}: allreduce {name} gave a wrong result")
            if name == "auto":
                entry["auto"] = picks[0] if picks else None
            calls[name] = int(max(1, min(args.max_calls, args.target / max(first, 1e-6))))
            entry["rounds"][name] = []
        for _ in range(args.rounds):
            for name in calls:
                algorithm = None if name == "auto" else name
                t = timed_calls(ctl, lambda: comm.Allreduce(send, recv, op=MPI.SUM,
                                                            algorithm=algorithm), calls[name])
                if comm.rank == 0:
                    entry["rounds"][name].append(t)
        if comm.rank == 0:
            entry["times"] = {n: statistics.median(ts) for n, ts in entry["rounds"].items()}
            entry["calls"] = calls
        out["sizes"][str(size)] = entry
    if comm.rank == 0:
        print(RESULT_MARK + json.dumps(out), flush=True)


# --------------------------------------------------------------------------- driver side
def _fmt_time(s: float) -> str:
    return f"{s:.3f} s" if s >= 1 else f"{s * 1e3:.2f} ms" if s >= 1e-3 else f"{s * 1e6:.1f} us"


def _fmt_size(n: int) -> str:
    from minimpi.data.units import format_size
    return format_size(n)


def report(result: Dict, hosts: Optional[str], calibrated: Optional[Dict]) -> str:
    from minimpi.coll import registry
    table = registry.algorithms("allreduce")
    p = result["p"]
    m = result["model"]
    lines = [f"allreduce, float32 SUM, {p} ranks; the ranks report: {result['layout']}"
             + (f" (--hosts {hosts})" if hosts else ""),
             "time: the slowest rank's average per call, median over rounds; busbw = size / "
             "time x 2(p-1)/p; predicted: the cost model for that layout"]

    def link(a, b):
        return f"{_fmt_time(a)}, {1 / b / 1e9:.3g} GB/s"

    alpha_i, beta_i = m["alpha_intra"] or m["alpha"], m["beta_intra"] or m["beta"]
    alpha_e, beta_e = m["alpha_inter"] or m["alpha"], m["beta_inter"] or m["beta"]
    lines.append(f"links: intra {link(alpha_i, beta_i)}; inter {link(alpha_e, beta_e)}"
                 + (" (measured just now)" if calibrated else " (the cost model as configured)"))
    for size, entry in result["sizes"].items():
        n = int(size)
        times = entry["times"]
        best = min((t for name, t in times.items() if name != "auto"), default=None)
        lines.append("")
        lines.append(f"{'size':>8}  {'algorithm':<20} {'kind':<22} {'time':>11} "
                     f"{'busbw GB/s':>10} {'vs best':>8} {'predicted':>11}")
        order = sorted((t, name) for name, t in times.items() if name != "auto")
        for t, name in order + ([(times["auto"], "auto")] if "auto" in times else []):
            alg = table.get(name)
            kind = ("hierarchical" if alg.hierarchical else "flat") if alg else \
                f"-> {entry.get('auto')}"
            busbw = n / t * 2 * (p - 1) / p / 1e9 if t and p > 1 else 0.0
            pred = entry["predicted"].get(name if alg else entry.get("auto"))
            lines.append(f"{_fmt_size(n):>8}  {name:<20} {kind:<22} {_fmt_time(t):>11} "
                         f"{busbw:10.3f} {t / best:7.2f}x "
                         f"{_fmt_time(pred) if pred else '':>11}")
        for name, why in entry["refused"].items():
            lines.append(f"{_fmt_size(n):>8}  {name:<20} refused: {why}")
        flat = [t for name, t in times.items() if name in table and not table[name].hierarchical]
        hier = [t for name, t in times.items() if name in table and table[name].hierarchical]
        if flat and hier:
            lines.append(f"{'':>8}  best hierarchical / best flat = {min(hier) / min(flat):.2f}")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", help="hosts for minimpi run, e.g. h1:2,h2:2 (default: this host)")
    ap.add_argument("-n", type=int, default=None,
                    help="ranks (default: every slot of --hosts, or 4)")
    ap.add_argument("--run-args", default="", help="more options for minimpi run, one string")
    ap.add_argument("--sizes", default="1MiB,64MiB", help="bytes per rank (default 1MiB,64MiB)")
    ap.add_argument("--algorithms", default="",
                    help="comma-separated allreduce algorithms (default: all registered)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--target", type=float, default=2.0, help="seconds per algorithm per round")
    ap.add_argument("--max-calls", type=int, default=200)
    ap.add_argument("--calibrate", action="store_true",
                    help="measure both links first (minimpi explain --calibrate --hosts)")
    ap.add_argument("--timeout", type=float, default=3600.0)
    ap.add_argument("--json", metavar="PATH", help="also write the raw results here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    sys.path.insert(0, REPO)
    from minimpi.data.units import parse_size
    sizes = ",".join(str(parse_size(s)) for s in args.sizes.split(","))
    if args.worker:
        args.sizes = sizes
        worker(args)
        return 0
    from minimpi.launcher.hosts import parse_hosts, total_slots
    nprocs = args.n or (total_slots(parse_hosts(args.hosts)) if args.hosts else 4)
    run_args = shlex.split(args.run_args)
    env_args: List[str] = []
    calibrated = None
    if args.calibrate:
        from minimpi.tools import calibrate
        print("measuring the links ...", flush=True)
        calibrated = calibrate.measure(quick=True, hosts=args.hosts, nprocs=nprocs,
                                       run_args=run_args)
        for name, var in LINK_VARS.items():
            if name in calibrated:
                env_args += ["-x", f"{var}={calibrated[name]!r}"]
    cmd = [sys.executable, "-m", "minimpi", "run", "-n", str(nprocs), "--no-prefix"]
    cmd += (["--hosts", args.hosts] if args.hosts else []) + run_args + env_args
    cmd += [os.path.abspath(__file__), "--worker", "--sizes", sizes, "--algorithms",
            args.algorithms, "--rounds", str(args.rounds), "--target", str(args.target),
            "--max-calls", str(args.max_calls)]
    print("running: " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_MARK)]
    if proc.returncode != 0 or not lines:
        print(f"the benchmark job failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}",
              file=sys.stderr)
        return 1
    result = json.loads(lines[-1][len(RESULT_MARK):])
    result["hosts"], result["calibration"] = args.hosts, calibrated
    print(report(result, args.hosts, calibrated))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
