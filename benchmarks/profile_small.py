"""Where a small message's time goes: one operation in a loop, profiled on rank 0, by layer.

    minimpi run -n 2 benchmarks/profile_small.py latency        # 8 B Send/Recv ping-pong
    minimpi run -n 2 benchmarks/profile_small.py obj_latency    # lowercase send/recv of 8 bytes
    minimpi run -n 2 benchmarks/profile_small.py allreduce      # 8 B Allreduce (SUM, float64)
    minimpi run -n 4 benchmarks/profile_small.py bcast --iters 5000

Rank 0 runs the loop once unprofiled (the wall time per call), then again under cProfile, and
prints the profile's own time per layer of minimpi (transports/, p2p/, coll/, comm/, data/,
runtime/...), the time spent waiting in the kernel (``select``/``poll``/``futex``-backed
waits, i.e. the peer's turn plus the wake-up), the doorbells (a socket write that wakes a
peer that went to sleep), and the top functions. cProfile slows Python
calls down, so read the layer shares, not the absolute profiled figures.
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from collections import defaultdict

import numpy as np
from mpi4py import MPI

# C functions in which a rank sleeps or polls until its peer has done its part
WAITS = ("select", "poll", "epoll", "wait", "sleep", "acquire", "recv_into", "recv", "read")


def layer_of(filename: str, name: str) -> str:
    if filename == "~":
        if "_socket.socket" in name and "'send" in name:
            return "doorbells"          # waking a peer that went to sleep
        return "kernel waits" if any(w in name for w in WAITS) else "C built-ins"
    if "/minimpi/" in filename:
        part = filename.split("/minimpi/", 1)[1].split("/")
        return part[0] + "/" if len(part) > 1 else part[0]
    return "numpy" if "numpy" in filename else "other Python"


def ping_pong(rank: int, send, recv):
    """One round trip between ranks 0 and 1 (other ranks idle): two one-way trips."""
    def call():
        if rank == 0:
            send(1)
            recv(1)
        elif rank == 1:
            recv(0)
            send(0)
    return call


def make_call(test: str, comm):
    rank = comm.Get_rank()
    buf, out = np.zeros(1, np.float64), np.zeros(1, np.float64)
    if test == "latency":
        return ping_pong(rank, lambda peer: comm.Send(buf, peer, 1),
                         lambda peer: comm.Recv(buf, peer, 1)), 2
    if test == "obj_latency":
        return ping_pong(rank, lambda peer: comm.send(b"12345678", peer, 1),
                         lambda peer: comm.recv(None, peer, 1)), 2
    if test == "allreduce":
        return (lambda: comm.Allreduce(buf, out, MPI.SUM)), 1
    if test == "bcast":
        return (lambda: comm.Bcast(buf, 0)), 1
    raise SystemExit(f"profile_small.py: unknown test {test!r}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("test", choices=("latency", "obj_latency", "allreduce", "bcast"))
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    call, per_round = make_call(args.test, comm)
    for _ in range(1000):
        call()
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(args.iters):
        call()
    wall = (time.perf_counter() - t0) / args.iters / per_round
    comm.Barrier()
    prof = cProfile.Profile() if comm.rank == 0 else None
    if prof:
        prof.enable()
    for _ in range(args.iters):
        call()
    if prof:
        prof.disable()
    comm.Barrier()
    if comm.rank != 0:
        return
    stats = pstats.Stats(prof)
    by_layer = defaultdict(float)
    calls = 0
    rows = []
    for (filename, _, name), (cc, nc, tt, ct, _) in stats.stats.items():
        by_layer[layer_of(filename, name)] += tt
        calls += nc
        rows.append((tt, nc, f"{filename.split('/minimpi/')[-1]}:{name}"))
    total = sum(by_layer.values())
    unit = "one-way" if per_round == 2 else "per call"
    print(f"{args.test} at p={comm.size}: {wall * 1e6:.1f} us {unit} (unprofiled); "
          f"{calls / args.iters:.0f} function calls per iteration (profiled)")
    print("profile's own time by layer:")
    for layer, t in sorted(by_layer.items(), key=lambda kv: -kv[1]):
        print(f"  {layer:<16} {100 * t / total:5.1f}%")
    print(f"top {args.top} functions by own time:")
    for tt, nc, where in sorted(rows, reverse=True)[:args.top]:
        print(f"  {100 * tt / total:5.1f}%  {nc / args.iters:6.1f}/iter  {where}")


if __name__ == "__main__":
    main()
