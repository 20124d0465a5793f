"""Process groups (``MPI.Group``) and communicators made from them (``Create``, ``Create_group``).

A group is an ordered tuple of *world* ranks plus this process's position in it
(``MPI.UNDEFINED`` when it is not a member). Every group operation is local.

``Comm.Create(group)`` is collective over the parent communicator: the ranks exchange the
groups they pass (which may differ when disjoint: each becomes a communicator ordered as its
group is; non-members get ``COMM_NULL``). ``Comm.Create_group(group, tag)`` is
collective over the group's members only: they agree on a fresh context id among themselves
(:func:`create_group`), and the other ranks of the parent take no part.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

from ..coll.slots import create_group_tag
from ..constants import IDENT, PROC_NULL, SIMILAR, UNDEFINED, UNEQUAL
from ..data.cint import as_int
from ..errors import ERR_GROUP, MinimpiError, RankError
from .handle_types import IntHandles
from .null import comm_null


class GroupError(MinimpiError):
    error_class = ERR_GROUP


class Group(IntHandles):
    """An ordered set of processes (``MPI.Group``)."""

    __slots__ = ("_members", "_me", "_null", "_engine", "_int_handle", "__weakref__")

    def __init__(self, group: Optional["Group"] = None) -> None:
        # mpi4py: Group() is GROUP_NULL, Group(g) another handle to g
        if group is not None and not isinstance(group, Group):
            raise TypeError(f"MPI.Group({group!r:.40}): expected a group or nothing")
        self._members: Tuple[int, ...] = group._members if group is not None else ()
        self._me = group._me if group is not None else UNDEFINED
        self._null = group._null if group is not None else True
        #: the engine of the process the group was made in (Intracomm.Create_from_group)
        self._engine = group._engine if group is not None else None

    @classmethod
    def _of(cls, members: Sequence[int], me_world: Optional[int], engine: Any = None) -> "Group":
        g = cls.__new__(cls)
        g._members = tuple(members)
        g._me = g._members.index(me_world) if me_world in g._members else UNDEFINED
        g._null = False
        g._engine = engine
        return g

    def _new(self, members: Sequence[int]) -> "Group":
        me = self._members[self._me] if self._me != UNDEFINED else None
        return Group._of(members, me, self._engine)

    def _check(self, call: str) -> None:
        if self._null:
            raise GroupError(f"Group.{call}: the group is MPI.GROUP_NULL (or was freed)")

    # -- facts ---------------------------------------------------------------------------
    def Get_size(self) -> int:
        self._check("Get_size")
        return len(self._members)

    def Get_rank(self) -> int:
        self._check("Get_rank")
        return self._me

    size = property(Get_size)
    rank = property(Get_rank)

    @property
    def world_ranks(self) -> Tuple[int, ...]:
        return self._members

    def __bool__(self) -> bool:
        return not self._null

    def __reduce__(self) -> Any:
        # as mpi4py: the predefined groups pickle by name (to the very same object), another
        # handle on them to a new equal handle; other groups name processes of this job
        # only and are refused
        if self is GROUP_NULL:
            return "GROUP_NULL"
        if self is GROUP_EMPTY:
            return "GROUP_EMPTY"
        if self._null:
            return (type(self), (GROUP_NULL,))
        if not self._members:
            return (type(self), (GROUP_EMPTY,))
        raise ValueError(f"cannot pickle {self!r}: only MPI.GROUP_NULL and MPI.GROUP_EMPTY "
                         f"can be pickled (a group names processes of this job only)")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Group):
            return NotImplemented
        if self._null or other._null:
            return self._null and other._null
        return self._members == other._members

    __hash__ = None  # type: ignore[assignment]   (handles are unhashable, as mpi4py's)

    def __repr__(self) -> str:
        if self._null:
            return "MPI.GROUP_NULL"
        if not self._members:
            return "MPI.GROUP_EMPTY"
        return f"<Group of world ranks {list(self._members)}, rank {self._me}>"

    # -- rank checks ---------------------------------------------------------------------
    def _ranks(self, ranks: Sequence[int], call: str) -> List[int]:
        ranks = [_rank_arg(r, call, "ranks") for r in ranks]
        n = len(self._members)
        bad = [r for r in ranks if not 0 <= r < n]
        if bad:
            raise RankError(f"Group.{call}: ranks {bad} are not in this group of size {n} "
                            f"(valid: 0..{n - 1})")
        if len(set(ranks)) != len(ranks):
            raise RankError(f"Group.{call}: ranks {ranks} name a process more than once")
        return ranks

    # -- constructors --------------------------------------------------------------------
    def Incl(self, ranks: Sequence[int]) -> "Group":
        """The processes ``ranks`` of this group, in that order."""
        self._check("Incl")
        return self._new([self._members[r] for r in self._ranks(ranks, "Incl")])

    def Excl(self, ranks: Sequence[int]) -> "Group":
        """This group without the processes ``ranks`` (order kept)."""
        self._check("Excl")
        drop = set(self._ranks(ranks, "Excl"))
        return self._new([w for i, w in enumerate(self._members) if i not in drop])

    def Range_incl(self, ranges: Sequence[Tuple[int, int, int]]) -> "Group":
        """``Incl`` of the ranks in the ``(first, last, stride)`` triplets (``last`` included)."""
        self._check("Range_incl")
        return self.Incl(_expand_ranges(ranges, "Range_incl"))

    def Range_excl(self, ranges: Sequence[Tuple[int, int, int]]) -> "Group":
        """``Excl`` of the ranks in the ``(first, last, stride)`` triplets (``last`` included)."""
        self._check("Range_excl")
        return self.Excl(_expand_ranges(ranges, "Range_excl"))

    def Dup(self) -> "Group":
        self._check("Dup")
        return self._new(self._members)

    # Written as instance methods, these serve both mpi4py spellings: ``g1.Union(g2)``
    # (mpi4py 4) and ``MPI.Group.Union(g1, g2)`` (mpi4py 3 classmethods).
    def Union(self, group: "Group") -> "Group":
        """Members of this group in order, then those of ``group`` not in it."""
        self._check("Union")
        group._check("Union")
        first = set(self._members)
        return _with_me(list(self._members) + [w for w in group._members if w not in first],
                        self, group)

    def Intersection(self, group: "Group") -> "Group":
        """Members of this group (in its order) that are also in ``group``."""
        self._check("Intersection")
        group._check("Intersection")
        second = set(group._members)
        return _with_me([w for w in self._members if w in second], self, group)

    Intersect = Intersection     # mpi4py 4's alias

    @classmethod
    def Create_from_session_pset(cls, session: Any, pset_name: str) -> "Group":
        """The group of process set ``pset_name`` of ``session`` (``session.Create_group``;
        the sessions themselves are minimpi.runtime.session)."""
        if not hasattr(session, "Create_group"):
            raise TypeError(f"Group.Create_from_session_pset: expected an MPI.Session, got "
                            f"{type(session).__name__}")
        return session.Create_group(pset_name)

    def Difference(self, group: "Group") -> "Group":
        """Members of this group (in its order) that are not in ``group``."""
        self._check("Difference")
        group._check("Difference")
        second = set(group._members)
        return _with_me([w for w in self._members if w not in second], self, group)

    # -- relations -----------------------------------------------------------------------
    def Translate_ranks(group1, ranks: Optional[Sequence[int]] = None,
                        group: Optional["Group"] = None) -> List[int]:
        """The rank in ``group`` of each of ``ranks`` of this group (``UNDEFINED`` if absent).

        ``group1.Translate_ranks(ranks, group2)`` or ``MPI.Group.Translate_ranks(group1,
        ranks, group2)`` (mpi4py's keyword names: ``ranks``, ``group``); ``ranks=None``
        means every rank of ``group1``, ``group=None`` gives the ranks back unchanged.
        """
        group1._check("Translate_ranks")
        if ranks is None:
            ranks = range(len(group1._members))
        out = []
        for r in ranks:
            r = _rank_arg(r, "Translate_ranks", "ranks")
            if r == PROC_NULL:
                out.append(PROC_NULL)
                continue
            if not 0 <= r < len(group1._members):
                raise RankError(f"Group.Translate_ranks: rank {r} is not in group1 of size "
                                f"{len(group1._members)}")
            if group is None:
                out.append(r)
                continue
            w = group1._members[r]
            out.append(group._members.index(w) if w in group._members else UNDEFINED)
        return out

    def Compare(group1, group2: "Group") -> int:
        """``IDENT`` (same members, same order), ``SIMILAR`` (same members) or ``UNEQUAL``."""
        group1._check("Compare")
        group2._check("Compare")
        if group1._members == group2._members:
            return IDENT
        if set(group1._members) == set(group2._members):
            return SIMILAR
        return UNEQUAL

    def free(self) -> None:
        """``Free`` unless this is a null or predefined group (mpi4py 4)."""
        if not self._null and self is not GROUP_EMPTY:
            self.Free()

    def Free(self) -> None:
        self._check("Free")
        self._null = True
        self._members = ()
        self._me = UNDEFINED


def _rank_arg(value: Any, call: str, arg: str) -> int:
    """A rank of a group argument, read as mpi4py reads its C ints (numpy integers, floats
    truncated: ``Incl([1.0])`` is rank 1); RankError for anything else (``'1'``, None)."""
    try:
        return as_int(value)
    except (TypeError, ValueError, OverflowError):
        raise RankError(f"Group.{call}: {arg} holds {value!r:.40}, which is not an integer "
                        f"rank") from None


def _expand_ranges(ranges: Sequence[Tuple[int, int, int]], call: str) -> List[int]:
    """The ranks named by MPI range triplets ``(first, last, stride)``, ``last`` included
    (each read as mpi4py reads C ints: ``(0.0, 4.0, 2.0)`` is ``(0, 4, 2)``)."""
    out: List[int] = []
    for triplet in ranges:
        try:
            first, last, stride = (_rank_arg(v, call, "a range") for v in triplet)
        except ValueError:   # not three values (RankError is no ValueError)
            raise RankError(f"Group.{call}: range {triplet!r:.60} is not a (first, last, "
                            f"stride) triplet") from None
        if stride == 0:
            raise RankError(f"Group.{call}: range ({first}, {last}, {stride}) has stride 0")
        out.extend(range(first, last + (1 if stride > 0 else -1), stride))
    return out


def _with_me(members: List[int], *groups: Group) -> Group:
    for g in groups:
        if g._me != UNDEFINED:
            return g._new(members)
    return Group._of(members, None, next((g._engine for g in groups if g._engine), None))


GROUP_NULL = Group()
GROUP_EMPTY = Group._of((), None)


def group_of(members: Sequence[int], me_world: Optional[int], engine: Any = None) -> Group:
    """The group of these world ranks, in this order, seen from world rank ``me_world``
    (an intercommunicator's local and remote groups)."""
    return Group._of(members, me_world, engine)


# -- communicators from groups -------------------------------------------------------------
def comm_group(comm: Any) -> Group:
    return Group._of(comm._ep.group, comm._ep.group[comm.rank], comm._ep.engine)


def _check_subset(comm: Any, group: Group, call: str) -> None:
    group._check(call)
    outside = [w for w in group._members if w not in comm._ep.group]
    if outside:
        raise GroupError(f"rank {comm.rank}: {call}: the group holds processes (world ranks "
                         f"{outside}) that are not members of {comm.name}")


def create(comm: Any, group: Group) -> Any:
    """``Comm.Create``: collective over ``comm``; members get the new communicator.

    Ranks may pass different groups as long as those are disjoint (MPI 2.2): every group
    becomes its own communicator, as in MPICH and Open MPI. The members exchange the groups
    they passed (one small all-to-all), so each can check that the groups are the same or
    disjoint and every subset gets one context id, unused on all of ``comm``'s members.
    """
    comm._alive("Create")
    _check_subset(comm, group, "Create")
    me = comm._ep.group[comm.rank]
    mine = group._members if me in group._members else None
    entries = comm._exchange((mine, comm._free_context()), "Create")
    _check_disjoint(comm, [e[0] for e in entries])
    context = comm._agree_context([e[1] for e in entries])
    if mine is None:
        return comm_null()
    return comm._derive(mine, mine.index(me), context, f"{comm.name}.create")


def _check_disjoint(comm: Any, groups: Sequence[Optional[Tuple[int, ...]]]) -> None:
    """Every member of a group passed to ``Create`` passed that very group (else MPI's rule,
    "the groups are the same or disjoint", is broken: a clear error on every rank)."""
    world = comm._ep.group
    passed = {world[r]: g for r, g in enumerate(groups) if g is not None}
    for w, g in passed.items():
        for other in g:
            if passed.get(other) != g:
                raise GroupError(
                    f"rank {comm.rank}: Create: world rank {w} passed the group of world ranks "
                    f"{list(g)} but its member {other} passed "
                    f"{list(passed[other]) if other in passed else 'a group without itself'}; "
                    f"the groups passed to Create must be the same or disjoint")


#: Create_group's tag must be below this (MPI's tag range; its messages travel on the
#: parent's collective context with tags from minimpi.coll.slots.create_group_tag, which
#: never meet a collective call's).
_CREATE_GROUP_TAG = 0x40000000


def create_group(comm: Any, group: Group, tag: int = 0) -> Any:
    """``Comm.Create_group``: collective over the members of ``group`` only.

    The members agree on a context id unused by all of them: each sends its next free
    context to the group's first member, which answers with all of them (``Comm._exchange``
    among the members: a linear gather and release on the parent's collective context, with
    a tag derived from ``tag`` so that concurrent ``Create_group`` calls on disjoint groups
    never mix); each takes the maximum.
    """
    comm._alive("Create_group")
    _check_subset(comm, group, "Create_group")
    me = comm._ep.group[comm.rank]
    if me not in group._members:
        return comm_null()
    try:   # as mpi4py's C int argument: numpy integers, floats truncated
        tag_value = as_int(tag)
    except (TypeError, ValueError, OverflowError):
        tag_value = -1
    if not 0 <= tag_value < _CREATE_GROUP_TAG:
        raise GroupError(f"rank {comm.rank}: Create_group(tag={tag!r}): tag must be in "
                         f"0..{_CREATE_GROUP_TAG - 1}")
    tag = tag_value
    parent_rank = {w: i for i, w in enumerate(comm._ep.group)}
    members = [parent_rank[w] for w in group._members]      # parent ranks, in group order
    proposals = comm._exchange(comm._free_context(), "Create_group", members,
                               create_group_tag(int(tag)))
    context = comm._agree_context(proposals)
    return comm._derive(group._members, group._members.index(me), context,
                        f"{comm.name}.create_group")
