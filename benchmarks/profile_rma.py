"""Where a one-sided call's time goes: rank 0 puts (or gets) into rank 1's window and
flushes, in a loop under a shared lock, profiled by layer (the pattern of profile_small.py).

    minimpi run -n 2 benchmarks/profile_rma.py put                 # 8 B Put + Flush, Allocate
    minimpi run -n 2 benchmarks/profile_rma.py get --win create    # 8 B Get + Flush, Create
    minimpi run -n 2 benchmarks/profile_rma.py put --size 4096

Rank 0 runs the loop once unprofiled (wall time per Put + Flush), then under cProfile, and
prints the profile's own time per minimpi layer and the top functions; rank 1 waits in a
Barrier meanwhile (its progress serves whatever needs serving). cProfile slows Python calls
down: read the shares and the calls per iteration, not the profiled times.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from collections import defaultdict

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from profile_small import layer_of  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("test", choices=("put", "get"))
    ap.add_argument("--win", choices=("allocate", "create"), default="allocate")
    ap.add_argument("--size", type=int, default=8)
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    if args.win == "create":
        memory = np.zeros(args.size, np.uint8)
        win = MPI.Win.Create(memory, 1, comm=comm)
    else:
        win = MPI.Win.Allocate(args.size, 1, comm=comm)
    buf = np.ones(args.size, np.uint8)
    spec = [buf, args.size, MPI.BYTE]
    op = win.Put if args.test == "put" else win.Get

    def call():
        op(spec, 1)
        win.Flush(1)

    prof = None
    wall = 0.0
    if comm.rank == 0:
        win.Lock(1, MPI.LOCK_SHARED)
        for _ in range(1000):
            call()
        t0 = time.perf_counter()
        for _ in range(args.iters):
            call()
        wall = (time.perf_counter() - t0) / args.iters
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.iters):
            call()
        prof.disable()
        win.Unlock(1)
    comm.Barrier()
    win.Free()
    if prof is None:
        return
    stats = pstats.Stats(prof)
    by_layer = defaultdict(float)
    calls = 0
    rows = []
    for (filename, _, name), (cc, nc, tt, ct, _) in stats.stats.items():
        by_layer[layer_of(filename, name)] += tt
        calls += nc
        rows.append((tt, nc, f"{filename.split('/minimpi/')[-1]}:{name}"))
    total = sum(by_layer.values()) or 1.0
    print(f"{args.size} B {args.test} + Flush, Win.{args.win.capitalize()} at p={comm.size}: "
          f"{wall * 1e6:.2f} us per pair (unprofiled); {calls / args.iters:.0f} function "
          f"calls per iteration (profiled)")
    print("profile's own time by layer:")
    for layer, t in sorted(by_layer.items(), key=lambda kv: -kv[1]):
        print(f"  {layer:<16} {100 * t / total:5.1f}%")
    print(f"top {args.top} functions by own time:")
    for tt, nc, where in sorted(rows, reverse=True)[:args.top]:
        print(f"  {100 * tt / total:5.1f}%  {nc / args.iters:6.1f}/iter  {where}")


if __name__ == "__main__":
    main()
