"""OSU-style measurements as one plain mpi4py program, run unchanged under every MPI.

    minimpi run -n 2 benchmarks/osu_mpi4py.py --test latency:8,4096 --out r.json
    mpirun -n 4 --oversubscribe python benchmarks/osu_mpi4py.py --test allreduce:8,1048576
    mpiexec -n 2 python benchmarks/osu_mpi4py.py --test bandwidth:65536 --test obj_latency:8

benchmarks/compare.py starts it under minimpi (``from mpi4py import MPI`` is minimpi there),
Open MPI and MPICH. It uses only mpi4py's public API and imports nothing of minimpi.

Tests (``--test NAME:SIZE,SIZE,...``, repeatable; sizes in bytes):

* ``latency``: one-way time of a ping-pong of numpy uint8 buffers, ``Send``/``Recv`` between
  ranks 0 and 1 (half the round trip, timed on rank 0). Other ranks wait.
* ``bandwidth``: rank 0 posts a window of ``Isend`` (64 messages, fewer when a window
  would exceed 256 MiB), rank 1 the matching ``Irecv``; both ``Waitall``, then rank 1 sends a
  4-byte acknowledgement. Bandwidth = bytes of the windows / time on rank 0.
* ``obj_latency``: as latency with the lowercase ``send``/``recv`` of a ``bytes`` object.
* ``allreduce`` (SUM, float32), ``bcast`` (root 0), ``allgather``, ``alltoall`` (uint8):
  the size S is the largest per-rank buffer of the call, as in benchmarks/collectives.py
  (allgather: the receive buffer, S/p from each rank; alltoall: the send buffer, S/p per
  pair). Each call is timed alone and followed by a ``Barrier`` outside the timing (OSU);
  the figure is the average over the ranks of each rank's mean time per call (OSU's
  "Avg Latency"); the slowest rank's mean is recorded too.
* ``obj_allreduce``: lowercase ``allreduce`` (SUM) of a float32 numpy array of S bytes, as
  a Python object (pickled).
* ``barrier``: ``Barrier``, timed alone like the other collectives (give a size of 0:
  ``barrier:0``; it is not used).
* One-sided, between ranks 0 and 1 (OSU's ``osu_put_latency``, ``osu_get_bw``,
  ``osu_acc_latency`` with their default passive-target synchronisation): every rank
  allocates a window (``Win.Allocate``, S bytes; ``--win create``: ``Win.Create`` over a
  numpy array, which keeps Open MPI's one-sided path off shared memory); rank 0 locks rank 1's window once
  (``LOCK_SHARED``) for the whole measurement. ``put_latency``: ``Put`` of S bytes then
  ``Flush``, time per pair. ``acc_latency``: ``Accumulate`` (SUM) of S/4 float32 then
  ``Flush``. ``get_bandwidth``: a window of ``Get`` (64 of S bytes, fewer when they would
  exceed 256 MiB) then one ``Flush``; bytes / time. Rank 1 only waits in the barriers (a
  target that computes would need MPI progress there; see README, RMA).

Timing: warm-up calls (see ``warm_up``) size a loop to about ``--target`` seconds (at least 2, at most
``--max-iters`` calls; rank 0 decides and broadcasts), then ``--reps`` timed loops; each loop
is one sample. Rank 0 writes ``{"library", "p", "samples": {test: {size: [...]}}, ...}`` as
JSON after every size, so a crash loses only what was not yet measured. Latencies are in
seconds per call, bandwidths in bytes per second.
"""
from __future__ import annotations

import argparse
import json
import os
import time

COLLECTIVES = ("allreduce", "bcast", "allgather", "alltoall", "obj_allreduce", "barrier")
P2P_TESTS = ("latency", "bandwidth", "obj_latency")
RMA_TESTS = ("put_latency", "get_bandwidth", "acc_latency")
TESTS = P2P_TESTS + RMA_TESTS + COLLECTIVES
WINDOW = 64
WINDOW_BYTES = 256 << 20


