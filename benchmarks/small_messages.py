"""Small messages, fast and steady: the figures of the small-message targets, as distributions.

    python benchmarks/small_messages.py --runs 5                  # quiet machine
    python benchmarks/small_messages.py --runs 5 --busy           # one unrelated busy process
    python benchmarks/small_messages.py --runs 5 --out /tmp/sm    # results.json and table.md there

Every run starts one job per system and size of job (p = 2, p = 4, and minimpi at p = 32), each
a separate ``osu_mpi4py.py`` program (the one benchmarks/compare.py runs unchanged under every
MPI), in an order rotated from run to run so that drift on a shared machine does not favour
one system. A job's figure is the median of its samples; across the ``--runs`` separate jobs
the table gives the median and the 90th percentile, and p90/median: how steady it is. A
target is met only by the median, and only if p90 is within 2x of it.

Measured, at p = 2 (each rank has a core on a 2-core machine): 8 B one-way ``Send/Recv``
(``latency``), lowercase ``send/recv`` of 8 bytes (``obj_latency``), ``Allreduce`` and ``Bcast`` of
8 B; at p = 4 (ranks outnumber cores): ``Allreduce`` 8 B and 1 MiB, ``Bcast`` 1 MiB; minimpi's
8 B ``Allreduce`` at p = 32. ``--busy`` runs ``sh -c 'while :; do :; done'`` for the whole
measurement, as a laptop's browser would take a core. Peers come from benchmarks/peers/setup.sh
(``--peers-dir``); a missing one is skipped with a note.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare  # noqa: E402  (benchmarks/compare.py: the systems and how to start them)

MiB = 1 << 20
JOBS: Dict[int, Dict[str, List[int]]] = {
    2: {"latency": [8], "obj_latency": [8], "allreduce": [8], "bcast": [8]},
    4: {"allreduce": [8, MiB], "bcast": [MiB]},
    32: {"allreduce": [8]},
}
SYSTEMS = ("minimpi-shm", "mpich", "openmpi", "openmpi-tcp")
Key = Tuple[str, int, str, int]          # system, p, test, size


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5, help="separate jobs per system (default 5)")
    ap.add_argument("--busy", action="store_true", help="one unrelated busy process throughout")
    ap.add_argument("--systems", default=",".join(SYSTEMS),
                    help=f"comma-separated subset of {', '.join(SYSTEMS)}")
    ap.add_argument("--no-p32", action="store_true", help="skip minimpi's p = 32 job")
    ap.add_argument("--out", default=os.path.join(HERE, "small-messages-results"))
    ap.add_argument("--target", type=float, default=0.1, help="seconds per sample (default 0.1)")
    ap.add_argument("--reps", type=int, default=5, help="samples per job (default 5)")
    ap.add_argument("--max-iters", type=int, default=20000)
    ap.add_argument("--job-timeout", type=float, default=300)
    ap.add_argument("--stall-timeout", type=float, default=120)
    ap.add_argument("--peers-dir")
    ap.add_argument("--openmpi"), ap.add_argument("--mpich"), ap.add_argument("--torch")
    return ap.parse_args(argv)


def p90(values: List[float]) -> float:
    """The 90th percentile, linear between the closest ranks (numpy's default)."""
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=10, method="inclusive")[-1]


def measure(args, systems: Dict[str, "compare.System"], log) -> Dict[Key, List[float]]:
    """{key: one figure per run}: each figure the median of one job's samples."""
    per_run: Dict[Key, List[float]] = {}
    order = [k for k in systems if systems[k].runnable]
    for run in range(args.runs):
        rotated = order[run % len(order):] + order[:run % len(order)]
        for key in rotated:
            for p, tests in JOBS.items():
                if p == 32 and (args.no_p32 or key != "minimpi-shm"):
                    continue
                t0 = time.monotonic()
                data = systems[key].run(p, tests) or {}
                for test, by_size in data.get("samples", {}).items():
                    for size, values in by_size.items():
                        if values:
                            per_run.setdefault((key, p, test, int(size)), []).append(
                                statistics.median(values))
                log(f"run {run + 1}/{args.runs} {key} p={p}: {time.monotonic() - t0:.1f} s")
    return per_run


def us(v: Optional[float]) -> str:
    return "-" if v is None else f"{v * 1e6:.1f}"


def summary(per_run: Dict[Key, List[float]]) -> Dict[Key, dict]:
    return {k: {"median": statistics.median(v), "p90": p90(v), "runs": v}
            for k, v in per_run.items()}


