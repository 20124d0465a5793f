import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()

if rank == 0:
    comm.send({"greeting": "ping", "count": 1}, dest=1, tag=0)   # a Python object
    reply = comm.recv(source=1, tag=1)
    print("rank 0 got", reply)

    data = np.arange(5, dtype="d")
    comm.Send(data, dest=1, tag=2)                                # a buffer: no pickling
    comm.Recv(data, source=1, tag=3)
    print("rank 0 got back", data)
elif rank == 1:
    msg = comm.recv(source=0, tag=0)
    comm.send({"greeting": "pong", "count": msg["count"] + 1}, dest=0, tag=1)

    buf = np.empty(5, dtype="d")
    status = MPI.Status()
    comm.Recv(buf, source=0, tag=2, status=status)
    print(f"rank 1 received {status.Get_count(MPI.DOUBLE)} doubles from rank {status.Get_source()}")
    comm.Send(buf * 10, dest=0, tag=3)
