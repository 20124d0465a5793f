"""MPI-4 persistent collectives: ``Bcast_init``, ``Allreduce_init``, ... -> ``MPI.Prequest``.

A persistent collective is made once and started many times. ``X_init(args, info)`` checks
what can be checked without touching the buffers' contents - the communicator, the root,
the op, ``info``, the number of ``recvcounts`` - and prepares the call as its blocking and
nonblocking forms do (``prepare_<collective>`` of :mod:`.collectives`: the buffers parsed,
the counts checked, a :class:`~.collectives.common.Prepared`), then finds its compiled call
(:class:`~minimpi.coll.compiled.CompiledCall`: the algorithm, the mismatch signature, the
working buffers). The request it returns holds both (:class:`PersistentCollective`): each
``Start()`` only takes the compiled call's channel and starts it - no parsing, no lookup.

MPI reads the buffers at ``Start``, and so does every ``Start``: the prepared call holds
views of the program's own memory, and whatever copies data (an ``IN_PLACE`` input, the
root's own block) is done by the call itself, at each start. A buffer that is not the
program's memory as a whole - the packed items of a non-contiguous datatype, ``MPI.BOTTOM``
addresses, an ``Alltoallw`` block list, a device array copied to the host - would hold the
first start's contents: such a call is prepared anew at each ``Start`` (as the nonblocking
form is), with the compiled call found by its one lookup.

An error the prepared call finds only when it parses a buffer is raised by ``Start`` on
that rank (the call is then prepared at each ``Start``), and the other members are told
through the collective's slot (as any failed collective does), so nobody waits for it.

The ``*_init`` of a collective exist wherever its nonblocking form does: ``Intracomm`` and
``Intercomm`` (``Comm`` handles run them as their kind), ``Scan_init``/``Exscan_init`` on
intracommunicators only, the ``Neighbor_*_init`` on topology communicators.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from ..data.buffers import persistent_buffer
from ..data.ops import SUM
from ..errors import ArgumentError, CountError, MinimpiError
from ..front import route
from ..p2p.request import Request
from .collectives import (
    allgather_calls,
    allreduce_calls,
    alltoall_calls,
    barrier_calls,
    bcast_calls,
    gather_calls,
    inter_calls,
    neighbor_calls,
    reduce_calls,
    reduce_scatter_calls,
    scan_calls,
    scatter_calls,
)
from .collectives.common import Prepared, begin, check_op, check_root, check_usable, collective
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


class PersistentCollective:
    """What a persistent collective's ``Start`` runs: its call prepared at ``*_init``
    (:class:`~.collectives.common.Prepared`) and the compiled call it runs, or - for buffers
    that are not the program's own memory - the way to prepare it anew at each start."""

    __slots__ = ("comm", "prepare", "prepared", "compiled")

    def __init__(self, comm: Any, prepare: Callable[[], Prepared], at_init: bool = True) -> None:
        self.comm = comm
        #: prepares the call (with the arguments of ``*_init``)
        self.prepare = prepare
        self.prepared: Optional[Prepared] = None
        self.compiled: Any = None
        if not at_init:       # preparing is a collective of its own: each Start does it
            return
        try:
            prepared = prepare()
        except Exception:     # raised by Start, which tells the other members (see above)
            return
        if prepared.in_user_memory():
            self.prepared, self.compiled = prepared, prepared.compiled(comm)

    def start(self) -> Request:
        """Begin one run of the call (the request ``Prequest.Start`` waits for); an error
        goes to the communicator's error handler, as the call's own would."""
        try:
            return _started(self.comm, self)
        except MinimpiError as exc:
            route(self.comm, exc)
            raise


@collective
def _started(comm: Any, op: PersistentCollective) -> Request:
    prepared = op.prepared
    if prepared is None:        # prepared at each start: parsed now, found by one lookup
        return op.prepare().execute(comm, True)
    if comm._freed or comm._ep.engine.revoked:
        check_usable(comm, prepared.call)
    return begin(comm, op.compiled, prepared.invoke, prepared.finalize, True)


def persistent(name: str, params: Sequence[Tuple[str, Any]], intra: Callable[..., Prepared],
               inter: Optional[Callable[..., Prepared]] = None, gathered: str = "",
               **fixed: Any) -> Callable[..., Prequest]:
    """The method ``name`` (``Bcast_init``...): checks once, prepares the call with
    ``intra`` (or ``inter`` on an intercommunicator; ``fixed``: their keyword arguments
    that the name decides, such as ``vector=True``) and returns the persistent request
    whose every ``Start`` runs it. ``gathered``: an argument that, left None, the call
    gathers from every member (``Reduce_scatter``'s ``recvcounts``): preparing is then a
    collective of its own, done at each ``Start`` as before, so that a rank whose
    ``*_init`` fails leaves no other waiting in it."""
    def init(self: Any, *args: Any, **kwargs: Any) -> Prequest:
        bound = _check_once(self, name, _bind(name, params, args, kwargs))
        prepare = inter if self.Is_inter() else intra
        at_init = not gathered or bound.get(gathered) is not None
        op = PersistentCollective(self, functools.partial(prepare, self, name, **bound,
                                                          **fixed), at_init)
        return Prequest._create(op.start, self._ep.engine, f"{name} on {self.name}")
    init.__name__ = init.__qualname__ = name
    shown = ", ".join(p if d is _NO_DEFAULT else f"{p}={_shown(d)}" for p, d in params)
    init.__doc__ = (f"``{name}({shown})``: a persistent request; each ``Start()`` runs the "
                    f"call prepared here (MPI-4).")
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
_BUF = ("buf", _NO_DEFAULT)
_COUNTS = ("recvcounts", None)