def window_for(size: int) -> int:
    """Messages in flight per bandwidth iteration: OSU's 64, fewer for huge messages."""
    return max(2, min(WINDOW, WINDOW_BYTES // max(1, size)))


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--test", action="append", default=[], metavar="NAME:SIZES",
                    help=f"a test and its sizes, e.g. latency:8,64; tests: {', '.join(TESTS)}")
    ap.add_argument("--out", help="JSON file rank 0 writes (default: print it)")
    ap.add_argument("--target", type=float, default=0.05, help="seconds per timed loop")
    ap.add_argument("--reps", type=int, default=3, help="timed loops (samples) per size")
    ap.add_argument("--max-iters", type=int, default=1000, help="most calls per timed loop")
    ap.add_argument("--win", choices=("allocate", "create"), default="allocate",
                    help="one-sided tests: the window flavor (OSU's -w): Win.Allocate "
                         "(default) or Win.Create over a numpy array")
    args = ap.parse_args(argv)
    args.tests = []
    for spec in args.test:
        name, _, sizes = spec.partition(":")
        if name not in TESTS:
            ap.error(f"unknown test {name!r}; tests: {', '.join(TESTS)}")
        args.tests.append((name, [int(s) for s in sizes.split(",") if s]))
    if not args.tests:
        ap.error("no --test given")
    return args


class Results:
    """What rank 0 collects and rewrites to ``path`` after every measurement."""

    def __init__(self, path, library: str, p: int):
        self.path = path
        self.data = {"library": library, "p": p, "samples": {}, "max": {}, "iters": {},
                     "window": {}, "errors": {}}

    def add(self, test: str, size: int, samples, iters: int, slowest=None, window=None):
        self.data["samples"].setdefault(test, {})[str(size)] = samples
        self.data["iters"].setdefault(test, {})[str(size)] = iters
        if slowest is not None:
            self.data["max"].setdefault(test, {})[str(size)] = slowest
        if window is not None:
            self.data["window"].setdefault(test, {})[str(size)] = window
        self.save()

    def error(self, test: str, size: int, message: str):
        self.data["errors"][f"{test}/{size}"] = message
        self.save()

    def save(self):
        if self.path is None:
            return
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.data, f)
        os.replace(tmp, self.path)


def warm_up(one_call, target: float, bcast) -> float:
    """Rank 0's time of one call, from warm-up calls each timed alone: three give a rough
    figure (their median), which, broadcast so that every rank makes as many calls, sets
    how many more to make (about a fifth of ``target``, 3 to 50); the fastest of those is
    the answer, so that a stall from other processes does not shrink the timed loop."""
    def timed(n):
        times = []
        for _ in range(n):
            t = time.perf_counter()
            one_call()
            times.append(time.perf_counter() - t)
        return sorted(times)
    rough = bcast(timed(3)[1])
    return bcast(timed(int(min(50, max(3, target / 5 / max(rough, 1e-7)))))[0])


def iterations(warm: float, target: float, max_iters: int) -> int:
    return int(min(max_iters, max(2, target / max(warm, 1e-7))))


