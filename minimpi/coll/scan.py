"""Scan and Exscan: rank r gets x0 (op) ... (op) xr (inclusive) or x0 (op) ... (op) x[r-1].

Two algorithms each, both in rank order, so they serve every op (commutative or not), and
each is written once for buffers and Python objects (:class:`~minimpi.coll.blocks.Operand`
does the combining; which side holds the lower ranks is always stated). Exscan leaves rank
0's receive buffer untouched (the object ``exscan`` returns None there), as mpi4py does.

``data`` is this rank's input (read-only); ``out`` its receive buffer (None for objects).
Costs use ``n`` = bytes of one rank's buffer.
"""
from __future__ import annotations

from typing import Any

from .blocks import as_bytes
from .cost import ceil_log2, segments, xor_exchanges
from .reduction import Operand, received
from .registry import algorithm
from .schedule import Channel, Schedule
from .segment import pieces, reduce_slots
from .slots import SEQ_BITS


def _doubling(ch: Channel, red: Operand, data: Any, out: Any, inclusive: bool) -> Schedule:
    """Recursive doubling shared by scan and exscan (see ``scan_binomial``)."""
    p, r = ch.size, ch.rank
    partial = red.copy(data, "partial")          # x of the 2^k-aligned block of ranks around r
    result = red.assign(out, data) if inclusive else out
    have = inclusive                    # exscan: nothing below rank r seen yet
    tmp = red.slot(data)
    mask = 1
    while mask < p:
        partner = r ^ mask
        if partner < p:
            req = ch.irecv(tmp, partner)
            yield [req, ch.isend(partial, partner)]
            got = received(req, tmp)
            if partner < r:             # got the block just below mine: lower ranks
                result = red.lower_into(got, result) if have else red.assign(result, got)
                have = True
                partial = red.lower_into(got, partial)
            else:                       # the block just above: higher ranks
                partial = red.into_lower(partial, got)
        mask <<= 1
    return result if have else None


def _chain(ch: Channel, red: Operand, data: Any, out: Any, inclusive: bool,
           segment: int) -> Schedule:
    """Pipelined chain shared by scan and exscan (see ``scan_ring``)."""
    p, r = ch.size, ch.rank
    left, right, last = r - 1, r + 1, r == p - 1
    if inclusive:                       # result = prefix (op) x_r, built in ``out`` and
        acc = red.assign(out, data)     # forwarded as it is
    else:                               # result = prefix, received straight into ``out``;
        acc = red.copy(data, "acc")          # prefix (op) x_r is forwarded
    fwd = red.pieces(acc, segment)
    n = len(fwd)
    if inclusive or red.objects:
        tmp = red.slot(fwd[0])          # one receive buffer, as large as the first piece
        slots = [None if tmp is None else tmp[:f.size] for f in fwd]
    else:
        slots = red.pieces(out, segment)
    result = [None] * n
    for i in range(n + 1):              # receive piece i while sending piece i-1
        step, req = [], None
        if r > 0 and i < n:
            req = ch.irecv(slots[i], left)
            step.append(req)
        if not last and i > 0:
            step.append(ch.isend(fwd[i - 1], right))
        if step:
            yield step
        if req is not None:
            got = received(req, slots[i])       # x0..x[r-1]: the lower side
            if inclusive:
                fwd[i] = red.lower_into(got, fwd[i])
            else:
                result[i] = got
                if not last:
                    fwd[i] = red.lower_into(got, fwd[i])
    if inclusive:
        return fwd[0] if red.objects else out
    if r == 0:
        return None
    return result[0] if red.objects else out


#: Scan and Exscan move the same data in the same steps, so they share their cost model.
#: Recursive doubling: ceil(log2 p)·(α + nβ + 2nγ); X(p) exchanges, up to 2·X(p)·n reduced.
DOUBLING_COST = dict(
    path=lambda m, p, n: [n] * ceil_log2(p),
    formula="⌈log2 p⌉·(α + n·β + 2·n·γ)",
    messages=lambda m, p, n: xor_exchanges(p),
    volume=lambda p, n: xor_exchanges(p) * n, local=lambda p, n: 2 * xor_exchanges(p) * n)
#: Pipelined chain with s segments: (p+s-2)·(α + (n/s)(β + γ)); (p-1)·n sent and reduced.
CHAIN_COST = dict(
    path=lambda m, p, n: [min(n, m.segment)] * (p + segments(n, m.segment) - 2),
    formula="(p + s - 2)·(α + min(n, segment)·(β + γ)); s = max(1, ⌈n/segment⌉)",
    messages=lambda m, p, n: (p - 1) * segments(n, m.segment),
    volume=lambda p, n: (p - 1) * n, local=lambda p, n: (p - 1) * n)


