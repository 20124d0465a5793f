"""A communicator as the point-to-point engine sees it: the one object both layers above use.

An :class:`Endpoint` is a group of world ranks, this process's rank in it, and the two
context ids its messages travel on - one for the user's point-to-point messages, one for
collectives - so that messages never cross communicators and a collective's messages never
match a user's receive. ``Comm`` (the mpi4py-facing API) and the collective algorithms'
``Channel`` both send and receive through it; neither needs the other.

Ranks given to :meth:`Endpoint.isend` / :meth:`Endpoint.irecv` are ranks of this group; the
engine works in world ranks, so the endpoint translates on the way down.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

from .engine import Engine
from .request import RecvRequest, Request

#: the bit that turns a communicator's point-to-point context into the context of its
#: partitioned messages (Psend_init/Precv_init): they never match an ordinary receive, not
#: even an ``ANY_TAG`` one (context ids stay far below 2**31)
PARTITIONED_BIT = 1 << 31


class Endpoint:
    """``rank`` of ``size`` in ``group`` (world ranks), on contexts ``context`` and ``context + 1``.

    Registering the contexts with the engine happens here, so a message that arrives for an
    endpoint before any receive is posted already has a queue to wait in.
    """

    __slots__ = ("engine", "group", "rank", "size", "context", "coll_context", "name",
                 "lane_facts", "_coll_seq")

    def __init__(self, engine: Engine, group: Sequence[int], rank: int, context: int,
                 name: str) -> None:
        self.engine = engine
        self.group: Tuple[int, ...] = tuple(group)
        self.rank = rank
        self.size = len(self.group)
        self.context = context
        self.coll_context = context + 1
        #: ``(engine, group, context, rank)`` in one tuple: what the comm layer's express
        #: fronts (``Send``, ``Recv``...) read on every call, one load instead of four
        self.lane_facts = (engine, self.group, context, rank)
        #: a label for error messages ("COMM_WORLD", "COMM_WORLD.split(1)", ...)
        self.name = name
        self._coll_seq = 0
        engine.register_context(context, self.group)
        engine.register_context(self.coll_context, self.group, "collective")

    @property
    def partitioned_context(self) -> int:
        """The context of this communicator's partitioned messages (registered on first use
        by :meth:`use_partitioned_context`)."""
        return self.context | PARTITIONED_BIT

    def use_partitioned_context(self) -> int:
        """Register the partitioned context with the engine (idempotent); returns it."""
        context = self.partitioned_context
        if self.engine.group_of(context) is None:
            self.engine.register_context(context, self.group)
        return context

    def isend(self, payload: Sequence[memoryview], nbytes: int, dest: int, tag: int,
              flags: int, call: str, context: Optional[int] = None) -> Request:
        """Start sending ``payload`` (``nbytes`` in all) to group rank ``dest``.

        ``context`` defaults to the point-to-point one; collectives pass ``coll_context``.
        ``call`` names the API call in errors and deadlock reports.
        """
        return self.engine.isend(self.context if context is None else context,
                                 self.group[dest], self.rank, tag, payload, nbytes, flags,
                                 (call, "dest", dest, tag, self.name))

    def irecv(self, target: Optional[memoryview], source: int, tag: int, call: str,
              context: Optional[int] = None) -> RecvRequest:
        """Start receiving from group rank ``source`` (or ``ANY_SOURCE``) into ``target``
        (a writable memoryview of the expected size), or - ``target`` None - into a fresh
        buffer of whatever size arrives (an object receive)."""
        return self.engine.irecv(self.context if context is None else context, source, tag,
                                 target, target is None, (call, "source", source, tag, self.name))

    @property
    def hosts(self) -> Tuple[int, ...]:
        """The host index of each group rank (equal indices: the same machine)."""
        hosts = self.engine.hosts
        return tuple(hosts[w] for w in self.group)

    def wire_within_host(self) -> Optional[str]:
        """The transport that carries messages between this rank and the group's other
        ranks on its host ("shm", "tcp", "inproc"...), or None when no other rank of the
        group shares its host (or the transport does not say)."""
        hosts = self.engine.hosts
        mine = hosts[self.group[self.rank]]
        peers = [w for i, w in enumerate(self.group) if i != self.rank and hosts[w] == mine]
        if not peers:
            return None
        transport = self.engine.transport
        route_name = getattr(transport, "route_name", None)   # a router: one member per peer
        if route_name is not None:
            return route_name(peers[0])
        return getattr(transport, "name", None)

    @property
    def coll_calls(self) -> int:
        """How many collective calls (slots) this rank has drawn on the endpoint so far."""
        return self._coll_seq

    def next_coll_tag(self) -> int:
        """The tag of the next collective call (every member draws them in the same order)."""
        self._coll_seq += 1
        return self._coll_seq & 0x7FFFFFFF

    def release(self) -> None:
        """Stop routing messages to this endpoint's contexts (``Comm.Free``)."""
        self.engine.release_context(self.context)
        self.engine.release_context(self.coll_context)
        self.engine.release_context(self.partitioned_context)