def _made(name: str, params: Sequence[Tuple[str, Any]], intra: Callable[..., Prepared],
          inter: Optional[Callable[..., Prepared]] = None, gathered: str = "",
          **fixed: Any) -> Tuple[str, Any]:
    return name, persistent(name, params, intra, inter, gathered, **fixed)


_ALL: Dict[str, Any] = dict([
    # the collectives of every communicator (intra and inter) and their parameters
    _made("Barrier_init", (_INFO,), barrier_calls.prepare_barrier, inter_calls.prepare_barrier),
    _made("Bcast_init", (_BUF, _ROOT, _INFO), bcast_calls.prepare_bcast,
          inter_calls.prepare_bcast),
    _made("Gather_init", (_SEND, _RECV, _ROOT, _INFO), gather_calls.prepare_gather,
          inter_calls.prepare_gather),
    _made("Gatherv_init", (_SEND, _RECV, _ROOT, _INFO), gather_calls.prepare_gather,
          inter_calls.prepare_gather, vector=True),
    _made("Scatter_init", (_SEND, _RECV, _ROOT, _INFO), scatter_calls.prepare_scatter,
          inter_calls.prepare_scatter),
    _made("Scatterv_init", (_SEND, _RECV, _ROOT, _INFO), scatter_calls.prepare_scatter,
          inter_calls.prepare_scatter, vector=True),
    _made("Allgather_init", (_SEND, _RECV, _INFO), allgather_calls.prepare_allgather,
          inter_calls.prepare_allgather),
    _made("Allgatherv_init", (_SEND, _RECV, _INFO), allgather_calls.prepare_allgather,
          inter_calls.prepare_allgather, vector=True),
    _made("Alltoall_init", (_SEND, _RECV, _INFO), alltoall_calls.prepare_alltoall,
          inter_calls.prepare_alltoall),
    _made("Alltoallv_init", (_SEND, _RECV, _INFO), alltoall_calls.prepare_alltoall,
          inter_calls.prepare_alltoall, vector=True),
    _made("Alltoallw_init", (_SEND, _RECV, _INFO), alltoall_calls.prepare_alltoallw,
          inter_calls.prepare_alltoallw),
    _made("Reduce_init", (_SEND, _RECV, _OP, _ROOT, _INFO), reduce_calls.prepare_reduce,
          inter_calls.prepare_reduce),
    _made("Allreduce_init", (_SEND, _RECV, _OP, _INFO), allreduce_calls.prepare_allreduce,
          inter_calls.prepare_allreduce),
    _made("Reduce_scatter_block_init", (_SEND, _RECV, _OP, _INFO),
          reduce_scatter_calls.prepare_reduce_scatter, inter_calls.prepare_reduce_scatter,
          block=True),
    _made("Reduce_scatter_init", (_SEND, _RECV, _COUNTS, _OP, _INFO),
          reduce_scatter_calls.prepare_reduce_scatter, inter_calls.prepare_reduce_scatter,
          gathered="recvcounts"),
    # intracommunicators only
    _made("Scan_init", (_SEND, _RECV, _OP, _INFO), scan_calls.prepare_scan,
          collective="scan"),
    _made("Exscan_init", (_SEND, _RECV, _OP, _INFO), scan_calls.prepare_scan,
          collective="exscan"),
    # topology communicators only
    _made("Neighbor_allgather_init", (_SEND, _RECV, _INFO),
          neighbor_calls.prepare_neighbor_allgather),
    _made("Neighbor_allgatherv_init", (_SEND, _RECV, _INFO),
          neighbor_calls.prepare_neighbor_allgather, vector=True),
    _made("Neighbor_alltoall_init", (_SEND, _RECV, _INFO),
          neighbor_calls.prepare_neighbor_alltoall),
    _made("Neighbor_alltoallv_init", (_SEND, _RECV, _INFO),
          neighbor_calls.prepare_neighbor_alltoall, vector=True),
    _made("Neighbor_alltoallw_init", (_SEND, _RECV, _INFO),
          neighbor_calls.prepare_neighbor_alltoallw),
])


# (the communicator classes name them: ``Bcast_init = persistent_coll.Bcast_init``)
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
