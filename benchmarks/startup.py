"""Start-up: time from launching a job to its first ``Barrier``, minimpi beside MPICH.

    python benchmarks/startup.py                          # 32, 64, 128 ranks; 5 runs each
    python benchmarks/startup.py -n 32,64 --runs 7 --mpich ~/.cache/minimpi-peers/mpich
    python benchmarks/startup.py -n 64 --phases           # where each rank's time goes
    python benchmarks/startup.py -n 4 --runs 15 --systems minimpi,mpich   # a small job

Every system runs the same mpi4py program (``from mpi4py import MPI``; under ``minimpi run``
that is minimpi): rank 0 prints the wall-clock time right after the first
``COMM_WORLD.Barrier()``. The first figure is that time less the time the launcher was
started, so it includes the interpreter's start, the imports, the rendezvous and the
connections, not the job's end; the second is the whole command, start to exit (what a user
waits for: finalize and the teardown included), and the third the CPU seconds of every
process of the job. The runs of the systems are interleaved (minimpi with the fork server,
minimpi with ``--no-fork-server``, MPICH, then again), so drift on a shared machine hits
them alike; each figure is the median of ``--runs`` runs with the fastest and slowest run
beside it, and the ratios to MPICH are medians of the ratios of runs made one after the
other. The share of CPU time other processes took meanwhile is printed: above a few
percent, the machine was busy and only the ratios mean much.

MPICH is the ``mpich`` virtualenv of benchmarks/peers/setup.sh (``--mpich``, or
``MINIMPI_MPICH``; default ``~/.cache/minimpi-peers/mpich``). Bytecode of minimpi is compiled
first, and the jobs run without ``PYTHONDONTWRITEBYTECODE``: an installed minimpi has its
bytecode, and a user's machine does not set that variable.

``--phases`` also runs a program that records, per rank, when its process started (from
/proc), when the program's first line ran (the interpreter and the imports done), when
``from mpi4py import MPI`` returned (rendezvous and connections done), when the first
``Barrier`` returned and when MPI's finalize had run (the program's last exit handler), and
when the whole command ended; it prints the median and the slowest rank of each phase,
measured from the launcher's start.
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
import atexit, os, time
t_program = time.time()
def _started():
    with open("/proc/self/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")
t_process = _started()
def _finalized():   # registered before MPI is imported: runs after MPI's finalize
    print("PHASES", rank, repr(t_process), repr(t_program), repr(t_init), repr(t_barrier),
          repr(time.time()), flush=True)
atexit.register(_finalized)
from mpi4py import MPI
t_init = time.time()
MPI.COMM_WORLD.Barrier()
t_barrier = time.time()
rank = MPI.COMM_WORLD.Get_rank()
"""
#: where the peers' virtualenvs are made (benchmarks/peers/setup.sh)
PEERS = os.environ.get("MINIMPI_PEERS_DIR", os.path.expanduser("~/.cache/minimpi-peers"))


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


def run_once(cmd: List[str], timeout: float, env: Dict[str, str]
             ) -> tuple[Optional[float], float, float, str]:
    """Seconds from start to rank 0's first Barrier (None on failure), seconds of the whole
    command, the CPU seconds the whole job used (every process of it, to its end), and the
    output."""
    cpu0 = children_cpu()
    t0 = time.time()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as exc:
        return None, 0.0, 0.0, f"timed out after {timeout} s: {exc.stdout or ''}{exc.stderr or ''}"
    whole = time.time() - t0
    cpu = children_cpu() - cpu0
    for line in proc.stdout.splitlines():
        if line.startswith("BARRIER ") and proc.returncode == 0:
            return float(line.split()[1]) - t0, whole, cpu, proc.stdout
    return None, whole, cpu, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"


def phases_once(cmd: List[str], timeout: float, env: Dict[str, str]
                ) -> Optional[Dict[str, List[float]]]:
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    t_end = time.time() - t0
    rows = [line.split()[1:] for line in proc.stdout.splitlines() if line.startswith("PHASES ")]
    if not rows:
        print(proc.stdout, proc.stderr, file=sys.stderr)
        return None
    cols = list(zip(*[[float(x) - t0 for x in row[1:]] for row in rows]))
    phases = dict(zip(("process started", "program's first line", "MPI imported (rendezvous)",
                       "first Barrier", "finalized (last exit handler)"),
                      [list(c) for c in cols]))
    phases["command ended"] = [t_end]
    return phases


