"""One large ``Allreduce`` in chunks of calls: the figure for comparing two codes job by job.

    minimpi run -n 4 python benchmarks/allreduce_chunks.py [--bytes 1M] [--chunks 12] [--calls 30]

A float32 vector of ``--bytes`` is summed with ``comm.Allreduce`` ``--calls`` times per chunk
after a ``Barrier``, ``--chunks`` times (after five untimed calls); rank 0 prints the median
chunk's time per call and the fastest. One job gives one figure: compare codes (or settings,
e.g. ``MINIMPI_ALLREDUCE=binomial``, ``MINIMPI_SPIN_US``) by alternating their jobs, several
rounds, since the machine's speed moves from minute to minute. Any MPI for mpi4py runs it
(``mpiexec -n 4 python benchmarks/allreduce_chunks.py``).
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from compare import parse_size  # (benchmarks/compare.py: "1M", "64K", "512")
from mpi4py import MPI


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bytes", type=parse_size, default=1 << 20, help="vector size (default 1M)")
    ap.add_argument("--chunks", type=int, default=12)
    ap.add_argument("--calls", type=int, default=30, help="calls per chunk")
    args = ap.parse_args(argv)
    comm = MPI.COMM_WORLD
    send = np.ones(max(1, args.bytes // 4), np.float32)
    recv = np.empty_like(send)
    for _ in range(5):
        comm.Allreduce(send, recv)
    if not np.all(recv == comm.size):
        raise SystemExit(f"rank {comm.rank}: wrong sum {recv[:4]} (expected {comm.size})")
    per_call = []
    for _ in range(args.chunks):
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(args.calls):
            comm.Allreduce(send, recv)
        per_call.append((time.perf_counter() - t0) / args.calls * 1e6)
    if comm.rank == 0:
        print(f"Allreduce {send.nbytes} B, p = {comm.size}: median {statistics.median(per_call):.1f} "
              f"us per call, fastest chunk {min(per_call):.1f} us ({args.chunks} chunks of "
              f"{args.calls} calls)")


if __name__ == "__main__":
    main()
