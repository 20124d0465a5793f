import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
N = 100_000


def count_primes(numbers):
    """How many of these numbers are prime (trial division by odd numbers)."""
    found = 0
    for n in numbers:
        if n == 2 or (n > 2 and n % 2 and all(n % d for d in range(3, int(n ** 0.5) + 1, 2))):
            found += 1
    return found


# The root cuts the work into one contiguous piece per rank.
pieces = np.array_split(np.arange(N), size) if rank == 0 else None
mine = comm.scatter(pieces, root=0)          # each rank gets its piece

counts = comm.gather(count_primes(mine), root=0)     # the root collects one count per rank
if rank == 0:
    print(f"primes below {N}: {sum(counts)} (per rank: {counts})")

# The buffer versions move numpy arrays without pickling: Scatter/Gather of equal blocks.
block = np.empty(4, dtype="i8")
comm.Scatter(np.arange(4 * size, dtype="i8") if rank == 0 else None, block, root=0)
squares = np.empty(4 * size, dtype="i8") if rank == 0 else None
comm.Gather(block ** 2, squares, root=0)
if rank == 0:
    print("squares:", squares)
