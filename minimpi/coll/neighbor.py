"""Neighbourhood collectives: each rank exchanges blocks with its topology's neighbours only.

A process topology (Cartesian grid, graph, distributed graph) gives every rank a list of
in-neighbours (``sources``: who sends to us) and out-neighbours (``destinations``: whom we
send to). ``Neighbor_allgather`` sends the same block to every out-neighbour and receives
block k from in-neighbour k; ``Neighbor_alltoall`` sends block k to out-neighbour k.

One schedule each, one step: post every receive from the in-neighbours, start every send
to the out-neighbours, wait for all. ``MPI.PROC_NULL`` neighbours (the edge of a
non-periodic Cartesian dimension) are skipped: their receive block is left untouched.

``order`` is the order in which the receives are posted (a permutation of the in-neighbour
indices). It matters only when one rank is an in-neighbour twice: messages from one rank
match receives in the order they were posted, so the caller (which knows the topology)
posts them so that the k-th message a neighbour sends us lands in the right block (a
periodic Cartesian dimension of size 1 or 2, where the rank before and the rank after are
the same process).

``n`` in the costs is the byte count one rank sends in all; the degree is unknown to the
registry, so the formula prices one round of overlapping messages. Each collective has one
algorithm, so the choice never depends on these figures.
"""
from __future__ import annotations

from typing import Callable, Sequence

from ..constants import PROC_NULL
from .blocks import Blocks
from .registry import algorithm
from .schedule import Channel, Schedule


def _cost(m, p, n):
    return m.alpha + n * m.beta


def _volume(p, n):
    return p * n


def _messages(m, p, n):
    """The registry knows no degree: priced as a ring's (two neighbours a rank)."""
    return 2 * p


def _exchange(ch: Channel, sources: Sequence[int], destinations: Sequence[int],
              order: Sequence[int], send: Blocks, recv: Blocks,
              block_for: Callable[[int], int]) -> Schedule:
    """One step: receive block k from ``sources[k]`` (posted in ``order``), send block
    ``block_for(k)`` of ``send`` to ``destinations[k]``."""
    recvs = []
    step = []
    for k in order:
        src = sources[k]
        if src == PROC_NULL:
            continue
        into = recv.target([k])
        req = ch.irecv(into, src)
        recvs.append((k, into, req))
        step.append(req)
    for k, dst in enumerate(destinations):
        if dst != PROC_NULL:
            step.append(ch.isend(send.pack([block_for(k)]), dst))
    yield step
    for k, into, req in recvs:
        recv.unpack([k], into, req)
    return recv


@algorithm("neighbor_allgather", "direct", formula="α + n·β", volume=_volume,
           messages=_messages)
def neighbor_allgather_direct(ch: Channel, sources: Sequence[int],
                              destinations: Sequence[int], order: Sequence[int], send: Blocks,
                              recv: Blocks) -> Schedule:
    """Direct: every receive from the in-neighbours and every send to the out-neighbours
    in one step; time α + n·β when the messages overlap.

    ``send`` has one block (ours), sent to every out-neighbour; ``recv`` one block per
    in-neighbour, in the order of the topology's in-neighbour list.
    """
    return (yield from _exchange(ch, sources, destinations, order, send, recv, lambda k: 0))


@algorithm("neighbor_alltoall", "direct", formula="α + n·β", volume=_volume,
           messages=_messages)
def neighbor_alltoall_direct(ch: Channel, sources: Sequence[int], destinations: Sequence[int],
                             order: Sequence[int], send: Blocks, recv: Blocks) -> Schedule:
    """Direct: every receive from the in-neighbours and every send to the out-neighbours
    in one step; time α + n·β when the messages overlap.

    ``send`` has one block per out-neighbour (block k goes to ``destinations[k]``),
    ``recv`` one block per in-neighbour (block k comes from ``sources[k]``).
    """
    return (yield from _exchange(ch, sources, destinations, order, send, recv, lambda k: k))
