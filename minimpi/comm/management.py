"""Communicator management: the operations behind ``Comm.Dup``, ``Split``, ``Free``, groups,
error handlers, info and the dynamic-process calls.

Each public function here is a method of ``Comm`` (through the API front,
:mod:`minimpi.front`). New communicators are made through the communicator's own
``_derive`` (its members, rank and agreed context), so this module never needs the
communicator classes themselves.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

from ..constants import CART, DIST_GRAPH, GRAPH, UNDEFINED
from ..data.cint import INT_MAX, INT_MIN, as_int
from ..errors import ArgumentError, CommError
from ..p2p.engine import FIRST_FREE_CONTEXT
from ..p2p.request import CompletedRequest, Request
from .collectives.common import collective
from .errhandlers import call_errhandler
from .group import comm_group, create, create_group
from .handle_types import Errhandler, Info, checked_errhandler, create_errhandler, unsupported
from .null import comm_null

#: Split_type kinds (MPICH's values) and the one hardware resource type minimpi knows
COMM_TYPE_SHARED, COMM_TYPE_HW_UNGUIDED, COMM_TYPE_HW_GUIDED, COMM_TYPE_RESOURCE_GUIDED = \
    1, 2, 3, 4
HW_RESOURCE_TYPE = "mpi_hw_resource_type"
SHARED_MEMORY = "mpi_shared_memory"

#: the dynamic-process calls (``spawn``, ``spawn_multiple``, ``accept``, ``connect``,
#: ``join``, ``get_parent``), installed by minimpi.dynamic, a layer above this one
_DYNAMIC: dict = {}


def set_dynamic_calls(**calls: Any) -> None:
    """Install the functions behind ``Spawn``, ``Accept``, ``Get_parent``... (by name)."""
    _DYNAMIC.update(calls)


def dynamic_call(name: str) -> Any:
    """The installed dynamic-process function ``name`` (None: not installed)."""
    return _DYNAMIC.get(name)


def _dynamic(name: str, call: str) -> Any:
    fn = _DYNAMIC.get(name)
    if fn is None:
        raise unsupported("Spawn", call)
    return fn


@collective
def Dup(comm, info: Any = None) -> Any:
    """A new communicator with the same members whose messages never mix with this one's
    (``info``: hints, kept as the new communicator's info)."""
    comm._alive("Dup")
    context = comm._allocate_context()
    new = comm._derive(comm._ep.group, comm.rank, context, f"{comm.name}.dup")
    comm._inherit_into(new)
    cls = type(comm)
    if cls is not type(new):   # mpi4py: Dup of a user subclass (or Cartcomm) keeps its type
        same = object.__new__(cls)
        same.__dict__ = new.__dict__
        new = same
    if info:
        new.Set_info(info)
    return new


def Idup(comm, info: Any = None) -> Tuple[Any, Request]:
    """``(newcomm, request)``: ``Dup`` started as a nonblocking call.

    minimpi agrees on the new communicator's context at the call, like ``Dup`` (so every
    member must reach ``Idup`` before any of them continues); the request is then
    already complete, and waiting on it returns at once.
    """
    return Dup(comm, info), CompletedRequest()


def Idup_with_info(comm, info: Any) -> Tuple[Any, Request]:
    """``Idup`` with hints (kept as the new communicator's info)."""
    return Idup(comm, info)


@collective
def Split(comm, color: int = 0, key: int = 0) -> Any:
    """Partition by ``color`` (``MPI.UNDEFINED``: not a member), order by (``key``, old rank)."""
    comm._alive("Split")
    try:   # as mpi4py's C int arguments: numpy integers, floats truncated
        color_i, key = as_int(color), as_int(key)
    except (TypeError, ValueError, OverflowError):
        color_i = None
    if color_i is not None and not (INT_MIN <= color_i <= INT_MAX and
                                    INT_MIN <= key <= INT_MAX):
        raise OverflowError(f"rank {comm.rank}: Split(color={color!r}, key={key!r}): color "
                            f"and key must fit a C int ({INT_MIN}..{INT_MAX}), as in "
                            f"mpi4py")
    if color_i is None or (color_i < 0 and color_i != UNDEFINED):
        raise ArgumentError(f"rank {comm.rank}: Split(color={color!r}, key={key!r}): color "
                            f"and key must be ints, color >= 0 or MPI.UNDEFINED")
    color = color_i
    entries = comm._exchange((color, key, comm._free_context()), "Split")
    context = comm._agree_context([e[2] for e in entries])
    if color == UNDEFINED:
        return comm_null()
    members = sorted((k, r) for r, (c, k, _) in enumerate(entries) if c == color)
    ranks = [r for _, r in members]
    group = [comm._ep.group[r] for r in ranks]
    return comm._derive(group, ranks.index(comm.rank), context, f"{comm.name}.split({color})")


def Free(comm) -> None:
    """Release the communicator; later use raises ``CommError``.

    ``COMM_WORLD`` and ``COMM_SELF`` cannot be freed (``CommError``, MPI_ERR_COMM, as in
    mpi4py), and stay usable.
    """
    comm._alive("Free")
    if comm._ep.context < FIRST_FREE_CONTEXT:
        raise CommError(f"rank {comm.rank}: Free on {comm.name}: a predefined "
                        f"communicator cannot be freed (MPI_ERR_COMM)")
    try:
        comm._release_attributes()
    finally:
        comm._freed = True
        comm._ep.release()
        if comm._plan is not None:
            comm._plan.close()


# -- Split_type ------------------------------------------------------------------------
@collective
def Split_type(comm, split_type: int, key: int = 0, info: Any = None) -> Any:
    """Split by hardware locality (MPI 3/4 ``MPI_Comm_split_type``).

    ``COMM_TYPE_SHARED``: the ranks on one host (they can share memory);
    ``COMM_TYPE_HW_GUIDED`` / ``COMM_TYPE_RESOURCE_GUIDED``: as SHARED when ``info``'s
    ``mpi_hw_resource_type`` is ``mpi_shared_memory`` (the one resource type minimpi
    knows), else ``COMM_NULL``; ``COMM_TYPE_HW_UNGUIDED``: the host level when it is
    strictly smaller than this communicator (``info`` then gets
    ``mpi_hw_resource_type``), else ``COMM_NULL``; ``MPI.UNDEFINED``: ``COMM_NULL``.
    Collective: every member calls it (with any of these).
    """
    comm._alive("Split_type")
    split_type = as_int(split_type)
    hosts = comm._ep.hosts
    color = UNDEFINED
    if split_type in (COMM_TYPE_SHARED, COMM_TYPE_HW_GUIDED, COMM_TYPE_RESOURCE_GUIDED):
        wanted = None if split_type == COMM_TYPE_SHARED else \
            (info.Get(HW_RESOURCE_TYPE) if info else None)
        if split_type == COMM_TYPE_SHARED or wanted == SHARED_MEMORY:
            color = hosts[comm.rank]
    elif split_type == COMM_TYPE_HW_UNGUIDED:
        if hosts.count(hosts[comm.rank]) < comm.size:
            color = hosts[comm.rank]
    elif split_type != UNDEFINED:
        raise ArgumentError(f"rank {comm.rank}: Split_type(split_type={split_type}): "
                            f"expected MPI.COMM_TYPE_SHARED, COMM_TYPE_HW_GUIDED, "
                            f"COMM_TYPE_HW_UNGUIDED, COMM_TYPE_RESOURCE_GUIDED or "
                            f"MPI.UNDEFINED")
    new = Split(comm, color, key)
    if new and split_type == COMM_TYPE_HW_UNGUIDED and info is not None and info:
        info.Set(HW_RESOURCE_TYPE, SHARED_MEMORY)
    if new:
        new._ep.name = f"{comm.name}.shared"
    return new


# -- groups ----------------------------------------------------------------------------
def Get_group(comm) -> Any:
    comm._alive("Get_group")
    return comm_group(comm)


@collective
def Create(comm, group: Any) -> Any:
    """A communicator of ``group``'s members (collective over this communicator; ranks
    may pass different groups if those are disjoint: one communicator each)."""
    return create(comm, group)


def Create_group(comm, group: Any, tag: int = 0) -> Any:
    """A communicator of ``group``'s members (collective over the members only)."""
    return create_group(comm, group, tag)


# -- error handlers, info ----------------------------------------------------------------
def Create_errhandler(cls, errhandler_fn: Any) -> Errhandler:
    """A user error handler: ``errhandler_fn(comm, errorcode)`` runs on the errors of
    the communicators it is set on (which then raise ``MPI.Exception``)."""
    return create_errhandler("Comm", errhandler_fn)


def Set_errhandler(comm, errhandler: Errhandler) -> None:
    """Handle this communicator's errors with ``errhandler`` (kept by its duplicates)."""
    comm._alive("Set_errhandler")
    comm._attrs["__errhandler__"] = checked_errhandler(errhandler, "Comm",
                                                       f"rank {comm.rank}: Set_errhandler")


def Get_errhandler(comm) -> Errhandler:
    """A new handle on this communicator's error handler (``ERRORS_RETURN`` unless set)."""
    comm._alive("Get_errhandler")
    return Errhandler(comm._current_errhandler())


def Call_errhandler(comm, errorcode: int) -> None:
    """Run this communicator's error handler for ``errorcode`` (``ERRORS_RETURN``:
    nothing happens)."""
    comm._alive("Call_errhandler")
    call_errhandler(comm, comm._current_errhandler(), errorcode, comm._abort_on_error)


def Set_info(comm, info: Info) -> None:
    """Keep ``info`` as this communicator's hints. The keys ``minimpi_<collective>`` (an
    algorithm name, or ``auto``) and ``minimpi_cost_<field>`` (``minimpi_cost_alpha``...)
    change how its collectives choose from the next call on; like ``Set_info`` in MPI it
    is collective: every member must pass the same of these, or members could choose
    differently (a ``CollectiveMismatchError`` names it then)."""
    kept = info.Dup() if info else Info.Create()
    hints = {key: kept.Get(key) for key in kept}
    settings = comm.__dict__.get("_settings")
    if settings is not None:
        new = settings.with_hints(hints, f"rank {comm.rank}: Set_info")
        if new != settings:
            comm._settings = new
            if comm._plan is not None:      # (a new plan takes the shared segment over)
                comm._plan = comm._plan.with_hints(hints, f"rank {comm.rank}: Set_info")
    comm._attrs["__info__"] = kept


def Get_info(comm) -> Info:
    return comm._attrs.get("__info__", Info.Create()).Dup()


def Dup_with_info(comm, info: Info) -> Any:
    """``Dup`` whose new communicator keeps ``info`` as its hints."""
    return Dup(comm, info)


# -- dynamic processes (minimpi/dynamic installs them: set_dynamic_calls) ---------------
def Spawn(comm, command: Any, args: Any = None, maxprocs: int = 1, info: Any = None,
          root: int = 0, errcodes: Optional[list] = None) -> Any:
    """Start ``maxprocs`` processes of ``command args`` (collective; only ``root``'s
    arguments count) and return the intercommunicator to them."""
    return _dynamic("spawn", "Intracomm.Spawn")(comm, command, args, maxprocs, info,
                                                 root, errcodes)


def Spawn_multiple(comm, command: Any, args: Any = None, maxprocs: Any = None,
                   info: Any = None, root: int = 0, errcodes: Optional[list] = None) -> Any:
    """As ``Spawn`` for several commands at once: one new job, one intercommunicator."""
    return _dynamic("spawn_multiple", "Intracomm.Spawn_multiple")(
        comm, command, args, maxprocs, info, root, errcodes)


def Accept(comm, port_name: str, info: Any = None, root: int = 0) -> Any:
    """Wait (collective) for a group that calls ``Connect`` on ``port_name``; the
    intercommunicator to it."""
    return _dynamic("accept", "Intracomm.Accept")(comm, port_name, info, root)


def Connect(comm, port_name: str, info: Any = None, root: int = 0) -> Any:
    """Join (collective) the group that calls ``Accept`` on ``port_name``."""
    return _dynamic("connect", "Intracomm.Connect")(comm, port_name, info, root)


def Join(cls, fd: int) -> Any:
    """The intercommunicator between two processes connected by socket ``fd``."""
    return _dynamic("join", "Comm.Join")(fd)


def Disconnect(comm) -> None:
    """Wait for the communicator's pending messages, then free it (an intracommunicator
    has no other processes' connection to wait for: as ``Free``)."""
    Free(comm)


def Get_remote_group(comm) -> Any:
    """Only an intercommunicator has a remote group: ``CommError`` (MPI_ERR_COMM)."""
    raise CommError(f"rank {comm.rank}: Get_remote_group on {comm.name}: an "
                    f"intracommunicator has no remote group (MPI_ERR_COMM)")


def Get_remote_size(comm) -> int:
    """Only an intercommunicator has a remote group: ``CommError`` (MPI_ERR_COMM)."""
    raise CommError(f"rank {comm.rank}: Get_remote_size on {comm.name}: an "
                    f"intracommunicator has no remote group (MPI_ERR_COMM)")


def Get_topology(comm) -> int:
    """``MPI.CART``, ``MPI.GRAPH``, ``MPI.DIST_GRAPH``, or ``MPI.UNDEFINED`` (none)."""
    comm._alive("Get_topology")
    for attr, kind in (("_dims", CART), ("_index", GRAPH), ("_sources", DIST_GRAPH)):
        if attr in comm.__dict__:     # any handle on a topology communicator
            return kind
    return UNDEFINED
