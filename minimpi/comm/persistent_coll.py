"""MPI-4 persistent collectives: ``Bcast_init``, ``Allreduce_init``, ... -> ``MPI.Prequest``.

A persistent collective is made once and started many times. ``X_init(args, info)`` checks
what can be checked without touching the buffers' contents - the communicator, the root,
the op, ``info``, the number of ``recvcounts`` - once, and remembers the call; every
``Start()`` then runs exactly the schedule of the nonblocking ``IX(args)`` (the same
algorithm choice, the same mismatch signature, the same finishing), so a persistent call
and its nonblocking twin can never disagree. The buffers are re-read at each ``Start``, as
MPI reads them then: the program may change their contents between starts.

An error the nonblocking path finds only when it parses a buffer is raised by ``Start`` on
that rank, and the other members are told through the collective's slot (as any failed
collective does), so nobody waits for it.

The ``*_init`` of a collective exist wherever its nonblocking form does: ``Intracomm`` and
``Intercomm`` (``Comm`` handles run them as their kind), ``Scan_init``/``Exscan_init`` on
intracommunicators only, the ``Neighbor_*_init`` on topology communicators.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Sequence, Tuple

from ..data.buffers import persistent_buffer
from ..data.ops import SUM
from ..errors import ArgumentError, CountError
from .collectives.common import check_op, check_root
from .handle_types import Info
from .persistent import Prequest

_NO_DEFAULT = object()


def _check_info(comm: Any, info: Any, call: str) -> None:
    if not isinstance(info, Info):
        raise ArgumentError(f"rank {comm.rank}: {call}(info={info!r:.40}): expected an "
                            f"MPI.Info (or MPI.INFO_NULL)")


def _bind(call: str, params: Sequence[Tuple[str, Any]], args: tuple,
          kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """The call's arguments by name, defaults filled in (TypeError as Python gives it)."""
    names = [name for name, _ in params]
    if len(args) > len(names):
        raise TypeError(f"{call}() takes at most {len(names)} arguments ({len(args)} given)")
    bound = dict(zip(names, args))
    for key, value in kwargs.items():
        if key not in names:
            raise TypeError(f"{call}() got an unexpected keyword argument {key!r}")
        if key in bound:
            raise TypeError(f"{call}() got multiple values for argument {key!r}")
        bound[key] = value
    for name, default in params:
        if name not in bound:
            if default is _NO_DEFAULT:
                raise TypeError(f"{call}() missing required argument {name!r}")
            bound[name] = default
    return bound


def _check_once(comm: Any, call: str, bound: Dict[str, Any]) -> Dict[str, Any]:
    """The checks made at ``*_init`` (bad values raise here, not at ``Start``); returns the
    arguments with root as an int."""
    comm._alive(call)
    _check_info(comm, bound.pop("info"), call)
    if "root" in bound:
        # An intercommunicator's root may be MPI.ROOT or MPI.PROC_NULL: its nonblocking
        # form checks that (at Start); an intracommunicator's must be one of its ranks.
        if not comm.Is_inter():
            bound["root"] = check_root(comm, bound["root"], call)
    if "op" in bound:
        check_op(comm, bound["op"], call)
    for buffer in ("buf", "sendbuf", "recvbuf"):   # every Start uses these datatypes, even
        if buffer in bound:                         # once the program freed its handles
            bound[buffer] = persistent_buffer(bound[buffer], call, buffer)
    counts = bound.get("recvcounts")
    if counts is not None and not comm.Is_inter():
        try:
            n = len(counts)
        except TypeError:
            raise CountError(f"rank {comm.rank}: {call}: recvcounts must be a sequence of "
                             f"{comm.size} counts, got {type(counts).__name__}") from None
        if n != comm.size:
            raise CountError(f"rank {comm.rank}: {call}: recvcounts has {n} counts; expected "
                             f"{comm.size} (one per rank)")
    return bound


def persistent(name: str, nonblocking: str,
               params: Sequence[Tuple[str, Any]]) -> Callable[..., Prequest]:
    """The method ``name`` (``Bcast_init``...): checks once, then each ``Start`` calls the
    communicator's ``nonblocking`` method (``Ibcast``...) with the same arguments."""
    def init(self: Any, *args: Any, **kwargs: Any) -> Prequest:
        bound = _check_once(self, name, _bind(name, params, args, kwargs))
        start = getattr(self, nonblocking)   # the bound method, looked up once
        return Prequest._create(lambda: start(**bound), self._ep.engine,
                                f"{name} on {self.name}")
    init.__name__ = init.__qualname__ = name
    shown = ", ".join(p if d is _NO_DEFAULT else f"{p}={_shown(d)}" for p, d in params)
    init.__doc__ = (f"``{name}({shown})``: a persistent request; each ``Start()`` runs "
                    f"``{nonblocking}`` with these arguments (MPI-4).")
    return init


