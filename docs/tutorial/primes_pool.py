from mpi4py.futures import MPIPoolExecutor

N, CHUNK = 100_000, 5_000


def count_primes(start):
    """How many primes in [start, start + CHUNK)."""
    found = 0
    for n in range(max(start, 2), start + CHUNK):
        if n == 2 or (n % 2 and all(n % d for d in range(3, int(n ** 0.5) + 1, 2))):
            found += 1
    return found


if __name__ == "__main__":                      # the workers import this file too
    with MPIPoolExecutor(max_workers=3) as pool:
        # 20 tasks for 3 workers: a worker that finishes early takes the next task,
        # so the slow chunks (large numbers) do not hold everybody up.
        counts = list(pool.map(count_primes, range(0, N, CHUNK)))
    print(f"primes below {N}: {sum(counts)}; per chunk: {counts[:5]} ...")
