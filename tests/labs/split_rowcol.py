"""Lab 8: Split COMM_WORLD into row and column communicators of a process grid."""
import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
ncols = 2
row, col = divmod(rank, ncols)

row_comm = comm.Split(color=row, key=col)
col_comm = comm.Split(color=col, key=row)
assert row_comm.Get_rank() == col and col_comm.Get_rank() == row
assert row_comm.Get_size() == len([r for r in range(size) if r // ncols == row])

# sum of world ranks along my row and my column
row_sum = row_comm.allreduce(rank, op=MPI.SUM)
assert row_sum == sum(r for r in range(size) if r // ncols == row)
col_total = np.zeros(1, dtype="i")
col_comm.Allreduce(np.array([rank], dtype="i"), col_total, op=MPI.SUM)
assert col_total[0] == sum(r for r in range(size) if r % ncols == col)

# messages on a sub-communicator never mix with COMM_WORLD's
if row_comm.size > 1:
    peer = 1 - row_comm.rank if row_comm.rank < 2 else None
    if peer is not None:
        row_comm.send(("row", row), dest=peer, tag=0)
        assert row_comm.recv(source=peer, tag=0) == ("row", row)

# UNDEFINED color: not a member
odd = comm.Split(MPI.UNDEFINED if rank % 2 else 0, rank)
if rank % 2:
    assert odd == MPI.COMM_NULL
else:
    assert odd.size == (size + 1) // 2
    odd.Free()

# Dup, Compare, groups
dup = comm.Dup()
assert MPI.Comm.Compare(comm, dup) == MPI.CONGRUENT and comm.Compare(comm) == MPI.IDENT
assert dup.Compare(row_comm) == (MPI.CONGRUENT if size <= ncols else MPI.UNEQUAL)
g = comm.Get_group()
rg = row_comm.Get_group()
assert MPI.Group.Translate_ranks(rg, list(range(rg.size)), g) == \
    [r for r in range(size) if r // ncols == row]
dup.Free()
row_comm.Free()
col_comm.Free()
if rank == 0:
    print("split_rowcol: OK")
