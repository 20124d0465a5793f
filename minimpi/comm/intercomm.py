"""Intercommunicators: the operations of ``Intercomm`` (a communicator between two
disjoint groups of processes) and how one is made.

An :class:`Intercomm` holds two endpoints (:class:`~minimpi.p2p.endpoint.Endpoint`):

* ``_ep``, over the **remote** group, with this process's rank in its **own** group: so
  ``Send(dest=j)`` goes to rank j of the remote group, and a message carries the sender's
  rank in its own group - exactly MPI's intercommunicator addressing, with no change to the
  engine. Its two contexts carry point-to-point messages and the collectives' traffic
  between the groups.
* ``_local_endpoint``, an ordinary endpoint over the local group (two more contexts): the steps of a
  collective that stay inside one group (:mod:`minimpi.coll.twogroups`).

So an intercommunicator takes four consecutive context ids, the same in both groups: each
process proposes its lowest free id, each group gathers its members' proposals at its
leader, the two leaders swap the maxima and each group learns the larger one, which is free
in every process of both groups. ``Create_intercomm`` does this through ``local_comm``'s own
collectives and one exchange between the leaders over ``peer_comm`` (``tag``); ``Dup``,
``Split``, ``Create`` and ``Merge`` through an exchange over the intercommunicator itself
(:func:`~minimpi.coll.twogroups.exchange_leaders`).
"""
from __future__ import annotations

from typing import Any, List, Sequence, Tuple

from ..constants import UNDEFINED
from ..data import serialization
from ..data.cint import as_int
from ..errors import ArgumentError, CommError, RankError
from ..p2p.endpoint import Endpoint
from ..p2p.request import CompletedRequest
from ..transports.frames import F_OBJECT
from .group import Group
from .null import comm_null

#: context ids an intercommunicator takes: inter p2p, inter collectives, local p2p, local
#: collectives
CONTEXTS = 4


# -- communicator management ---------------------------------------------------------
def Dup(comm, info: Any = None) -> Any:
    """A new intercommunicator between the same two groups (collective over both)."""
    comm._alive("Dup")
    engine = comm._ep.engine
    mine, theirs = comm._agree(engine.free_context(), "Dup")
    context = max(mine + theirs)
    engine.claim_contexts(context, CONTEXTS)
    new = comm._derived(comm._local_endpoint.group, comm._ep.group, comm.rank, context,
                        f"{comm.name}.dup")
    comm._inherit_into(new)
    if info:
        new.Set_info(info)
    return new


def Idup(comm, info: Any = None) -> Tuple[Any, Any]:
    """As ``Dup`` (agreed at the call, as minimpi's ``Intracomm.Idup``); the request is
    already complete."""
    return Dup(comm, info), CompletedRequest()


def Split(comm, color: int = 0, key: int = 0) -> Any:
    """Split both groups by ``color``: the members of one color in each group form a new
    intercommunicator (ordered by ``key``, then old rank); ``MPI.UNDEFINED``, or a color
    with no member in the other group, gives ``COMM_NULL``."""
    comm._alive("Split")
    try:
        color, key = as_int(color), as_int(key)   # as mpi4py's C ints: floats truncated
    except (TypeError, ValueError, OverflowError):
        raise ArgumentError(f"rank {comm.rank}: Split(color={color!r}, key={key!r}) on "
                            f"{comm.name}: color and key must be ints") from None
    if color < 0 and color != UNDEFINED:
        raise ArgumentError(f"rank {comm.rank}: Split(color={color}) on {comm.name}: "
                            f"color must be >= 0 or MPI.UNDEFINED")
    engine = comm._ep.engine
    mine, theirs = comm._agree((color, key, engine.free_context()), "Split")
    context = max(e[2] for e in mine + theirs)
    engine.claim_contexts(context, CONTEXTS)
    if color == UNDEFINED:
        return comm_null()

    def members(entries: Sequence[Tuple[int, int, int]], group: Sequence[int]) -> List[int]:
        ranked = sorted((k, r) for r, (c, k, _) in enumerate(entries) if c == color)
        return [group[r] for _, r in ranked]

    local = members(mine, comm._local_endpoint.group)
    remote = members(theirs, comm._ep.group)
    if not remote:
        return comm_null()
    me = comm._local_endpoint.group[comm.rank]
    return comm._derived(local, remote, local.index(me), context,
                         f"{comm.name}.split({color})")


