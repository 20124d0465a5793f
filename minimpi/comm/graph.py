"""Graph and distributed-graph topologies, and what every process topology shares.

``Intracomm.Create_graph(index, edges)`` -> ``MPI.Graphcomm``: node i's neighbours are
``edges[index[i-1]:index[i]]`` (``index`` is cumulative; mpi4py's extension: an ``index``
that starts with 0 and ends with ``len(edges)`` is the standard adjacency form). Ranks
beyond the graph's nodes get ``MPI.COMM_NULL``. Neighbourhood collectives use the
neighbour list as both in- and out-neighbours.

``Create_dist_graph_adjacent(sources, destinations)`` -> ``MPI.Distgraphcomm``: each rank
names its own in- and out-neighbours. ``Create_dist_graph(sources, degrees,
destinations)``: each rank names any edges; one allgather tells every rank all edges, and a
rank's in- and out-neighbours are the edges that end and start at it, in the order of
(the rank that named it, its position there), so both ends of repeated edges list them
in the same order.

``reorder`` is accepted and ignored (every rank keeps its rank), as for Cartesian grids;
``Cart_map``/``Graph_map`` answer accordingly (rank r keeps r if the topology has a node r).
"""
from __future__ import annotations

import operator
from typing import Any, List, Optional, Sequence, Tuple

from ..constants import PROC_NULL, UNDEFINED
from ..errors import ArgumentError, CountError, RankError
from .collectives.common import collective
from .null import comm_null
from .topology import DimsError

#: ``MPI.UNWEIGHTED`` / ``MPI.WEIGHTS_EMPTY``: sentinels for the weights arguments
UNWEIGHTED = -2
WEIGHTS_EMPTY = -3


def _ints(values: Any, call: str, arg: str, rank: int) -> List[int]:
    try:
        return [operator.index(v) for v in values]
    except TypeError:
        raise ArgumentError(f"rank {rank}: {call}: {arg} must be a sequence of integers, got "
                            f"{values!r:.60}") from None


def _weights(weights: Any, count: int, call: str, arg: str, rank: int) -> Optional[List[int]]:
    """The weights list, or None when unweighted (None, UNWEIGHTED, WEIGHTS_EMPTY)."""
    if weights is None or (isinstance(weights, int) and weights == UNWEIGHTED):
        return None
    if isinstance(weights, int) and weights == WEIGHTS_EMPTY:
        if count:   # a ValueError, as in mpi4py
            raise ValueError(f"rank {rank}: {call}: {arg}=MPI.WEIGHTS_EMPTY but the degree "
                             f"is {count}, not 0")
        return None
    values = _ints(weights, call, arg, rank)
    if len(values) != count:    # a ValueError, as mpi4py's length checks
        raise CountError(f"rank {rank}: {call}: {arg} has {len(values)} weights for "
                            f"{count} edges")
    return values


def _check_ranks(ranks: Sequence[int], size: int, call: str, arg: str, rank: int) -> None:
    for r in ranks:
        if not 0 <= r < size:
            raise RankError(f"rank {rank}: {call}: {arg} holds {r}, not a rank of the "
                            f"communicator (0..{size - 1})")








def cart_neighbours(cart: Any) -> Tuple[List[int], List[int], List[int]]:
    """A Cartesian grid's neighbours in MPI's order: for each dimension, the rank before
    (``Shift(d, 1)[0]``) then the rank after, ``PROC_NULL`` past a non-periodic edge; in-
    and out-neighbours alike.

    Receive order: where the rank before and the rank after are one process (a periodic
    dimension of 1 or 2), that process sends first the block for its rank before - that is
    us seen from it as its rank before, so our "after" block - then the other: post the
    "after" receive first there.
    """
    nbrs: List[int] = []
    order: List[int] = []
    for d in range(cart.Get_dim()):
        before, after = cart.Shift(d, 1)
        k = len(nbrs)
        nbrs += [before, after]
        order += [k + 1, k] if before == after != PROC_NULL else [k, k + 1]
    return nbrs, list(nbrs), order


# -- creation -------------------------------------------------------------------------------

@collective   # bad arguments on one rank: the others raise too, none waits
def Create_graph(comm: Any, index: Sequence[int], edges: Sequence[int],
                 reorder: bool = False) -> Any:
    """``Intracomm.Create_graph`` (collective over ``comm``)."""
    comm._alive("Create_graph")
    call, rank = "Create_graph", comm.rank
    index = _ints(index, call, "index", rank)
    edges = _ints(edges, call, "edges", rank)
    if index and index[0] == 0 and index[-1] == len(edges):
        index = index[1:]                     # mpi4py's extension: standard adjacency form
    nnodes = len(index)
    if nnodes > comm.size:
        raise DimsError(f"rank {rank}: {call}: the graph has {nnodes} nodes but {comm.name} "
                        f"has only {comm.size} processes")
    if any(b < a for a, b in zip([0] + index, index)) or (index and index[-1] != len(edges)):
        raise ArgumentError(f"rank {rank}: {call}: index must be non-decreasing cumulative "
                            f"degrees ending at len(edges)={len(edges)}, got {index}")
    _check_ranks(edges, nnodes, call, "edges", rank)
    sub = comm.Split(0 if rank < nnodes else UNDEFINED, rank)
    if not sub:
        return comm_null()
    sub._ep.name = f"{comm.name}.graph"
    return sub._as_graph(index, edges)


