"""Graph and distributed-graph topologies, Topocomm queries and the neighbourhood collectives
(ranks as threads). Every result is checked against the neighbour lists computed here
directly from the topology's definition."""
from __future__ import annotations

import numpy as np
import pytest

from minimpi import MPI
from minimpi.errors import MinimpiError
from minimpi.runtime.inproc import run_threads

SIZES = [3, 4, 5]


# -- the topologies, and their neighbour lists computed directly ------------------------------

def ring_graph(comm):
    p = comm.size
    index, edges = [], []
    for i in range(p):
        edges += [(i - 1) % p, (i + 1) % p]
        index.append(len(edges))
    return comm.Create_graph(index, edges)


def ring_lists(rank, p):
    nbrs = [(rank - 1) % p, (rank + 1) % p]
    return nbrs, nbrs


def star_graph(comm):
    """Node 0 is joined to every other node."""
    p = comm.size
    index, edges = [p - 1], list(range(1, p))
    for _ in range(1, p):
        edges.append(0)
        index.append(len(edges))
    return comm.Create_graph(index, edges)


def star_lists(rank, p):
    nbrs = list(range(1, p)) if rank == 0 else [0]
    return nbrs, nbrs


def dist_edges(p):
    """Unequal degrees: rank i sends to every j > i, and rank p-1 to rank 0 (twice)."""
    edges = [(i, j) for i in range(p) for j in range(i + 1, p)]
    return edges + [(p - 1, 0), (p - 1, 0)]


def dist_graph(comm):
    """Each edge named by its source (Create_dist_graph, so the edges must travel)."""
    mine = [d for s, d in dist_edges(comm.size) if s == comm.rank]
    return comm.Create_dist_graph([comm.rank], [len(mine)], mine)


def dist_lists(rank, p):
    edges = dist_edges(p)
    return [s for s, d in edges if d == rank], [d for s, d in edges if s == rank]


def cart_2d(periodic):
    def make(comm):
        return comm.Create_cart(MPI.Compute_dims(comm.size, 2), periods=[periodic] * 2)
    return make


