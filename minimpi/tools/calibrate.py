"""Measure the cost model's inputs on this machine (``minimpi explain --calibrate``).

A 2-rank job over the transport jobs use (``python -m minimpi run -n 2``: shared memory on one
host) measures

* **alpha**, per-message latency: the one-way time of an 8-byte ``Send``/``Recv`` ping-pong
  (half the round trip), median of several repetitions;
* **beta**, per-byte time: the slope of the one-way ping-pong time over message sizes from
  256 KiB (the pipeline segment) to 8 MiB, fitted by least squares - so the fixed cost of a
  large message (its rendezvous) is not counted as bandwidth;
* **gamma**, per-byte reduction time: ``reduce_local(SUM)`` of one float64 buffer into
  another (the in-place numpy kernel the reducing collectives use) over 4 MiB buffers,
  in one process.

**Over several hosts** (``minimpi explain --calibrate --hosts a:2,b:2``: a job over those
hosts, as ``minimpi run --hosts`` starts it) the same ping-pongs run twice: between two
ranks of one host (the intra-host link: ``alpha_intra``, ``beta_intra``, and ``alpha``,
``beta`` as a single-host job would measure them) and between ranks on two hosts
(``alpha_inter``, ``beta_inter``). A link the job's layout lacks (no host with two ranks,
or one host only) is not measured and its fields are left out.

Each ping-pong loop is sized to last about ``BUDGET`` seconds per repetition (at least 2
round trips), so a slow inter-host link (tc-limited, say) takes seconds, not minutes.

The result is a dict with those fields (seconds, seconds per byte) and a ``measured`` note,
which rank 0 prints as one line (``RESULT_MARK`` + JSON: it reaches the launcher from any
host); :func:`save` merges it into the calibration file that
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
from typing import Dict, List, Optional, Sequence

import numpy as np

from ..coll.cost import clear_cache, config_path
from ..coll.peers import host_groups
from ..comm.communicator import endpoint_of
from ..data.ops import SUM, reduce_local

SMALL = 8
LARGE_SIZES = [256 << 10, 1 << 20, 2 << 20, 4 << 20, 8 << 20]
GAMMA_BYTES = 4 << 20
#: seconds one repetition of a ping-pong loop should last, at most (quick: a quarter)
BUDGET = 0.25
#: the line of the job's output that carries the result
RESULT_MARK = "minimpi-calibration: "


def _pingpong(comm, peer: int, lead: bool, a: np.ndarray, b: np.ndarray, iters: int,
              repeats: int, budget: float) -> float:
    """Median one-way time of a Send/Recv ping-pong with ``peer`` (``lead``: this rank sends
    first and times it). At most ``iters`` round trips per repetition, fewer when one round
    trip is slow: about ``budget`` seconds, and at least 2."""
    if lead:                          # one round trip to size the loop; tell the peer
        t = time.perf_counter()
        comm.Send(a, peer, 7)
        comm.Recv(b, peer, 7)
        iters = max(2, min(iters, int(budget / max(time.perf_counter() - t, 1e-9))))
        comm.send(iters, peer, 8)
    else:
        comm.Recv(b, peer, 7)
        comm.Send(a, peer, 7)
        iters = comm.recv(source=peer, tag=8)
    times = []
    for _ in range(repeats):
        comm.sendrecv(None, peer, 9, None, peer, 9)       # start together (p2p only)
        for i in range(iters + 2):
            if i == 2:
                t = time.perf_counter()
            if lead:
                comm.Send(a, peer, 7)
                comm.Recv(b, peer, 7)
            else:
                comm.Recv(b, peer, 7)
                comm.Send(a, peer, 7)
        times.append((time.perf_counter() - t) / iters / 2)
    return statistics.median(times)


def measure_link(comm, peer: int, lead: bool, quick: bool) -> Dict:
    """alpha, beta (and the raw times) of the link to ``peer``; both ends call it, and the
    ``lead`` end's numbers are the ones that count."""
    repeats = 3 if quick else 7
    budget = BUDGET / 4 if quick else BUDGET
    a, b = np.zeros(SMALL, np.uint8), np.empty(SMALL, np.uint8)
    alpha = _pingpong(comm, peer, lead, a, b, 200 if quick else 1000, repeats, budget)
    sizes = LARGE_SIZES[:3] if quick else LARGE_SIZES
    one_way = {}
    for n in sizes:
        a, b = np.ones(n, np.uint8), np.zeros(n, np.uint8)
        one_way[n] = _pingpong(comm, peer, lead, a, b,
                               max(3, (32 << 20) // n // (4 if quick else 1)), repeats, budget)
    intercept, beta = fit_line([float(n) for n in sizes], [one_way[n] for n in sizes])
    if beta <= 0:   # noise on a busy machine: fall back to the largest message's rate
        beta = one_way[sizes[-1]] / sizes[-1]
    return {"alpha": alpha, "beta": beta, "large_intercept_s": intercept,
            "one_way_s": {str(n): t for n, t in one_way.items()}}


def link_pairs(hosts) -> Dict[str, tuple]:
    """Which two ranks measure which link, from the host of each rank: ``intra`` the two
    lowest ranks of the first host that has two, ``inter`` the lowest ranks of the first two
    hosts. A link the layout lacks is missing."""
    groups = host_groups(hosts)
    pairs = {}
    shared = next((g for g in groups if len(g) >= 2), None)
    if shared is not None:
        pairs["intra"] = (shared[0], shared[1])
    if len(groups) >= 2:
        pairs["inter"] = (groups[0][0], groups[1][0])
    return pairs


def measure_links(comm, quick: bool, gamma: bool = True) -> Optional[Dict]:
    """Every rank calls it; rank 0 returns the result (the others None): alpha, beta of each
    link the layout has, gamma, and how they were measured. One link at a time, so two
    measurements never share a wire; the other ranks wait."""
    pairs = link_pairs(endpoint_of(comm).hosts)
    if not pairs:
        raise SystemExit("calibration needs at least 2 ranks")
    links: Dict[str, Dict] = {}
    for name, (first, second) in pairs.items():
        if comm.rank in (first, second):
            peer = second if comm.rank == first else first
            got = measure_link(comm, peer, comm.rank == first, quick)
            if comm.rank == first and first != 0:
                comm.send(got, 0, 10)              # rank 0 writes the result
            elif comm.rank == first:
                links[name] = got
        if comm.rank == 0 and first != 0:
            links[name] = comm.recv(source=first, tag=10)
        comm.Barrier()                             # the next link starts on a quiet network
    if comm.rank != 0:
        return None
    out: Dict = {}
    if "intra" in links:
        out["alpha"], out["beta"] = links["intra"]["alpha"], links["intra"]["beta"]
    if "inter" in pairs:                           # a job over hosts: name the links
        for name, got in links.items():
            out[f"alpha_{name}"], out[f"beta_{name}"] = got["alpha"], got["beta"]
    if gamma:
        out["gamma"] = measure_gamma(repeats=3 if quick else 7)
    out["measured"] = {"how": "minimpi explain --calibrate" + (" --quick" if quick else ""),
                       "when": time.strftime("%Y-%m-%d %H:%M:%S"),
                       "host": platform.node(), "cpus": os.cpu_count(),
                       "python": platform.python_version(), "numpy": np.__version__,
                       "pairs": {name: list(pair) for name, pair in pairs.items()},
                       "links": links}
    return out


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
    """Run inside the calibration job: rank 0 prints the measurements as one line
    (``RESULT_MARK`` + JSON), and also writes them to ``result_path`` unless it is ``-``."""
    from .. import MPI
    out = measure_links(MPI.COMM_WORLD, quick)
    if out is None:
        return
    if result_path != "-":
        with open(result_path, "w") as f:
            json.dump(out, f, indent=1)
    print(RESULT_MARK + json.dumps(out), flush=True)


def measure(quick: bool = False, timeout: float = 600.0, hosts: Optional[str] = None,
            nprocs: int = 2, run_args: Sequence[str] = ()) -> Dict:
    """Start the calibration job - 2 ranks here, or ``nprocs`` ranks over ``hosts`` (passed to
    ``minimpi run --hosts``, with ``run_args``) - and return its measurements."""
    cmd = [sys.executable, "-m", "minimpi", "run", "-n", str(nprocs), "--no-prefix"]
    if hosts:
        cmd += ["--hosts", hosts]
    cmd += list(run_args) + ["-m", "minimpi.tools.calibrate", "--worker", "-"]
    cmd += ["--quick"] if quick else []
    # run in an empty directory: a current directory holding a `minimpi` folder (a clone of
    # minimpi) would otherwise shadow the installed package in `python -m minimpi`
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(cmd, timeout=timeout, capture_output=True, text=True, cwd=tmp)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_MARK)]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"the calibration job failed (exit {proc.returncode}):\n"
                           f"{' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
    return json.loads(lines[-1][len(RESULT_MARK):])


def save(result: Dict, path: Optional[str] = None) -> str:
    """Write ``result`` into the calibration file (default: :func:`cost.config_path`): its
    fields replace those of the file, the file's other fields stay (a multi-host calibration
    keeps the single-host one's, and the other way round)."""
    path = path or config_path()
    if not path:
        raise ValueError("MINIMPI_COST_FILE is set empty: no calibration file to write")
    merged: Dict = {}
    try:
        with open(path) as f:
            old = json.load(f)
        merged = old if isinstance(old, dict) else {}
    except (OSError, ValueError):      # none yet, or unreadable: start afresh
        pass
    merged.update(result)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(merged, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)
    clear_cache()
    return path


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description="calibration worker (run under minimpi run)")
    ap.add_argument("--worker", metavar="RESULT_JSON", required=True,
                    help="where rank 0 writes the result (-: only printed)")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    worker(args.worker, args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