def Create(comm, group: Group) -> Any:
    """An intercommunicator between ``group`` (a subgroup of the local group) and the
    subgroup the other side passes; ``COMM_NULL`` where this process is not in it."""
    comm._alive("Create")
    outside = [w for w in group.world_ranks if w not in comm._local_endpoint.group]
    if outside:
        raise CommError(f"rank {comm.rank}: Create on {comm.name}: the group holds "
                        f"processes (world ranks {outside}) outside the local group")
    me = comm._local_endpoint.group[comm.rank]
    ranks = list(group.world_ranks)
    new = Split(comm, 0 if me in ranks else UNDEFINED, ranks.index(me) if me in ranks else 0)
    if new:
        new._ep.name = new._local_endpoint.name = f"{comm.name}.create"
    return new


def Create_group(comm, group: Group, tag: int = 0) -> Any:
    """MPI defines ``Create_group`` for intracommunicators only: a ``CommError``
    (``Create`` is the intercommunicator form)."""
    raise CommError(f"rank {comm.rank}: Create_group on {comm.name}: MPI defines it for "
                    f"intracommunicators only; use Create (collective over both groups), "
                    f"or Merge first")


def Create_intercomm(comm, *args: Any, **kwargs: Any) -> Any:
    """MPI builds intercommunicators from intracommunicators only: a ``CommError``."""
    raise CommError(f"rank {comm.rank}: Create_intercomm on {comm.name}: call it on an "
                    f"intracommunicator (this one's local group: Merge, or the "
                    f"communicator it was made from)")


def Create_cart(comm, dims: Sequence[int], periods: Any = None, reorder: bool = False) -> Any:
    """Topologies need an intracommunicator (MPI): a ``CommError``; Merge first."""
    raise CommError(f"rank {comm.rank}: Create_cart on {comm.name}: a topology needs an "
                    f"intracommunicator; Merge the intercommunicator first")


def Split_type(comm, split_type: int, key: int = 0, info: Any = None) -> Any:
    """Split both groups by host (``COMM_TYPE_SHARED`` and the guided kinds) or give
    ``COMM_NULL`` (``MPI.UNDEFINED``); collective over both groups."""
    comm._alive("Split_type")
    split_type = as_int(split_type)
    color = UNDEFINED if split_type == UNDEFINED else comm._local_endpoint.hosts[comm.rank]
    return Split(comm, color, key)


def Merge(comm, high: bool = False) -> Any:
    """One intracommunicator of both groups: the group that passes ``high=False`` first
    (when both pass the same, the group holding the lower world rank first)."""
    comm._alive("Merge")
    engine = comm._ep.engine
    mine, theirs = comm._agree((bool(high), engine.free_context()), "Merge")
    context = max(e[1] for e in mine + theirs)
    engine.claim_contexts(context, 2)
    my_high, their_high = mine[0][0], theirs[0][0]
    if my_high != their_high:
        first_is_mine = not my_high
    else:
        first_is_mine = min(comm._local_endpoint.group) < min(comm._ep.group)
    ordered = list(comm._local_endpoint.group) + list(comm._ep.group) if first_is_mine \
        else list(comm._ep.group) + list(comm._local_endpoint.group)
    me = comm._local_endpoint.group[comm.rank]
    return comm._derive(ordered, ordered.index(me), context, f"{comm.name}.merge")


def Free(comm) -> None:
    """Release the intercommunicator (both of its endpoints)."""
    comm._alive("Free")
    try:
        comm._release_attributes()
    finally:
        comm._freed = True
        comm._ep.release()
        comm._local_endpoint.release()


def Disconnect(comm) -> None:
    """As ``Free``."""
    Free(comm)






class PeerSwap:
    """The leaders' exchange of ``Create_intercomm``: over ``peer_comm`` with the user's tag."""

    def __init__(self, peer_comm: Any, remote_leader: int, tag: int) -> None:
        self.peer_comm, self.remote_leader, self.tag = peer_comm, remote_leader, tag

    def __call__(self, value: Any) -> Any:
        return self.peer_comm.sendrecv(value, self.remote_leader, self.tag, None,
                                       self.remote_leader, self.tag)


