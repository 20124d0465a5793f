"""What ``minimpi run --dashboard`` costs a program: small-message figures, off and on.

    python benchmarks/dashboard_overhead.py              # 5 runs each, off and on, interleaved
    python benchmarks/dashboard_overhead.py --runs 3 --no-p2p
    python benchmarks/dashboard_overhead.py --micro      # the per-message and per-snapshot cost

Two programs, each run ``--runs`` times with the dashboard off and on (alternating, so that
a machine whose load drifts treats both alike); the medians and their ratio are printed:

* ``benchmarks/p2p.py --quick --transport shm``: the one-way latency of 8 B and 64 B
  ``Send/Recv`` and ``send/recv`` (pickled objects) over shared memory;
* an 8 B ``Allreduce`` loop on 2 ranks (``--ranks``): the median time of one call;
* an 8 B ``Send/Recv`` ping-pong with ``--progress block``: the CPU time rank 0 spends per
  round trip (on a machine loaded by other programs the wall-clock figures above move by
  several times between runs; CPU time hardly does).

With the dashboard on (``MINIMPI_DASHBOARD=0``: any free port) each rank counts its messages
and samples itself four times a second; no page is open, as when nobody watches.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ALLREDUCE = """
import statistics, sys, time
import numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
iters = int(sys.argv[1])
a, out = np.ones(1), np.empty(1)
for _ in range(200):
    comm.Allreduce(a, out)
