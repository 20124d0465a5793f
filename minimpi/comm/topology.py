"""Cartesian process topologies (``MPI.Compute_dims``, ``Create_cart`` -> ``MPI.Cartcomm``).

Ranks are laid out in row-major order (the last dimension varies fastest), as MPI requires:
``rank = ((c0 * d1) + c1) * d2 + c2``. ``reorder`` is accepted and ignored (every rank keeps
its rank), which MPI allows. Ranks beyond ``prod(dims)`` get ``MPI.COMM_NULL``.

Graph and distributed-graph topologies: :mod:`minimpi.comm.graph`.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Union

from ..constants import UNDEFINED
from ..errors import ERR_DIMS, ERR_TOPOLOGY, CountError, MinimpiError
from .collectives.common import collective
from .null import comm_null


class TopologyError(MinimpiError):
    error_class = ERR_TOPOLOGY


class DimsError(MinimpiError):
    error_class = ERR_DIMS


def _prod(xs: Sequence[int]) -> int:
    p = 1
    for x in xs:
        p *= x
    return p


def _factorizations(n: int, k: int, largest: int):
    """Non-increasing k-tuples of positive ints, each <= largest, whose product is n."""
    if k == 0:
        if n == 1:
            yield ()
        return
    for d in range(min(n, largest), 0, -1):
        if n % d == 0:
            for rest in _factorizations(n // d, k - 1, d):
                yield (d,) + rest


def compute_dims(nnodes: int, dims: Union[int, Sequence[int]]) -> List[int]:
    """``MPI.Compute_dims``: fill the zero entries of ``dims`` so that the product is ``nnodes``.

    ``dims`` is the number of dimensions or a list where non-zero entries are fixed. The free
    dimensions are made as close to each other as possible and returned in non-increasing
    order (e.g. 12 in 2-D -> [4, 3], 16 in 3-D -> [4, 2, 2]).
    """
    nnodes = int(nnodes)
    if isinstance(dims, int):
        dims = [0] * dims
    dims = [int(d) for d in dims]
    if nnodes < 1 or any(d < 0 for d in dims):
        raise DimsError(f"Compute_dims({nnodes}, {dims}): nnodes must be >= 1 and dims >= 0")
    fixed = _prod([d for d in dims if d > 0])
    free = [i for i, d in enumerate(dims) if d == 0]
    if nnodes % fixed:
        raise DimsError(f"Compute_dims({nnodes}, {dims}): {nnodes} is not divisible by the "
                        f"product of the fixed dimensions ({fixed})")
    rest = nnodes // fixed
    if not free:
        if rest != 1:
            raise DimsError(f"Compute_dims({nnodes}, {dims}): the dimensions multiply to "
                            f"{fixed}, not {nnodes}")
        return dims
    best = min(_factorizations(rest, len(free), rest), key=lambda t: (t[0] - t[-1], t))
    for i, d in zip(free, best):
        dims[i] = d
    return dims




def keep_class(original: Any, copy: Any) -> Any:
    """``copy`` as an object of ``original``'s class (a user subclass of ``Cartcomm``...),
    as mpi4py's ``Dup``/``Clone`` keep the class of the communicator they copy."""
    cls = type(original)
    if type(copy) is cls or not isinstance(original, type(copy)):
        return copy
    same = object.__new__(cls)
    same.__dict__ = copy.__dict__
    return same


@collective   # bad arguments on one rank: the others raise too, none waits
def Create_cart(comm: Any, dims: Sequence[int], periods: Optional[Sequence[bool]] = None,
                reorder: bool = False) -> Any:
    """``Intracomm.Create_cart`` (collective over ``comm``)."""
    comm._alive("Create_cart")
    dims = [int(d) for d in dims]
    if periods is None or isinstance(periods, (bool, int)):   # mpi4py: one flag for all
        periods = [bool(periods)] * len(dims)
    periods = [bool(p) for p in periods]
    if len(periods) != len(dims):     # a ValueError, as mpi4py's length check
        raise CountError(f"rank {comm.rank}: Create_cart(dims={dims}, periods={periods}): "
                        f"dims and periods must have the same length")
    if any(d <= 0 for d in dims):
        raise DimsError(f"rank {comm.rank}: Create_cart(dims={dims}): every dimension must "
                        f"be >= 1 (use MPI.Compute_dims to choose them)")
    n = _prod(dims)
    if n > comm.size:
        raise DimsError(f"rank {comm.rank}: Create_cart(dims={dims}): the grid needs {n} "
                        f"processes but {comm.name} has only {comm.size}")
    sub = comm.Split(0 if comm.rank < n else UNDEFINED, comm.rank)
    if not sub:
        return comm_null()
    sub._ep.name = f"{comm.name}.cart"
    return sub._as_cart(dims, periods)
