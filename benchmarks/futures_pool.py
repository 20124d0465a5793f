"""A process pool's throughput: mpi4py.futures on minimpi, on MPICH, and concurrent.futures.

    python benchmarks/futures_pool.py --runs 5
    python benchmarks/futures_pool.py --runs 5 --mpich ~/.cache/minimpi-peers/mpich

Each run starts, as separate programs, this file's worker under every system in an order
rotated from run to run:

* ``minimpi``: ``minimpi run -n 1 futures_pool.py --worker mpi`` (``MPIPoolExecutor`` spawns
  its workers through the launcher);
* ``mpich``: ``mpiexec -n 1 python futures_pool.py --worker mpi`` with mpi4py on MPICH (from
  benchmarks/peers/setup.sh; skipped with a note when missing);
* ``processpool``: ``python futures_pool.py --worker process``
  (``concurrent.futures.ProcessPoolExecutor``).

The worker makes a cold pool of 4 workers and measures: the time from creating the pool to
the first result of one ``submit`` (start-up), then ``map`` over 20,000 tiny tasks (identity,
default chunksize) and ``map`` over 200 tasks that sleep 10 ms, as tasks per second. Figures
are medians over the runs, with min and max. Under the table: the load average before and
after, and the share of the machine's CPU time that other processes took during the runs
(``compare.OtherLoad``: /proc/stat less this run's own); when that is more than a few
percent, the figures are those of a busy machine.
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

HERE = os.path.dirname(os.path.abspath(__file__))
TINY, SLEEPY, SLEEP_S, WORKERS = 20000, 200, 0.01, 4


def tiny(x):
    return x


def sleepy(x):
    time.sleep(SLEEP_S)
    return x


def worker(kind: str, out: str) -> None:
    t0 = time.perf_counter()
    if kind == "mpi":
        from mpi4py.futures import MPIPoolExecutor
        pool = MPIPoolExecutor(max_workers=WORKERS)
    else:
        from concurrent.futures import ProcessPoolExecutor
        pool = ProcessPoolExecutor(max_workers=WORKERS)
    with pool:
        assert pool.submit(tiny, 7).result() == 7
        first = time.perf_counter() - t0
        t = time.perf_counter()
        got = list(pool.map(tiny, range(TINY)))
        tiny_rate = TINY / (time.perf_counter() - t)
        assert got == list(range(TINY))
        t = time.perf_counter()
        got = list(pool.map(sleepy, range(SLEEPY)))
        sleepy_rate = SLEEPY / (time.perf_counter() - t)
        assert got == list(range(SLEEPY))
    with open(out, "w") as f:
        json.dump({"first_result_s": first, "tiny_per_s": tiny_rate,
                   "sleepy_per_s": sleepy_rate}, f)


def commands(args, out: str) -> dict:
    me = os.path.abspath(__file__)
    cmds = {"minimpi": [sys.executable, "-m", "minimpi", "run", "-n", "1", "--timeout",
                        str(int(args.timeout)), me, "--worker", "mpi", "--out", out],
            "processpool": [sys.executable, me, "--worker", "process", "--out", out]}
    mpich = args.mpich or os.path.join(os.environ.get("MINIMPI_PEERS_DIR") or
                                       os.path.expanduser("~/.cache/minimpi-peers"), "mpich")
    if os.path.exists(os.path.join(mpich, "bin", "mpiexec")):
        cmds["mpich"] = [os.path.join(mpich, "bin", "mpiexec"), "-n", "1",
                         os.path.join(mpich, "bin", "python"), me, "--worker", "mpi",
                         "--out", out]
    else:
        print(f"mpich: skipped ({mpich}/bin/mpiexec missing; bash benchmarks/peers/setup.sh "
              f"mpich)", file=sys.stderr)
    return cmds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--mpich", help="virtualenv with mpi4py + MPICH")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per program")
    ap.add_argument("--worker", choices=["mpi", "process"], help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args.worker, args.out)
        return 0
    sys.path.insert(0, HERE)
    import compare  # benchmarks/compare.py: load, OtherLoad (not in the workers)
    results: dict = {}
    load_before, others = compare.load(), compare.OtherLoad()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        cmds = commands(args, out)
        systems = list(cmds)
        for run in range(args.runs):
            for name in systems[run % len(systems):] + systems[:run % len(systems)]:
                env = dict(os.environ)
                if name == "mpich":
                    env.pop("PYTHONPATH", None)          # the real mpi4py
                if os.path.exists(out):
                    os.unlink(out)
                try:
                    done = subprocess.run(cmds[name], env=env, capture_output=True, text=True,
                                          timeout=args.timeout + 30, stdin=subprocess.DEVNULL)
                except subprocess.TimeoutExpired:
                    print(f"{name}: run {run + 1} timed out", file=sys.stderr)
                    continue
                if done.returncode != 0 or not os.path.exists(out):
                    print(f"{name}: run {run + 1} failed (exit {done.returncode}):\n"
                          f"{(done.stderr or done.stdout)[-2000:]}", file=sys.stderr)
                    continue
                with open(out) as f:
                    for k, v in json.load(f).items():
                        results.setdefault(name, {}).setdefault(k, []).append(v)
                print(f"run {run + 1}/{args.runs} {name} done", file=sys.stderr, flush=True)
    print(f"MPIPoolExecutor / ProcessPoolExecutor with {WORKERS} workers; medians over "
          f"{args.runs} runs [min, max]\n")
    print("| system | first result (s) | 20,000 tiny tasks (tasks/s) | "
          "200 x 10 ms tasks (tasks/s) |")
    print("|---|---|---|---|")
    for name, figures in results.items():
        cells = []
        for k, fmt in (("first_result_s", "{:.2f}"), ("tiny_per_s", "{:.0f}"),
                       ("sleepy_per_s", "{:.0f}")):
            v = figures[k]
            cells.append(f"{fmt.format(statistics.median(v))} "
                         f"[{fmt.format(min(v))}, {fmt.format(max(v))}]")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(f"\nload average {load_before:.2f} before, {compare.load():.2f} after; other "
          f"processes took {compare.busy_text(others.share())} of the machine's CPU time "
          f"during the runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