class WorldSwap:
    """The leaders' exchange of ``Create_from_groups``: on COMM_WORLD's collective context."""

    def __init__(self, world: Endpoint, remote_leader: int, tag: int) -> None:
        self.world, self.remote_leader, self.tag = world, remote_leader, tag

    def __call__(self, value: Any) -> Any:
        ep, call = self.world, "Intercomm.Create_from_groups"
        req = ep.irecv(None, self.remote_leader, self.tag, call, ep.coll_context)
        payload, nbytes = serialization.dumps(value)
        sent = ep.isend(payload, nbytes, self.remote_leader, self.tag, F_OBJECT, call,
                        ep.coll_context)
        ep.engine.wait_all([req, sent])
        sent.wait()
        req.wait()
        return serialization.loads(req.buffer)


def build_intercomm(local_comm: Any, local_leader: int, swap: Any, call: str) -> Any:
    """The intercommunicator of ``local_comm``'s group and the group whose leader ``swap``
    exchanges with (collective over ``local_comm``). ``swap`` is an error text at a leader
    whose arguments were wrong: every member then raises it, none waits."""
    engine = local_comm._ep.engine
    me = local_comm.world_ranks[local_comm.rank]
    proposals = local_comm.allgather(engine.free_context())
    outcome = None
    if local_comm.rank == local_leader:
        if isinstance(swap, str):
            outcome = ("error", swap)
        else:
            try:
                outcome = ("ok", swap((tuple(local_comm.world_ranks), max(proposals))))
            except Exception as exc:    # tell the group, then raise it here too
                local_comm.bcast(("error", f"{type(exc).__name__}: {exc}"), root=local_leader)
                raise
    kind, value = local_comm.bcast(outcome, root=local_leader)
    if kind == "error":
        raise CommError(f"rank {local_comm.rank}: {call}: the local leader (rank "
                        f"{local_leader}) failed: {value}")
    remote, their_max = value
    overlap = set(remote) & set(local_comm.world_ranks)
    if overlap:
        raise CommError(f"rank {local_comm.rank}: {call}: the two groups share processes "
                        f"(world ranks {sorted(overlap)}); an intercommunicator needs disjoint "
                        f"groups")
    context = max(max(proposals), their_max)
    engine.claim_contexts(context, CONTEXTS)
    name = f"{local_comm.name}.inter"
    return local_comm._derive_inter(local_comm.world_ranks, remote,
                            list(local_comm.world_ranks).index(me), context, name)


def create_intercomm(local_comm: Any, local_leader: int, peer_comm: Any,
                     remote_leader: int, tag: int = 0) -> Any:
    """``Intracomm.Create_intercomm``: collective over ``local_comm``; its rank
    ``local_leader`` and ``peer_comm``'s rank ``remote_leader`` (the other group's leader)
    exchange the groups and context proposals over ``peer_comm`` with ``tag``."""
    call = "Create_intercomm"
    local_comm._alive(call)
    rank = local_comm.rank
    leaders = []
    for arg, value in (("local_leader", local_leader), ("remote_leader", remote_leader)):
        try:   # as mpi4py's C int arguments: numpy integers, floats truncated
            leaders.append(as_int(value))
        except (TypeError, ValueError, OverflowError):
            raise RankError(f"rank {rank}: {call}({arg}={value!r}): expected an int") from None
    local_leader, remote_leader = leaders
    if not 0 <= local_leader < local_comm.size:
        raise RankError(f"rank {rank}: {call}(local_leader={local_leader}) on "
                        f"{local_comm.name}: expected 0..{local_comm.size - 1}")
    swap: Any = None
    if rank == local_leader:
        if not callable(getattr(peer_comm, "sendrecv", None)) or not peer_comm:
            swap = f"the local leader needs a live peer_comm (got {peer_comm!r:.60})"
        elif not 0 <= remote_leader < peer_comm.size:
            swap = (f"remote_leader={remote_leader} on {peer_comm.name}: expected "
                    f"0..{peer_comm.size - 1}")
        elif _tag_or_none(tag) is None:
            swap = f"tag={tag!r}: expected an int >= 0"
        else:
            swap = PeerSwap(peer_comm, remote_leader, _tag_or_none(tag))
    return build_intercomm(local_comm, local_leader, swap, call)


def _tag_or_none(tag: Any) -> Any:
    """``tag`` as a non-negative int read as mpi4py reads its C int arguments (floats
    truncated), or None if it is not one."""
    try:
        value = as_int(tag)
    except (TypeError, ValueError, OverflowError):
        return None
    return value if value >= 0 else None
