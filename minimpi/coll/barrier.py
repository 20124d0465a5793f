"""Barrier: no rank leaves before every rank has entered.

Three algorithms over empty messages. A barrier moves no data, so the cost is counted in
message latencies α only.
"""
from __future__ import annotations

import numpy as np

from .bcast import bcast_binomial
from .cost import ceil_log2
from .peers import GROUP_LEADER, binomial_children, binomial_parent, ring_neighbours
from .registry import INTER, algorithm
from .schedule import Channel, Schedule
from .slots import SEQ_BITS


def _token() -> np.ndarray:
    """An empty message (sent and received as zero raw bytes)."""
    return np.empty(0, np.uint8)


@algorithm("barrier", "binomial",
           formula="2·⌈log2 p⌉·α", messages=lambda m, p, n: 2 * (p - 1),
           volume=lambda p, n: 0)
def barrier_binomial(ch: Channel) -> Schedule:
    """Binomial gather of "arrived" to rank 0, then a binomial release: 2·ceil(log2 p) steps.

    Arrive: step k (mask = 2^k), a rank whose bit k is set tells ``rank - mask`` that its
    whole subtree has arrived and waits; the others first hear from ``rank + mask``.
    Release: the same tree backwards. Time 2·ceil(log2 p)·α.
    """
    p, r = ch.size, ch.rank
    children = binomial_children(r, p)
    ch.phase("arrive")
    for child in reversed(children):           # arrive, from the leaves up
        yield [ch.irecv(_token(), child)]
    if r != 0:
        parent = binomial_parent(r)
        yield [ch.isend(_token(), parent)]
        ch.phase("release")
        yield [ch.irecv(_token(), parent)]     # released by the parent
    ch.phase("release")
    for child in children:                     # release, from the root down
        yield [ch.isend(_token(), child)]


@algorithm("barrier", "ring",
           formula="2·p·α", messages=lambda m, p, n: 2 * p if p > 1 else 0,
           volume=lambda p, n: 0)
def barrier_ring(ch: Channel) -> Schedule:
    """A token goes round the ring twice: 0 -> 1 -> ... -> p-1 -> 0, two rounds.

    Round 1: when the token is back at rank 0 every rank has arrived. Round 2 releases
    them in turn. 2p messages in sequence; time 2p·α.
    """
    p, r = ch.size, ch.rank
    if p == 1:
        return
    left, right = ring_neighbours(r, p)
    for round_ in range(2):
        ch.phase("arrive" if round_ == 0 else "release")
        if r == 0:
            yield [ch.isend(_token(), right)]
            yield [ch.irecv(_token(), left)]
        else:
            yield [ch.irecv(_token(), left)]
            yield [ch.isend(_token(), right)]


@algorithm("barrier", "dissemination",
           formula="⌈log2 p⌉·α", messages=lambda m, p, n: p * ceil_log2(p),
           volume=lambda p, n: 0)
def barrier_dissemination(ch: Channel) -> Schedule:
    """Dissemination (Hensgen, Finkel, Manber): ceil(log2 p) steps, time ceil(log2 p)·α.

    Step k: send to ``rank + 2^k`` and receive from ``rank - 2^k`` (mod p). After step k a
    rank has heard, directly or indirectly, from the 2^(k+1) ranks below it; after
    ceil(log2 p) steps, from all of them.
    """
    p, r = ch.size, ch.rank
    dist = 1
    while dist < p:
        yield [ch.irecv(_token(), (r - dist) % p), ch.isend(_token(), (r + dist) % p)]
        dist <<= 1


@algorithm("barrier", "segment", segment=True, objects=True,
           formula="α/2", messages=lambda m, p, n: p, volume=lambda p, n: 0)
def barrier_segment(ch: Channel) -> Schedule:
    """Meet in the communicator's shared segment (ranks on one host): publish the call,
    wait until every rank has. One step, one wake-up at most per rank; time α/2 (a meeting
    in memory: no frame, no matching).
    """
    seg = ch.segment()
    k = seg.reserve(1)[0]
    sig = ch.tag >> SEQ_BITS
    yield [seg.free_for(ch, k)]                  # (the signature word k uses was read)
    seg.publish(k, sig, call=ch)
    yield [seg.wait_for(ch, k, range(ch.size))]
    seg.check(k, sig, range(ch.size), ch)
    seg.finished(k)


# -- intercommunicators (two groups; see minimpi.coll.twogroups) -------------------------
def _arrive(local: Channel) -> Schedule:
    """Binomial fan-in of "arrived" to the local leader."""
    token = np.empty(0, np.uint8)
    for child in reversed(binomial_children(local.rank, local.size)):
        yield [local.irecv(token, child)]
    if local.rank != GROUP_LEADER:
        yield [local.isend(token, binomial_parent(local.rank))]


@algorithm("barrier", "leaders", kinds=(INTER,),
           formula="(2·⌈log2 p⌉ + 1)·α", messages=lambda m, p, n: 4 * p - 2,
           volume=lambda p, n: 0)
def barrier_leaders(remote: Channel, local: Channel) -> Schedule:
    """Each group fans in to its leader, the two leaders swap an empty message, each leader
    releases its group: every rank of both groups has arrived before any leaves.

    1. each group fans in to its leader (binomial tree);
    2. the two leaders swap an empty message (each now knows both groups arrived);
    3. each leader releases its group (binomial broadcast of an empty message).
    Time: (2·⌈log2 p⌉ + 1)·α for groups of p.
    """
    local.phase("1. arrive in each group")
    yield from _arrive(local)
    if local.rank == GROUP_LEADER:
        local.phase("2. the leaders swap")
        token = np.empty(0, np.uint8)
        yield [remote.irecv(token, GROUP_LEADER), remote.isend(token, GROUP_LEADER)]
    local.phase("3. release each group")
    yield from bcast_binomial(local, np.empty(0, np.uint8), GROUP_LEADER)
