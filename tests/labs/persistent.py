"""Lab 11: persistent requests (Send_init/Recv_init, Start, Startall, Waitall) in a ring."""
import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
right, left = (rank + 1) % size, (rank - 1) % size

sendbuf = np.zeros(4, dtype="i")
recvbuf = np.zeros(4, dtype="i")
sreq = comm.Send_init(sendbuf, dest=right, tag=5)
rreq = comm.Recv_init(recvbuf, source=left, tag=5)
assert isinstance(sreq, MPI.Prequest) and isinstance(rreq, MPI.Prequest)

for it in range(10):
    sendbuf[:] = rank * 100 + it               # the buffer is read at every Start
    MPI.Prequest.Startall([rreq, sreq])
    statuses = [MPI.Status(), MPI.Status()]
    MPI.Request.Waitall([rreq, sreq], statuses)
    assert (recvbuf == left * 100 + it).all(), (it, recvbuf)
    assert statuses[0].Get_source() == left and statuses[0].Get_tag() == 5
    assert sreq and rreq                         # inactive, not freed: still usable

# Start / Wait one at a time, and a synchronous persistent send
ssreq = comm.Ssend_init(sendbuf, dest=right, tag=6)
rreq2 = comm.Recv_init(recvbuf, source=left, tag=6)
for it in range(3):
    sendbuf[:] = it
    rreq2.Start()
    ssreq.Start()
    assert ssreq.Wait() is True
    rreq2.Wait()
    assert (recvbuf == it).all()
for r in (sreq, rreq, ssreq, rreq2):
    r.Free()
assert not sreq
if rank == 0:
    print("persistent: OK")
