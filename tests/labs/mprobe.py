"""Lab 15: probe for size, matched probes (Mprobe/Improbe), statuses and truncation errors."""
import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size

if rank == 0:
    for dest in range(1, size):
        comm.Send(np.arange(dest * 10, dtype="i"), dest=dest, tag=dest)
        comm.send({"obj": dest}, dest=dest, tag=100)
        comm.Send(np.arange(4, dtype="d"), dest=dest, tag=200)
    print("mprobe: OK")
else:
    st = MPI.Status()
    comm.Probe(source=0, tag=MPI.ANY_TAG, status=st)
    n = st.Get_count(MPI.INT)
    assert n == rank * 10 and st.Get_tag() == rank
    msg = comm.Mprobe(source=0, tag=rank, status=st)
    buf = np.empty(n, dtype="i")
    msg.Recv(buf, status=st)
    assert (buf == np.arange(n)).all() and st.Get_elements(MPI.INT) == n
    st2 = MPI.Status()
    m = None
    while m is None:
        m = comm.improbe(source=0, tag=100, status=st2)
    obj = m.recv()
    assert obj == {"obj": rank}
    import pickle
    assert st2.Get_count() == len(pickle.dumps(obj, protocol=5))
    # truncation: 4 doubles into room for 2
    small = np.empty(2, dtype="d")
    try:
        comm.Recv(small, source=0, tag=200)
    except MPI.Exception as exc:
        assert exc.Get_error_class() == MPI.ERR_TRUNCATE, exc.Get_error_class()
        assert isinstance(exc.Get_error_string(), str)
    else:
        raise AssertionError("truncation was not reported")
    assert comm.Mprobe(source=MPI.PROC_NULL) == MPI.MESSAGE_NO_PROC