samples = []
for _ in range(iters // 100):
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(100):
        comm.Allreduce(a, out)
    samples.append((time.perf_counter() - t0) / 100)
if comm.rank == 0:
    print(f"allreduce_us {statistics.median(samples) * 1e6:.2f}", flush=True)
"""

#: CPU time, not wall time, of a ping-pong whose waits sleep (--progress block): what the
#: rank itself spends per round trip, which other programs' load on the machine hardly moves
PINGPONG_CPU = """
import statistics, time
import numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
b = np.zeros(1)
samples = []
for _ in range(7):
    comm.Barrier()
    t0 = time.process_time()
    for _ in range(2000):
        if comm.rank == 0:
            comm.Send(b, dest=1, tag=0)
            comm.Recv(b, source=1, tag=0)
        else:
            comm.Recv(b, source=0, tag=0)
            comm.Send(b, dest=0, tag=0)
    samples.append((time.process_time() - t0) / 2000)
if comm.rank == 0:
    print(f"cpu_us {statistics.median(samples) * 1e6:.2f}", flush=True)
"""


def run_env(on: bool) -> dict:
    env = dict(os.environ)
    env.pop("MINIMPI_DASHBOARD", None)
    if on:
        env["MINIMPI_DASHBOARD"] = "0"
    return env


def p2p_once(on: bool) -> dict:
    out = subprocess.run([sys.executable, os.path.join(HERE, "p2p.py"), "--quick", "--transport",
                          "shm"], env=run_env(on), capture_output=True, text=True, check=True,
                         timeout=1800).stdout
    found = {}
    for size in ("8 B", "64 B"):
        m = re.search(rf"^\s*{size}\s+\S+\s+\S+\s+(\S+)\s+\S+\s+(\S+)", out, re.M)
        found[f"Send/Recv {size}"] = float(m.group(1))
        found[f"send/recv obj {size}"] = float(m.group(2))
    return found


def allreduce_once(on: bool, script: str, ranks: int, iters: int) -> dict:
    out = subprocess.run([sys.executable, "-m", "minimpi", "run", "-n", str(ranks), script,
                          str(iters)], env=run_env(on), capture_output=True, text=True,
                         check=True, timeout=600).stdout
    m = re.search(r"allreduce_us (\S+)", out)
    return {f"Allreduce 8 B, {ranks} ranks": float(m.group(1))}


def micro(repeats: int = 9, iters: int = 10000) -> None:
    """The dashboard's own work, measured in one process in CPU time (a machine loaded by
    other processes disturbs this far less than a ping-pong between processes): an 8 B
    Send + Recv to itself (the engine's whole path with its bus events) without and with
    the message counter, alternately, best of ``repeats`` each; the same with the reporter
    sampling 4 times a second (the CPU time of both threads); one snapshot, sealed as sent."""
    import threading
    import time
    from types import SimpleNamespace

    import numpy as np

    from minimpi.comm.communicator import endpoint_of
    from minimpi.runtime.bootstrap import seal
    from minimpi.runtime.dashboard import LiveReporter, MessageCounter
    from minimpi.runtime.inproc import run_threads

    def body(comm):
        engine = endpoint_of(comm).engine
        out, into = np.zeros(1), np.empty(1)

        def loop(clock) -> float:
            t0 = clock()
            for _ in range(iters):
                comm.Send(out, dest=0, tag=7)
                comm.Recv(into, source=0, tag=7)
            return (clock() - t0) / iters

        def calls() -> int:
            """Python function calls per Send+Recv (what the machine's load cannot blur)."""
            import sys
            n = [0]

            def count(frame, event, arg):
                if event == "call":
                    n[0] += 1
            sys.setprofile(count)
            for _ in range(100):
                comm.Send(out, dest=0, tag=7)
                comm.Recv(into, source=0, tag=7)
            sys.setprofile(None)
            return n[0] // 100

        counter = MessageCounter()
        calls_off = calls()
        engine.bus.subscribe(counter)
        calls_on = calls()
        engine.bus.unsubscribe(counter)
        best = {"off": float("inf"), "on": float("inf"), "calls": (calls_off, calls_on)}
        for i in range(2 * repeats):
            mode = "on" if i % 2 else "off"
            (engine.bus.subscribe if i % 2 else engine.bus.unsubscribe)(counter)
            best[mode] = min(best[mode], loop(time.thread_time))
        reporter = LiveReporter(engine, SimpleNamespace(), counter, 0.25, threading.get_ident())
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.25):
                reporter.snapshot()
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        best["sampled"] = min(loop(time.process_time) for _ in range(repeats))
        stop.set()
        sampler.join()
        best["on, process"] = min(loop(time.process_time) for _ in range(repeats))
        costs = []
        for _ in range(200):
            t0 = time.thread_time()
            seal(b"k" * 32, {"t": "live", "r": 0, "c": "x" * 32, "s": reporter.snapshot()})
            costs.append(time.thread_time() - t0)
        best["snapshot"] = min(costs)
        return best

    b = run_threads(1, body, timeout=600)[0]
    off, on, snap = b["off"], b["on"], b["snapshot"]
    print(f"# in one process, CPU time, best of {repeats} x {iters}: 8 B Send + Recv to itself")
    print(f"Python calls per Send+Recv:     {b['calls'][0]} off, {b['calls'][1]} with the counter")
    print(f"dashboard off:                  {off * 1e6:8.3f} us per Send+Recv")
    print(f"message counter on:             {on * 1e6:8.3f} us  (+{(on - off) * 1e9:.0f} ns "
          f"per message, {100 * (on / off - 1):+.1f}%)")
    print(f"... and sampling 4 times a s:   {b['sampled'] * 1e6:8.3f} us  (both threads; "
          f"{b['on, process'] * 1e6:.3f} us without the sampler)")
    print(f"one snapshot, sealed:           {snap * 1e6:8.1f} us  (x4 a second: "
          f"{0.4 * snap * 1e6 / 1000:.3f}% of a core)")


def cpu_once(on: bool, script: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "minimpi", "run", "-n", "2", "--transport",
                          "shm", "--progress", "block", script], env=run_env(on),
                         capture_output=True, text=True, check=True, timeout=600).stdout
    m = re.search(r"cpu_us (\S+)", out)
    return {"8 B round trip, CPU of rank 0": float(m.group(1))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--iters", type=int, default=3000)
    ap.add_argument("--no-p2p", action="store_true", help="only the Allreduce loop")
    ap.add_argument("--micro", action="store_true",
                    help="only the in-process measurement of the dashboard's own work")
    args = ap.parse_args()
    if args.micro:
        micro()
        return 0
    results: dict = {False: {}, True: {}}
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "allreduce_loop.py")
        with open(script, "w") as f:
            f.write(ALLREDUCE)
        cpu_script = os.path.join(tmp, "pingpong_cpu.py")
        with open(cpu_script, "w") as f:
            f.write(PINGPONG_CPU)
        for i in range(args.runs):
            for on in ((False, True) if i % 2 == 0 else (True, False)):
                figures = {} if args.no_p2p else p2p_once(on)
                figures.update(allreduce_once(on, script, args.ranks, args.iters))
                figures.update(cpu_once(on, cpu_script))
                for key, value in figures.items():
                    results[on].setdefault(key, []).append(value)
                print(f"run {i + 1} dashboard {'on ' if on else 'off'}: " +
                      ", ".join(f"{k} {v:.1f}" for k, v in figures.items()), flush=True)
    print(f"\n# {args.runs} runs each, microseconds (one-way latency; Allreduce: per call; "
          f"round trip: CPU time). Medians; 'paired' is the median of each run's on/off ratio "
          f"(the two runs of a pair ran back to back: the least disturbed by a drifting load)")
    print(f"{'figure':<32} {'off':>9} {'on':>9} {'on/off':>7} {'paired':>7}")
    for key in results[False]:
        offs, ons = results[False][key], results[True][key]
        off, on = statistics.median(offs), statistics.median(ons)
        paired = statistics.median(b / a for a, b in zip(offs, ons))
        print(f"{key:<32} {off:9.1f} {on:9.1f} {on / off:7.3f} {paired:7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