def cart_lists(periodic):
    def lists(rank, p):
        dims = MPI.Compute_dims(p, 2)
        coords = [rank // dims[1], rank % dims[1]]
        nbrs = []
        for d in range(2):
            for step in (-1, 1):
                c = list(coords)
                c[d] += step
                if not 0 <= c[d] < dims[d]:
                    if not periodic:
                        nbrs.append(MPI.PROC_NULL)
                        continue
                    c[d] %= dims[d]
                nbrs.append(c[0] * dims[1] + c[1])
        return nbrs, nbrs
    lists.cartesian = True   # blocks pair up by direction, not by order of repeated ranks
    return lists


TOPOLOGIES = {
    "ring": (ring_graph, ring_lists),
    "star": (star_graph, star_lists),
    "dist": (dist_graph, dist_lists),
    "cart-periodic": (cart_2d(True), cart_lists(True)),
    "cart-open": (cart_2d(False), cart_lists(False)),
}


def expected_from(rank, p, lists, payload):
    """What in-neighbour k sent us: ``payload(source, position of us among its out-edges)``;
    repeated edges pair up in order (graphs), or by direction (Cartesian grids)."""
    sources, _ = lists(rank, p)
    cartesian = getattr(lists, "cartesian", False)
    seen = {}
    out = []
    for k, s in enumerate(sources):
        if s == MPI.PROC_NULL:
            out.append(None)
            continue
        if cartesian:   # the rank before us sent its "to after" block (2d+1), and so on
            out.append(payload(s, k + 1 if k % 2 == 0 else k - 1))
            continue
        mine = [k for k, d in enumerate(lists(s, p)[1]) if d == rank]
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.append(payload(s, mine[n]))
    return out


# -- queries ----------------------------------------------------------------------------------

@pytest.mark.parametrize("p", SIZES)
@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
def test_neighbour_lists_and_degrees(name, p):
    make, lists = TOPOLOGIES[name]

    def body(comm):
        topo = make(comm)
        return topo.inedges, topo.outedges, topo.degrees, topo.Get_topology()

    kinds = {"ring": MPI.GRAPH, "star": MPI.GRAPH, "dist": MPI.DIST_GRAPH}
    for rank, (ins, outs, degrees, kind) in enumerate(run_threads(p, body, timeout=30)):
        want_in, want_out = lists(rank, p)
        assert ins == want_in and outs == want_out
        assert degrees == (len(want_in), len(want_out))
        assert kind == kinds.get(name, MPI.CART)


def test_graph_queries():
    def body(comm):
        g = star_graph(comm)
        return (g.Get_dims(), g.Get_topo(), g.Get_neighbors_count(0), g.Get_neighbors(2),
                g.nneighbors, type(g).__name__, g.Dup().Get_topo(), MPI.Comm.Get_topology(g))

    res = run_threads(4, body, timeout=30)
    assert res[0][0] == (4, 6)
    assert res[0][1] == ([3, 4, 5, 6], [1, 2, 3, 0, 0, 0])
    assert res[0][2] == 3 and res[0][3] == [0]
    assert [r[4] for r in res] == [3, 1, 1, 1]
    assert all(r[5] == "Graphcomm" and r[6] == r[1] and r[7] == MPI.GRAPH for r in res)


def test_graph_larger_than_communicator_gives_comm_null_beyond_it():
    def body(comm):
        g = comm.Create_graph([1, 2], [1, 0])       # 2 nodes on 3 ranks
        return g == MPI.COMM_NULL, comm.Graph_map([1, 2], [1, 0]), \
            comm.Cart_map([2]), comm.Cart_map([3])

    res = run_threads(3, body, timeout=30)
    assert [r[0] for r in res] == [False, False, True]
    assert [r[1] for r in res] == [0, 1, MPI.UNDEFINED]
    assert [r[2] for r in res] == [0, 1, MPI.UNDEFINED]
    assert [r[3] for r in res] == [0, 1, 2]


def test_dist_graph_weights_and_adjacent_form():
    def body(comm):
        r, p = comm.rank, comm.size
        g = comm.Create_dist_graph_adjacent([(r - 1) % p], [(r + 1) % p, (r + 2) % p],
                                            sourceweights=[r], destweights=[10 + r, 20 + r])
        u = comm.Create_dist_graph([r], [1], [(r + 1) % p], weights=[5 * r])
        n = comm.Create_dist_graph_adjacent([], [], MPI.WEIGHTS_EMPTY, MPI.WEIGHTS_EMPTY)
        return (g.Get_dist_neighbors_count(), g.Get_dist_neighbors(), u.Get_dist_neighbors(),
                n.Get_dist_neighbors_count(), comm.Create_dist_graph([], [], []).Get_dist_neighbors())

    res = run_threads(3, body, timeout=30)
    for r, (count, nbrs, made, empty, none) in enumerate(res):
        assert count == (1, 2, True)
        assert nbrs == ([(r - 1) % 3], [(r + 1) % 3, (r + 2) % 3], ([r], [10 + r, 20 + r]))
        assert made == ([(r - 1) % 3], [(r + 1) % 3], ([5 * ((r - 1) % 3)], [5 * r]))
        assert empty == (0, 0, True)
        assert none == ([], [], None)


def test_bad_graph_arguments_name_the_call_and_argument():
    def body(comm):
        try:
            comm.Create_graph([2, 3], [1, 9, 0])
        except MinimpiError as exc:
            return str(exc)
        return "no error"

    msgs = run_threads(3, body, timeout=30)
    assert all("Create_graph" in m and "edges" in m and "9" in m for m in msgs)


# -- neighbourhood collectives ----------------------------------------------------------------

@pytest.mark.parametrize("p", SIZES)
@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
def test_neighbor_allgather_and_alltoall(name, p):
    make, lists = TOPOLOGIES[name]

    def body(comm):
        topo = make(comm)
        indeg, outdeg = topo.degrees
        r = comm.rank
        out = {}
        recv = np.full((indeg, 2), -1.0)
        topo.Neighbor_allgather(np.array([r, r + 0.5]), recv)
        out["allgather"] = recv[:, 0].tolist()
        send = np.array([[100 * r + k, 7] for k in range(outdeg)], "i").reshape(outdeg, 2)
        recv = np.full((indeg, 2), -1, "i")
        topo.Neighbor_alltoall(send, recv)
        out["alltoall"] = recv[:, 0].tolist()
        recv = np.full((indeg, 2), -1, "i")
        topo.Ineighbor_alltoall(send, recv).Wait()
        out["ialltoall"] = recv[:, 0].tolist()
        out["obj_allgather"] = topo.neighbor_allgather({"from": r})
        out["obj_alltoall"] = topo.neighbor_alltoall([(r, k) for k in range(outdeg)])
        # v-form: out-neighbour k gets k+1 items; a gap in front of every received block
        scounts = [k + 1 for k in range(outdeg)]
        sbuf = np.concatenate([np.full(c, 1000 * r + k, "d") for k, c in enumerate(scounts)]
                              or [np.empty(0)])
        want = expected_from(r, p, lists, lambda s, k: (k + 1, 1000 * s + k))
        rcounts = [w[0] if w else 0 for w in want]
        rdispls = [sum(rcounts[:k]) + k for k in range(indeg)]
        rbuf = np.full(sum(rcounts) + indeg, -1.0)
        topo.Neighbor_alltoallv([sbuf, scounts], [rbuf, (rcounts, rdispls), MPI.DOUBLE])
        out["alltoallv"] = [rbuf[d:d + c].tolist() for d, c in zip(rdispls, rcounts)]
        return out

    for rank, out in enumerate(run_threads(p, body, timeout=60)):
        sources, _ = lists(rank, p)
        assert out["allgather"] == [-1.0 if s == MPI.PROC_NULL else s for s in sources]
        want = expected_from(rank, p, lists, lambda s, k: 100 * s + k)
        assert out["alltoall"] == [-1 if w is None else w for w in want]
        assert out["ialltoall"] == out["alltoall"]
        assert out["obj_allgather"] == [None if s == MPI.PROC_NULL else {"from": s}
                                        for s in sources]
        assert out["obj_alltoall"] == expected_from(rank, p, lists, lambda s, k: (s, k))
        vwant = expected_from(rank, p, lists, lambda s, k: [1000.0 * s + k] * (k + 1))
        assert out["alltoallv"] == [w or [] for w in vwant]


@pytest.mark.parametrize("p", [1, 2, 4])
def test_periodic_cart_where_before_and_after_are_one_rank(p):
    """1-D periodic grids of 1 and 2: the rank before and after are the same process, and
    each block must still come from the right direction (MPI-4's rule)."""
    def body(comm):
        cart = comm.Create_cart([p], periods=[True])
        send = np.array([10 * comm.rank + 0, 10 * comm.rank + 1], "i")  # to before, to after
        recv = np.full(2, -1, "i")
        cart.Neighbor_alltoall(send, recv)
        return recv.tolist()

    for r, got in enumerate(run_threads(p, body, timeout=30)):
        before, after = (r - 1) % p, (r + 1) % p
        # the rank before sent us its "to after" block; the rank after its "to before" one
        assert got == [10 * before + 1, 10 * after + 0]


def test_neighbor_alltoallw_with_per_neighbour_types():
    def body(comm):
        r, p = comm.rank, comm.size
        g = comm.Create_dist_graph_adjacent([(r - 1) % p, (r + 1) % p],
                                            [(r + 1) % p, (r - 1) % p])
        sbuf = np.array([r, r, r, 100 + r], "i")
        rbuf = np.full(6, -1, "i")
        g.Neighbor_alltoallw([sbuf, ([2, 1], [0, 12]), [MPI.INT, MPI.INT]],
                             [rbuf, ([2, 1], [0, 16]), [MPI.INT, MPI.INT]])
        return rbuf.tolist()

    for r, got in enumerate(run_threads(3, body, timeout=30)):
        before, after = (r - 1) % 3, (r + 1) % 3
        assert got == [before, before, -1, -1, 100 + after, -1]


def test_neighbour_calls_check_counts_and_refuse_plain_communicators():
    def body(comm):
        g = ring_graph(comm)
        errors = []
        try:
            g.Neighbor_allgather(np.zeros(3), np.zeros(4))
        except MinimpiError as exc:
            errors.append(str(exc))
        try:
            g.neighbor_alltoall([1])
        except MinimpiError as exc:
            errors.append(str(exc))
        got = np.zeros(2)          # the persistent form (MPI-4) runs the same exchange
        req = g.Neighbor_allgather_init(np.full(1, float(g.rank)), got)
        req.Start()
        req.Wait()
        g.Barrier()
        return errors, hasattr(comm, "Neighbor_allgather"), sorted(got)

    for rank, (errors, plain_has, got) in enumerate(run_threads(3, body, timeout=30)):
        assert "Neighbor_allgather" in errors[0] and "recvbuf" in errors[0]
        assert "neighbor_alltoall" in errors[1] and "2 objects" in errors[1]
        assert got == sorted([(rank - 1) % 3, (rank + 1) % 3])
        assert not plain_has


def test_length_mismatches_are_value_errors_as_in_mpi4py():
    def body(comm):
        caught = []
        for bad in (lambda: comm.Create_dist_graph([0], [1, 2], [0]),
                    lambda: comm.Create_dist_graph([0], [2], [0]),
                    lambda: comm.Create_dist_graph_adjacent([0], [0], [1, 2], None),
                    lambda: comm.Create_dist_graph_adjacent([0], [0], MPI.WEIGHTS_EMPTY),
                    lambda: comm.Create_cart([comm.size], [True, True])):
            try:
                bad()
            except ValueError as exc:
                caught.append(str(exc))
        return caught

    for caught in run_threads(3, body, timeout=30):
        assert len(caught) == 5
        assert all(msg.startswith("rank ") for msg in caught)


def test_bad_arguments_on_one_rank_fail_every_rank_instead_of_hanging():
    def body(comm):
        outcomes = []
        for make in (lambda bad: comm.Create_dist_graph_adjacent([9 if bad else 0], []),
                     lambda bad: comm.Create_dist_graph([0], [1], [9 if bad else 0])):
            try:
                make(comm.rank == 1)
                outcomes.append("made")
            except MinimpiError as exc:
                outcomes.append(type(exc).__name__)
        comm.Barrier()        # the communicator still works afterwards
        return outcomes

    res = run_threads(3, body, timeout=30)
    assert res[1] == ["RankError", "RankError"]
    assert res[0] == res[2] == ["CollectiveAbortedError", "CollectiveAbortedError"]
