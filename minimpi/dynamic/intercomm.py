"""Intercommunicators: a communicator between two disjoint groups of processes.

An :class:`Intercomm` holds two endpoints (:class:`~minimpi.p2p.endpoint.Endpoint`):

* ``_ep``, over the **remote** group, with this process's rank in its **own** group: so
  ``Send(dest=j)`` goes to rank j of the remote group, and a message carries the sender's
  rank in its own group - exactly MPI's intercommunicator addressing, with no change to the
  engine. Its two contexts carry point-to-point messages and the collectives' traffic
  between the groups.
* ``_local_endpoint``, an ordinary endpoint over the local group (two more contexts): the steps of a
  collective that stay inside one group (:mod:`minimpi.coll.intercomm`).

So an intercommunicator takes four consecutive context ids, the same in both groups: each
process proposes its lowest free id, each group gathers its members' proposals at its
leader, the two leaders swap the maxima and each group learns the larger one, which is free
in every process of both groups. ``Create_intercomm`` does this through ``local_comm``'s own
collectives and one exchange between the leaders over ``peer_comm`` (``tag``); ``Dup``,
``Split``, ``Create`` and ``Merge`` through an exchange over the intercommunicator itself
(:func:`~minimpi.coll.intercomm.inter_exchange`).
"""
from __future__ import annotations

import zlib
from typing import Any, List, Sequence, Tuple

from ..coll.intercomm import inter_exchange
from ..coll.slots import create_group_tag
from ..comm.communicator import COMM_NULL, Comm, Intracomm, claim_contexts, free_context
from ..comm.communicator import Intercomm as _IntercommHandle
from ..comm.group import Group, group_of
from ..constants import CONGRUENT, IDENT, SIMILAR, UNDEFINED, UNEQUAL
from ..data import serialization
from ..data.cint import as_int
from ..errors import ArgumentError, CommError, RankError
from ..p2p.endpoint import Endpoint
from ..p2p.request import CompletedRequest
from ..transports.frames import F_OBJECT
from .collectives import InterCollectiveMethods

#: context ids an intercommunicator takes: inter p2p, inter collectives, local p2p, local
#: collectives
CONTEXTS = 4


