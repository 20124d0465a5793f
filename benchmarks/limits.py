"""What the machine itself allows, for benchmarks/compare.py to measure in the same run.

* ``pingpong(sizes, spin_us=0)``: one-way latency of a ping-pong between two processes over
  a loopback TCP socket (TCP_NODELAY), ``sendall`` then ``recv_into``. With ``spin_us`` > 0
  each read first polls (non-blocking ``recv_into`` with MSG_DONTWAIT) for up to that many
  microseconds before it blocks, as a runtime that spins briefly would.
* ``stream(sizes)``: bandwidth of one process streaming messages over a loopback socket into
  a preallocated numpy array in another, which acknowledges each batch with one byte.
* ``memcpy(sizes)``: bandwidth of ``np.copyto`` between two preallocated arrays in one
  process (a copy reads and writes: bytes copied per second).

Each returns ``{size: [samples]}``: seconds per one-way message, or bytes per second. A
sample is a loop sized to about ``target`` seconds; ``reps`` samples per size. Pure Python
and numpy; imports nothing of minimpi.
"""
from __future__ import annotations

import os
import socket
import time
from typing import Dict, List

import numpy as np

MAX_ITERS = 1000


def _iters(estimate: float, target: float) -> int:
    return int(min(MAX_ITERS, max(2, target / max(estimate, 1e-7))))


def _recv_exact(sock: socket.socket, view: memoryview, spin_s: float) -> None:
    got, n = 0, view.nbytes
    while got < n:
        if spin_s > 0:
            deadline = time.perf_counter() + spin_s
            while got < n:
                try:
                    r = sock.recv_into(view[got:], 0, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    if time.perf_counter() >= deadline:
                        break
                    continue
                if r == 0:
                    raise ConnectionError("peer closed")
                got += r
                deadline = time.perf_counter() + spin_s
            if got >= n:
                return
        r = sock.recv_into(view[got:])
        if r == 0:
            raise ConnectionError("peer closed")
        got += r


def _pair():
    """A connected loopback TCP pair, for a parent and a forked child."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    listener.close()
    for s in (client, server):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return server, client


def _child(run_child) -> int:
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            run_child()
        except BaseException:  # noqa: BLE001 - the parent sees the broken socket
            code = 1
        os._exit(code)
    return pid


def pingpong(sizes: List[int], spin_us: float = 0.0, target: float = 0.05,
             reps: int = 3) -> Dict[int, List[float]]:
    """One-way latency samples (seconds) per size; see the module docstring."""
    spin = spin_us * 1e-6
    mine, theirs = _pair()
    control = np.zeros(8, np.int64)                 # the echo side's loop count per sample

    def echo():
        mine.close()
        cview = memoryview(control).cast("B")
        for n in sizes:
            buf = memoryview(bytearray(max(1, n)))
            while True:
                _recv_exact(theirs, cview, 0)
                if control[0] < 0:
                    break
                for _ in range(int(control[0])):
                    _recv_exact(theirs, buf, spin)
                    theirs.sendall(buf)

    pid = _child(echo)
    theirs.close()
    out = {}
    try:
        for n in sizes:
            data = bytes(max(1, n))
            buf = memoryview(bytearray(max(1, n)))

            def loop(iters):
                control[0] = iters
                mine.sendall(control)
                t = time.perf_counter()
                for _ in range(iters):
                    mine.sendall(data)
                    _recv_exact(mine, buf, spin)
                return (time.perf_counter() - t) / iters / 2

            loop(3)
            warm = min(loop(5) for _ in range(2)) * 2
            iters = _iters(warm, target)
            out[n] = [loop(iters) for _ in range(reps)]
            control[0] = -1
            mine.sendall(control)
    finally:
        mine.close()
        os.waitpid(pid, 0)
    return out


def stream(sizes: List[int], target: float = 0.05, reps: int = 3) -> Dict[int, List[float]]:
    """Socket streaming bandwidth samples (bytes/s) into a numpy array; see the docstring."""
    mine, theirs = _pair()
    control = np.zeros(8, np.int64)

    def sink():
        mine.close()
        cview = memoryview(control).cast("B")
        for n in sizes:
            target_buf = np.zeros(max(1, n), np.uint8)   # touched once, reused
            view = memoryview(target_buf)
            while True:
                _recv_exact(theirs, cview, 0)
                if control[0] < 0:
                    break
                for _ in range(int(control[0])):
                    _recv_exact(theirs, view, 0)
                theirs.sendall(b"k")

    pid = _child(sink)
    theirs.close()
    ack = memoryview(bytearray(1))
    out = {}
    try:
        for n in sizes:
            src = np.ones(max(1, n), np.uint8)

            def loop(iters):
                control[0] = iters
                mine.sendall(control)
                t = time.perf_counter()
                for _ in range(iters):
                    mine.sendall(src)
                _recv_exact(mine, ack, 0)
                return n * iters / (time.perf_counter() - t)

            loop(2)
            rate = loop(4)
            iters = _iters(n / rate, target)
            out[n] = [loop(iters) for _ in range(reps)]
            control[0] = -1
            mine.sendall(control)
    finally:
        mine.close()
        os.waitpid(pid, 0)
    return out


def memcpy(sizes: List[int], target: float = 0.05, reps: int = 3) -> Dict[int, List[float]]:
    """``np.copyto`` bandwidth samples (bytes copied per second) per size."""
    out = {}
    for n in sizes:
        src = np.ones(max(1, n), np.uint8)
        dst = np.zeros(max(1, n), np.uint8)

        def loop(iters):
            t = time.perf_counter()
            for _ in range(iters):
                np.copyto(dst, src)
            return n * iters / (time.perf_counter() - t)

        rate = loop(3)
        iters = _iters(n / rate, target)
        out[n] = [loop(iters) for _ in range(reps)]
    return out


if __name__ == "__main__":
    import json
    import sys
    sizes = [int(s) for s in (sys.argv[1:] or ["8", "65536", str(1 << 20)])]
    print(json.dumps({"blocking": pingpong(sizes), "spin": pingpong(sizes, 20),
                      "stream": stream(sizes), "memcpy": memcpy(sizes)}, indent=1))
