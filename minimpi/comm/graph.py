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

from ..constants import DIST_GRAPH, GRAPH, PROC_NULL, UNDEFINED
from ..errors import ArgumentError, CountError, RankError
from .null import comm_null
from .topology import DimsError, TopologyError, keep_class

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


class TopoMixin:
    """What ``MPI.Topocomm`` adds: neighbour lists and degrees (``_neighbours`` per kind)."""

    def _neighbours(self) -> Tuple[List[int], List[int], List[int]]:
        """``(in-neighbours, out-neighbours, order to post receives in)``, computed once."""
        cached = self.__dict__.get("_neighbour_lists")
        if cached is None:
            cached = self.__dict__["_neighbour_lists"] = self._compute_neighbours()
        return cached

    def _compute_neighbours(self) -> Tuple[List[int], List[int], List[int]]:
        raise TopologyError(f"rank {self.rank}: {self.name} has no process topology; "
                            f"neighbourhood calls need a Cartcomm, Graphcomm or Distgraphcomm")

    @property
    def degrees(self) -> Tuple[int, int]:
        """``(indegree, outdegree)``."""
        sources, destinations, _ = self._neighbours()
        return len(sources), len(destinations)

    @property
    def indegree(self) -> int:
        return self.degrees[0]

    @property
    def outdegree(self) -> int:
        return self.degrees[1]

    @property
    def inoutedges(self) -> Tuple[List[int], List[int]]:
        """``(in-neighbours, out-neighbours)`` in the topology's order."""
        sources, destinations, _ = self._neighbours()
        return list(sources), list(destinations)

    @property
    def inedges(self) -> List[int]:
        return self.inoutedges[0]

    @property
    def outedges(self) -> List[int]:
        return self.inoutedges[1]


class GraphMixin:
    """Queries of a graph communicator (state: ``_index``, ``_edges``)."""

    _index: Tuple[int, ...]
    _edges: Tuple[int, ...]

    def Get_topology(self) -> int:
        return GRAPH

    @property
    def topology(self) -> int:
        return GRAPH

    def Get_dims(self) -> Tuple[int, int]:
        """``(nnodes, nedges)``."""
        return len(self._index), len(self._edges)

    @property
    def dims(self) -> Tuple[int, int]:
        return self.Get_dims()

    @property
    def nnodes(self) -> int:
        return len(self._index)

    @property
    def nedges(self) -> int:
        return len(self._edges)

    def Get_topo(self) -> Tuple[List[int], List[int]]:
        """``(index, edges)`` as given to ``Create_graph`` (cumulative ``index``)."""
        return list(self._index), list(self._edges)

    @property
    def topo(self) -> Tuple[List[int], List[int]]:
        return self.Get_topo()

    @property
    def index(self) -> List[int]:
        return list(self._index)

    @property
    def edges(self) -> List[int]:
        return list(self._edges)

    def Get_neighbors(self, rank: int) -> List[int]:
        """The neighbours of node ``rank`` in the order of ``edges``."""
        rank = operator.index(rank)
        if not 0 <= rank < len(self._index):
            raise RankError(f"rank {self.rank}: Graphcomm.Get_neighbors({rank}): expected a "
                            f"node 0..{len(self._index) - 1}")
        start = self._index[rank - 1] if rank else 0
        return list(self._edges[start:self._index[rank]])

    def Get_neighbors_count(self, rank: int) -> int:
        return len(self.Get_neighbors(rank))

    @property
    def neighbors(self) -> List[int]:
        return self.Get_neighbors(self.rank)

    @property
    def nneighbors(self) -> int:
        return len(self.neighbors)

    def _compute_neighbours(self) -> Tuple[List[int], List[int], List[int]]:
        mine = self.Get_neighbors(self.rank)
        return mine, mine, list(range(len(mine)))

    def Dup(self, info: Any = None) -> Any:
        """A new communicator with the same members and the same graph."""
        return keep_class(self, super().Dup()._as_graph(self._index, self._edges))

    Clone = Dup


class DistGraphMixin:
    """Queries of a distributed-graph communicator (state: ``_sources``, ``_destinations``,
    ``_sourceweights``, ``_destweights``; weights None when unweighted)."""

    _sources: Tuple[int, ...]
    _destinations: Tuple[int, ...]
    _sourceweights: Optional[Tuple[int, ...]]
    _destweights: Optional[Tuple[int, ...]]

    def Get_topology(self) -> int:
        return DIST_GRAPH

    @property
    def topology(self) -> int:
        return DIST_GRAPH

    def Get_dist_neighbors_count(self) -> Tuple[int, int, bool]:
        """``(indegree, outdegree, weighted)``."""
        return len(self._sources), len(self._destinations), self._sourceweights is not None

    def Get_dist_neighbors(self) -> Tuple[List[int], List[int], Optional[Tuple[List[int], List[int]]]]:
        """``(sources, destinations, (sourceweights, destweights) or None)``."""
        weights = None
        if self._sourceweights is not None:
            weights = (list(self._sourceweights), list(self._destweights))
        return list(self._sources), list(self._destinations), weights

    def _compute_neighbours(self) -> Tuple[List[int], List[int], List[int]]:
        return list(self._sources), list(self._destinations), list(range(len(self._sources)))

    def Dup(self, info: Any = None) -> Any:
        """A new communicator with the same members and the same graph."""
        return keep_class(self, super().Dup()._as_dist_graph(
            self._sources, self._destinations, self._sourceweights, self._destweights))

    Clone = Dup


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

def create_graph(comm: Any, index: Sequence[int], edges: Sequence[int],
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


def create_dist_graph_adjacent(comm: Any, sources: Sequence[int], destinations: Sequence[int],
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


def create_dist_graph(comm: Any, sources: Sequence[int], degrees: Sequence[int],
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


def cart_map(comm: Any, dims: Sequence[int], periods: Any = None) -> int:
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


def graph_map(comm: Any, index: Sequence[int], edges: Sequence[int]) -> int:
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


__all__ = ["TopoMixin", "GraphMixin", "DistGraphMixin", "cart_neighbours",
           "create_graph", "create_dist_graph", "create_dist_graph_adjacent", "cart_map",
           "graph_map", "UNWEIGHTED", "WEIGHTS_EMPTY"]