class Intercomm(InterCollectiveMethods, _IntercommHandle):
    """``MPI.Intercomm``: point-to-point and collectives between two disjoint groups.

    ``Get_rank``/``Get_size``/``Get_group`` describe the local group, ``Get_remote_size``/
    ``Get_remote_group`` the other one; ranks given to ``Send``/``Recv`` (and collective
    roots) are ranks of the remote group. ``MPI.Intercomm()`` is a null handle.
    """

    @classmethod
    def _build(cls, engine: Any, local: Sequence[int], remote: Sequence[int], rank: int,
               context: int, name: str) -> "Intercomm":
        comm = cls(engine, remote, rank, context, name)
        comm._local_endpoint = Endpoint(engine, local, rank, context + 2, f"{name}(local group)")
        return comm

    # -- the two groups -----------------------------------------------------------------
    @property
    def size(self) -> int:
        return self.Get_size()

    def Get_size(self) -> int:
        """The size of the local group (0 for a null handle)."""
        return self.__dict__.get("_local_endpoint", self._ep).size

    @property
    def remote_size(self) -> int:
        return self._ep.size

    def Get_remote_size(self) -> int:
        """The size of the remote group."""
        self._alive("Get_remote_size")
        return self._ep.size

    def Get_group(self) -> Group:
        """The local group."""
        self._alive("Get_group")
        return group_of(self._local_endpoint.group, self._local_endpoint.group[self.rank], self._ep.engine)

    def Get_remote_group(self) -> Group:
        """The remote group (this process is not a member)."""
        self._alive("Get_remote_group")
        return group_of(self._ep.group, None, self._ep.engine)

    @property
    def group(self) -> Group:
        return self.Get_group()

    @property
    def remote_group(self) -> Group:
        return self.Get_remote_group()

    def __repr__(self) -> str:
        if self.__dict__.get("_null"):
            return "<Intercomm null (== MPI.COMM_NULL)>"
        return (f"<Intercomm {self.name} rank {self.rank} of {self.size}, remote group of "
                f"{self.remote_size}>")

    def Compare(self, other: Comm) -> int:
        """``IDENT`` (same communicator), ``CONGRUENT`` (both groups equal, in order),
        ``SIMILAR`` (both groups hold the same processes) or ``UNEQUAL`` (an
        intracommunicator is always UNEQUAL)."""
        if other is self or (isinstance(other, Comm) and vars(other) is vars(self)):
            return IDENT
        if not isinstance(other, Intercomm) or not other or not self:
            return UNEQUAL
        mine, theirs = (self._local_endpoint.group, self._ep.group), (other._local_endpoint.group, other._ep.group)
        if mine == theirs:
            return CONGRUENT
        if all(sorted(a) == sorted(b) for a, b in zip(mine, theirs)):
            return SIMILAR
        return UNEQUAL

    # -- agreement over the intercommunicator ----------------------------------------------
    def _agree(self, value: Any, what: str) -> Tuple[List[Any], List[Any]]:
        """Every member's ``value``, of both groups (a collective of both groups)."""
        return self._inter_collective(
            "exchange", what, lambda: lambda remote, local: inter_exchange(remote, local, value),
            objects=True)

    def _derived(self, local: Sequence[int], remote: Sequence[int], rank: int, context: int,
                 name: str) -> "Intercomm":
        comm = Intercomm._build(self._ep.engine, local, remote, rank, context, name)
        cls = type(self)
        if cls is not Intercomm:     # a user subclass keeps its type (as Intracomm.Dup)
            same = object.__new__(cls)
            same.__dict__ = comm.__dict__
            comm = same
        return comm

    # -- communicator management ---------------------------------------------------------
    def Dup(self, info: Any = None) -> "Intercomm":
        """A new intercommunicator between the same two groups (collective over both)."""
        self._alive("Dup")
        engine = self._ep.engine
        mine, theirs = self._agree(free_context(engine), "Dup")
        context = max(mine + theirs)
        claim_contexts(engine, context, CONTEXTS)
        comm = self._derived(self._local_endpoint.group, self._ep.group, self.rank, context,
                             f"{self.name}.dup")
        self._inherit_into(comm)
        if info:
            comm.Set_info(info)
        return comm

    Clone = Dup

    def Idup(self, info: Any = None) -> Tuple["Intercomm", Any]:
        """As ``Dup`` (agreed at the call, as minimpi's ``Intracomm.Idup``); the request is
        already complete."""
        return self.Dup(info), CompletedRequest()

    def Split(self, color: int = 0, key: int = 0) -> Any:
        """Split both groups by ``color``: the members of one color in each group form a new
        intercommunicator (ordered by ``key``, then old rank); ``MPI.UNDEFINED``, or a color
        with no member in the other group, gives ``COMM_NULL``."""
        self._alive("Split")
        try:
            color, key = as_int(color), as_int(key)   # as mpi4py's C ints: floats truncated
        except (TypeError, ValueError, OverflowError):
            raise ArgumentError(f"rank {self.rank}: Split(color={color!r}, key={key!r}) on "
                                f"{self.name}: color and key must be ints") from None
        if color < 0 and color != UNDEFINED:
            raise ArgumentError(f"rank {self.rank}: Split(color={color}) on {self.name}: "
                                f"color must be >= 0 or MPI.UNDEFINED")
        engine = self._ep.engine
        mine, theirs = self._agree((color, key, free_context(engine)), "Split")
        context = max(e[2] for e in mine + theirs)
        claim_contexts(engine, context, CONTEXTS)
        if color == UNDEFINED:
            return COMM_NULL

        def members(entries: Sequence[Tuple[int, int, int]], group: Sequence[int]) -> List[int]:
            ranked = sorted((k, r) for r, (c, k, _) in enumerate(entries) if c == color)
            return [group[r] for _, r in ranked]

        local = members(mine, self._local_endpoint.group)
        remote = members(theirs, self._ep.group)
        if not remote:
            return COMM_NULL
        me = self._local_endpoint.group[self.rank]
        return self._derived(local, remote, local.index(me), context,
                             f"{self.name}.split({color})")

    def Create(self, group: Group) -> Any:
        """An intercommunicator between ``group`` (a subgroup of the local group) and the
        subgroup the other side passes; ``COMM_NULL`` where this process is not in it."""
        self._alive("Create")
        outside = [w for w in group.world_ranks if w not in self._local_endpoint.group]
        if outside:
            raise CommError(f"rank {self.rank}: Create on {self.name}: the group holds "
                            f"processes (world ranks {outside}) outside the local group")
        me = self._local_endpoint.group[self.rank]
        ranks = list(group.world_ranks)
        comm = self.Split(0 if me in ranks else UNDEFINED, ranks.index(me) if me in ranks else 0)
        if comm:
            comm._ep.name = comm._local_endpoint.name = f"{self.name}.create"
        return comm

    def Create_group(self, group: Group, tag: int = 0) -> Any:
        """MPI defines ``Create_group`` for intracommunicators only: a ``CommError``
        (``Create`` is the intercommunicator form)."""
        raise CommError(f"rank {self.rank}: Create_group on {self.name}: MPI defines it for "
                        f"intracommunicators only; use Create (collective over both groups), "
                        f"or Merge first")

    def Create_intercomm(self, *args: Any, **kwargs: Any) -> Any:
        """MPI builds intercommunicators from intracommunicators only: a ``CommError``."""
        raise CommError(f"rank {self.rank}: Create_intercomm on {self.name}: call it on an "
                        f"intracommunicator (this one's local group: Merge, or the "
                        f"communicator it was made from)")

    def Create_cart(self, dims: Sequence[int], periods: Any = None, reorder: bool = False) -> Any:
        """Topologies need an intracommunicator (MPI): a ``CommError``; Merge first."""
        raise CommError(f"rank {self.rank}: Create_cart on {self.name}: a topology needs an "
                        f"intracommunicator; Merge the intercommunicator first")

    def Split_type(self, split_type: int, key: int = 0, info: Any = None) -> Any:
        """Split both groups by host (``COMM_TYPE_SHARED`` and the guided kinds) or give
        ``COMM_NULL`` (``MPI.UNDEFINED``); collective over both groups."""
        self._alive("Split_type")
        split_type = as_int(split_type)
        color = UNDEFINED if split_type == UNDEFINED else self._local_endpoint.hosts[self.rank]
        return self.Split(color, key)

    def Merge(self, high: bool = False) -> Intracomm:
        """One intracommunicator of both groups: the group that passes ``high=False`` first
        (when both pass the same, the group holding the lower world rank first)."""
        self._alive("Merge")
        engine = self._ep.engine
        mine, theirs = self._agree((bool(high), free_context(engine)), "Merge")
        context = max(e[1] for e in mine + theirs)
        claim_contexts(engine, context, 2)
        my_high, their_high = mine[0][0], theirs[0][0]
        if my_high != their_high:
            first_is_mine = not my_high
        else:
            first_is_mine = min(self._local_endpoint.group) < min(self._ep.group)
        ordered = list(self._local_endpoint.group) + list(self._ep.group) if first_is_mine \
            else list(self._ep.group) + list(self._local_endpoint.group)
        me = self._local_endpoint.group[self.rank]
        return Intracomm(engine, ordered, ordered.index(me), context, f"{self.name}.merge")

    def Free(self) -> None:
        """Release the intercommunicator (both of its endpoints)."""
        self._alive("Free")
        try:
            self._release_attributes()
        finally:
            self._freed = True
            self._ep.release()
            self._local_endpoint.release()

    def Disconnect(self) -> None:
        """As ``Free``."""
        self.Free()

    @classmethod
    def Create_from_groups(cls, local_group: Group, local_leader: int, remote_group: Group,
                           remote_leader: int, stringtag: str = "org.mpi4py", info: Any = None,
                           errhandler: Any = None) -> "Intercomm":
        """An intercommunicator from two disjoint groups, without a parent communicator
        (MPI 4): collective over both groups' members, who pass the same ``stringtag``."""
        if not isinstance(stringtag, str):
            raise TypeError(f"Intercomm.Create_from_groups: stringtag must be a str, got "
                            f"{type(stringtag).__name__}")
        local_comm = Intracomm.Create_from_group(local_group, stringtag)
        engine = local_comm._ep.engine
        remote = list(remote_group.world_ranks)
        local_leader, remote_leader = as_int(local_leader), as_int(remote_leader)
        if not 0 <= local_leader < local_comm.size:
            raise RankError(f"rank {local_comm.rank}: Intercomm.Create_from_groups("
                            f"local_leader={local_leader}): expected 0..{local_comm.size - 1}")
        if not 0 <= remote_leader < len(remote):
            raise RankError(f"rank {local_comm.rank}: Intercomm.Create_from_groups("
                            f"remote_leader={remote_leader}): expected 0..{len(remote) - 1}")
        # The leaders meet on COMM_WORLD's collective context with a tag of their own (never
        # a collective call's, never a user's message).
        world = Intracomm(engine, range(engine.size), engine.rank, 0, "COMM_WORLD")
        tag = create_group_tag((zlib.crc32(stringtag.encode()) + 1) & 0x3FFFFFFF)
        swap = _WorldSwap(world._ep, remote[remote_leader], tag)
        comm = _create(local_comm, local_leader, swap, "Intercomm.Create_from_groups")
        local_comm.Free()
        if info:
            comm.Set_info(info)
        if cls is not Intercomm:
            same = object.__new__(cls)
            same.__dict__ = comm.__dict__
            comm = same
        return comm




