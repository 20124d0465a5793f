"""Cartesian process topologies (``MPI.Compute_dims``, ``Create_cart`` -> ``MPI.Cartcomm``).

Ranks are laid out in row-major order (the last dimension varies fastest), as MPI requires:
``rank = ((c0 * d1) + c1) * d2 + c2``. ``reorder`` is accepted and ignored (every rank keeps
its rank), which MPI allows. Ranks beyond ``prod(dims)`` get ``MPI.COMM_NULL``.

Graph and distributed-graph topologies: :mod:`minimpi.comm.graph`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, Optional, Sequence, Tuple, Union

from ..constants import CART, PROC_NULL, UNDEFINED
from ..errors import ERR_DIMS, ERR_TOPOLOGY, CountError, MinimpiError, RankError
from .null import comm_null

if TYPE_CHECKING:  # pragma: no cover
    from .communicator import Comm


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


class CartMixin:
    """Topology queries of a Cartesian communicator (state: _dims, _periods, _coords)."""

    _dims: Tuple[int, ...]
    _periods: Tuple[bool, ...]

    # -- facts -----------------------------------------------------------------------------
    @property
    def dims(self) -> List[int]:
        return list(self._dims)

    @property
    def periods(self) -> List[bool]:
        return list(self._periods)

    @property
    def coords(self) -> List[int]:
        return self.Get_coords(self.rank)

    @property
    def ndim(self) -> int:
        return len(self._dims)

    @property
    def dim(self) -> int:
        return len(self._dims)

    @property
    def topo(self) -> Tuple[List[int], List[bool], List[int]]:
        return self.Get_topo()

    @property
    def topology(self) -> int:
        return CART

    def Get_dim(self) -> int:
        return len(self._dims)

    def Get_topology(self) -> int:
        return CART

    def Get_topo(self) -> Tuple[List[int], List[bool], List[int]]:
        """``(dims, periods, coords)`` of this process."""
        return list(self._dims), list(self._periods), self.Get_coords(self.rank)

    # -- rank <-> coordinates ----------------------------------------------------------------
    def Get_coords(self, rank: int) -> List[int]:
        rank = int(rank)
        if not 0 <= rank < self.size:
            raise RankError(f"Cartcomm.Get_coords({rank}): rank must be in 0..{self.size - 1}")
        coords = []
        for d in reversed(self._dims):
            coords.append(rank % d)
            rank //= d
        return coords[::-1]

    def Get_cart_rank(self, coords: Sequence[int]) -> int:
        coords = [int(c) for c in coords]
        if len(coords) != len(self._dims):
            raise DimsError(f"Cartcomm.Get_cart_rank({coords}): expected {len(self._dims)} "
                            f"coordinates")
        rank = 0
        for c, d, p in zip(coords, self._dims, self._periods):
            if p:
                c %= d
            elif not 0 <= c < d:
                raise RankError(f"Cartcomm.Get_cart_rank({coords}): coordinate {c} is outside "
                                f"0..{d - 1} of a non-periodic dimension")
            rank = rank * d + c
        return rank

    def Shift(self, direction: int, disp: int) -> Tuple[int, int]:
        """``(source, dest)``: the ranks ``disp`` steps before and after this one along
        ``direction`` (``MPI.PROC_NULL`` past the edge of a non-periodic dimension)."""
        direction, disp = int(direction), int(disp)
        if not 0 <= direction < len(self._dims):
            raise DimsError(f"Cartcomm.Shift(direction={direction}): expected 0.."
                            f"{len(self._dims) - 1}")
        me = self.Get_coords(self.rank)

        def neighbour(offset: int) -> int:
            c = list(me)
            c[direction] += offset
            d = self._dims[direction]
            if not self._periods[direction] and not 0 <= c[direction] < d:
                return PROC_NULL
            return self.Get_cart_rank(c)

        return neighbour(-disp), neighbour(disp)

    def Sub(self, remain_dims: Sequence[bool]) -> Any:
        """Split into lower-dimensional grids keeping the dimensions marked true (collective)."""
        remain = [bool(x) for x in remain_dims]
        if len(remain) != len(self._dims):
            raise DimsError(f"Cartcomm.Sub({remain_dims}): expected {len(self._dims)} flags")
        me = self.Get_coords(self.rank)
        color = key = 0
        for c, d, keep in zip(me, self._dims, remain):
            if keep:
                key = key * d + c
            else:
                color = color * d + c
        sub = self.Split(color, key)
        dims = [d for d, keep in zip(self._dims, remain) if keep]
        periods = [p for p, keep in zip(self._periods, remain) if keep]
        return sub._as_cart(dims, periods)

    def Dup(self, info: Any = None) -> Any:
        """A new communicator with the same members and the same topology."""
        return keep_class(self, super().Dup()._as_cart(self._dims, self._periods))

    Clone = Dup

    def Create_cart(self, *args: Any, **kwargs: Any) -> Any:  # allowed on a Cartcomm too
        return create_cart(self, *args, **kwargs)


def keep_class(original: Any, copy: Any) -> Any:
    """``copy`` as an object of ``original``'s class (a user subclass of ``Cartcomm``...),
    as mpi4py's ``Dup``/``Clone`` keep the class of the communicator they copy."""
    cls = type(original)
    if type(copy) is cls or not isinstance(original, type(copy)):
        return copy
    same = object.__new__(cls)
    same.__dict__ = copy.__dict__
    return same


def create_cart(comm: "Comm", dims: Sequence[int], periods: Optional[Sequence[bool]] = None,
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
