"""Lab 13: a user-defined, non-commutative reduction (2x2 matrix product) and MAXLOC."""
import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size


def matmul_obj(a, b):
    return a @ b


def matmul_buf(inbuf, inoutbuf, datatype):
    a = np.frombuffer(inbuf, dtype="d").reshape(-1, 2, 2)
    b = np.frombuffer(inoutbuf, dtype="d").reshape(-1, 2, 2)
    b[:] = a @ b                     # inoutbuf = inbuf (op) inoutbuf, inbuf from lower ranks


mine = np.array([[1.0, rank + 1.0], [0.0, 1.0]]) if rank % 2 == 0 else \
    np.array([[1.0, 0.0], [rank + 1.0, 1.0]])
every = comm.allgather(mine)
expected = every[0]
for m in every[1:]:
    expected = expected @ m

op_obj = MPI.Op.Create(matmul_obj, commute=False)
op_buf = MPI.Op.Create(matmul_buf, commute=False)
assert not op_obj.Is_commutative() and MPI.SUM.Is_commutative()

res = comm.reduce(mine, op=op_obj, root=0)
if rank == 0:
    assert np.allclose(res, expected), (res, expected)
mat_t = MPI.DOUBLE.Create_contiguous(4).Commit()   # one element = one whole matrix
out = np.empty((2, 2))
comm.Allreduce([mine, 1, mat_t], [out, 1, mat_t], op=op_buf)
assert np.allclose(out, expected)
# inclusive scan in rank order
pre = comm.scan(mine, op=op_obj)
ref = every[0]
for m in every[1:rank + 1]:
    ref = ref @ m
assert np.allclose(pre, ref)

# predefined ops on objects, MAXLOC on pairs and on a DOUBLE_INT buffer
assert MPI.SUM(2, 3) == 5 and MPI.MAX(2, 3) == 3
value = float((rank * 7) % size)
best = comm.allreduce((value, rank), op=MPI.MAXLOC)
assert best == max(((float((r * 7) % size), r) for r in range(size)), key=lambda t: (t[0], -t[1]))
pair = np.array([(value, rank)], dtype=np.dtype([("v", "d"), ("i", "i")], align=True))
pres = np.empty_like(pair)
comm.Allreduce([pair, MPI.DOUBLE_INT], [pres, MPI.DOUBLE_INT], op=MPI.MAXLOC)
assert (float(pres["v"][0]), int(pres["i"][0])) == best

# Reduce_local
acc = np.ones(3)
MPI.SUM.Reduce_local(np.arange(3.0), acc)
assert (acc == [1, 2, 3]).all()
mat_t.Free()
op_obj.Free()
op_buf.Free()
if rank == 0:
    print("user_op: OK")