class _PeerSwap:
    """The leaders' exchange of ``Create_intercomm``: over ``peer_comm`` with the user's tag."""

    def __init__(self, peer_comm: Comm, remote_leader: int, tag: int) -> None:
        self.peer_comm, self.remote_leader, self.tag = peer_comm, remote_leader, tag

    def __call__(self, value: Any) -> Any:
        return self.peer_comm.sendrecv(value, self.remote_leader, self.tag, None,
                                       self.remote_leader, self.tag)


class _WorldSwap:
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


def _create(local_comm: Intracomm, local_leader: int, swap: Any, call: str) -> Intercomm:
    """The intercommunicator of ``local_comm``'s group and the group whose leader ``swap``
    exchanges with (collective over ``local_comm``). ``swap`` is an error text at a leader
    whose arguments were wrong: every member then raises it, none waits."""
    engine = local_comm._ep.engine
    me = local_comm.world_ranks[local_comm.rank]
    proposals = local_comm.allgather(free_context(engine))
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
    claim_contexts(engine, context, CONTEXTS)
    name = f"{local_comm.name}.inter"
    return Intercomm._build(engine, local_comm.world_ranks, remote,
                            list(local_comm.world_ranks).index(me), context, name)


def create_intercomm(local_comm: Intracomm, local_leader: int, peer_comm: Comm,
                     remote_leader: int, tag: int = 0) -> Intercomm:
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
        if not isinstance(peer_comm, Comm) or not peer_comm:
            swap = f"the local leader needs a live peer_comm (got {peer_comm!r:.60})"
        elif not 0 <= remote_leader < peer_comm.size:
            swap = (f"remote_leader={remote_leader} on {peer_comm.name}: expected "
                    f"0..{peer_comm.size - 1}")
        elif _tag_or_none(tag) is None:
            swap = f"tag={tag!r}: expected an int >= 0"
        else:
            swap = _PeerSwap(peer_comm, remote_leader, _tag_or_none(tag))
    return _create(local_comm, local_leader, swap, call)


def _tag_or_none(tag: Any) -> Any:
    """``tag`` as a non-negative int read as mpi4py reads its C int arguments (floats
    truncated), or None if it is not one."""
    try:
        value = as_int(tag)
    except (TypeError, ValueError, OverflowError):
        return None
    return value if value >= 0 else None
