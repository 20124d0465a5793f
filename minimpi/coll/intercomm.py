"""Intercommunicator collectives: two disjoint groups, and the data crosses between them.

On an intercommunicator every collective moves data from one group to the *other* one
(an ``Allreduce`` gives each group the reduction of the remote group's data). Each
schedule here gets the two channels of one call:

* ``remote``: ``rank`` is this process's rank in its own group, ``size`` the *remote*
  group's size; ``isend(x, j)``/``irecv(x, j)`` address rank j of the remote group;
* ``local``: an ordinary channel over this process's own group, for the steps inside it
  (reusing the intracommunicator trees of :mod:`.bcast` and :mod:`.reduce`).

Rooted collectives follow MPI's convention: in the group that holds the root, the root
passes ``ROOT`` and the others ``PROC_NULL`` (they take no part); in the other group every
rank passes the root's rank in the remote group.

The groups' *leaders* (rank 0 of each group) carry the traffic that must be combined
first (reductions, barrier); data that each rank of one group owes each rank of the other
(gather, scatter, allgather, alltoall) goes straight across in one step. As with every
algorithm, each ``yield`` is one step's sends and receives; nothing here sees a
communicator, only the two channels.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from ..constants import PROC_NULL, ROOT
from .bcast import bcast_binomial
from .peers import binomial_children, binomial_parent
from .reduce import reduce_binomial
from .reduction import Operand, received
from .schedule import Channel, Schedule

LEADER = 0


def _token() -> np.ndarray:
    """An empty message (zero raw bytes)."""
    return np.empty(0, np.uint8)


def _arrive(local: Channel) -> Schedule:
    """Binomial fan-in of "arrived" to the local leader."""
    children = binomial_children(local.rank, local.size)
    for child in reversed(children):
        yield [local.irecv(_token(), child)]
    if local.rank != LEADER:
        yield [local.isend(_token(), binomial_parent(local.rank))]


def inter_barrier(remote: Channel, local: Channel) -> Schedule:
    """Every rank of both groups has arrived before any leaves.

    1. each group fans in to its leader (binomial tree);
    2. the two leaders swap an empty message (each now knows both groups arrived);
    3. each leader releases its group (binomial broadcast of an empty message).
    Steps: 2·⌈log2 p⌉ + 1 for the larger group p.
    """
    local.phase("1. arrive in each group")
    yield from _arrive(local)
    if local.rank == LEADER:
        local.phase("2. the leaders swap")
        yield [remote.irecv(_token(), LEADER), remote.isend(_token(), LEADER)]
    local.phase("3. release each group")
    yield from bcast_binomial(local, _token(), LEADER)


def inter_bcast(remote: Channel, local: Channel, data: Any, root: int) -> Schedule:
    """The root's data reaches every rank of the other group.

    The root sends it to the remote leader, which broadcasts it in its group (binomial
    tree): 1 + ⌈log2 q⌉ steps for a receiving group of q. Returns the data on the receiving
    side (the object in object mode), None (objects) or ``data`` on the root's side.
    """
    if root == ROOT:
        yield [remote.isend(data, LEADER)]
        return None if remote.objects else data
    if root == PROC_NULL:
        return None if remote.objects else data
    if local.rank == LEADER:
        into = None if remote.objects else data
        req = remote.irecv(into, root)
        yield [req]
        data = received(req, into)
    return (yield from bcast_binomial(local, data, LEADER))


def inter_gather(remote: Channel, local: Channel, send: Any, blocks: Optional[Sequence[Any]],
                 root: int) -> Schedule:
    """Rank i of the other group sends ``send`` into ``blocks[i]`` at the root.

    One step: the root posts a receive per remote rank, each remote rank one send (a flat
    tree: q messages). Object mode: the root returns the list of objects; others None.
    """
    if root == ROOT:
        if remote.objects:
            reqs = [remote.irecv(None, i) for i in range(remote.size)]
            yield reqs
            return [r.wait() for r in reqs]
        yield [remote.irecv(blocks[i], i) for i in range(remote.size)]
        return None
    if root != PROC_NULL:
        yield [remote.isend(send, root)]
    return None


def inter_scatter(remote: Channel, local: Channel, blocks: Optional[Sequence[Any]],
                  recv: Any, root: int) -> Schedule:
    """The root sends ``blocks[i]`` to rank i of the other group, which receives it into
    ``recv`` (one step, q messages). Object mode: returns the received object."""
    if root == ROOT:
        yield [remote.isend(blocks[i], i) for i in range(remote.size)]
        return None
    if root == PROC_NULL:
        return None
    into = None if remote.objects else recv
    req = remote.irecv(into, root)
    yield [req]
    return received(req, into)


def inter_allgather(remote: Channel, local: Channel, send: Any,
                    blocks: Optional[Sequence[Any]]) -> Schedule:
    """Every rank receives every remote rank's ``send`` (into ``blocks[j]`` from remote
    rank j) - the direct exchange: one step, p·q messages each way. Object mode: returns
    the list of the remote group's objects."""
    into = [None] * remote.size if remote.objects else blocks
    reqs = [remote.irecv(into[j], j) for j in range(remote.size)]
    yield reqs + [remote.isend(send, j) for j in range(remote.size)]
    return [r.wait() for r in reqs] if remote.objects else None


