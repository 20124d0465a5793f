"""Lab 2: ping-pong between ranks 0 and 1 (objects and numpy buffers), others idle."""
import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
ROUNDS = 20

if rank == 0:
    # Python objects
    for i in range(ROUNDS):
        comm.send({"ball": i}, dest=1, tag=11)
        back = comm.recv(source=1, tag=22)
        assert back == {"ball": i + 1}, back
    # buffers of growing size, including one above the eager limit
    for n in (1, 100, 10_000, 200_000):
        a = np.arange(n, dtype="d")
        b = np.empty(n, dtype="d")
        t0 = MPI.Wtime()
        comm.Send([a, MPI.DOUBLE], dest=1, tag=33)
        comm.Recv([b, MPI.DOUBLE], source=1, tag=44)
        assert MPI.Wtime() >= t0
        assert np.array_equal(b, a * 2), n
    print("pingpong: OK")
elif rank == 1:
    for i in range(ROUNDS):
        ball = comm.recv(source=0, tag=11)
        comm.send({"ball": ball["ball"] + 1}, dest=0, tag=22)
    for n in (1, 100, 10_000, 200_000):
        buf = np.empty(n, dtype="d")
        st = MPI.Status()
        comm.Recv(buf, source=0, tag=33, status=st)
        assert st.Get_count(MPI.DOUBLE) == n and st.Get_source() == 0 and st.Get_tag() == 33
        comm.Send(buf * 2, dest=0, tag=44)
