"""What the small-message path executes, counted rather than timed: bytecode instructions
and Python calls per operation, in one thread (a world of one), so the figures are the
same on a loaded machine as on an idle one.

    python benchmarks/engine_overhead.py

Prints, per operation (after a warm-up): ``Irecv + Send + Wait`` to self, ``Isend + Wait
+ Recv`` to self, and an 8-byte ``Allreduce`` at p = 1, each as instructions and as calls
(Python functions and C functions, as ``sys.setprofile`` sees them). Compare two checkouts
by running it with ``PYTHONPATH`` pointing at each: a change that adds work to the path
every message takes (an observer test, a lookup) shows up as a few instructions more.
"""
from __future__ import annotations

import sys
from typing import Callable, Tuple

import numpy as np

from minimpi.runtime.inproc import run_threads


def instructions(fn: Callable[[], None], n: int = 50) -> float:
    count = [0]

    def tracer(frame, event, arg):
        frame.f_trace_opcodes = True
        if event == "opcode":
            count[0] += 1
        return tracer

    sys.settrace(tracer)
    try:
        for _ in range(n):
            fn()
    finally:
        sys.settrace(None)
    return count[0] / n


def calls(fn: Callable[[], None], n: int = 50) -> float:
    count = [0]

    def profiler(frame, event, arg):
        if event in ("call", "c_call"):
            count[0] += 1

    sys.setprofile(profiler)
    try:
        for _ in range(n):
            fn()
    finally:
        sys.setprofile(None)
    return count[0] / n


def measure(comm) -> Tuple[Tuple[str, float, float], ...]:
    buf, out = np.zeros(1), np.zeros(1)

    def irecv_send_wait() -> None:
        req = comm.Irecv(out, 0, 1)
        comm.Send(buf, 0, 1)
        req.Wait()

    def isend_recv() -> None:
        comm.Isend(buf, 0, 2).Wait()
        comm.Recv(out, 0, 2)

    def allreduce() -> None:
        comm.Allreduce(buf, out)

    ops = (("Irecv+Send+Wait to self", irecv_send_wait), ("Isend+Wait+Recv to self", isend_recv),
           ("Allreduce 8 B, p=1", allreduce))
    for _, fn in ops:
        for _ in range(200):
            fn()
    return tuple((name, instructions(fn), calls(fn)) for name, fn in ops)


def main() -> None:
    for name, ins, ncalls in run_threads(1, measure, timeout=300)[0]:
        print(f"{name:26s} {ins:7.0f} instructions {ncalls:6.1f} calls")


if __name__ == "__main__":
    main()
