"""Every collective with every algorithm over real processes, over TCP and over shared memory
(a representative slice of the in-process matrix in tests/unit/coll/test_<collective>.py), at
non-power-of-two and power-of-two sizes, in one job per size and transport."""
from __future__ import annotations

import pytest
from jobhelpers import marker_args, run_minimpi

PROGRAM = r'''
import numpy as np
from minimpi import MPI
from minimpi.coll import registry

comm = MPI.COMM_WORLD
rank, p = comm.rank, comm.size
n = 1000                                   # not a multiple of p: uneven chunks
checked = 0

def algs(coll, objects=False, op=MPI.SUM):
    return [a.name for a in registry.algorithms(coll).values() if a.refusal(p, 8 * n, op, objects) is None]

def mine(r=None):
    r = rank if r is None else r
    return np.arange(n, dtype=np.float64) + 1000.0 * r

for root in sorted({0, p // 2, p - 1}):
    for alg in algs("bcast"):
        buf = mine() if rank == root else np.zeros(n)
        comm.Bcast(buf, root=root, algorithm=alg)
        assert np.array_equal(buf, mine(root)), ("Bcast", alg)
        checked += 1
    for alg in algs("bcast", objects=True):
        assert comm.bcast({"r": root} if rank == root else None, root=root, algorithm=alg) == {"r": root}
    for alg in algs("scatter"):
        send = np.concatenate([mine(r) for r in range(p)]) if rank == root else None
        recv = np.empty(n)
        comm.Scatter(send, recv, root=root, algorithm=alg)
        assert np.array_equal(recv, mine()), ("Scatter", alg)
        checked += 1
    for alg in algs("gather"):
        recv = np.empty(n * p) if rank == root else None
        comm.Gather(mine(), recv, root=root, algorithm=alg)
        if rank == root:
            assert np.array_equal(recv, np.concatenate([mine(r) for r in range(p)])), ("Gather", alg)
        assert comm.gather(rank, root=root, algorithm=alg) == (list(range(p)) if rank == root else None)
        checked += 1
    for alg in algs("reduce"):
        recv = np.empty(n) if rank == root else None
        comm.Reduce(mine(), recv, op=MPI.SUM, root=root, algorithm=alg)
        if rank == root:
            assert np.allclose(recv, sum(mine(r) for r in range(p))), ("Reduce", alg)
        checked += 1
expected_sum = sum(mine(r) for r in range(p))
for alg in algs("allreduce"):
    out = np.empty(n)
    comm.Allreduce(mine(), out, op=MPI.SUM, algorithm=alg)
    assert np.allclose(out, expected_sum), ("Allreduce", alg)
    req = comm.Iallreduce(mine(), out2 := np.empty(n), op=MPI.MAX, algorithm=alg)
    req.Wait()
    assert np.array_equal(out2, mine(p - 1)), ("Iallreduce", alg)
    checked += 1
for alg in algs("allreduce", objects=True):
    assert comm.allreduce(rank, op=MPI.SUM, algorithm=alg) == p * (p - 1) // 2
for alg in algs("allgather"):
    out = np.empty(n * p)
    comm.Allgather(mine(), out, algorithm=alg)
    assert np.array_equal(out, np.concatenate([mine(r) for r in range(p)])), ("Allgather", alg)
    checked += 1
for alg in algs("reduce_scatter"):
    out = np.empty(n)
    comm.Reduce_scatter_block(np.concatenate([mine()] * p), out, op=MPI.SUM, algorithm=alg)
    assert np.allclose(out, expected_sum), ("Reduce_scatter_block", alg)
    checked += 1
for alg in algs("alltoall"):
    send = np.concatenate([mine() + 0.5 * d for d in range(p)])
    out = np.empty(n * p)
    comm.Alltoall(send, out, algorithm=alg)
    assert np.array_equal(out, np.concatenate([mine(s) + 0.5 * rank for s in range(p)])), ("Alltoall", alg)
    assert comm.alltoall([(rank, d) for d in range(p)], algorithm=alg) == [(s, rank) for s in range(p)]
    checked += 1
for alg in algs("scan"):
    out = np.empty(n)
    comm.Scan(mine(), out, op=MPI.SUM, algorithm=alg)
    assert np.allclose(out, sum(mine(r) for r in range(rank + 1))), ("Scan", alg)
    checked += 1
for alg in algs("barrier"):
    comm.Barrier(algorithm=alg)
    checked += 1
print(f"rank {rank}: {checked} collective calls correct")
'''


@pytest.mark.parametrize("transport, size", [("tcp", 3), ("tcp", 4), ("tcp", 5),
                                             ("shm", 3), ("shm", 4)])
def test_every_collective_and_algorithm(transport, size, write_script, job_marker):
    script = write_script("all_collectives.py", PROGRAM)
    r = run_minimpi("-n", str(size), "--transport", transport, *marker_args(job_marker), script,
                    timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [l for l in r.stdout.splitlines() if "collective calls correct" in l]
    assert len(lines) == size
    counts = {int(l.split(":")[1].split()[0]) for l in lines}
    assert len(counts) == 1 and counts.pop() > 30
