"""Lab 14: groups (Incl/Excl/Union/Intersection/Difference) and Create/Create_group."""
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
world = comm.Get_group()
assert world.Get_size() == size and world.Get_rank() == rank

evens = world.Incl(list(range(0, size, 2)))
odds = world.Excl(list(range(0, size, 2)))
assert evens.size + odds.size == size
assert MPI.Group.Union(evens, odds).size == size
assert MPI.Group.Intersection(evens, odds).size == 0
assert MPI.Group.Difference(world, odds) == evens
assert MPI.Group.Compare(MPI.Group.Union(odds, evens), world) == MPI.SIMILAR
assert MPI.Group.Compare(world, comm.Get_group()) == MPI.IDENT
assert evens.Get_rank() == (rank // 2 if rank % 2 == 0 else MPI.UNDEFINED)
assert evens.Translate_ranks([0, 1], world) == [0, 2]

# Create: collective over COMM_WORLD, members in group order
rev = world.Incl(list(reversed(range(size))))
rcomm = comm.Create(rev)
assert rcomm.Get_rank() == size - 1 - rank
assert rcomm.allreduce(rank) == size * (size - 1) // 2
ecomm = comm.Create(evens)
if rank % 2:
    assert ecomm == MPI.COMM_NULL
else:
    assert ecomm.size == evens.size and ecomm.bcast(rank, root=0) == 0
    ecomm.Free()

# Create_group: only the odd ranks take part
if rank % 2:
    ocomm = comm.Create_group(odds, tag=7)
    assert ocomm.size == odds.size and ocomm.rank == rank // 2
    assert ocomm.allgather(rank) == list(range(1, size, 2))
    ocomm.Free()
for g in (evens, odds, rev, world):
    g.Free()
comm.Barrier()
if rank == 0:
    print("groups_create: OK")
