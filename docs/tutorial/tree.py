from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()


def tree_bcast(value, root=0):
    """Binomial-tree broadcast: in step k, every rank that has the value sends it 2**k ranks
    further. ceil(log2 size) steps instead of size - 1 sends from the root."""
    me = (rank - root) % size                 # my rank counted from the root
    mask = 1
    while mask < size:                        # receive once, from the rank mask below me
        if me & mask:
            value = comm.recv(source=(rank - mask) % size, tag=10)
            break
        mask <<= 1
    mask >>= 1
    while mask > 0:                           # then pass it on to the ranks below me
        if me + mask < size:
            comm.send(value, dest=(rank + mask) % size, tag=10)
        mask >>= 1
    return value


def tree_reduce(value, root=0):
    """Binomial-tree sum to the root: the broadcast's tree, walked the other way."""
    me = (rank - root) % size
    mask = 1
    while mask < size:
        if me & mask:                         # hand my partial sum down and stop
            comm.send(value, dest=(rank - mask) % size, tag=11)
            return None
        if me + mask < size:                  # add the partial sum of my child
            value += comm.recv(source=(rank + mask) % size, tag=11)
        mask <<= 1
    return value


word = tree_bcast("hello" if rank == 0 else None)
total = tree_reduce(rank + 1)

# the library's versions give the same answers
assert word == comm.bcast("hello" if rank == 0 else None, root=0)
assert total == comm.reduce(rank + 1, op=MPI.SUM, root=0)
if rank == 0:
    print(f"by hand: every rank got {word!r}; the sum of 1..{size} is {total}")