def inter_alltoall(remote: Channel, local: Channel, sends: Sequence[Any],
                   blocks: Optional[Sequence[Any]]) -> Schedule:
    """``sends[j]`` goes to remote rank j, which receives it into its ``blocks[i]`` (i: the
    sender's rank): one step, pairwise. Object mode: returns the received list."""
    into = [None] * remote.size if remote.objects else blocks
    reqs = [remote.irecv(into[j], j) for j in range(remote.size)]
    yield reqs + [remote.isend(sends[j], j) for j in range(remote.size)]
    return [r.wait() for r in reqs] if remote.objects else None


def inter_reduce(remote: Channel, local: Channel, red: Operand, data: Any, out: Any,
                 root: int) -> Schedule:
    """The root receives the reduction (in rank order) of the other group's data.

    The sending group reduces to its leader (:func:`~minimpi.coll.reduce.reduce_binomial`,
    rooted at 0 so non-commutative ops keep rank order), which sends the result to the root
    into ``out``: ⌈log2 q⌉ + 1 steps. Object mode: the root returns the reduced object.
    """
    if root == ROOT:
        into = None if remote.objects else out
        req = remote.irecv(into, LEADER)
        yield [req]
        return received(req, into)
    if root == PROC_NULL:
        return None
    local.phase("1. reduce to the leader")
    acc = yield from reduce_binomial(local, red, red.mine(data), LEADER)
    if local.rank == LEADER:
        local.phase("2. the leader sends to the root")
        yield [remote.isend(acc, root)]
    return None


def _leaders_swap(remote: Channel, local: Channel, red: Operand, data: Any,
                  into: Any) -> Schedule:
    """Reduce my group's data to its leader; the two leaders swap their results. Returns
    what the leader received (None on other ranks)."""
    local.phase("1. reduce to each leader")
    acc = yield from reduce_binomial(local, red, red.mine(data), LEADER)
    if local.rank != LEADER:
        return None
    local.phase("2. the leaders swap")
    req = remote.irecv(into, LEADER)
    yield [req, remote.isend(acc, LEADER)]
    return received(req, into)


def inter_allreduce(remote: Channel, local: Channel, red: Operand, data: Any,
                    out: Any) -> Schedule:
    """Each group gets the reduction of the other group's data (in ``out``).

    Reduce to each leader, swap between the leaders, broadcast in each group:
    ⌈log2 p⌉ + 1 + ⌈log2 p⌉ steps. Object mode: returns the reduced object.
    """
    into = None if remote.objects else out
    result = yield from _leaders_swap(remote, local, red, data, into)
    if local.rank != LEADER:
        result = into
    local.phase("3. broadcast in each group")
    return (yield from bcast_binomial(local, result, LEADER))


def inter_reduce_scatter(remote: Channel, local: Channel, red: Operand, data: np.ndarray,
                         out: np.ndarray, elems: Sequence[int]) -> Schedule:
    """Rank i of each group gets ``elems[i]`` items (block i) of the reduction of the other
    group's vectors.

    Reduce to each leader, swap between the leaders, then each leader sends block i to its
    rank i (one step): ⌈log2 p⌉ + 2 steps.
    """
    whole = red.slot(data, "remote result") if local.rank == LEADER else None
    yield from _leaders_swap(remote, local, red, data, whole)
    local.phase("3. scatter in each group")
    if local.rank != LEADER:
        yield [local.irecv(out, LEADER)]
        return None
    starts = np.concatenate(([0], np.cumsum(elems))).astype(int)
    out[...] = whole[:elems[LEADER]]
    yield [local.isend(whole[starts[i]:starts[i + 1]], i) for i in range(local.size)
           if i != LEADER]
    return None


def inter_exchange(remote: Channel, local: Channel, value: Any) -> Schedule:
    """Every rank learns every rank's ``value``, of both groups: returns ``(local_values,
    remote_values)``, each in group rank order (what creating a communicator agrees on).

    Gather to each leader (flat), swap between the leaders, release to each group (flat).
    """
    if local.rank != LEADER:
        yield [local.isend(value, LEADER)]
        req = local.irecv(None, LEADER)
        yield [req]
        return req.wait()
    reqs = [local.irecv(None, i) for i in range(1, local.size)]
    if reqs:
        yield reqs
    mine: List[Any] = [value] + [r.wait() for r in reqs]
    req = remote.irecv(None, LEADER)
    yield [req, remote.isend(mine, LEADER)]
    both: Tuple[List[Any], List[Any]] = (mine, req.wait())
    if local.size > 1:
        yield [local.isend(both, i) for i in range(1, local.size)]
    return both
