"""Broadcast: the root's data ends up on every rank.

Three flat algorithms and a hierarchical one (which knows which ranks share a host). In
each flat one, ranks are renumbered relative to the root (``rel = (rank - root)
mod p``) so that the root is relative rank 0 and the schedule is the same for every root.

``data`` is a flat numpy array (``Bcast``: every rank passes its buffer, the root's is sent,
the others' are filled) or, for the object ``bcast``, the root's object (``None`` elsewhere).
Each schedule returns the broadcast object in object mode.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..constants import PROC_NULL, ROOT
from .blocks import as_bytes, segment_bounds
from .cost import Layout, ceil_log2, halves, segments, tree_volume
from .groups import GroupChannel
from .peers import (
    GROUP_LEADER,
    absolute,
    binomial_children,
    binomial_parent,
    host_leaders,
    host_of,
    relative,
    ring_neighbours,
    subtree_end,
)
from .reduction import received
from .registry import INTER, algorithm, algorithms, cheapest, flat_cost
from .schedule import Channel, Schedule
from .segment import pieces
from .slots import SEQ_BITS


@algorithm("bcast", "binomial", path=lambda m, p, n: [n] * ceil_log2(p),
           formula="⌈log2 p⌉·(α + n·β)",
           messages=lambda m, p, n: p - 1,
           volume=lambda p, n: (p - 1) * n)
def bcast_binomial(ch: Channel, data: Any, root: int) -> Schedule:
    """Binomial tree: ceil(log2 p) steps, p-1 messages; time ceil(log2 p)·(α + nβ);
    volume (p-1)·n.

    Step k (mask = 2^k): every rank that already has the data (rel < mask) sends it to
    rel + mask. So a rank first waits for its parent, the rank that differs in its lowest
    set bit, then sends to its children rel + mask for each lower mask, largest first
    (:mod:`~minimpi.coll.peers` draws the tree).
    """
    p, rel = ch.size, relative(ch.rank, root, ch.size)
    into = None if ch.objects else data   # objects arrive as objects
    if rel != 0:                          # receive from the parent
        req = ch.irecv(into, absolute(binomial_parent(rel), root, p))
        yield [req]
        data = received(req, into)
    for child in binomial_children(rel, p):   # send down, largest subtree first
        yield [ch.isend(data, absolute(child, root, p))]
    return data


@algorithm("bcast", "ring",
           path=lambda m, p, n: [min(n, m.segment)] * (p + segments(n, m.segment) - 2),
           formula="(p + s - 2)·(α + min(n, segment)·β); s = max(1, ⌈n/segment⌉)",
           messages=lambda m, p, n: (p - 1) * segments(n, m.segment),
           volume=lambda p, n: (p - 1) * n)
def bcast_ring(ch: Channel, data: Any, root: int, segment: Optional[int] = None) -> Schedule:
    """Pipelined chain: root -> root+1 -> ... -> root-1, in segments (default: the cost model's).

    With s segments: p-1+s-1 steps; time (p+s-2)·(α + (n/s)β), so for large n every link
    streams at once and the time approaches nβ; volume (p-1)·n. Objects travel as one
    segment.
    """
    p, rel = ch.size, relative(ch.rank, root, ch.size)
    if p == 1:
        return data
    prev, nxt = ring_neighbours(ch.rank, p)
    last = rel == p - 1
    if ch.objects:
        if rel != 0:
            req = ch.irecv(None, prev)
            yield [req]
            data = req.wait()
        if not last:
            yield [ch.isend(data, nxt)]
        return data
    raw = as_bytes(data)
    per = segment or ch.model.segment
    pieces = [raw[lo:hi] for lo, hi in segment_bounds(raw.size, per)]
    if rel == 0:
        for piece in pieces:
            yield [ch.isend(piece, nxt)]
        return data
    # receive segment k while forwarding segment k-1: one step per segment
    pending = None
    for piece in pieces:
        step = [ch.irecv(piece, prev)]
        if pending is not None and not last:
            step.append(ch.isend(pending, nxt))
        yield step
        pending = piece
    if not last:
        yield [ch.isend(pending, nxt)]
    return data


@algorithm("bcast", "scatter_allgather",
           path=lambda m, p, n: halves(n, ceil_log2(p)) + [n / p] * (p - 1),
           formula="(⌈log2 p⌉ + p - 1)·α + 2·(p-1)/p·n·β", objects=False,
           messages=lambda m, p, n: (p - 1) + p * (p - 1),
           volume=lambda p, n: tree_volume(p) * n / p + (p - 1) * n)
def bcast_scatter_allgather(ch: Channel, data: np.ndarray, root: int) -> Schedule:
    """Van de Geijn: binomial scatter of p chunks, then a ring allgather of the chunks.

    Steps: ceil(log2 p) + p-1; time (log2 p + p-1)·α + 2·((p-1)/p)·nβ - about twice the
    bandwidth of the binomial tree for large n, at the price of more messages - but volume
    T(p)·n/p + (p-1)·n (T: :func:`~minimpi.coll.cost.tree_volume`), more than the tree's
    (p-1)·n, so where ranks share cores it loses.
    """
    p, rel = ch.size, relative(ch.rank, root, ch.size)
    raw = as_bytes(data)
    n = raw.size
    if p == 1 or n == 0:
        return data
    chunk = -(-n // p)

    def span(first_rel: int, count: int):
        """Bytes of the chunks of relative ranks first_rel..first_rel+count-1."""
        lo = min(n, first_rel * chunk)
        hi = min(n, (first_rel + count) * chunk)
        return raw[lo:hi]

    # Scatter: each rank receives the chunks of its whole subtree from its parent and hands
    # each child the chunks of the child's subtree.
    ch.phase("binomial scatter")
    if rel != 0:
        piece = span(rel, subtree_end(rel, p) - rel)
        yield [ch.irecv(piece, absolute(binomial_parent(rel), root, p))]
    for child in binomial_children(rel, p):
        piece = span(child, subtree_end(child, p) - child)
        yield [ch.isend(piece, absolute(child, root, p))]
    # Ring allgather of the p chunks: in step k, pass on the chunk received in step k-1.
    ch.phase("ring allgather")
    left, right = ring_neighbours(ch.rank, p)
    for k in range(p - 1):
        send_rel = (rel - k) % p
        recv_rel = (rel - k - 1) % p
        yield [ch.irecv(span(recv_rel, 1), left), ch.isend(span(send_rel, 1), right)]
    return data


#: what the leaders of the hierarchical bcast choose from: the cheapest over the inter-host
#: link for H leaders and n bytes (:func:`~minimpi.coll.registry.cheapest`)
LEADERS = ("binomial", "scatter_allgather", "ring")


def _hierarchical_phases(m, p, n, layout=None):
    """Each step of :func:`bcast_hierarchical` and its predicted time."""
    t = layout or Layout.one_host(p)
    among = cheapest("bcast", LEADERS, m, m.inter, t.hosts, n)
    return [(f"between hosts: {among} bcast over {t.hosts} leaders",
             flat_cost("bcast", among, m, m.inter, t.hosts, n)),
            (f"inside hosts: binomial bcast over {t.widest} ranks",
             flat_cost("bcast", "binomial", m, m.intra, t.widest, n))]


@algorithm("bcast", "hierarchical", hierarchical=True, phases=_hierarchical_phases,
           path=lambda m, p, n: [n] * ceil_log2(p),
           cost=lambda m, p, n, layout=None: sum(t for _, t in _hierarchical_phases(m, p, n, layout)),
           messages=lambda m, p, n, layout=None: p - 1,
           volume=lambda p, n, layout=None: (p - 1) * n)
def bcast_hierarchical(ch: Channel, data: Any, root: int) -> Schedule:
    """Two levels: a broadcast among one leader per host, then a binomial tree inside each
    host.

    With H hosts and at most L ranks on one: time B(H) + ceil(log2 L)·(α_i + nβ_i) (i:
    within a host), where B(H) is the leaders' broadcast over the inter-host link - the
    binomial tree's ceil(log2 H)·(α_e + nβ_e), van de Geijn's or the pipelined ring's
    formula with α_e, β_e, whichever is least (:func:`~minimpi.coll.registry.cheapest`;
    objects: the tree); volume about (p-1)·n, of which only the leaders' part crosses hosts
    - each host receives the data once, where a flat tree over interleaved hosts may send
    it across many times.

    1. Between hosts: the leaders (the root on its host, the lowest rank on each other
       host; :func:`~minimpi.coll.peers.host_leaders`) broadcast from the root, in host
       order.
    2. Inside each host: :func:`bcast_binomial` from the leader over the host's ranks.
    """
    groups = ch.host_groups
    leaders = host_leaders(groups, root)
    mine = host_of(ch.rank, groups)
    ch.phase("1. broadcast among the host leaders")
    if ch.rank == leaders[mine]:                              # 1. between hosts
        model = ch.model
        among = "binomial" if ch.objects else cheapest(
            "bcast", LEADERS, model, model.inter, len(leaders), data.nbytes)
        data = yield from algorithms("bcast")[among](GroupChannel(ch, leaders), data,
                                                     host_of(root, groups))
    home = groups[mine]                                       # 2. inside my host
    ch.phase("2. broadcast inside each host")
    return (yield from bcast_binomial(GroupChannel(ch, home), data, home.index(leaders[mine])))


@algorithm("bcast", "segment", segment=True, objects=False,
           formula="c·α/2 + (c-1)·o·α/4 + (p-1)·n·β; c = max(1, ⌈n/16384⌉)", messages=lambda m, p, n: p, volume=lambda p, n: 0,
           local=lambda p, n: p * n)
def bcast_segment(ch: Channel, data: np.ndarray, root: int) -> Schedule:
    """Meet in the communicator's shared segment (ranks on one host): the root copies its
    buffer into its slot and publishes the call; every other rank publishes that it is in
    the call, waits for the root's slot and copies it out. One step for a buffer that fits
    a slot (larger ones in slot-sized pieces); time α/2 + (p-1)·n·β (each of the other
    ranks copies n bytes).
    """
    seg = ch.segment()
    rank = ch.rank
    sig = ch.tag >> SEQ_BITS
    mine = as_bytes(data)
    parts = pieces(mine.nbytes, seg.slot)
    for k, part in zip(seg.reserve(len(parts)), parts):
        lo, hi = part.start, part.stop
        yield [seg.free_for(ch, k)]              # (the area k uses was read by everyone)
        if rank == root:
            seg.area(rank, k, hi - lo)[...] = mine[lo:hi]
            seg.publish(k, sig, root=True, call=ch)   # the others wait for this slot alone
            seg.finished(k)
            continue
        seg.publish(k, sig, call=ch, quiet=True)     # (nobody waits for this slot)
        yield [seg.wait_for(ch, k, (root,))]
        seg.check(k, sig, (root,), ch)
        mine[lo:hi] = seg.area(root, k, hi - lo)
        seg.finished(k)
    return data


# -- intercommunicators (two groups; see minimpi.coll.twogroups) -------------------------
@algorithm("bcast", "via_leader", kinds=(INTER,),
           formula="(1 + ⌈log2 p⌉)·(α + n·β)", messages=lambda m, p, n: p,
           volume=lambda p, n: p * n)
def bcast_via_leader(remote: Channel, local: Channel, data: Any, root: int) -> Schedule:
    """The root sends its data to the other group's leader, which broadcasts it in its
    group (binomial tree): (1 + ⌈log2 p⌉)·(α + n·β) for a receiving group of p.

    ``root``: ``ROOT`` on the root, ``PROC_NULL`` on the rest of its group, the root's rank
    on the receiving side. Returns the data on the receiving side (the object in object
    mode), None (objects) or ``data`` on the root's side.
    """
    leader = GROUP_LEADER
    if root == ROOT:
        yield [remote.isend(data, leader)]
        return None if remote.objects else data
    if root == PROC_NULL:
        return None if remote.objects else data
    if local.rank == leader:
        into = None if remote.objects else data
        req = remote.irecv(into, root)
        yield [req]
        data = received(req, into)
    return (yield from bcast_binomial(local, data, leader))



