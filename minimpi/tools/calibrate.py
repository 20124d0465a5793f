"""Measure the cost model's inputs on this machine (``minimpi explain --calibrate``).

A 2-rank job over the real TCP transport (``python -m minimpi run -n 2``) measures

* **alpha**, per-message latency: the one-way time of an 8-byte ``Send``/``Recv`` ping-pong
  (half the round trip), median of several repetitions;
* **beta**, per-byte time: the slope of the one-way ping-pong time over message sizes from
  256 KiB (the pipeline segment) to 8 MiB, fitted by least squares - so the fixed cost of a
  large message (its rendezvous) is not counted as bandwidth;
* **gamma**, per-byte reduction time: ``reduce_local(SUM)`` of one float64 buffer into
  another (the in-place numpy kernel the reducing collectives use) over 4 MiB buffers,
  in one process.

The result is a dict with ``alpha``, ``beta``, ``gamma`` (seconds, seconds per byte) and a
``measured`` note; :func:`save` writes it as the calibration file that
:func:`minimpi.coll.cost.default_model` reads.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

import numpy as np

from ..coll.cost import clear_cache, config_path
from ..data.ops import SUM, reduce_local

SMALL = 8
LARGE_SIZES = [256 << 10, 1 << 20, 2 << 20, 4 << 20, 8 << 20]
GAMMA_BYTES = 4 << 20


def _pingpong(comm, a: np.ndarray, b: np.ndarray, iters: int, repeats: int) -> float:
    """Median one-way time of a Send/Recv ping-pong between ranks 0 and 1."""
    other = 1 - comm.rank
    times = []
    for _ in range(repeats):
        comm.sendrecv(None, other, 9, None, other, 9)      # start together (p2p only)
        for i in range(iters + 2):
            if i == 2:
                t = time.perf_counter()
            if comm.rank == 0:
                comm.Send(a, other, 7)
                comm.Recv(b, other, 7)
            else:
                comm.Recv(b, other, 7)
                comm.Send(a, other, 7)
        times.append((time.perf_counter() - t) / iters / 2)
    return statistics.median(times)


def fit_line(xs: List[float], ys: List[float]) -> tuple:
    """Least-squares (intercept, slope) of ys over xs."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    return my - slope * mx, slope


def measure_gamma(nbytes: int = GAMMA_BYTES, repeats: int = 7) -> float:
    """Seconds per byte of reducing (SUM) one float64 buffer into another."""
    a = np.ones(nbytes // 8)
    b = np.ones(nbytes // 8)
    reduce_local(a, b, SUM)          # warm up: pages touched, code paths loaded
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(4):
            reduce_local(a, b, SUM)
        times.append((time.perf_counter() - t) / 4)
    return statistics.median(times) / nbytes


def worker(result_path: str, quick: bool) -> None:
    """Run inside a 2-rank job: rank 0 writes the measurements to ``result_path``."""
    from .. import MPI
    comm = MPI.COMM_WORLD
    if comm.size != 2:
        raise SystemExit("calibration needs exactly 2 ranks")
    repeats = 3 if quick else 7
    a, b = np.zeros(SMALL, np.uint8), np.empty(SMALL, np.uint8)
    alpha = _pingpong(comm, a, b, 200 if quick else 1000, repeats)
    sizes = LARGE_SIZES[:3] if quick else LARGE_SIZES
    one_way = {}
    for n in sizes:
        a, b = np.ones(n, np.uint8), np.zeros(n, np.uint8)
        one_way[n] = _pingpong(comm, a, b, max(3, (32 << 20) // n // (4 if quick else 1)), repeats)
    intercept, beta = fit_line([float(n) for n in sizes], [one_way[n] for n in sizes])
    if beta <= 0:   # noise on a busy machine: fall back to the largest message's rate
        beta = one_way[sizes[-1]] / sizes[-1]
    gamma = measure_gamma(repeats=repeats) if comm.rank == 0 else 0.0
    if comm.rank == 0:
        out = {"alpha": alpha, "beta": beta, "gamma": gamma,
               "measured": {"how": "minimpi explain --calibrate" + (" --quick" if quick else ""),
                            "when": time.strftime("%Y-%m-%d %H:%M:%S"),
                            "host": platform.node(), "cpus": os.cpu_count(),
                            "python": platform.python_version(), "numpy": np.__version__,
                            "small_one_way_s": alpha, "large_intercept_s": intercept,
                            "one_way_s": {str(n): t for n, t in one_way.items()}}}
        with open(result_path, "w") as f:
            json.dump(out, f, indent=1)


def measure(quick: bool = False, timeout: float = 300.0) -> Dict:
    """Start the 2-rank calibration job and return its measurements."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "calibration.json")
        cmd = [sys.executable, "-m", "minimpi", "run", "-n", "2", "--no-prefix",
               "-m", "minimpi.tools.calibrate", "--worker", path] + (["--quick"] if quick else [])
        # run in the temporary directory: a current directory holding a `minimpi` folder
        # (a clone of minimpi) would otherwise shadow the installed package in `python -m`
        proc = subprocess.run(cmd, timeout=timeout, capture_output=True, text=True, cwd=tmp)
        if proc.returncode != 0 or not os.path.exists(path):
            raise RuntimeError(f"the calibration job failed (exit {proc.returncode}):\n"
                               f"{proc.stdout}{proc.stderr}")
        with open(path) as f:
            return json.load(f)


def save(result: Dict, path: Optional[str] = None) -> str:
    """Write ``result`` as the calibration file (default: :func:`cost.config_path`)."""
    path = path or config_path()
    if not path:
        raise ValueError("MINIMPI_COST_FILE is set empty: no calibration file to write")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)
    clear_cache()
    return path


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description="calibration worker (run under minimpi run -n 2)")
    ap.add_argument("--worker", metavar="RESULT_JSON", required=True)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    worker(args.worker, args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
