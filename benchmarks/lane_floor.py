"""What an 8 B one-way ``Send``/``Recv`` costs in Python at the least, with what MPI asks of it.

    python benchmarks/lane_floor.py [--iters 20000] [--runs 5]

Two forked processes, one shared mmap holding a ring each way, spin-polling: the bare
minimum of an MPI express lane written in Python, as one function per side and nothing
else - the floor of what any Python MPI's ``Send``/``Recv`` of a numpy array can cost on
this machine. Each step is one minimpi's express lane takes too:

* ``send``: the argument checks MPI requires (a C-contiguous numpy array, destination
  and tag integers in range), a header packed in place (kind, flags, context, source,
  tag, message id, length: 40 bytes), the payload copied behind it, the ring's tail
  stored, a fence (a lock taken and released: the tail's store before the next load), and
  a look at the peer's sleeping flag - without it a receiver that blocked could never be
  woken;
* ``recv``: the argument checks, a spin on the ring's tail, the header unpacked and
  matched (context, source, tag), the length checked against the buffer, the payload
  copied out, the head stored, a fence, and a look at the writer's flag (it waits for room
  in a full ring: without the look it could never be woken).

Left out (each of which a real MPI needs): a lock for threads, the unexpected queue,
wildcards, an error handler, a communicator's state (freed, revoked, lost peers), message
ordering across transports, the ring's wrap-around and a full ring, request objects.

It prints the bare floor (an 8-byte copy and a sequence word each way), the lane floor
above, the lane floor with what minimpi's lane must do besides (``make_side``'s
``duties``: a lock for threads, the failure state, the unexpected queue), and the lane floor's steps one by one (each timed in a loop of its own in one
process: what the ping-pong pays beyond their sum is cache lines moving between cores and
the spin's detection).
"""
from __future__ import annotations

import argparse
import mmap
import os
import statistics
import struct
import threading
import time

import numpy as np

HEADER = struct.Struct("<BBHIiiQQ")      # kind, flags, spare, context, source, tag, id, length
RING = 1 << 16
TAG_UB = (1 << 31) - 1
#: each ring's control words (tail, head, the writer's want-room flag; the reader's sleeping
#: flag on a line of its own) before its data
CTL = 128


class _State:
    """What a real MPI looks at before it touches a ring: why it may not (see ``duties``)."""

    __slots__ = ("aborted", "lost_peers", "revoked")

    def __init__(self) -> None:
        self.aborted, self.lost_peers, self.revoked = None, set(), set()


def make_side(mem: mmap.mmap, out_at: int, in_at: int, rank: int, size: int,
              duties: bool = False):
    """The ``send`` and ``recv`` of one process: it writes the ring at ``out_at`` and reads
    the one at ``in_at``. ``duties``: each call also does what minimpi's lane must besides -
    a re-entrant lock held (threads may call at once), the failure state looked at (an
    abort, lost peers, revoked communicators), and on receive the unexpected queue looked
    at first (an earlier message may match)."""
    words = memoryview(mem).cast("Q")
    out_tail, out_sleep = out_at // 8, out_at // 8 + 8
    in_tail, in_head, in_want = in_at // 8, in_at // 8 + 1, in_at // 8 + 2
    out_data, in_data = out_at + CTL, in_at + CTL
    view = memoryview(mem)
    fence = threading.Lock()
    acquire, release = fence.acquire, fence.release
    tail = head = msg_id = 0
    context = 7
    lock, state, unexpected = threading.RLock(), _State(), {context: []}

    def send(buf, dest, tag):
        nonlocal tail, msg_id
        if not (type(buf) is np.ndarray and buf.flags.c_contiguous and type(dest) is int
                and type(tag) is int and 0 <= dest < size and 0 <= tag <= TAG_UB):
            raise ValueError("bad arguments")
        if duties:
            lock.acquire()
            if state.aborted is not None or state.lost_peers or state.revoked:
                raise RuntimeError("a real lane would leave this to the general path")
        n = buf.nbytes
        pos = out_data + (tail & (RING - 1))
        msg_id += 1
        HEADER.pack_into(mem, pos, 1, 0, 0, context, rank, tag, msg_id, n)
        start = pos + HEADER.size
        mem[start:start + n] = buf
        tail += (HEADER.size + n + 63) // 64 * 64
        words[out_tail] = tail
        acquire(False)
        release()
        if words[out_sleep]:
            raise RuntimeError("the peer sleeps: a real lane would wake it here")
        if duties:
            lock.release()

    def recv(buf, source, tag):
        nonlocal head
        flags = buf.flags
        if not (type(buf) is np.ndarray and flags.c_contiguous and flags.writeable
                and type(source) is int and type(tag) is int and 0 <= source < size
                and 0 <= tag <= TAG_UB):
            raise ValueError("bad arguments")
        if duties:
            lock.acquire()
            if (state.aborted is not None or state.lost_peers or state.revoked
                    or unexpected.get(context)):
                raise RuntimeError("a real lane would leave this to the general path")
        while words[in_tail] == head:
            pass
        pos = in_data + (head & (RING - 1))
        kind, _, _, ctx, src, t, _, n = HEADER.unpack_from(mem, pos)
        if ctx != context or src != source or t != tag:
            raise RuntimeError("a real lane would queue this message as unexpected")
        if n > buf.nbytes:
            raise RuntimeError("truncated")
        start = pos + HEADER.size
        memoryview(buf).cast("B")[:n] = view[start:start + n]
        head += (HEADER.size + n + 63) // 64 * 64
        words[in_head] = head
        acquire(False)
        release()
        if words[in_want]:
            raise RuntimeError("the writer waits for room: a real lane would wake it here")
        if duties:
            lock.release()

    return send, recv


