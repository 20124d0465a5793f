"""Allreduce: every rank ends with x0 (op) x1 (op) ... (op) x[p-1].

Each schedule takes ``red`` (the :class:`~minimpi.coll.blocks.Operand`: how two values are
combined, in MPI order) and ``data``: the flat numpy receive buffer, already holding this
rank's contribution (``Allreduce`` copies ``sendbuf`` in unless ``IN_PLACE``), reduced in
place; or, for the object ``allreduce``, this rank's object (each schedule returns the
result). ``n`` in the costs is the byte count of the whole vector.

Operand order: binomial, recursive doubling and Rabenseifner always combine two partial
results that cover *adjacent* ranges of ranks, lower range on the left, so non-commutative
ops give rank order. The ring accumulates each block starting at a different rank
(cyclically), so it is registered ``commutative_only`` and ``auto`` never picks it for a
non-commutative op. The hierarchical algorithm keeps rank order when each host's ranks are
contiguous (and is refused for a non-commutative op when they are not).
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .bcast import bcast_binomial
from .blocks import as_bytes, even_bounds
from .cost import Layout, ceil_log2, floor_log2, halving_path, not_pow2, segments
from .groups import GroupChannel
from .peers import (
    GROUP_LEADER,
    fold_power_of_two,
    host_leaders,
    host_of,
    ring_neighbours,
    unfold_rank,
)
from .reduce import reduce_and_swap, reduce_binomial
from .reduction import Operand, fold_in, received
from .registry import INTER, algorithm, algorithms, cheapest, flat_cost
from .schedule import Channel, Schedule
from .segment import pieces, reduce_slots
from .slots import SEQ_BITS


def _pof2(p: int) -> int:
    """q = 2^floor(log2 p): the ranks left after the fold."""
    return 1 << floor_log2(p)


def _fold_steps(p: int) -> int:
    """Extra full-vector steps a non-power-of-two p costs the folding algorithms (0 or 2)."""
    return 2 * not_pow2(p)


def _ring_path(m, p: int, n: float) -> list:
    """The ring's critical path: 2(p-1) block steps, each waiting for the first of its S
    segments (the others follow in its shadow)."""
    pieces = min(MAX_RING_SEGMENTS, segments(n / max(p, 1), m.segment))
    return [n / max(p, 1) / pieces] * 2 * (p - 1)


@algorithm("allreduce", "binomial", path=lambda m, p, n: [n] * 2 * ceil_log2(p),
           formula="2·⌈log2 p⌉·(α + n·β) + ⌈log2 p⌉·n·γ",
           messages=lambda m, p, n: 2 * (p - 1),
           volume=lambda p, n: 2 * (p - 1) * n, local=lambda p, n: (p - 1) * n)
def allreduce_binomial(ch: Channel, red: Operand, data: Any) -> Schedule:
    """Binomial reduce to rank 0, then binomial broadcast: 2·ceil(log2 p) steps;
    time 2·ceil(log2 p)·(α + nβ) + ceil(log2 p)·nγ; volume 2(p-1)·n, (p-1)·n reduced.

    Reduce (:func:`~minimpi.coll.reduce.reduce_binomial` to root 0), step k (mask = 2^k):
    a rank with bit k set sends its partial result (ranks [rank, rank + mask)) to
    rank - mask and is done; the receiver appends it on the right (acc = acc op received).
    Broadcast (:func:`~minimpi.coll.bcast.bcast_binomial` from root 0): the same tree
    backwards, largest subtree first.
    """
    ch.phase("reduce to rank 0")
    result = yield from reduce_binomial(ch, red, data, 0)
    ch.phase("broadcast from rank 0")
    # rank 0 sends the result; the others receive it into ``data`` (or as an object)
    return (yield from bcast_binomial(ch, result if ch.rank == 0 else data, 0))


@algorithm("allreduce", "recursive_doubling",
           path=lambda m, p, n: [n] * (floor_log2(p) + 2 * not_pow2(p)),
           formula="(⌊log2 p⌋ + 2·f)·(α + n·β) + (⌊log2 p⌋ + f)·n·γ",
           messages=lambda m, p, n: _pof2(p) * floor_log2(p) + 2 * (p - _pof2(p)),
           volume=lambda p, n: _pof2(p) * floor_log2(p) * n + 2 * (p - _pof2(p)) * n,
           local=lambda p, n: _pof2(p) * floor_log2(p) * n + (p - _pof2(p)) * n)
def allreduce_recursive_doubling(ch: Channel, red: Operand, data: Any) -> Schedule:
    """Recursive doubling: log2 p steps of full-vector exchanges (+2 when p is not a power of
    two); time (log2 p + f)·(α + nβ) + (log2 p + f/2)·nγ, f = 0 or 2. Every rank sends
    and receives the whole vector each step: volume q·log2 q·n + 2(p-q)·n, q·log2 q·n +
    (p-q)·n reduced (q = 2^floor(log2 p)) - the most of any allreduce.

    Step k (mask = 2^k): exchange everything with newrank ^ mask and combine, the lower
    partner's partial on the left. Any p: first fold (the even rank of each of the first
    ``rem`` pairs hands its vector to the odd one and sits out), at the end unfold (the odd
    rank hands the result back).
    """
    p, rank = ch.size, ch.rank
    pof2, rem, newrank = fold_power_of_two(rank, p)
    data = yield from fold_in(ch, red, data)          # fold (p not a power of two)
    tmp = red.slot(data)
    ch.phase("recursive doubling")
    if newrank >= 0:
        mask = 1
        while mask < pof2:
            partner = unfold_rank(newrank ^ mask, rem)
            req = ch.irecv(tmp, partner)
            yield [req, ch.isend(data, partner)]
            got = received(req, tmp)
            data = red.lower_into(got, data) if partner < rank else red.into_lower(data, got)
            mask <<= 1
    ch.phase("unfold")
    if rank < 2 * rem:                                # unfold
        if newrank >= 0:
            yield [ch.isend(data, rank - 1)]
        else:
            back = None if red.objects else data      # the result lands in our buffer
            req = ch.irecv(back, rank + 1)
            yield [req]
            data = received(req, back)
    return data


@algorithm("allreduce", "rabenseifner", path=lambda m, p, n: halving_path(p, n),
           formula="(2·⌊log2 p⌋ + 2·f)·α + (2·(p-1)/p + 2·f)·n·β + ((p-1)/p + f)·n·γ", objects=False,
           messages=lambda m, p, n: 2 * _pof2(p) * floor_log2(p) + 2 * (p - _pof2(p)),
           volume=lambda p, n: 2 * (_pof2(p) - 1) * n + 2 * (p - _pof2(p)) * n,
           local=lambda p, n: (p - 1) * n)
def allreduce_rabenseifner(ch: Channel, red: Operand, data: np.ndarray) -> Schedule:
    """Rabenseifner: reduce-scatter by recursive halving, then allgather by recursive doubling.

    2·log2 p steps (+2 when p is not a power of two, as in recursive doubling); time
    2·log2 p·α + 2·((p-1)/p)·nβ + ((p-1)/p)·nγ - the bandwidth of the ring with the latency
    of a tree; volume 2(q-1)·n + 2(p-q)·n, (p-1)·n reduced (q = 2^floor(log2 p)). Halving runs with distance 1, 2, 4, ... so the partners' partial results always
    cover adjacent rank ranges: non-commutative ops are fine.

    Halving step (mask = 2^k): split the current window in two; the lower partner keeps the
    lower half and sends the upper one (and vice versa), then reduces what it receives into
    the half it keeps. Doubling retraces the windows backwards, swapping halves.
    """
    p, rank = ch.size, ch.rank
    unit = red.datatype.base_count if red.datatype is not None else 1
    n_items = data.size // unit
    pof2, rem, newrank = fold_power_of_two(rank, p)
    data = yield from fold_in(ch, red, data)          # fold (whole vectors)
    ch.phase("reduce-scatter (recursive halving)")
    if newrank >= 0:
        tmp = ch.scratch((n_items - n_items // 2) * unit, data.dtype, "tmp")
        lo, hi = 0, n_items                           # window, in items
        windows = []
        mask = 1
        while mask < pof2:                            # reduce-scatter: recursive halving
            partner = unfold_rank(newrank ^ mask, rem)
            mid = lo + (hi - lo) // 2
            keep, give = ((lo, mid), (mid, hi)) if newrank & mask == 0 else ((mid, hi), (lo, mid))
            kept = data[keep[0] * unit:keep[1] * unit]
            piece = tmp[:kept.size]
            yield [ch.irecv(piece, partner), ch.isend(data[give[0] * unit:give[1] * unit], partner)]
            if partner < rank:
                red.lower_into(piece, kept)
            else:
                red.into_lower(kept, piece)
            windows.append((lo, hi))
            lo, hi = keep
            mask <<= 1
        ch.phase("allgather (recursive doubling)")
        while windows:                                # allgather: recursive doubling
            mask >>= 1
            partner = unfold_rank(newrank ^ mask, rem)
            wlo, whi = windows.pop()
            other = (hi, whi) if lo == wlo else (wlo, lo)
            yield [ch.irecv(data[other[0] * unit:other[1] * unit], partner),
                   ch.isend(data[lo * unit:hi * unit], partner)]
            lo, hi = wlo, whi
    ch.phase("unfold")
    if rank < 2 * rem:                                # unfold
        if newrank >= 0:
            yield [ch.isend(data, rank - 1)]
        else:
            yield [ch.irecv(data, rank + 1)]
    return data


#: the ring cuts each block step into at most this many segments
MAX_RING_SEGMENTS = 8


def _ring_cost(m, p, n):
    s = min(MAX_RING_SEGMENTS, segments(n / max(p, 1), m.segment))
    return 2 * (p - 1) * m.alpha + (p - 1) * (s - 1) * m.alpha / 4 \
        + 2 * (p - 1) / p * n * m.beta + (p - 1) / p * n * m.gamma / min(s, 2)


@algorithm("allreduce", "ring", path=lambda m, p, n: _ring_path(m, p, n),
           formula="2·(p-1)·α + (p-1)·(S-1)·α/4 + 2·(p-1)/p·n·β + (p-1)/p·n·γ/min(S, 2); S = min(8, max(1, ⌈n/p/segment⌉))", objects=False, commutative_only=True, reads_sendbuf=True,
           messages=lambda m, p, n: p * (p - 1) * (1 + min(MAX_RING_SEGMENTS, segments(n / max(p, 1), m.segment))),
           volume=lambda p, n: 2 * (p - 1) * n, local=lambda p, n: (p - 1) * n)
def allreduce_ring(ch: Channel, red: Operand, data: np.ndarray, segment: int = 0,
                    contribution: Optional[np.ndarray] = None) -> Schedule:
    """Ring: reduce-scatter around the ring, then allgather around it; 2(p-1) block steps.

    Time 2(p-1)·α + (p-1)(S-1)·α/4 + 2·((p-1)/p)·nβ + ((p-1)/p)·nγ/min(S, 2), with S the
    segments per block step (below): each rank sends and receives only 2(p-1)/p of the
    vector, the least any algorithm can; volume 2(p-1)·n, (p-1)·n reduced. The vector is
    cut into p blocks.

    Reduce-scatter, step k = 0..p-2: send block (rank-k-1) to the right, receive block
    (rank-k-2) from the left and reduce our contribution into it; after p-1 steps rank r
    holds the complete block r. Each block step is cut into S segments of about ``segment``
    bytes (``MINIMPI_COST_SEGMENT``), but at most ``MAX_RING_SEGMENTS`` (larger blocks get
    larger segments: each segment costs a rendezvous handshake): while segment t is being
    reduced, segment t+1 is already on the wire (its data was reduced S segments ago), so
    transfer and reduction overlap. The model charges each extra segment α/4 (its handshake
    overlaps the previous transfer: the (p-1)(S-1)·α/4 above) and hides half of the
    reduction time once S >= 2 (the /min(S, 2)); S = min(MAX_RING_SEGMENTS, ceil((n/p) /
    segment)).

    ``contribution``: our own vector when it is not already in ``data`` (``Allreduce``
    without ``IN_PLACE``). Then a partial result lands straight in ``data`` and our part is
    reduced into it there - no copy of the input, no temporaries. Otherwise it lands in one
    of two preallocated segment slots and is reduced into ``data``.

    Allgather, step k = 0..p-2: send block (rank-k), receive block (rank-k-1) straight into
    place. Block b is accumulated starting at rank b+1, so operands are combined in cyclic,
    not rank, order: commutative ops only.
    """
    p, rank = ch.size, ch.rank
    if p == 1:
        if contribution is not None:
            data[...] = contribution
        return data
    if not segment:
        segment = ch.model.segment
    left, right = ring_neighbours(rank, p)
    unit = red.datatype.base_count if red.datatype is not None else 1
    bounds = even_bounds(data.size // unit, p, unit)  # block b = [bounds[b], bounds[b+1])
    largest = bounds[1] - bounds[0]
    nseg = min(MAX_RING_SEGMENTS, -(-largest * data.itemsize // max(1, segment)))
    nseg = max(1, min(nseg, largest // unit))
    mine = data if contribution is None else contribution

    def piece(vector: np.ndarray, b: int, j: int) -> np.ndarray:
        """Segment j of block b of ``vector``."""
        lo, hi = bounds[b], bounds[b + 1]
        cut = even_bounds((hi - lo) // unit, nseg, unit)
        return vector[lo + cut[j]:lo + cut[j + 1]]

    if contribution is None:
        slot_size = even_bounds(largest // unit, nseg, unit)[1]
        slots = (ch.scratch(slot_size, data.dtype, "slot"), ch.scratch(slot_size, data.dtype, "slot"))
    # Reduce-scatter: unit t = (step k, segment j) sends segment j of block rank-k-1 (at
    # k = 0 our own contribution), receives segment j of block rank-k-2.
    work = [((rank - k - 1) % p, (rank - k - 2) % p, j) for k in range(p - 1) for j in range(nseg)]

    def post(t: int):
        sb, rb, j = work[t]
        dest = piece(data, rb, j)
        into = dest if contribution is not None else slots[t % 2][:dest.size]
        outgoing = piece(mine if t < nseg else data, sb, j)
        return t, into, dest, [ch.irecv(into, left), ch.isend(outgoing, right)]

    ch.phase("reduce-scatter")
    current = post(0)
    for t in range(len(work)):
        yield current[3]
        _, into, dest, _ = current
        ahead = t + 1 < len(work) and nseg > 1
        if ahead:                                     # next segment goes on the wire now
            current = post(t + 1)
        if contribution is None:
            red.lower_into(into, dest)
        else:
            sb, rb, j = work[t]
            red.lower_into(piece(contribution, rb, j), dest)
        if t + 1 < len(work) and not ahead:
            current = post(t + 1)
    # Allgather: pass the complete blocks around.
    ch.phase("allgather")
    for k in range(p - 1):
        sb, rb = (rank - k) % p, (rank - k - 1) % p
        yield [ch.irecv(data[bounds[rb]:bounds[rb + 1]], left),
               ch.isend(data[bounds[sb]:bounds[sb + 1]], right)]
    return data


#: what the leaders of each hierarchical allreduce choose from: the cheapest over the
#: inter-host link for H leaders and n bytes (:func:`~minimpi.coll.registry.cheapest`)
LEADERS = {"hierarchical": ("recursive_doubling", "rabenseifner"),
           "hierarchical_ring": ("ring",)}


def _hierarchical_phases(name, m, p, n, layout=None):
    """Each step of the hierarchical allreduce ``name`` and its predicted time."""
    t = layout or Layout.one_host(p)
    among = cheapest("allreduce", LEADERS[name], m, m.inter, t.hosts, n)
    return [(f"inside hosts: binomial reduce over {t.widest} ranks",
             flat_cost("reduce", "binomial", m, m.intra, t.widest, n)),
            (f"between hosts: {among} allreduce over {t.hosts} leaders",
             flat_cost("allreduce", among, m, m.inter, t.hosts, n)),
            (f"inside hosts: binomial bcast over {t.widest} ranks",
             flat_cost("bcast", "binomial", m, m.intra, t.widest, n))]


def _hierarchical_volume(p, n, layout=None):
    """Steps 1 and 3 send (p-H)·n each; the leaders 2(H-1)·n (ring, Rabenseifner for H a
    power of two; the contention bound does not decide where recursive doubling is taken)."""
    hosts = (layout or Layout.one_host(p)).hosts
    return 2 * (p - hosts) * n + 2 * (hosts - 1) * n


def _hierarchical_messages(m, p, n, layout=None):
    hosts = (layout or Layout.one_host(p)).hosts
    return 2 * (p - hosts) + 2 * hosts * ceil_log2(hosts)


def _two_levels(ch: Channel, red: Operand, data: Any, name: str) -> Schedule:
    """The steps of :func:`allreduce_hierarchical` (``name`` says what the leaders run)."""
    groups = ch.host_groups
    home = groups[host_of(ch.rank, groups)]
    host = GroupChannel(ch, home)
    ch.phase("1. reduce inside each host")
    acc = yield from reduce_binomial(host, red, data, 0)     # 1. inside my host
    ch.phase("2. allreduce among the host leaders")
    if host.rank == 0:                                        # 2. between hosts (leaders)
        leaders = GroupChannel(ch, host_leaders(groups))
        model = ch.model
        among = "recursive_doubling" if red.objects else cheapest(
            "allreduce", LEADERS[name], model, model.inter, leaders.size, data.nbytes)
        acc = yield from algorithms("allreduce")[among](leaders, red, acc)
    # 3. inside my host: the leader sends the result; the others receive it into ``data``
    ch.phase("3. broadcast inside each host")
    return (yield from bcast_binomial(host, acc if host.rank == 0 else data, 0))


@algorithm("allreduce", "hierarchical", hierarchical=True, order_needs_contiguous_hosts=True,
           path=lambda m, p, n: [n] * 2 * ceil_log2(p),
           phases=lambda m, p, n, layout=None: _hierarchical_phases("hierarchical", m, p, n, layout),
           cost=lambda m, p, n, layout=None: sum(
               t for _, t in _hierarchical_phases("hierarchical", m, p, n, layout)),
           messages=_hierarchical_messages, volume=_hierarchical_volume,
           local=lambda p, n, layout=None: (p - 1) * n)
def allreduce_hierarchical(ch: Channel, red: Operand, data: Any) -> Schedule:
    """Three steps: reduce inside each host, allreduce among one leader per host, broadcast
    inside each host.

    With H hosts and at most L ranks on one: time ceil(log2 L)·(α_i + nβ_i + nγ) + A(H) +
    ceil(log2 L)·(α_i + nβ_i) (i: within a host), where A(H) is the leaders' allreduce over
    the inter-host link: recursive doubling's or Rabenseifner's formula with α_e, β_e,
    whichever is less (:func:`~minimpi.coll.registry.cheapest`; objects: recursive
    doubling); volume 2(p-H)·n plus the leaders'. Only the leaders' step crosses hosts:
    2(H-1)/H·n per host with Rabenseifner (H a power of two), where a flat ring over
    interleaved hosts sends 2(p-1)/p·n across from every rank.

    1. Inside each host: :func:`~minimpi.coll.reduce.reduce_binomial` to the host's lowest
       rank, its leader.
    2. Between hosts: the leaders, in host order, run :func:`allreduce_recursive_doubling`
       (small n: log2 H steps) or :func:`allreduce_rabenseifner` (large n).
    3. Inside each host: :func:`~minimpi.coll.bcast.bcast_binomial` from the leader.

    Operand order: steps 1 and 2 combine ranks, then hosts, in order, so the result is in
    rank order when each host's ranks are contiguous; when hosts interleave it is not, and
    the registry refuses a non-commutative op.
    """
    return (yield from _two_levels(ch, red, data, "hierarchical"))


@algorithm("allreduce", "hierarchical_ring", hierarchical=True, commutative_only=True,
           path=lambda m, p, n: [n] * 2 * ceil_log2(p),
           objects=False,
           phases=lambda m, p, n, layout=None: _hierarchical_phases("hierarchical_ring", m, p, n,
                                                                    layout),
           cost=lambda m, p, n, layout=None: sum(
               t for _, t in _hierarchical_phases("hierarchical_ring", m, p, n, layout)),
           messages=_hierarchical_messages, volume=_hierarchical_volume,
           local=lambda p, n, layout=None: (p - 1) * n)
def allreduce_hierarchical_ring(ch: Channel, red: Operand, data: np.ndarray) -> Schedule:
    """As the hierarchical allreduce, but the leaders run the ring: 2(H-1)/H·n per leader
    for any number of hosts H.

    Time ceil(log2 L)·(α_i + nβ_i + nγ) + R(H) + ceil(log2 L)·(α_i + nβ_i), R(H) the
    ring's formula (:func:`allreduce_ring`) over H leaders with α_e, β_e. Rabenseifner
    pays two extra whole-vector steps between hosts when H is not a power of two (3 hosts:
    3n per leader where the ring sends 4n/3); the ring combines in ring order, so
    commutative ops only.
    """
    return (yield from _two_levels(ch, red, data, "hierarchical_ring"))


@algorithm("allreduce", "segment", segment=True, reads_sendbuf=True, objects=False,
           formula="c·α/2 + (c-1)·o·α/4 + (p-1)·n·(β + γ); c = max(1, ⌈n/16384⌉)",
           messages=lambda m, p, n: p, volume=lambda p, n: 0,
           local=lambda p, n: p * p * n)
def allreduce_segment(ch: Channel, red: Operand, data: np.ndarray,
                      contribution: Optional[np.ndarray] = None) -> Schedule:
    """Meet in the communicator's shared segment (ranks on one host): each rank copies its
    vector into its slot and publishes the call; once every rank has, each reduces the p
    slots in rank order into its own result. One step and one wake-up at most per rank for
    a vector that fits a slot (larger ones go through in slot-sized pieces, a step each),
    no message; time α/2 + (p-1)·n·(β + γ) (the α of a meeting in memory: no frame, no
    matching, priced at half a message step), every rank reading all p vectors.

    Step: write slot ``rank`` of call k, publish k (the last writer wakes whoever sleeps);
    wait until all p slots carry k; result = x0 (op) x1 (op) ... (op) x[p-1] - rank order,
    so any op, commutative or not.
    """
    seg = ch.segment()
    p, rank = ch.size, ch.rank
    sig = ch.tag >> SEQ_BITS
    mine = as_bytes(data if contribution is None else contribution)
    out = as_bytes(data)
    dtype = data.dtype
    unit = (red.datatype.base_count if red.datatype is not None else 1) * data.itemsize
    everyone = range(p)
    parts = pieces(mine.nbytes, seg.slot, unit)
    for k, part in zip(seg.reserve(len(parts)), parts):
        lo, hi = part.start, part.stop
        yield [seg.free_for(ch, k)]              # (the area k uses was read by everyone)
        seg.area(rank, k, hi - lo)[...] = mine[lo:hi]
        seg.publish(k, sig, call=ch)
        yield [seg.wait_for(ch, k, everyone)]
        seg.check(k, sig, everyone, ch)
        reduce_slots(seg, k, hi - lo, everyone, red, out[lo:hi].view(dtype))
        seg.finished(k)
    return data


# -- intercommunicators (two groups; see minimpi.coll.twogroups) -------------------------
@algorithm("allreduce", "leaders_swap", kinds=(INTER,),
           formula="(2·⌈log2 p⌉ + 1)·(α + n·β) + ⌈log2 p⌉·n·γ",
           messages=lambda m, p, n: 4 * p - 2, volume=lambda p, n: (4 * p - 2) * n,
           local=lambda p, n: 2 * (p - 1) * n)
def allreduce_leaders_swap(remote: Channel, local: Channel, red: Operand, data: Any,
                           out: Any) -> Schedule:
    """Each group reduces to its leader, the leaders swap their results, each leader
    broadcasts what it received in its group: (2·⌈log2 p⌉ + 1)·(α + n·β) + ⌈log2 p⌉·n·γ.

    So each group gets the reduction of the other group's data (in ``out``). Object mode:
    returns the reduced object.
    """
    into = None if remote.objects else out
    result = yield from reduce_and_swap(remote, local, red, data, into)
    if local.rank != GROUP_LEADER:
        result = into
    local.phase("3. broadcast in each group")
    return (yield from bcast_binomial(local, result, GROUP_LEADER))
