"""Start-up: time from launching a job to its first ``Barrier``, minimpi beside MPICH.

    python benchmarks/startup.py                          # 32, 64, 128 ranks; 5 runs each
    python benchmarks/startup.py -n 32,64 --runs 7 --mpich /tmp/mpich-venv
    python benchmarks/startup.py -n 64 --phases           # where each rank's time goes

Every system runs the same mpi4py program (``from mpi4py import MPI``; under ``minimpi run``
that is minimpi): rank 0 prints the wall-clock time right after the first
``COMM_WORLD.Barrier()``. The figure is that time less the time the launcher was started,
so it includes the interpreter's start, the imports, the rendezvous and the connections,
not the job's end. The runs of the systems are interleaved (minimpi with the fork server,
minimpi with ``--no-fork-server``, MPICH, then again), so drift on a shared machine hits
them alike; each figure is the median of ``--runs`` runs, and the table gives the ratios
to MPICH measured in the same run. The share of CPU time other processes took meanwhile is
printed: above a few percent, the machine was busy and only the ratios mean much.

``--phases`` also runs a program that records, per rank, when its process started (from
/proc), when the program's first line ran (the interpreter and the imports done), when
``from mpi4py import MPI`` returned (rendezvous and connections done) and when the first
``Barrier`` returned, and prints the median and the slowest rank of each phase, measured
from the launcher's start.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

BARRIER_PROGRAM = """\
from mpi4py import MPI
import time
MPI.COMM_WORLD.Barrier()
if MPI.COMM_WORLD.Get_rank() == 0:
    print("BARRIER", repr(time.time()), flush=True)
"""

PHASES_PROGRAM = """\
import os, time
t_program = time.time()
def _started():
    with open("/proc/self/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")
t_process = _started()
from mpi4py import MPI
t_init = time.time()
MPI.COMM_WORLD.Barrier()
t_barrier = time.time()
print("PHASES", MPI.COMM_WORLD.Get_rank(), repr(t_process), repr(t_program), repr(t_init),
      repr(t_barrier), flush=True)
"""


def busy_share() -> tuple[float, float]:
    """(all CPU jiffies, busy jiffies) from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return float(sum(fields)), float(sum(fields) - idle)


def commands(system: str, n: int, program: str, mpich: str) -> List[str]:
    if system == "mpich":
        return [os.path.join(mpich, "bin", "mpiexec"), "-n", str(n),
                os.path.join(mpich, "bin", "python"), program]
    cmd = [sys.executable, "-m", "minimpi", "run", "-n", str(n), "--no-prefix"]
    if system == "minimpi-no-fork-server":
        cmd.append("--no-fork-server")
    return cmd + [program]


def children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def run_once(cmd: List[str], timeout: float) -> tuple[Optional[float], float, str]:
    """Seconds from start to rank 0's first Barrier (None on failure), the CPU seconds the
    whole job used (every process of it, to its end), and the output."""
    cpu0 = children_cpu()
    t0 = time.time()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        return None, 0.0, f"timed out after {timeout} s: {exc.stdout or ''}{exc.stderr or ''}"
    cpu = children_cpu() - cpu0
    for line in proc.stdout.splitlines():
        if line.startswith("BARRIER "):
            return float(line.split()[1]) - t0, cpu, proc.stdout
    return None, cpu, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"