@algorithm("scan", "binomial", **DOUBLING_COST)
def scan_binomial(ch: Channel, red: Operand, data: Any, out: Any, segment: int = 0) -> Schedule:
    """Recursive doubling: ceil(log2 p) steps; time ceil(log2 p)·(α + nβ + 2nγ); volume
    X(p)·n, up to 2·X(p)·n reduced (X: :func:`~minimpi.coll.cost.xor_exchanges`, p·log2 p
    for a power of two: every rank sends its whole partial each step).

    Each rank keeps ``partial``, the reduction of its aligned block of 2^k ranks, and its
    ``result``. Step k: swap ``partial`` with ``rank XOR 2^k``. The partner's block is
    either just below (then ``partial = got (op) partial`` and ``result = got (op) result``)
    or just above (``partial = partial (op) got``), so rank order is kept.
    """
    return (yield from _doubling(ch, red, data, out, True))


@algorithm("scan", "ring", **CHAIN_COST)
def scan_ring(ch: Channel, red: Operand, data: Any, out: Any, segment: int = 256 * 1024) -> Schedule:
    """Pipelined chain 0 -> 1 -> ... -> p-1, in segments of ``segment`` bytes.

    Rank r receives the prefix x0..x[r-1] from r-1, combines ``prefix (op) x_r`` and sends
    it on, one segment behind. With s segments: p-1+s-1 steps; time
    (p+s-2)·(α + (n/s)(β + γ)); volume (p-1)·n, (p-1)·n reduced. Objects travel as one
    segment.
    """
    return (yield from _chain(ch, red, data, out, True, segment))


@algorithm("exscan", "binomial", **DOUBLING_COST)
def exscan_binomial(ch: Channel, red: Operand, data: Any, out: Any, segment: int = 0) -> Schedule:
    """Recursive doubling as for scan, but ``result`` starts empty: the first block from
    below is assigned, later ones combined. ceil(log2 p) steps; time
    ceil(log2 p)·(α + nβ + 2nγ); volume X(p)·n, up to 2·X(p)·n reduced."""
    return (yield from _doubling(ch, red, data, out, False))


@algorithm("exscan", "ring", **CHAIN_COST)
def exscan_ring(ch: Channel, red: Operand, data: Any, out: Any, segment: int = 256 * 1024) -> Schedule:
    """Pipelined chain: rank r receives x0..x[r-1] from r-1 straight into its result and
    sends ``prefix (op) x_r`` on. p-1+s-1 steps; time (p+s-2)·(α + (n/s)(β + γ)); volume
    (p-1)·n, (p-1)·n reduced."""
    return (yield from _chain(ch, red, data, out, False, segment))


#: every rank writes its vector once; rank r reads and reduces the r (or r + 1) below it
SEGMENT_COST = dict(
    formula="c·α/2 + (c-1)·o·α/4 + (p-1)·n·(β + γ); c = max(1, ⌈n/16384⌉)", objects=False, segment=True,
    messages=lambda m, p, n: p, volume=lambda p, n: 0, local=lambda p, n: p * n)


def _in_segment(ch: Channel, red: Operand, data: Any, out: Any, inclusive: bool) -> Schedule:
    """Scan (``inclusive``) or exscan in the communicator's shared segment."""
    seg = ch.segment()
    rank = ch.rank
    sig = ch.tag >> SEQ_BITS
    mine, result = as_bytes(data), as_bytes(out)
    dtype = data.dtype
    unit = (red.datatype.base_count if red.datatype is not None else 1) * data.itemsize
    below = range(rank + 1) if inclusive else range(rank)
    parts = pieces(mine.nbytes, seg.slot, unit)
    for k, part in zip(seg.reserve(len(parts)), parts):
        lo, hi = part.start, part.stop
        yield [seg.free_for(ch, k)]              # (the area k uses was read by everyone)
        seg.area(rank, k, hi - lo)[...] = mine[lo:hi]
        seg.publish(k, sig, call=ch)
        if below:
            yield [seg.wait_for(ch, k, below)]
            seg.check(k, sig, below, ch)
            reduce_slots(seg, k, hi - lo, below, red, result[lo:hi].view(dtype))
        seg.finished(k)
    return out if below else None


@algorithm("scan", "segment", **SEGMENT_COST)
def scan_segment(ch: Channel, red: Operand, data: Any, out: Any, segment: int = 0) -> Schedule:
    """Meet in the communicator's shared segment (ranks on one host): every rank copies its
    vector into its slot and publishes the call; rank r waits for ranks 0..r and reduces
    their slots in rank order (any op). One step for a vector that fits a slot (larger ones
    in slot-sized pieces); time α/2 + r·n·(β + γ) at rank r.
    """
    return (yield from _in_segment(ch, red, data, out, True))


@algorithm("exscan", "segment", **SEGMENT_COST)
def exscan_segment(ch: Channel, red: Operand, data: Any, out: Any, segment: int = 0) -> Schedule:
    """As ``scan_segment``, but rank r reduces the slots of ranks 0..r-1 (rank 0's result
    is left undefined, as MPI says); time α/2 + (r-1)·n·(β + γ) at rank r.
    """
    return (yield from _in_segment(ch, red, data, out, False))