def pingpong(iters: int, runs: int, warm: int = 2000, duties: bool = False) -> list:
    ring_bytes = CTL + RING
    mem = mmap.mmap(-1, 2 * ring_bytes)
    total = warm + iters * runs
    a = np.zeros(1, np.float64)
    b = np.zeros(1, np.float64)
    # (frames are 64-byte aligned, so a small one never straddles the ring's end; each is
    # consumed before the next is written, so the ring is never full)
    pid = os.fork()
    if pid == 0:
        send, recv = make_side(mem, ring_bytes, 0, 1, 2, duties)
        for _ in range(total):
            recv(b, 0, 1)
            send(b, 0, 1)
        os._exit(0)
    send, recv = make_side(mem, 0, ring_bytes, 0, 2, duties)
    for _ in range(warm):
        send(a, 1, 1)
        recv(b, 1, 1)
    res = []
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(iters):
            send(a, 1, 1)
            recv(b, 1, 1)
        res.append((time.perf_counter() - t0) / iters / 2 * 1e6)
    os.waitpid(pid, 0)
    return res


def bare(iters: int, runs: int) -> list:
    """shm_floor.py's loop: an 8-byte copy and a sequence word each way."""
    m = mmap.mmap(-1, 4096)
    mv = memoryview(m)
    seq = mv[0:16].cast("q")
    out, back = mv[64:72], mv[128:136]
    src, dst = bytearray(8), bytearray(8)
    total = iters * runs + 1000
    pid = os.fork()
    if pid == 0:
        n = 0
        while n < total:
            n += 1
            while seq[0] < n:
                pass
            dst[:] = out
            back[:] = dst
            seq[1] = n
        os._exit(0)
    n = 0
    for _ in range(1000):
        n += 1
        out[:] = src
        seq[0] = n
        while seq[1] < n:
            pass
    res = []
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(iters):
            n += 1
            out[:] = src
            seq[0] = n
            while seq[1] < n:
                pass
            dst[:] = back
        res.append((time.perf_counter() - t0) / iters / 2 * 1e6)
    os.waitpid(pid, 0)
    return res


#: the steps of the lane floor, each as the statement it runs (timed alone, in one process:
#: no cache line moves between cores, which the ping-pong pays on top)
STEPS = (
    ("call of a Python function (x2: send, recv)", "f()"),
    ("send: argument checks", "type(a) is np.ndarray and a.flags.c_contiguous and "
     "type(d) is int and type(t) is int and 0 <= d < 2 and 0 <= t <= TAG_UB"),
    ("send: header packed in place", "HEADER.pack_into(mem, 0, 1, 0, 0, 7, 0, 1, 5, 8)"),
    ("send: payload copied into the ring", "mem[64:72] = a"),
    ("send: tail stored", "words[0] = 64"),
    ("send: fence (a lock taken and released)", "acquire(False); release()"),
    ("send: the peer's sleeping flag read", "words[8]"),
    ("recv: argument checks", "fl = a.flags; type(a) is np.ndarray and fl.c_contiguous and "
     "fl.writeable and type(d) is int and type(t) is int and 0 <= d < 2 and "
     "0 <= t <= TAG_UB"),
    ("recv: one look at the tail", "words[0] == 0"),
    ("recv: header unpacked", "HEADER.unpack_from(mem, 0)"),
    ("recv: matched (context, source, tag, length)", "c != 7 or s != 0 or t2 != 1 or n > 8"),
    ("recv: payload copied out", "memoryview(a).cast('B')[:8] = view[64:72]"),
    ("recv: head stored", "words[1] = 64"),
    ("recv: fence", "acquire(False); release()"),
    ("recv: the writer's flag read", "words[2]"),
)


def steps(number: int = 200_000) -> list:
    """(step, ns) for each of :data:`STEPS`, the best of three loops of ``number``."""
    import timeit
    mem = mmap.mmap(-1, 4096)
    lock = threading.Lock()
    env = {"np": np, "HEADER": HEADER, "TAG_UB": TAG_UB, "mem": mem, "view": memoryview(mem),
           "words": memoryview(mem).cast("Q"), "a": np.zeros(1, np.float64), "d": 1, "t": 1,
           "acquire": lock.acquire, "release": lock.release, "f": lambda: None,
           "c": 7, "s": 0, "t2": 1, "n": 8}
    empty = min(timeit.repeat("pass", number=number, repeat=3, globals=env))
    return [(name, max(0.0, min(timeit.repeat(stmt, number=number, repeat=3, globals=env))
                       - empty) / number * 1e9) for name, stmt in STEPS]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args(argv)
    for name, fn in (("bare floor (copy + sequence word)", bare),
                     ("lane floor (send/recv with MPI's steps)", pingpong),
                     ("lane floor + lock, failure state, queue",
                      lambda i, r: pingpong(i, r, duties=True))):
        res = fn(args.iters, args.runs)
        print(f"{name:42s} one-way median {statistics.median(res):.2f} us  "
              f"runs {[round(x, 2) for x in res]}")
    parts = steps()
    print("the lane floor's steps, each alone in one process (ns):")
    for name, ns in parts:
        print(f"  {ns:6.0f}  {name}")
    calls = parts[0][1]
    print(f"  {sum(ns for _, ns in parts) + calls:6.0f}  in all, both sides "
          f"(the function call counted twice)")


if __name__ == "__main__":
    main()