def phases_once(cmd: List[str], timeout: float) -> Optional[Dict[str, List[float]]]:
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    rows = [line.split()[1:] for line in proc.stdout.splitlines() if line.startswith("PHASES ")]
    if not rows:
        print(proc.stdout, proc.stderr, file=sys.stderr)
        return None
    cols = list(zip(*[[float(x) - t0 for x in row[1:]] for row in rows]))
    return dict(zip(("process started", "program's first line", "MPI imported (rendezvous)",
                     "first Barrier"), [list(c) for c in cols]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", default="32,64,128", help="rank counts (comma-separated)")
    ap.add_argument("--runs", type=int, default=5, help="runs per system and size")
    ap.add_argument("--systems", default="minimpi,minimpi-no-fork-server,mpich")
    ap.add_argument("--mpich", default=os.environ.get("MINIMPI_MPICH", "/tmp/mpich-venv"),
                    help="a virtualenv with mpi4py on MPICH (bin/mpiexec, bin/python)")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--phases", action="store_true", help="also time each phase per rank")
    ap.add_argument("--json", help="write every sample here")
    args = ap.parse_args()
    sizes = [int(x) for x in args.n.split(",")]
    systems = [s for s in args.systems.split(",") if s]
    if "mpich" in systems and not os.path.exists(os.path.join(args.mpich, "bin", "mpiexec")):
        print(f"no MPICH at {args.mpich}: left out", file=sys.stderr)
        systems.remove("mpich")
    # an installed minimpi has its bytecode compiled; a checkout run with
    # PYTHONDONTWRITEBYTECODE=1 would compile every module in every rank instead
    import minimpi
    subprocess.run([sys.executable, "-m", "compileall", "-q",
                    os.path.dirname(os.path.abspath(minimpi.__file__)),
                    os.path.join(REPO, "launcher")],
                   env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
                   stdout=subprocess.DEVNULL, check=False)
    tmp = tempfile.mkdtemp(prefix="minimpi-startup-")
    barrier = os.path.join(tmp, "first_barrier.py")
    phases = os.path.join(tmp, "phases.py")
    with open(barrier, "w") as f:
        f.write(BARRIER_PROGRAM)
    with open(phases, "w") as f:
        f.write(PHASES_PROGRAM)

    samples: Dict[str, Dict[int, List[float]]] = {s: {n: [] for n in sizes} for s in systems}
    cpus: Dict[str, Dict[int, List[float]]] = {s: {n: [] for n in sizes} for s in systems}
    total0, busy0 = busy_share()
    ours0 = children_cpu()
    for n in sizes:
        for i in range(args.runs):
            for system in systems[i % len(systems):] + systems[:i % len(systems)]:
                seconds, cpu, out = run_once(commands(system, n, barrier, args.mpich),
                                             args.timeout)
                if seconds is None:
                    print(f"{system} n={n}: failed: {out[-2000:]}", file=sys.stderr)
                    continue
                samples[system][n].append(seconds)
                cpus[system][n].append(cpu)
                print(f"  {system:24s} n={n:4d} run {i + 1}: {seconds:6.2f} s "
                      f"(job CPU {cpu:6.2f} s)", flush=True)
    total1, busy1 = busy_share()
    ours = children_cpu() - ours0
    load = os.getloadavg()

    print()
    print(f"time to the first Barrier, median of {args.runs} runs (s); ratio to MPICH")
    head = f"| {'n':>4} | " + " | ".join(f"{s:>24}" for s in systems)
    if "mpich" in systems:
        head += " | " + " | ".join(f"{s + ' / mpich':>24}" for s in systems if s != "mpich")
    print(head + " |")
    for n in sizes:
        med = {s: statistics.median(samples[s][n]) if samples[s][n] else float("nan")
               for s in systems}
        row = f"| {n:>4} | " + " | ".join(f"{med[s]:>24.2f}" for s in systems)
        if "mpich" in systems:
            row += " | " + " | ".join(f"{med[s] / med['mpich']:>24.2f}"
                                      for s in systems if s != "mpich")
        print(row + " |")
    print()
    print("CPU seconds of the whole job (every process, to its end), median")
    print(f"| {'n':>4} | " + " | ".join(f"{s:>24}" for s in systems) + " |")
    for n in sizes:
        print(f"| {n:>4} | " + " | ".join(
            f"{statistics.median(cpus[s][n]) if cpus[s][n] else float('nan'):>24.2f}"
            for s in systems) + " |")
    hz = os.sysconf("SC_CLK_TCK")
    others = max(0.0, (busy1 - busy0) / hz - ours)
    print(f"\nother processes used {100 * others / max(1e-9, (total1 - total0) / hz):.0f}% of "
          f"the machine's CPU ({os.cpu_count()} cores) during the runs; load average now "
          f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")

    if args.phases:
        for system in [s for s in systems if s != "mpich"]:
            for n in sizes:
                got = phases_once(commands(system, n, phases, args.mpich), args.timeout)
                if got is None:
                    continue
                print(f"\n{system}, n={n}: seconds after the launcher started (median / slowest rank)")
                for name, values in got.items():
                    print(f"  {name:28s} {statistics.median(values):6.2f} / {max(values):6.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"samples": samples, "cpu": cpus, "load": load}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