@collective   # bad arguments on one rank: the others raise too, none waits
def Create_dist_graph_adjacent(comm: Any, sources: Sequence[int], destinations: Sequence[int],
                               sourceweights: Any = None, destweights: Any = None,
                               info: Any = None, reorder: bool = False) -> Any:
    """``Intracomm.Create_dist_graph_adjacent`` (collective over ``comm``)."""
    comm._alive("Create_dist_graph_adjacent")
    call, rank = "Create_dist_graph_adjacent", comm.rank
    sources = _ints(sources or (), call, "sources", rank)
    destinations = _ints(destinations or (), call, "destinations", rank)
    sw = _weights(sourceweights, len(sources), call, "sourceweights", rank)
    dw = _weights(destweights, len(destinations), call, "destweights", rank)
    _check_ranks(sources, comm.size, call, "sources", rank)
    _check_ranks(destinations, comm.size, call, "destinations", rank)
    weighted = sw is not None or dw is not None or _explicit_empty(sourceweights, destweights)
    if weighted:
        sw = sw if sw is not None else []
        dw = dw if dw is not None else []
    dup = comm.Dup()
    dup._ep.name = f"{comm.name}.distgraph"
    graph = dup._as_dist_graph(sources, destinations, sw if weighted else None,
                               dw if weighted else None)
    if info:
        graph.Set_info(info)
    return graph


def _explicit_empty(*weights: Any) -> bool:
    return any(isinstance(w, int) and w == WEIGHTS_EMPTY for w in weights)


@collective   # bad arguments on one rank: the others raise too, none waits
def Create_dist_graph(comm: Any, sources: Sequence[int], degrees: Sequence[int],
                      destinations: Sequence[int], weights: Any = None, info: Any = None,
                      reorder: bool = False) -> Any:
    """``Intracomm.Create_dist_graph`` (collective over ``comm``: one allgather of the edges)."""
    comm._alive("Create_dist_graph")
    call, rank = "Create_dist_graph", comm.rank
    sources = _ints(sources, call, "sources", rank)
    degrees = _ints(degrees, call, "degrees", rank)
    destinations = _ints(destinations, call, "destinations", rank)
    if len(degrees) != len(sources):
        raise CountError(f"rank {rank}: {call}: {len(sources)} sources but {len(degrees)} "
                            f"degrees")
    if any(d < 0 for d in degrees) or sum(degrees) != len(destinations):
        raise CountError(f"rank {rank}: {call}: degrees {degrees} must be >= 0 and add up "
                            f"to len(destinations)={len(destinations)}")
    w = _weights(weights, len(destinations), call, "weights", rank)
    _check_ranks(sources, comm.size, call, "sources", rank)
    _check_ranks(destinations, comm.size, call, "destinations", rank)
    edges = []
    pos = 0
    for src, deg in zip(sources, degrees):
        for j in range(deg):
            edges.append((src, destinations[pos], w[pos] if w is not None else 1))
            pos += 1
    weighted = w is not None or _explicit_empty(weights)
    everyone = comm.allgather((weighted, edges))
    weighted = any(flag for flag, _ in everyone)
    ins, outs = [], []
    for _, named in everyone:                 # (naming rank, position) order on every rank
        for src, dst, weight in named:
            if src == rank:
                outs.append((dst, weight))
            if dst == rank:
                ins.append((src, weight))
    dup = comm.Dup()
    dup._ep.name = f"{comm.name}.distgraph"
    graph = dup._as_dist_graph([s for s, _ in ins], [d for d, _ in outs],
                               [x for _, x in ins] if weighted else None,
                               [x for _, x in outs] if weighted else None)
    if info:
        graph.Set_info(info)
    return graph


def Cart_map(comm: Any, dims: Sequence[int], periods: Any = None) -> int:
    """``Intracomm.Cart_map``: this rank's rank in such a grid (minimpi never reorders), or
    ``MPI.UNDEFINED`` when the grid has fewer points than this rank."""
    dims = _ints(dims, "Cart_map", "dims", comm.rank)
    n = 1
    for d in dims:
        if d <= 0:
            raise DimsError(f"rank {comm.rank}: Cart_map(dims={dims}): every dimension must "
                            f"be >= 1")
        n *= d
    if n > comm.size:
        raise DimsError(f"rank {comm.rank}: Cart_map(dims={dims}): the grid needs {n} "
                        f"processes but {comm.name} has only {comm.size}")
    return comm.rank if comm.rank < n else UNDEFINED


def Graph_map(comm: Any, index: Sequence[int], edges: Sequence[int]) -> int:
    """``Intracomm.Graph_map``: this rank's rank in such a graph (minimpi never reorders),
    or ``MPI.UNDEFINED`` when the graph has fewer nodes than this rank."""
    index = _ints(index, "Graph_map", "index", comm.rank)
    edges = _ints(edges, "Graph_map", "edges", comm.rank)
    if index and index[0] == 0 and index[-1] == len(edges):
        index = index[1:]
    if len(index) > comm.size:
        raise DimsError(f"rank {comm.rank}: Graph_map: the graph has {len(index)} nodes but "
                        f"{comm.name} has only {comm.size} processes")
    return comm.rank if comm.rank < len(index) else UNDEFINED


__all__ = ["cart_neighbours",
           "Create_graph", "Create_dist_graph", "Create_dist_graph_adjacent", "Cart_map",
           "Graph_map", "UNWEIGHTED", "WEIGHTS_EMPTY"]
