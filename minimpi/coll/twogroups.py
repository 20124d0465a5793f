"""Collectives over two groups (an intercommunicator): the call's pair of channels, its
compiled form, and the exchange that makes a communicator from an intercommunicator.

On an intercommunicator every collective moves data from one group to the *other* one
(an ``Allreduce`` gives each group the reduction of the remote group's data). Its
algorithms live in the registry beside the intracommunicator ones - each collective's
module holds both (``bcast_leader`` in :mod:`.bcast`...), registered with
``kinds=(INTER,)`` - and each gets the two channels of one call:

* ``remote`` (a :class:`TwoGroupChannel`): ``rank`` is this process's rank in its own
  group, ``size`` the *remote* group's size; ``isend(x, j)``/``irecv(x, j)`` address rank j
  of the remote group;
* ``local`` (``remote.local``): an ordinary channel over this process's own group, for the
  steps inside it (the intracommunicator trees of :mod:`.bcast` and :mod:`.reduce`).

Rooted collectives follow MPI's convention: in the group that holds the root, the root
passes ``ROOT`` and the others ``PROC_NULL`` (they take no part); in the other group every
rank passes the root's rank in the remote group. The groups' *leaders* (rank
:data:`~minimpi.coll.peers.GROUP_LEADER` of each group) carry the traffic that must be
combined first.

A call draws a slot (sequence number) on both endpoints, so the two groups' calls stay in
step, and signs both for the mismatch checks (:mod:`.mismatch`). Its signature leaves the
root and the byte count out, and its algorithm is chosen without the byte count: the two
groups pass different ones by definition (a root's group sends, the other receives), and
must still choose and sign alike. A call that fails on one rank tells every member of both
groups (:func:`~minimpi.coll.mismatch.abort_groups`).
"""
from __future__ import annotations

import weakref
from typing import Any, List, Optional, Tuple

from .compiled import CompiledCall
from .mismatch import abort_groups, call_fields, op_name, open_recorded, signature, watch_of
from .peers import GROUP_LEADER
from .registry import INTER, Algorithm
from .schedule import Channel, Schedule
from .slots import SEQ_MASK

#: the collectives whose v and w forms run their base collective's algorithms (as on an
#: intracommunicator); the call is still signed as the form it is
ALGORITHMS_OF = {"gatherv": "gather", "scatterv": "scatter", "allgatherv": "allgather",
                 "alltoallw": "alltoallv", "reduce_scatter_block": "reduce_scatter"}


class TwoGroupChannel(Channel):
    """The remote channel of one intercommunicator call, holding its local twin
    (``local``): a compiled call reopens, signs, keeps and aborts both together."""

    __slots__ = ("local",)

    def __init__(self, ep: Any, local_ep: Any, call: str, step_hook: Any = None,
                 objects: bool = False, plan: Any = None) -> None:
        super().__init__(ep, call, step_hook, objects, plan)
        self.local = Channel(local_ep, call, step_hook, objects)

    def reopen(self) -> None:
        super().reopen()
        self.local.reopen()

    def slot(self) -> Tuple[int, int]:
        """The slots this call holds: (on the remote endpoint, on the local one)."""
        return self.tag & SEQ_MASK, self.local.tag & SEQ_MASK

    def abort(self, exc: BaseException) -> None:
        """This rank failed in the call: tell every member of both groups."""
        abort_groups(self.ep, self.local.ep, exc, self.slot(), self.call)


class TwoGroupCall(CompiledCall):
    """The compiled form of one call signature on an intercommunicator: the algorithm its
    plan chooses among the intercommunicator ones (or ``fixed``), the signature, and
    channel pairs kept between calls (see :class:`~minimpi.coll.compiled.CompiledCall`)."""

    __slots__ = ("local_ep", "local_watch")

    def __init__(self, ep: Any, local_ep: Any, plan: Any, collective: str, call: str,
                 op: Any, requested: Optional[str], objects: bool,
                 fixed: Optional[Algorithm] = None) -> None:
        # (every field set here rather than by CompiledCall's constructor, which chooses
        # and signs with the byte count and root that two groups do not share)
        self.ep = ep
        self.local_ep = local_ep
        self.plan = plan
        self.collective = collective
        self.call = call
        alg = self.algorithm = fixed or plan.algorithm(
            ALGORITHMS_OF.get(collective, collective), 0, op, requested, objects, call)
        self.label = f"{call}[{alg.name}]"
        self.root = None
        self.nbytes = 0
        self.objects = objects
        self.typename = None
        self.opname = op_name(op)
        self.sig = signature(collective, alg.name, None, self.opname, 0, objects, None)
        self.watch = watch_of(ep)
        self.local_watch = watch_of(local_ep)
        self.fields = call_fields(self.sig, collective, call, alg.name, None, self.opname, 0,
                                  objects, None)
        self.op_ref = None if op is None else weakref.ref(op)
        self.datatype_ref = None
        self._idle: List[Channel] = []

    def channel(self) -> Channel:
        if self._idle:
            return super().channel()
        bus = self.ep.engine.bus
        return TwoGroupChannel(self.ep, self.local_ep, self.label,
                               bus.step_reporter() if bus.steps else None, self.objects,
                               self.plan)

    def sign(self, ch: Channel) -> None:
        super().sign(ch)
        local = ch.local
        local.watch = self.local_watch
        local.tag = open_recorded(self.local_ep, self.local_watch, local.tag, self.fields)


def exchange_leaders(remote: Channel, local: Channel, value: Any) -> Schedule:
    """Every rank learns every rank's ``value``, of both groups: returns ``(local_values,
    remote_values)``, each in group rank order (what creating a communicator agrees on).

    Gather to each leader (flat), swap between the leaders, release to each group (flat):
    3 steps, 2·(p-1) + 2 messages per group.
    """
    if local.rank != GROUP_LEADER:
        yield [local.isend(value, GROUP_LEADER)]
        req = local.irecv(None, GROUP_LEADER)
        yield [req]
        return req.wait()
    reqs = [local.irecv(None, i) for i in range(1, local.size)]
    if reqs:
        yield reqs
    mine: List[Any] = [value] + [r.wait() for r in reqs]
    req = remote.irecv(None, GROUP_LEADER)
    yield [req, remote.isend(mine, GROUP_LEADER)]
    both: Tuple[List[Any], List[Any]] = (mine, req.wait())
    if local.size > 1:
        yield [local.isend(both, i) for i in range(1, local.size)]
    return both


#: the agreement of communicator creation: not an MPI collective, so not in the registry
#: (``minimpi explain`` lists what a program can call), but run and signed as one
EXCHANGE = Algorithm("exchange", "leaders", exchange_leaders,
                     lambda m, p, n: 3 * m.alpha, objects=True,
                     summary="Gather to each leader, swap, release.", kinds=(INTER,))
