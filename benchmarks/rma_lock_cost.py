"""What the accumulate lock of a shared-memory window costs (minimpi.rma.atomics).

    python benchmarks/rma_lock_cost.py [--calls 50000] [--reps 5]

Times, on one uncontended descriptor of a file in /dev/shm: a lock + unlock of 8 bytes
through ``RangeLock.hold`` (what every accumulate on a shared-memory window adds), and the
two bare ``fcntl(F_OFD_SETLKW / F_OFD_SETLK)`` calls it makes. Prints the median and range
over ``--reps`` loops, in microseconds per lock + unlock.
"""
from __future__ import annotations

import argparse
import fcntl
import os
import statistics
import struct
import tempfile
import time

from minimpi.rma.atomics import RangeLock


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=50000, help="lock + unlock pairs per loop")
    ap.add_argument("--reps", type=int, default=5, help="loops (samples)")
    args = ap.parse_args()
    directory = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    fd, path = tempfile.mkstemp(prefix="minimpi-lockcost-", dir=directory)
    try:
        os.ftruncate(fd, 4096)
        lock = RangeLock(fd, [0, 64])
        flock = struct.Struct("hh4xqqi4x")
        wait_cmd = getattr(fcntl, "F_OFD_SETLKW", None)
        set_cmd = getattr(fcntl, "F_OFD_SETLK", None)

        def through_hold() -> None:
            with lock.hold(1, 0, 8, True):
                pass

        def bare() -> None:
            fcntl.fcntl(fd, wait_cmd, flock.pack(fcntl.F_WRLCK, os.SEEK_SET, 64, 8, 0))
            fcntl.fcntl(fd, set_cmd, flock.pack(fcntl.F_UNLCK, os.SEEK_SET, 64, 8, 0))

        cases = [("RangeLock.hold", through_hold)]
        if wait_cmd is not None:
            cases.append(("bare fcntl pair", bare))
        for name, fn in cases:
            samples = []
            for _ in range(args.reps):
                t = time.perf_counter()
                for _ in range(args.calls):
                    fn()
                samples.append((time.perf_counter() - t) / args.calls * 1e6)
            print(f"{name:16s} {statistics.median(samples):6.2f} us per lock + unlock "
                  f"[{min(samples):.2f}, {max(samples):.2f}] over {args.reps} loops")
    finally:
        os.close(fd)
        os.unlink(path)


if __name__ == "__main__":
    main()
