"""Ping-pong latency and bandwidth between 2 ranks over verbs and over TCP, on the same machine.

    python tests/verbs/bench.py            # runs both jobs with `minimpi run -n 2`, prints a table

Meant for the soft-RoCE guest (tests/verbs/run-in-guest.sh --bench). There, "verbs" is rdma_rxe:
RoCE implemented in the guest kernel's software, on CPUs that QEMU emulates (TCG). The table
compares the two code paths on the same emulated machine; it says nothing about the speed of
RDMA hardware, where the verbs path moves data without the CPU.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

SIZES = [8, 1024, 64 * 1024, 1024 * 1024, 8 * 1024 * 1024]
BUDGET = 2.0          # seconds per size (emulated CPUs are slow: keep the run short)
DISCLAIMER = ("soft-RoCE (rdma_rxe) in an emulated (TCG) QEMU guest: both transports run on the "
              "same emulated CPUs; these numbers compare code paths and say nothing about "
              "RDMA hardware speed.")


def exchange(comm, buf, rank: int, other: int, times: int) -> None:
    for _ in range(times):
        if rank == 0:
            comm.Send(buf, other)
            comm.Recv(buf, other)
        else:
            comm.Recv(buf, other)
            comm.Send(buf, other)


def worker() -> None:
    import numpy as np

    from minimpi import MPI
    from minimpi.runtime import world

    comm = MPI.COMM_WORLD
    rank, other = comm.rank, 1 - comm.rank
    results = []
    for size in SIZES:
        buf = np.zeros(size, np.uint8)
        comm.Barrier()
        exchange(comm, buf, rank, other, 3)      # warm-up (registration cache, connections)
        # Time a few exchanges, then size the measured run to the budget; rank 0 decides and
        # tells rank 1 once, so no extra message sits inside the timed loop.
        start = time.perf_counter()
        exchange(comm, buf, rank, other, 3)
        per = (time.perf_counter() - start) / 3
        iterations = comm.bcast(max(3, int(BUDGET / per)) if rank == 0 else None, root=0)
        comm.Barrier()
        start = time.perf_counter()
        exchange(comm, buf, rank, other, iterations)
        elapsed = time.perf_counter() - start
        results.append({"size": size, "iterations": iterations,
                        "half_rtt_us": elapsed / iterations / 2 * 1e6,
                        "mb_s": 2 * size * iterations / elapsed / 1e6})
    if rank == 0:
        t = world.world_state().engine.transport
        t = t.member(t.name) or t          # the router's only member carries the stats
        print("RESULT " + json.dumps({"transport": t.name, "results": results,
                                      "zero_copy_frames": t.stats.get("zero_copy_frames", 0)
                                      if hasattr(t, "stats") else 0}), flush=True)


def run(transport: str) -> dict:
    cmd = [sys.executable, "-m", "minimpi", "run", "-n", "2", "-x", f"MINIMPI_TRANSPORT={transport}",
           os.path.abspath(__file__), "--worker"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    for line in proc.stdout.splitlines():
        if "RESULT " in line:
            return json.loads(line.split("RESULT ", 1)[1])
    raise SystemExit(f"bench: the {transport} job failed (exit {proc.returncode}):\n"
                     f"{proc.stdout}\n{proc.stderr}")


def main() -> None:
    tcp, verbs = run("tcp"), run("verbs")
    assert verbs["transport"] == "verbs" and tcp["transport"] == "tcp"
    print(f"minimpi ping-pong, 2 ranks ({DISCLAIMER})")
    print(f"{'bytes':>9} | {'tcp us':>9} {'tcp MB/s':>9} | {'verbs us':>9} {'verbs MB/s':>10}")
    for t, v in zip(tcp["results"], verbs["results"]):
        print(f"{t['size']:>9} | {t['half_rtt_us']:>9.1f} {t['mb_s']:>9.1f} | "
              f"{v['half_rtt_us']:>9.1f} {v['mb_s']:>10.1f}")
    print(f"(us = half round trip; verbs sent {verbs['zero_copy_frames']} frames zero-copy "
          f"with RDMA_WRITE_WITH_IMM)")


if __name__ == "__main__":
    worker() if "--worker" in sys.argv else main()
