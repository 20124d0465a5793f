"""A receiver whose receives are interrupted, over and over, by a raising signal handler.

Rank 0 sends COUNT numbered messages of mixed sizes (a few bytes, several per network
read, eager messages split across reads, rendezvous messages); message i is an int64 array
filled with i. Rank 1 receives them while a SIGALRM handler raises ``Interrupted`` every
few hundred microseconds; the program catches it and goes on, as a program with a
timeout decorator does. Rank 1 prints one line ``RESULT mode=... received=... interrupts=...
bad=... gaps=...`` and exits 1 on any message that is not a fresh, intact one.

The stream ends with TRAILERS more messages (values COUNT...): the receiver stops at the first
of them it gets and drains the rest, so a message the program lost cannot make it wait forever.

mode ``wait``: ``req = Irecv(buf)`` then ``req.Wait()`` retried until it completes: every
message must arrive exactly once, in order (``gaps`` must be 0).
mode ``recv``: blocking ``Recv`` retried after an interrupt: values must strictly increase and
be intact. A receive interrupted after its message matched finishes first and then raises
(as under mpi4py), so the program never learns of that message: at most one gap per interrupt.
"""
import signal
import sys

import numpy as np
from mpi4py import MPI

COUNT = int(sys.argv[2]) if len(sys.argv) > 2 else 1500
MODE = sys.argv[1] if len(sys.argv) > 1 else "wait"
RATE = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0003
SIZES = (1, 400, 9000, 12000)      # int64 elements: 8 B, 3.2 KB, 72 KB (rendezvous), 96 KB


class Interrupted(Exception):
    pass


def size_of(i: int) -> int:
    return SIZES[i % len(SIZES)]


comm = MPI.COMM_WORLD
rank = comm.Get_rank()
TRAILERS = 50      # messages COUNT.. COUNT+49 end the stream (a lost one cannot hang it)
if rank == 0:
    for i in range(COUNT + TRAILERS):
        comm.Send(np.full(size_of(i), i, dtype=np.int64), dest=1, tag=7)
    comm.Recv(np.empty(1, np.int64), source=1, tag=8)     # the receiver is done
else:
    interrupts = 0
    armed = False       # the handler raises only around the MPI call, not in our own checks

    def alarm(signum, frame):
        if armed:
            raise Interrupted()

    buf = np.empty(max(SIZES), dtype=np.int64)
    signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, RATE, RATE)
    received, bad, data, last = 0, 0, 0, -1
    try:
        while last < COUNT:
            buf[:] = -1
            if MODE == "wait":
                req = comm.Irecv(buf, source=0, tag=7)
                while req:       # a completed request becomes REQUEST_NULL (falsy)
                    try:
                        try:
                            armed = True
                            req.Wait()
                        finally:
                            armed = False
                    except Interrupted:
                        interrupts += 1
            else:
                try:
                    try:
                        armed = True
                        comm.Recv(buf, source=0, tag=7)
                    finally:
                        armed = False
                except Interrupted:
                    interrupts += 1
                    continue
            filled = np.flatnonzero(buf == -1)
            n = int(filled[0]) if filled.size else buf.size
            value = int(buf[0])
            received += 1
            if value <= last or n != size_of(value) or not (buf[:n] == value).all():
                bad += 1
                print(f"BAD after {last}: value {value}, {n} elements, "
                      f"distinct {np.unique(buf[:n])[:5].tolist()}", flush=True)
                if bad > 5:
                    break
            else:
                last = value
                if value < COUNT:
                    data += 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
    for _ in range(COUNT + TRAILERS - 1 - last):      # the trailers after the one we got
        comm.Recv(buf, source=0, tag=7)
    gaps = COUNT - data
    print(f"RESULT mode={MODE} received={received} interrupts={interrupts} bad={bad} "
          f"gaps={gaps}", flush=True)
    comm.Send(np.zeros(1, np.int64), dest=0, tag=8)
    sys.exit(1 if bad else 0)