def spread(values: List[float]) -> str:
    """``median (fastest-slowest)``"""
    if not values:
        return "-"
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def paired_ratio(ours: List[Optional[float]], theirs: List[Optional[float]]) -> str:
    """The median of the ratios of runs made one after the other, and their spread."""
    ratios = [a / b for a, b in zip(ours, theirs) if a is not None and b]
    if not ratios:
        return "-"
    return f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", default="32,64,128", help="rank counts (comma-separated)")
    ap.add_argument("--runs", type=int, default=5, help="runs per system and size")
    ap.add_argument("--systems", default="minimpi,minimpi-no-fork-server,mpich")
    ap.add_argument("--mpich", default=os.environ.get("MINIMPI_MPICH",
                                                      os.path.join(PEERS, "mpich")),
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
    # an installed minimpi has its bytecode compiled, and users do not set
    # PYTHONDONTWRITEBYTECODE (this machine's environment may)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    import minimpi
    subprocess.run([sys.executable, "-m", "compileall", "-q",
                    os.path.dirname(os.path.abspath(minimpi.__file__)),
                    os.path.join(REPO, "launcher")],
                   env=env, stdout=subprocess.DEVNULL, check=False)
    tmp = tempfile.mkdtemp(prefix="minimpi-startup-")
    barrier = os.path.join(tmp, "first_barrier.py")
    phases = os.path.join(tmp, "phases.py")
    with open(barrier, "w") as f:
        f.write(BARRIER_PROGRAM)
    with open(phases, "w") as f:
        f.write(PHASES_PROGRAM)

    #: system -> n -> one entry per run (None: the run failed), in the order of the runs
    first: Dict[str, Dict[int, List[Optional[float]]]] = {s: {n: [] for n in sizes}
                                                          for s in systems}
    whole = {s: {n: [] for n in sizes} for s in systems}
    cpus = {s: {n: [] for n in sizes} for s in systems}
    total0, busy0 = busy_share()
    ours0 = children_cpu()
    for n in sizes:
        for i in range(args.runs):
            for system in systems[i % len(systems):] + systems[:i % len(systems)]:
                seconds, command, cpu, out = run_once(commands(system, n, barrier, args.mpich),
                                                      args.timeout, env)
                first[system][n].append(seconds)
                whole[system][n].append(command if seconds is not None else None)
                cpus[system][n].append(cpu if seconds is not None else None)
                if seconds is None:
                    print(f"{system} n={n}: failed: {out[-2000:]}", file=sys.stderr)
                    continue
                print(f"  {system:24s} n={n:4d} run {i + 1}: {seconds:6.2f} s to the first "
                      f"Barrier, {command:6.2f} s in all (job CPU {cpu:6.2f} s)", flush=True)
    total1, busy1 = busy_share()
    ours = children_cpu() - ours0
    load = os.getloadavg()

    for title, table in (("time to the first Barrier", first), ("the whole command", whole),
                         ("CPU seconds of the whole job (every process, to its end)", cpus)):
        print(f"\n{title}, s: median (fastest-slowest) of {args.runs} runs; ratio to MPICH: "
              f"median (spread) of the ratios of runs made one after the other")
        head = f"| {'n':>4} | " + " | ".join(f"{s:>26}" for s in systems)
        if "mpich" in systems:
            head += " | " + " | ".join(f"{s + ' / mpich':>26}" for s in systems if s != "mpich")
        print(head + " |")
        for n in sizes:
            row = f"| {n:>4} | " + " | ".join(
                f"{spread([v for v in table[s][n] if v is not None]):>26}" for s in systems)
            if "mpich" in systems:
                row += " | " + " | ".join(f"{paired_ratio(table[s][n], table['mpich'][n]):>26}"
                                          for s in systems if s != "mpich")
            print(row + " |")
    hz = os.sysconf("SC_CLK_TCK")
    others = max(0.0, (busy1 - busy0) / hz - ours)
    print(f"\nother processes used {100 * others / max(1e-9, (total1 - total0) / hz):.0f}% of "
          f"the machine's CPU ({os.cpu_count()} cores) during the runs; load average now "
          f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")

    if args.phases:
        for system in [s for s in systems if s != "mpich"]:
            for n in sizes:
                got = phases_once(commands(system, n, phases, args.mpich), args.timeout, env)
                if got is None:
                    continue
                print(f"\n{system}, n={n}: seconds after the launcher started (median / slowest rank)")
                for name, values in got.items():
                    print(f"  {name:30s} {statistics.median(values):6.2f} / {max(values):6.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"first_barrier": first, "whole_command": whole, "cpu": cpus,
                       "load": load}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
