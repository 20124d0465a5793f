"""A rank program for the fault tests: every rank works, one rank (the victim) faults.

    fault_program.py VICTIM POINT METHOD CODE DELAY OUTDIR

POINT   rendezvous  the victim faults after connecting to the coordinator, before it
                    registers, while the others wait for the address table
        collective  everyone loops random-size Allreduce/Bcast/Alltoall; the victim faults
                    DELAY s after a first Barrier
        transfer    everyone passes 64 MiB around a ring with Sendrecv; the victim faults
                    DELAY s after a first Barrier (mid-transfer, as a transfer takes longer)
        waiting     the victim faults DELAY s into a second Barrier that the others enter
                    only after DELAY + 2 s: always inside a collective's wait
METHOD  sys.exit | os._exit | exit0 (sys.exit(0): a clean exit too early) | SIGKILL | SIGSTOP

The victim faults from a SIGALRM handler, i.e. at whatever bytecode the main thread is
running then (inside the engine's progress loop, most of the time), and writes the time it
faulted to OUTDIR/fault.time first, so the test can measure how long the teardown took.
"""
import os
import signal
import sys
import time

victim, point, method, code, delay, outdir = (int(sys.argv[1]), sys.argv[2], sys.argv[3],
                                              int(sys.argv[4]), float(sys.argv[5]), sys.argv[6])
rank = int(os.environ["MINIMPI_RANK"])


def fault(*_):
    with open(os.path.join(outdir, "fault.time"), "w") as f:
        f.write(repr(time.time()))
    if method == "sys.exit":
        sys.exit(code)
    if method == "exit0":
        sys.exit(0)
    if method == "os._exit":
        os._exit(code)
    os.kill(os.getpid(), getattr(signal, method))


if point == "rendezvous":
    if rank == victim:
        from minimpi.runtime.bootstrap import bootstrap
        bootstrap().coordinator.report_state({"phase": "connected"})
        fault()
    from minimpi import MPI  # the others block here, waiting for the address table
    MPI.COMM_WORLD.Barrier()
    sys.exit(0)

import numpy as np  # noqa: E402

from minimpi import MPI  # noqa: E402

comm = MPI.COMM_WORLD
size = comm.Get_size()
comm.Barrier()
if rank == victim:
    signal.signal(signal.SIGALRM, fault)
    signal.setitimer(signal.ITIMER_REAL, delay)
rng = np.random.default_rng(1234)   # one seed on every rank: the same sizes everywhere
end = time.monotonic() + 30   # the fault ends the job long before this
if point == "collective":
    while time.monotonic() < end:
        n = int(rng.integers(1, 200_000))
        x = np.ones(n)
        y = np.empty(n)
        comm.Allreduce(x, y)
        comm.Bcast(y, root=int(n % size))
        comm.Alltoall(np.ones(size * 8), np.empty(size * 8))
elif point == "waiting":
    if rank != victim:
        time.sleep(delay + 2)
    comm.Barrier()
elif point == "transfer":
    big = np.full(8 << 20, float(rank))   # 64 MiB
    got = np.empty_like(big)
    while time.monotonic() < end:
        comm.Sendrecv(big, dest=(rank + 1) % size, recvbuf=got, source=(rank - 1) % size)