# --------------------------------------------------------------------------- mpi4py side
def main(argv=None) -> None:
    args = parse_args(argv)
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, p = comm.Get_rank(), comm.Get_size()
    library = MPI.Get_library_version().splitlines()[0].strip("\x00 ")
    res = Results(args.out, library, p) if rank == 0 else None

    def sized(loop, one_call):
        """Warm up, size the loop from the second call's time (rank 0's), return the
        samples of ``args.reps`` timed loops (as ``loop(iters)`` returns them)."""
        one_call()
        warm = warm_up(one_call, args.target, lambda v: comm.bcast(v, root=0))
        iters = iterations(warm, args.target, args.max_iters)
        return [loop(iters) for _ in range(args.reps)], iters

    def timed(once, iters):
        """Seconds for ``iters`` calls of ``once`` in a row, from a common start (Barrier)."""
        comm.Barrier()
        t = time.perf_counter()
        for _ in range(iters):
            once()
        return time.perf_counter() - t

    # ---- point to point (ranks 0 and 1; the others only take part in the barriers)
    def p2p(test, size):
        if test == "obj_latency":
            obj = bytes(size)

            def once():
                if rank == 0:
                    comm.send(obj, dest=1, tag=2)
                    comm.recv(source=1, tag=2)
                elif rank == 1:
                    comm.recv(source=0, tag=2)
                    comm.send(obj, dest=0, tag=2)
        elif test == "latency":
            a = np.zeros(size, np.uint8)
            b = np.zeros(size, np.uint8)

            def once():
                if rank == 0:
                    comm.Send(a, dest=1, tag=1)
                    comm.Recv(b, source=1, tag=1)
                elif rank == 1:
                    comm.Recv(b, source=0, tag=1)
                    comm.Send(a, dest=0, tag=1)
        else:                                   # bandwidth
            window = window_for(size)
            a = np.ones(size, np.uint8)
            b = np.zeros(size, np.uint8)
            ack = np.zeros(4, np.uint8)

            def once():
                if rank == 0:
                    MPI.Request.Waitall([comm.Isend(a, dest=1, tag=3) for _ in range(window)])
                    comm.Recv(ack, source=1, tag=4)
                elif rank == 1:
                    MPI.Request.Waitall([comm.Irecv(b, source=0, tag=3) for _ in range(window)])
                    comm.Send(ack, dest=0, tag=4)

        def loop(iters):
            elapsed = timed(once, iters)
            if test == "bandwidth":
                return size * window * iters / elapsed
            return elapsed / iters / 2

        samples, iters = sized(loop, once)
        if rank == 0:
            res.add(test, size, samples, iters, window=window if test == "bandwidth" else None)

    # ---- one-sided (rank 0 origin, rank 1 target; the others only in the barriers)
    def rma(test, size):
        if args.win == "create":
            memory = np.zeros(size, np.uint8)
            win = MPI.Win.Create(memory, 1, comm=comm)
        else:
            win = MPI.Win.Allocate(size, 1, comm=comm)
        window = window_for(size) if test == "get_bandwidth" else 1
        if test == "acc_latency":
            origin, dtype = np.ones(max(1, size // 4), np.float32), MPI.FLOAT
        else:
            origin, dtype = np.ones(size, np.uint8), MPI.BYTE
        count = origin.size

        def once():
            if rank != 0:
                return
            if test == "put_latency":
                win.Put([origin, count, dtype], 1)
            elif test == "acc_latency":
                win.Accumulate([origin, count, dtype], 1, op=MPI.SUM)
            else:
                for _ in range(window):
                    win.Get([origin, count, dtype], 1)
            win.Flush(1)

        def loop(iters):
            elapsed = timed(once, iters)
            if test == "get_bandwidth":
                return size * window * iters / elapsed
            return elapsed / iters

        if rank == 0:
            win.Lock(1, MPI.LOCK_SHARED)
        try:
            samples, iters = sized(loop, once)
        finally:
            if rank == 0:
                win.Unlock(1)
            comm.Barrier()
            win.Free()
        if rank == 0:
            res.add(test, size, samples, iters,
                    window=window if test == "get_bandwidth" else None)

    # ---- collectives (every rank)
    def make_call(test, size):
        def f32(n):
            return np.ones(max(1, n // 4), np.float32)
        block = max(1, size // p)
        if test == "allreduce":
            send, recv = f32(size), np.empty(max(1, size // 4), np.float32)
            return lambda: comm.Allreduce(send, recv, op=MPI.SUM)
        if test == "bcast":
            buf = np.ones(max(1, size), np.uint8)
            return lambda: comm.Bcast(buf, root=0)
        if test == "allgather":
            send, recv = np.ones(block, np.uint8), np.empty(block * p, np.uint8)
            return lambda: comm.Allgather(send, recv)
        if test == "alltoall":
            send, recv = np.ones(block * p, np.uint8), np.empty(block * p, np.uint8)
            return lambda: comm.Alltoall(send, recv)
        if test == "barrier":                   # (the size is not used: barrier:0)
            return comm.Barrier
        obj = f32(size)                         # obj_allreduce
        return lambda: comm.allreduce(obj, op=MPI.SUM)

    def collective(test, size):
        call = make_call(test, size)

        def loop(iters):
            comm.Barrier()
            total = 0.0
            for _ in range(iters):
                t = time.perf_counter()
                call()
                total += time.perf_counter() - t
                comm.Barrier()
            return total / iters

        def once():
            call()
            comm.Barrier()

        per_rank, iters = sized(loop, once)
        gathered = comm.gather(per_rank, root=0)   # [rank][rep]
        if rank == 0:
            reps = range(len(per_rank))
            avg = [sum(r[i] for r in gathered) / p for i in reps]
            slowest = [max(r[i] for r in gathered) for i in reps]
            res.add(test, size, avg, iters, slowest=slowest)

    for test, sizes in args.tests:
        for size in sizes:
            if test in P2P_TESTS + RMA_TESTS and p < 2:
                continue
            try:
                run = p2p if test in P2P_TESTS else rma if test in RMA_TESTS else collective
                run(test, size)
            except Exception as e:  # noqa: BLE001 - record it, go on with the next size
                if rank == 0:
                    res.error(test, size, f"{type(e).__name__}: {e}")
                raise
    comm.Barrier()
    if rank == 0 and args.out is None:
        print(json.dumps(res.data))


if __name__ == "__main__":
    main()