def _shown(default: Any) -> str:
    if isinstance(default, Info):
        return "INFO_NULL"
    if default is SUM:
        return "SUM"
    return repr(default)


_INFO = ("info", Info())        # INFO_NULL: a null Info
_SEND = ("sendbuf", _NO_DEFAULT)
_RECV = ("recvbuf", _NO_DEFAULT)
_ROOT = ("root", 0)
_OP = ("op", SUM)


def _nonblocking_name(init_name: str) -> str:
    """``Bcast_init`` -> ``Ibcast``, ``Neighbor_allgather_init`` -> ``Ineighbor_allgather``."""
    base = init_name[:-len("_init")]
    return "I" + base[0].lower() + base[1:]


#: the collectives of every communicator (intra and inter) and their parameters
COMM_INITS: Dict[str, Sequence[Tuple[str, Any]]] = {
    "Barrier_init": (_INFO,),
    "Bcast_init": (("buf", _NO_DEFAULT), _ROOT, _INFO),
    "Gather_init": (_SEND, _RECV, _ROOT, _INFO),
    "Gatherv_init": (_SEND, _RECV, _ROOT, _INFO),
    "Scatter_init": (_SEND, _RECV, _ROOT, _INFO),
    "Scatterv_init": (_SEND, _RECV, _ROOT, _INFO),
    "Allgather_init": (_SEND, _RECV, _INFO),
    "Allgatherv_init": (_SEND, _RECV, _INFO),
    "Alltoall_init": (_SEND, _RECV, _INFO),
    "Alltoallv_init": (_SEND, _RECV, _INFO),
    "Alltoallw_init": (_SEND, _RECV, _INFO),
    "Reduce_init": (_SEND, _RECV, _OP, _ROOT, _INFO),
    "Allreduce_init": (_SEND, _RECV, _OP, _INFO),
    "Reduce_scatter_block_init": (_SEND, _RECV, _OP, _INFO),
    "Reduce_scatter_init": (_SEND, _RECV, ("recvcounts", None), _OP, _INFO),
}
#: intracommunicators only
SCAN_INITS: Dict[str, Sequence[Tuple[str, Any]]] = {
    "Scan_init": (_SEND, _RECV, _OP, _INFO),
    "Exscan_init": (_SEND, _RECV, _OP, _INFO),
}
#: topology communicators only
NEIGHBOR_INITS: Dict[str, Sequence[Tuple[str, Any]]] = {
    f"Neighbor_{kind}_init": (_SEND, _RECV, _INFO)
    for kind in ("allgather", "allgatherv", "alltoall", "alltoallv", "alltoallw")}


def _defined(table: Dict[str, Sequence[Tuple[str, Any]]]) -> Dict[str, Any]:
    return {name: persistent(name, _nonblocking_name(name), params)
            for name, params in table.items()}


# One function per persistent collective, made from the tables above (the communicator
# classes name them: ``Bcast_init = persistent_coll.Bcast_init``).
_ALL = {**_defined(COMM_INITS), **_defined(SCAN_INITS), **_defined(NEIGHBOR_INITS)}
Barrier_init = _ALL["Barrier_init"]
Bcast_init = _ALL["Bcast_init"]
Gather_init = _ALL["Gather_init"]
Gatherv_init = _ALL["Gatherv_init"]
Scatter_init = _ALL["Scatter_init"]
Scatterv_init = _ALL["Scatterv_init"]
Allgather_init = _ALL["Allgather_init"]
Allgatherv_init = _ALL["Allgatherv_init"]
Alltoall_init = _ALL["Alltoall_init"]
Alltoallv_init = _ALL["Alltoallv_init"]
Alltoallw_init = _ALL["Alltoallw_init"]
Reduce_init = _ALL["Reduce_init"]
Allreduce_init = _ALL["Allreduce_init"]
Reduce_scatter_block_init = _ALL["Reduce_scatter_block_init"]
Reduce_scatter_init = _ALL["Reduce_scatter_init"]
Scan_init = _ALL["Scan_init"]
Exscan_init = _ALL["Exscan_init"]
Neighbor_allgather_init = _ALL["Neighbor_allgather_init"]
Neighbor_allgatherv_init = _ALL["Neighbor_allgatherv_init"]
Neighbor_alltoall_init = _ALL["Neighbor_alltoall_init"]
Neighbor_alltoallv_init = _ALL["Neighbor_alltoallv_init"]
Neighbor_alltoallw_init = _ALL["Neighbor_alltoallw_init"]
