"""OSU-style point-to-point benchmark of minimpi, beside raw-socket baselines.

    python benchmarks/p2p.py                     # full sweep over TCP (about a minute)
    python benchmarks/p2p.py --quick             # fewer sizes and iterations
    python benchmarks/p2p.py --transport shm     # minimpi over shared memory

Both are measured in the same run, on the same machine, so the ratios mean something on a
shared, noisy host:

* latency: one-way time of a ping-pong (half the round trip), median of several repetitions;
  baselines: two processes doing ``sendall``/``recv_into`` on a TCP socket, with blocking
  reads, and with reads that spin (non-blocking, ``MSG_DONTWAIT``) for up to 20 us before
  they block, as minimpi's ``--progress spin`` does; the ratio is against the spinning one.
* bandwidth: one rank streams messages to the other, which acknowledges the last one;
  baseline: a raw socket stream received with ``recv_into`` into a preallocated numpy array.

minimpi rows: ``Send/Recv`` of numpy buffers and ``send/recv`` of Python objects (bytes and
numpy arrays pickled with out-of-band buffers).
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

LAT_SIZES = [8, 64, 512, 4096, 32768, 65536, 262144, 1 << 20, 4 << 20, 16 << 20]
BW_SIZES = [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
REPEATS = 5


def iterations(n: int, quick: bool) -> int:
    base = 2000 if n <= 4096 else 500 if n <= 65536 else 100 if n <= (1 << 20) else 20
    return max(5, base // (4 if quick else 1))


def bw_iterations(n: int, quick: bool) -> int:
    return max(4, (256 << 20) // n // (4 if quick else 1))


# --------------------------------------------------------------------------- raw baseline
#: how long the spinning baseline polls before it blocks (s)
SPIN = 20e-6


def _recv_exact(sock: socket.socket, view: memoryview, spin: float = 0.0) -> None:
    got = 0
    n = view.nbytes
    while got < n:
        if spin:
            deadline = time.perf_counter() + spin
            while got < n and time.perf_counter() < deadline:
                try:
                    got += sock.recv_into(view[got:], 0, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    pass
            if got == n:
                return
        got += sock.recv_into(view[got:])


def raw_baseline(lat_sizes, bw_sizes, quick: bool, spin: float = 0.0) -> dict:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    pid = os.fork()
    if pid == 0:  # the echo / sink side
        s = socket.create_connection(listener.getsockname())
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for n in lat_sizes:
            buf = memoryview(bytearray(n))
            for _ in range(REPEATS * (iterations(n, quick) + 5)):
                _recv_exact(s, buf, spin)
                s.sendall(buf)
        for n in bw_sizes:
            target = np.empty(n, np.uint8)
            view = memoryview(target)
            for _ in range(REPEATS):
                for _ in range(bw_iterations(n, quick)):
                    _recv_exact(s, view)
                s.sendall(b"k")
        os._exit(0)
    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    out = {"latency": {}, "bandwidth": {}}
    for n in lat_sizes:
        data = bytes(n)
        buf = memoryview(bytearray(n))
        it = iterations(n, quick)
        times = []
        for _ in range(REPEATS):
            for i in range(it + 5):
                if i == 5:
                    t = time.perf_counter()
                conn.sendall(data)
                _recv_exact(conn, buf, spin)
            times.append((time.perf_counter() - t) / it / 2)
        out["latency"][n] = statistics.median(times)
    ack = bytearray(1)
    for n in bw_sizes:
        src = np.ones(n, np.uint8)
        it = bw_iterations(n, quick)
        rates = []
        for _ in range(REPEATS):
            t = time.perf_counter()
            for _ in range(it):
                conn.sendall(src)
            _recv_exact(conn, memoryview(ack))
            rates.append(n * it / (time.perf_counter() - t))
        out["bandwidth"][n] = statistics.median(rates)
    os.waitpid(pid, 0)
    return out


# --------------------------------------------------------------------------- minimpi side
def minimpi_worker(lat_sizes, bw_sizes, quick: bool, result_path: str) -> None:
    from minimpi import MPI

    comm = MPI.COMM_WORLD
    rank, other = comm.rank, 1 - comm.rank
    out = {"latency": {}, "latency_obj": {}, "bandwidth": {}, "bandwidth_obj": {}}

    def pingpong(send, recv, it):
        times = []
        for _ in range(REPEATS):
            for i in range(it + 5):
                if i == 5:
                    t = time.perf_counter()
                if rank == 0:
                    send()
                    recv()
                else:
                    recv()
                    send()
            times.append((time.perf_counter() - t) / it / 2)
        return statistics.median(times)

    for n in lat_sizes:
        a = np.zeros(n, np.uint8)
        b = np.empty(n, np.uint8)
        it = iterations(n, quick)
        out["latency"][n] = pingpong(lambda: comm.Send(a, other, 1), lambda: comm.Recv(b, other, 1), it)
        obj = bytes(n) if n <= 65536 else np.zeros(n, np.uint8)
        out["latency_obj"][n] = pingpong(lambda: comm.send(obj, other, 2), lambda: comm.recv(None, other, 2), it)

    def stream(send, recv, it):
        rates = []
        for _ in range(REPEATS):
            comm.sendrecv(None, other, 9, None, other, 9)
            t = time.perf_counter()
            for _ in range(it):
                send() if rank == 0 else recv()
            if rank == 0:
                comm.recv(None, other, 8)
            else:
                comm.send(None, other, 8)
            rates.append(n * it / (time.perf_counter() - t))
        return statistics.median(rates)

    for n in bw_sizes:
        a = np.ones(n, np.uint8)
        b = np.empty(n, np.uint8)
        b[:] = 0  # touch the pages once, as the baseline's buffer is reused too
        it = bw_iterations(n, quick)
        out["bandwidth"][n] = stream(lambda: comm.Send(a, other, 3), lambda: comm.Recv(b, other, 3), it)
        out["bandwidth_obj"][n] = stream(lambda: comm.send(a, other, 4), lambda: comm.recv(None, other, 4), it)
    if rank == 0:
        with open(result_path, "w") as f:
            json.dump(out, f)


def fmt_size(n: int) -> str:
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n // size} {unit}"
    return f"{n} B"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer sizes and iterations")
    ap.add_argument("--transport", default="tcp", choices=("tcp", "shm", "auto"),
                    help="minimpi run --transport (default tcp, like the baselines)")
    ap.add_argument("--progress", default="auto", choices=("auto", "spin", "yield", "block"),
                    help="minimpi run --progress (default auto: spin, 2 ranks)")
    ap.add_argument("--worker", metavar="RESULT_JSON", help=argparse.SUPPRESS)
    args = ap.parse_args()
    lat_sizes = LAT_SIZES[:6] + LAT_SIZES[-1:] if args.quick else LAT_SIZES
    bw_sizes = BW_SIZES[::2] + BW_SIZES[-1:] if args.quick else BW_SIZES
    if args.worker:
        minimpi_worker(lat_sizes, bw_sizes, args.quick, args.worker)
        return 0
    raw = raw_baseline(lat_sizes, bw_sizes, args.quick)
    spin = raw_baseline(lat_sizes, [], args.quick, SPIN)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "minimpi.json")
        cmd = [sys.executable, "-m", "minimpi", "run", "-n", "2", "--no-prefix",
               "--transport", args.transport, "--progress", args.progress,
               os.path.abspath(__file__), "--worker", path] + (["--quick"] if args.quick else [])
        subprocess.run(cmd, check=True, timeout=1800)
        with open(path) as f:
            mine = json.load(f)
    mine = {k: {int(n): v for n, v in d.items()} for k, d in mine.items()}
    print(f"# minimpi over {args.transport} (--progress {args.progress}); one-way latency (us), "
          f"median of {REPEATS} repetitions; ratio = minimpi / raw socket that spins")
    print(f"{'size':>10} {'raw block':>10} {'raw spin':>9} {'Send/Recv':>10} {'ratio':>6} "
          f"{'send/recv obj':>14} {'ratio':>6}")
    for n in lat_sizes:
        r, s = raw["latency"][n] * 1e6, spin["latency"][n] * 1e6
        b, o = mine["latency"][n] * 1e6, mine["latency_obj"][n] * 1e6
        print(f"{fmt_size(n):>10} {r:10.1f} {s:9.1f} {b:10.1f} {b / s:6.2f} {o:14.1f} {o / s:6.2f}")
    print()
    print("# streaming bandwidth (GB/s), median; ratio = minimpi / raw socket into numpy")
    print(f"{'size':>10} {'raw socket':>11} {'Send/Recv':>10} {'ratio':>6} {'send/recv obj':>14} {'ratio':>6}")
    for n in bw_sizes:
        r, b, o = raw["bandwidth"][n] / 1e9, mine["bandwidth"][n] / 1e9, mine["bandwidth_obj"][n] / 1e9
        print(f"{fmt_size(n):>10} {r:11.2f} {b:10.2f} {b / r:6.2f} {o:14.2f} {o / r:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
