"""Lab 12: post Irecv and poll with Test while doing other work."""
import time

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size

if rank == 0:
    reqs = []
    bufs = []
    for src in range(1, size):
        buf = np.empty(5, dtype="d")
        bufs.append(buf)
        reqs.append(comm.Irecv([buf, MPI.DOUBLE], source=src, tag=1))
    work = 0
    done = [False] * len(reqs)
    while not all(done):
        for i, r in enumerate(reqs):
            if not done[i] and r.Test():
                done[i] = True
                assert r == MPI.REQUEST_NULL and not r
        work += 1
        time.sleep(0.001)
    for i, buf in enumerate(bufs):
        assert (buf == i + 1).all()
    # lowercase: test() returns (flag, message)
    req = comm.irecv(source=1, tag=2)
    flag, msg = req.test()
    while not flag:
        time.sleep(0.001)
        flag, msg = req.test()
    assert msg == "late", msg
    # Waitany / Testany / Waitsome over several receives
    reqs = [comm.irecv(source=s, tag=3) for s in range(1, size)]
    seen = set()
    while len(seen) < size - 1:
        idx = MPI.Request.Waitany(reqs)
        assert idx != MPI.UNDEFINED and idx not in seen
        seen.add(idx)
    assert MPI.Request.Waitany(reqs) == MPI.UNDEFINED      # all are REQUEST_NULL now
    assert MPI.Request.Testany(reqs) == (MPI.UNDEFINED, True)
    assert MPI.Request.Waitsome(reqs) is None
    print(f"irecv_test: polled {work} times")
    print("irecv_test: OK")
else:
    time.sleep(0.05 * rank)
    comm.Send(np.full(5, rank, dtype="d"), dest=0, tag=1)
    if rank == 1:
        time.sleep(0.05)
        comm.send("late", dest=0, tag=2)
    comm.send(rank, dest=0, tag=3)
