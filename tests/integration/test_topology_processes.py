"""Topologies and neighbourhood collectives over real processes: ``minimpi run -n 5`` builds
a periodic 1-D grid, a non-periodic 2-D grid (with PROC_NULL edges), a star graph and a
distributed graph of unequal degrees, and checks every exchange (mpi4py's spelling)."""
from __future__ import annotations

from jobhelpers import assert_no_leftovers, marker_args, run_minimpi

PROGRAM = r'''
import numpy as np
from mpi4py import MPI

world = MPI.COMM_WORLD
rank, p = world.Get_rank(), world.Get_size()

ring = world.Create_cart([p], periods=[True])
assert isinstance(ring, MPI.Topocomm) and ring.inedges == [(rank - 1) % p, (rank + 1) % p]
got = np.full((2, 3), -1, "i")
ring.Neighbor_alltoall(np.array([[rank, 0, 0], [rank, 1, 1]], "i"), got)
assert got.tolist() == [[(rank - 1) % p, 1, 1], [(rank + 1) % p, 0, 0]], got

grid = world.Create_cart([5, 1], periods=[False, False])     # 5x1: PROC_NULL on the edges
before = rank - 1 if rank > 0 else MPI.PROC_NULL
after = rank + 1 if rank < 4 else MPI.PROC_NULL
assert grid.inedges == [before, after, MPI.PROC_NULL, MPI.PROC_NULL], grid.inedges
got = np.full(4, -7.0)
grid.Ineighbor_allgather(np.array([rank * 1.5]), got).Wait()
assert got.tolist() == [-7.0 if s < 0 else s * 1.5 for s in grid.inedges], got

index = [p - 1] + [p - 1 + i for i in range(1, p)]
edges = list(range(1, p)) + [0] * (p - 1)
star = world.Create_graph(index, edges)
assert star.Get_topology() == MPI.GRAPH and isinstance(star, MPI.Graphcomm)
assert star.neighbor_allgather(rank * rank) == ([i * i for i in range(1, p)] if rank == 0 else [0])

mine = list(range(rank + 1, p))                     # rank i sends to every j > i
dist = world.Create_dist_graph([rank], [len(mine)], mine)
sources, dests, weights = dist.Get_dist_neighbors()
assert sources == list(range(rank)) and dests == mine and weights is None
send = np.concatenate([np.full(j, 10 * rank + j, "d") for j in mine] or [np.empty(0)])
counts = [rank] * rank
recv = np.full(rank * rank, -1.0)
dist.Neighbor_alltoallv([send, [len(range(j)) for j in mine]], [recv, counts])
assert recv.tolist() == [10.0 * s + rank for s in range(rank) for _ in range(rank)], recv
assert dist.neighbor_alltoall([(rank, j) for j in mine]) == [(s, rank) for s in range(rank)]
for comm in (ring, grid, star, dist):
    comm.Free()
print(f"rank {rank} ok")
'''


def test_topologies_across_processes(tmp_path):
    prog = tmp_path / "topologies.py"
    prog.write_text(PROGRAM)
    marker = f"topo-{tmp_path.name}"
    result = run_minimpi("-n", "5", "--timeout", "60", *marker_args(marker), str(prog),
                         timeout=90)
    assert result.returncode == 0, result.stdout + result.stderr
    done = [line for line in result.stdout.splitlines() if line.endswith(" ok")]
    assert sorted(line.split("] ", 1)[-1] for line in done) == [f"rank {r} ok" for r in range(5)]
    assert_no_leftovers(marker)
