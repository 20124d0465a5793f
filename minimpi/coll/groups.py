"""A collective on some of the ranks: how a hierarchical algorithm runs flat ones on groups.

A hierarchical algorithm is flat algorithms run one after the other on groups of ranks:
the ranks of each host, then one leader per host (:mod:`~minimpi.coll.peers` finds them).
:class:`GroupChannel` is the call's channel seen by the members of one group, renumbered
0..k-1 in the group's order, so the flat generators of ``bcast.py``, ``reduce.py``, ...
run on it unchanged::

    leaders = GroupChannel(ch, [0, 4])          # rank 0 is leader 0, rank 4 is leader 1
    yield from bcast_binomial(leaders, data, 0)  # rank 0 sends to rank 4

Every phase uses the call's one tag. That is safe: between two ranks, the messages and the
receives of all phases come in the same order on both sides (each rank runs the phases in
program order, and each phase is a complete flat algorithm), so the non-overtaking rule
matches the k-th message from a rank to the k-th receive posted for it.

:class:`GroupBlocks` does the same for the blocks of an allgather: block i of the group is
the blocks of several ranks (all the ranks of host i), so a flat allgather among the
leaders moves whole hosts' blocks, each as one message.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence

import numpy as np

from ..p2p.request import Request
from .blocks import Blocks


class GroupChannel:
    """The channel ``ch`` as seen by the ranks ``members`` (ranks of ``ch``), renumbered: our
    ``rank`` is our index in ``members`` and ``isend``/``irecv`` take group ranks."""

    __slots__ = ("parent", "members", "rank", "size", "objects", "ep", "call", "temps")

    def __init__(self, ch: Any, members: Sequence[int]) -> None:
        if ch.rank not in members:
            raise ValueError(f"rank {ch.rank} is not a member of the group {list(members)}")
        self.parent = ch
        self.members = list(members)
        self.rank = self.members.index(ch.rank)
        self.size = len(self.members)
        self.objects = ch.objects
        self.ep = ch.ep
        self.call = ch.call
        self.temps = ch.temps        # the call's working buffers are the real channel's

    def isend(self, data: Any, dest: int) -> Request:
        return self.parent.isend(data, self.members[dest])

    def irecv(self, into: Optional[np.ndarray], source: int) -> Request:
        return self.parent.irecv(into, self.members[source])

    @property
    def model(self) -> Any:
        """The cost model of the call (segment sizes)."""
        return self.parent.model

    def phase(self, name: str) -> None:
        """The phases of an algorithm run on a group stay inside the step of the call that
        runs it (which marks its own phases on the real channel): nothing to do."""

    def scratch(self, size: int, dtype: Any, name: str = "tmp") -> np.ndarray:
        return self.temps.take(size, dtype, name)

    def scratch_like(self, like: np.ndarray, name: str = "tmp") -> np.ndarray:
        return self.temps.like(like, name)

    def scratch_copy(self, source: np.ndarray, name: str = "acc") -> np.ndarray:
        return self.temps.copy(source, name)


class GroupBlocks:
    """The blocks of ``blocks`` seen group by group: block i is the blocks of the ranks
    ``groups[i]``, in that order. Packing several group blocks packs all their ranks' blocks
    into one message (:meth:`~minimpi.coll.blocks.Blocks.pack`: zero-copy when they lie back
    to back), so the flat allgather code works on it as on plain blocks."""

    __slots__ = ("blocks", "groups")

    def __init__(self, blocks: Blocks, groups: Sequence[Sequence[int]]) -> None:
        self.blocks = blocks
        self.groups = groups

    def ranks(self, indices: Sequence[int]) -> List[int]:
        """The ranks whose blocks the group blocks ``indices`` are made of."""
        return [rank for i in indices for rank in self.groups[i]]

    def pack(self, indices: Sequence[int], copy: bool = False) -> Any:
        return self.blocks.pack(self.ranks(indices), copy)

    def target(self, indices: Sequence[int]) -> Optional[np.ndarray]:
        return self.blocks.target(self.ranks(indices))

    def unpack(self, indices: Sequence[int], into: Optional[np.ndarray],
               req: Optional[Request]) -> None:
        self.blocks.unpack(self.ranks(indices), into, req)