def table(stats: Dict[Key, dict], systems: List[str]) -> List[str]:
    rows = sorted({(p, t, s) for (_, p, t, s) in stats})
    head = "| p | test | size | " + " | ".join(f"{k} median / p90 (us)" for k in systems) + " |"
    lines = [head, "|" + "---|" * (3 + len(systems))]
    for p, t, s in rows:
        cells = []
        for k in systems:
            st = stats.get((k, p, t, s))
            cells.append("-" if st is None else f"{us(st['median'])} / {us(st['p90'])}")
        lines.append(f"| {p} | {t} | {compare.fmt_size(s)} | " + " | ".join(cells) + " |")
    return lines


def targets(stats: Dict[Key, dict], busy: bool) -> List[str]:
    """The small-message targets, met / missed / not measured, from this run's figures."""
    out = []

    def get(system, p, test, size):
        return stats.get((system, p, test, size))

    def check(text, a, bound, how):
        if a is None or bound is None:
            out.append(f"- not measured: {text}")
            return
        steady = a["p90"] <= 2 * a["median"]
        ok = a["median"] <= bound and steady
        out.append(f"- {'met' if ok else 'MISSED'}: {text}: median {us(a['median'])} us, "
                   f"p90 {us(a['p90'])} us (p90/median {a['p90'] / a['median']:.2f}); {how}")

    mine = "minimpi-shm"
    if busy:
        ref = get("mpich", 2, "latency", 8)
        check("with a busy process, 8 B one-way latency within 3x of MPICH's",
              get(mine, 2, "latency", 8), ref and 3 * ref["median"],
              f"MPICH {us(ref and ref['median'])} us")
        return out
    check("8 B one-way Send/Recv over shm <= 3.5 us", get(mine, 2, "latency", 8), 3.5e-6, "")
    check("8 B lowercase send/recv <= 6 us", get(mine, 2, "obj_latency", 8), 6e-6, "")
    check("Allreduce 8 B, p=2 <= 10 us", get(mine, 2, "allreduce", 8), 10e-6, "")
    check("Bcast 8 B, p=2 <= 6 us", get(mine, 2, "bcast", 8), 6e-6, "")
    ref = get("openmpi-tcp", 4, "allreduce", 8)
    check("Allreduce 8 B, p=4 <= 2x Open MPI over TCP", get(mine, 4, "allreduce", 8),
          ref and 2 * ref["median"], f"Open MPI TCP {us(ref and ref['median'])} us")
    for test in ("allreduce", "bcast"):
        ref = get("openmpi", 4, test, MiB)
        check(f"{test} 1 MiB, p=4 within 1.5x of Open MPI's default", get(mine, 4, test, MiB),
              ref and 1.5 * ref["median"], f"Open MPI {us(ref and ref['median'])} us")
    ref = get(mine, 4, "allreduce", 8)
    check("Allreduce 8 B at p=32 <= 8x its p=4 time", get(mine, 32, "allreduce", 8),
          ref and 8 * ref["median"], f"p=4 {us(ref and ref['median'])} us")
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    wanted = [s for s in args.systems.split(",") if s]
    unknown = [s for s in wanted if s not in SYSTEMS]
    if unknown:
        sys.exit(f"small_messages.py: unknown system {unknown[0]!r} (known: {', '.join(SYSTEMS)})")
    systems = {k: compare.System(k, args) for k in wanted}
    for k, s in systems.items():
        if not s.runnable:
            print(f"{k}: skipped: {s.status}", file=sys.stderr)

    def log(text):
        print(text, file=sys.stderr, flush=True)

    busy = None
    if args.busy:
        busy = subprocess.Popen(["sh", "-c", "while :; do :; done"])
    other = compare.OtherLoad()
    started = time.time()
    try:
        per_run = measure(args, systems, log)
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    share = other.share()
    stats = summary(per_run)
    shown = [k for k in wanted if systems[k].runnable]
    note = (f"{args.runs} runs, {'with' if args.busy else 'without'} a busy process; other "
            f"processes took {compare.busy_text(share)} of the CPUs"
            f"{' (the busy process included)' if args.busy else ''}; "
            f"load average at the end {compare.load():.2f}; {time.time() - started:.0f} s")
    lines = ["# Small messages: medians and 90th percentiles over separate runs", "", note, ""]
    lines += table(stats, shown) + ["", "## Targets", ""] + targets(stats, args.busy)
    for k in shown:
        for e in systems[k].errors:
            lines.append(f"- {k}: error: {e}")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"note": note, "args": vars(args),
                   "commands": {k: systems[k].commands for k in shown},
                   "figures": [{"system": k[0], "p": k[1], "test": k[2], "size": k[3], **v}
                               for k, v in stats.items()]}, f, indent=1)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
