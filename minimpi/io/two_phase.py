"""Collective data access (``Write_at_all``, ``Read_all``...): independent or two-phase.

Every collective access starts with one small exchange: each rank tells the others the
file range its access spans, its bytes and its number of file runs (or the error its
arguments raised, so that no rank is left waiting). From these every rank computes the
same :class:`Plan`, priced by a small cost model:

* **independent**: each rank does its own ``pwrite``/``preadv`` per run. Cost: each rank's
  ``runs x CALL + bytes x IO_BYTE`` (``CALL``: ``WRITE_CALL`` or ``READ_CALL``), summed over
  the ranks for writes (the kernel takes writes to one file in turn), the slowest rank's
  for reads; reads of runs with small holes are sieved (posix.read_runs: one call per
  ``SIEVE_BUFFER`` of extent, holes read too, the data copied out).
* **two-phase** (the ROMIO idea): ``A`` aggregator ranks each own one contiguous file
  domain (the accessed range cut in ``A`` equal, block-aligned parts). Phase 1: every
  rank cuts its runs at the domain boundaries and sends each aggregator its pieces (file
  offsets and lengths, then the data) with ``Alltoallv``; phase 2: each aggregator sorts
  the pieces by offset, joins the adjacent ones and writes them with few large
  ``pwrite`` calls (reads run the phases backwards). Cost: the exchange
  (``bytes x NET_BYTE`` plus a message per aggregator) plus the aggregators' reordering
  (their bytes x ``COPY_BYTE``) and I/O (merged runs x ``CALL`` + bytes x ``IO_BYTE``,
  summed over the aggregators for writes).

Two-phase wins when the ranks' accesses interleave in many small runs (strided views,
cyclic distributions), since the aggregators' merged runs are long; a rank-per-block
pattern stays independent. The choice can be forced with the info hints ROMIO uses,
``romio_cb_write``/``romio_cb_read`` = ``enable``/``disable``/``automatic``, or with
``MINIMPI_IO_COLLECTIVE=two_phase|independent|auto``; ``cb_nodes`` sets the number of
aggregators (default: every rank) and ``cb_buffer_size`` how much of its domain an
aggregator holds at once (default 16 MiB; a larger domain takes several rounds). :func:`plan` is pure (no communication), so
``Plan.explain()`` can say why a call went the way it did; ``MINIMPI_IO_EXPLAIN=1`` makes
rank 0 print it for every collective call.

Errors: after the I/O every rank learns whether another failed (state.agree), so a
collective call that failed anywhere raises everywhere - no rank reports success for a
partly written file.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from ..data.datatypes import BYTE, INT64_T
from ..p2p.request import Status
from . import runs as R
from .datarep import from_file, to_file
from .independent import io_status
from .open_file import OpenFile, agree, failure_of
from .posix import SIEVE_BUFFER, SIEVE_MAX_HOLE, read_runs, write_runs
from .userbuf import Incoming, Outgoing

# cost model (seconds), measured on a 2-core development machine with the page cache
# warm: one pwrite call from Python (the file system's per-write work makes it dearer than
# a read), one preadv call, one byte to or from the page cache, one byte between ranks
# (Alltoallv over shared memory at p = 4, copies included), one message, one byte copied
# in memory
WRITE_CALL = 12e-6
READ_CALL = 2.5e-6
IO_BYTE = 1 / 5e9
NET_BYTE = 1 / 0.7e9
MESSAGE = 25e-6
COPY_BYTE = 1 / 1e9
DOMAIN_ALIGN = 4096      # file domains start on block boundaries (no shared blocks)
CB_BUFFER_SIZE = 16 * 2**20   # bytes of its domain an aggregator handles per round


@dataclass(frozen=True)
class Summary:
    """One rank's access, as the plan needs it."""
    lo: int
    hi: int
    nbytes: int
    nruns: int


@dataclass(frozen=True)
class Plan:
    """How one collective access runs (the same on every rank)."""
    method: str                    # "independent" or "two_phase"
    reason: str
    independent_cost: float
    two_phase_cost: float
    aggregators: tuple = ()        # ranks owning a domain, in domain order
    bounds: tuple = ()             # part k of domain d is [bounds[d*R+k], bounds[d*R+k+1])
    rounds: int = 1                # R: each domain is done in R parts, one per round

    def explain(self) -> str:
        lines = [f"{self.method}: {self.reason}",
                 f"  cost model: independent {self.independent_cost * 1e3:.3f} ms, "
                 f"two-phase {self.two_phase_cost * 1e3:.3f} ms"]
        R = self.rounds
        for d, agg in enumerate(self.aggregators):
            lines.append(f"  aggregator rank {agg}: file bytes [{self.bounds[d * R]}, "
                         f"{self.bounds[(d + 1) * R]})" + (f" in {R} rounds" if R > 1 else ""))
        return "\n".join(lines)


def summarize(offs: np.ndarray, lens: np.ndarray) -> Summary:
    """One rank's access summary from its file runs (sorted, as a view gives them)."""
    if not len(offs):
        return Summary(0, 0, 0, 0)
    return Summary(int(offs[0]), int(offs[-1] + lens[-1]), int(lens.sum()), len(offs))


@dataclass(frozen=True)
class AggregatorRound:
    """What one aggregator does in one round of a two-phase plan."""
    aggregator: int                # its rank
    round: int
    domain: tuple                  # file bytes [lo, hi) of this part of its domain
    pieces: int                    # pieces it receives (writes) or sends (reads)
    nbytes: int
    senders: int                   # ranks with at least one piece for it
    io_calls: int                  # pwrite/preadv calls: its pieces joined where adjacent


def schedule(p: Plan, rank_runs: Sequence[tuple]) -> list:
    """The work of every aggregator in every round of plan ``p``, given each rank's file
    runs ``(offsets, lengths)`` (pure: no communication). It cuts the runs with
    :class:`Pieces` and joins them as the aggregators do, so it counts the I/O calls a
    real call makes."""
    if p.method != "two_phase":
        return []
    per_round = [[] for _ in range(p.rounds)]       # round -> per rank (meta, counts)
    for offs, lens in rank_runs:
        pieces = Pieces(p, np.asarray(offs, np.int64), np.asarray(lens, np.int64))
        for k in range(p.rounds):
            meta, piece_counts, meta_displs, _bc, _bd = pieces.for_round(k, len(rank_runs))
            per_round[k].append((meta, piece_counts, meta_displs))
    rows = []
    R_ = p.rounds
    for k in range(p.rounds):
        for d, agg in enumerate(p.aggregators):
            parts = [meta[int(displs[agg]):int(displs[agg] + counts[agg])]
                     for meta, counts, displs in per_round[k]]
            their = np.concatenate(parts) if parts else np.zeros((0, 2), np.int64)
            order, _rp, _sp, _sl, (m_off, _m_len) = _sorted_layout(their[:, 0], their[:, 1])
            rows.append(AggregatorRound(
                agg, k, (p.bounds[d * R_ + k], p.bounds[d * R_ + k + 1]), len(their),
                int(their[:, 1].sum()), sum(1 for part in parts if len(part)), len(m_off)))
    return rows


def _forced(hints: dict, write: bool) -> Optional[str]:
    env = os.environ.get("MINIMPI_IO_COLLECTIVE", "").strip().lower()
    if env in ("two_phase", "independent"):
        return env
    value = hints.get("romio_cb_write" if write else "romio_cb_read", "").lower()
    return {"enable": "two_phase", "disable": "independent"}.get(value)


def _int_hint(hints: dict, key: str, default: int) -> int:
    """An integer hint; one that is not a number is ignored, as MPI says of bad hints."""
    try:
        return int(hints.get(key, default))
    except (TypeError, ValueError):
        return default


def independent_read_calls(s: Summary) -> int:
    """``preadv`` calls of one rank's independent read, as posix.read_runs sieves it when
    the holes between its runs are small on average."""
    holes = (s.hi - s.lo) - s.nbytes
    if s.nruns > 1 and holes <= SIEVE_MAX_HOLE * (s.nruns - 1):
        return min(s.nruns, -(-(s.hi - s.lo) // SIEVE_BUFFER))
    return s.nruns


def independent_read_cost(s: Summary) -> float:
    """One rank's independent read: its calls, and the bytes they read (with sieving, the
    holes too, and a copy of the data out of the sieve buffer)."""
    calls = independent_read_calls(s)
    if calls == s.nruns:
        return calls * READ_CALL + s.nbytes * IO_BYTE
    return calls * READ_CALL + (s.hi - s.lo) * IO_BYTE + s.nbytes * COPY_BYTE


def plan(summaries: Sequence[Summary], hints: dict, write: bool) -> Plan:
    """Choose independent or two-phase for these ranks' accesses (pure function)."""
    active = [s for s in summaries if s.nbytes]
    P = len(summaries)
    if not active:
        return Plan("independent", "no data to move", 0.0, 0.0)
    lo = min(s.lo for s in active)
    hi = max(s.hi for s in active)
    total = sum(s.nbytes for s in active)
    nagg = max(1, min(P, _int_hint(hints, "cb_nodes", P)))
    # Writes to one file take turns in the kernel (one lock per inode on local file
    # systems): the ranks' write costs add up. Reads of one file run side by side.
    call = WRITE_CALL if write else READ_CALL
    each = [s.nruns * call + s.nbytes * IO_BYTE if write else independent_read_cost(s)
            for s in active]
    independent = sum(each) if write else max(each)
    # interleaved: some rank's range overlaps the next one's (sorted by start)
    ranges = sorted((s.lo, s.hi) for s in active)
    interleaved = any(b[0] < a[1] for a, b in zip(ranges, ranges[1:]))
    dense = total >= 0.9 * (hi - lo)
    runs_total = sum(s.nruns for s in active)
    merged_runs = nagg if (interleaved and dense) else max(nagg, runs_total)
    per_agg_bytes = total / nagg
    exchange = max(s.nbytes * NET_BYTE + s.nruns * 16 * NET_BYTE for s in active) \
        + 3 * nagg * MESSAGE
    if write:
        storing = merged_runs * call + total * IO_BYTE
    else:
        storing = (merged_runs / nagg) * call + per_agg_bytes * IO_BYTE
    two_phase = exchange + storing + per_agg_bytes * COPY_BYTE
    forced = _forced(hints, write)
    if forced == "independent" or (forced is None and (P == 1 or two_phase >= independent)):
        why = ("forced by hint" if forced else
               "one process" if P == 1 else
               "cheaper: " + ("accesses do not interleave" if not interleaved
                              else "runs are long enough"))
        return Plan("independent", why, independent, two_phase)
    step = -(-(hi - lo) // nagg)
    step = -(-step // DOMAIN_ALIGN) * DOMAIN_ALIGN
    cuts = [lo] + [min(hi, (lo // DOMAIN_ALIGN) * DOMAIN_ALIGN + step * d)
                   for d in range(1, nagg)] + [hi]
    cuts = [max(lo, c) for c in cuts]
    aggregators = tuple((d * P) // nagg for d in range(nagg))
    # an aggregator holds at most cb_buffer_size bytes of its domain at a time (ROMIO's
    # hint and default): a larger domain is done in several rounds, part by part
    buffer = max(DOMAIN_ALIGN, _int_hint(hints, "cb_buffer_size", CB_BUFFER_SIZE))
    rounds = max(1, max(-(-(b - a) // buffer) for a, b in zip(cuts, cuts[1:])))
    bounds = []
    for a, b in zip(cuts, cuts[1:]):
        part = -(-(b - a) // rounds)
        bounds += [min(b, a + k * part) for k in range(rounds)]
    bounds.append(hi)
    why = "forced by hint" if forced else (
        f"{runs_total} interleaved runs merge into about {merged_runs} on {nagg} aggregators")
    return Plan("two_phase", why, independent, two_phase, aggregators, tuple(bounds), rounds)


# ---------------------------------------------------------------------------- entry points
def collective_write(f: OpenFile, offset: Optional[int], buf: Any, call: str) -> Status:
    """``Write_at_all`` (offset given) or ``Write_all`` (individual pointer)."""
    err = None
    out = offs = lens = None
    try:
        f.check_not_sequential(call)
        f.check_can_write(call)
        out = Outgoing(buf, call, f.rank)
        etypes = f.etypes_of(out.nbytes, out.datatype, call)
        start = f.start_of(offset, call)
        offs, lens = f.view.runs(start, out.nbytes)
    except Exception as e:      # every rank hears of it (agree): none waits
        err = e
    the_plan = _exchange_summaries(f, offs, lens, err, call, write=True)
    err = None
    try:
        data = to_file(f.view.converter, out.data, out.datatype, f"{call} on rank {f.rank}")
        if the_plan.method == "two_phase":
            err = _two_phase_write(f, the_plan, offs, lens, data, call)
        else:
            with f.atomic_range(offs, lens, write=True):
                write_runs(f.fd, offs, lens, memoryview(data), f.where(call))
    except Exception as e:      # every rank hears of it (agree): none waits
        err = e
    agree(f.comm, err, call)
    if offset is None:
        f.position += etypes
    return io_status(out.nbytes)


def collective_read(f: OpenFile, offset: Optional[int], buf: Any, call: str) -> Status:
    """``Read_at_all`` (offset given) or ``Read_all`` (individual pointer)."""
    err = None
    inc = offs = lens = None
    try:
        f.check_not_sequential(call)
        f.check_can_read(call)
        inc = Incoming(buf, call, f.rank)
        f.etypes_of(inc.nbytes, inc.datatype, call)
        start = f.start_of(offset, call)
        offs, lens = f.view.runs(start, inc.nbytes)
        # only what lies before the end of the file is read (the rest of buf is untouched)
        nread = R.clip_to(offs, lens, f.file_size(call)) if len(offs) else 0
        offs, lens = R.trim(offs, lens, 0, nread)
    except Exception as e:      # every rank hears of it (agree): none waits
        err = e
    the_plan = _exchange_summaries(f, offs, lens, err, call, write=False)
    err = None
    try:
        if the_plan.method == "two_phase":
            _two_phase_read(f, the_plan, offs, lens, inc.data[:nread], call)
        else:
            with f.atomic_range(offs, lens, write=False):
                nread = read_runs(f.fd, offs, lens, memoryview(inc.data), f.where(call))
        from_file(f.view.converter, inc.data[:nread], inc.datatype,
                  f"{call} on rank {f.rank}")
        inc.finish(nread)
    except Exception as e:      # every rank hears of it (agree): none waits
        err = e
    agree(f.comm, err, call)
    if offset is None:
        f.position += nread // f.view.esize
    return io_status(nread)


def _exchange_summaries(f: OpenFile, offs, lens, err, call: str, write: bool) -> Plan:
    """The first exchange: everybody's access summary, or an argument error (then every
    rank raises)."""
    if err is None:
        mine = (summarize(offs, lens), None)
    else:
        mine = (None, failure_of(err))
    everyone = f.comm.allgather(mine)
    if err is not None or any(failure for _s, failure in everyone):
        agree(f.comm, err, call)
    if f.atomic:     # atomic mode: each rank's access locked as a whole, no reordering
        chosen = Plan("independent", "atomic mode", 0.0, 0.0)
    else:
        chosen = plan([s for s, _f in everyone], f.info, write)
    if f.explain and f.rank == 0:
        print(f"minimpi io: {call} on {f.path!r}: {chosen.explain()}", file=sys.stderr,
              flush=True)
    return chosen


# ---------------------------------------------------------------------------- two-phase
class Pieces:
    """This rank's runs cut at every domain part's bounds (in file order): per piece its
    offset, length, part (domain d, round k: part d*R+k) and where its data starts."""

    def __init__(self, p: Plan, offs, lens) -> None:
        self.off, self.len, self.part, self.data_pos = R.split_at(
            offs, lens, np.asarray(p.bounds, np.int64))
        self.plan = p

    def for_round(self, k: int, group_size: int):
        """The pieces of round ``k`` as (offset, length) pairs, and per rank of the group
        how many pieces and bytes go to it and where they start (its own pieces and data
        are consecutive: one domain part per aggregator per round)."""
        p = self.plan
        nagg = len(p.aggregators)
        sel = np.flatnonzero(self.part % p.rounds == k)
        domain = self.part[sel] // p.rounds
        lens = self.len[sel]
        npieces = np.bincount(domain, minlength=nagg).astype(np.int64)
        nbytes = np.bincount(domain, weights=lens, minlength=nagg).astype(np.int64)
        first_piece = np.cumsum(npieces) - npieces
        data_start = np.zeros(nagg, np.int64)
        some = npieces > 0
        data_start[some] = self.data_pos[sel][first_piece[some]]
        piece_counts, meta_displs, byte_counts, byte_displs = (
            np.zeros(group_size, np.int64) for _ in range(4))
        aggs = np.asarray(p.aggregators)
        piece_counts[aggs], meta_displs[aggs] = npieces, first_piece
        byte_counts[aggs], byte_displs[aggs] = nbytes, data_start
        meta = np.empty((len(sel), 2), np.int64)
        meta[:, 0], meta[:, 1] = self.off[sel], lens
        return meta, piece_counts, meta_displs, byte_counts, byte_displs


def _exchange_meta(f: OpenFile, meta, piece_counts, meta_displs):
    """Phase 1a: the aggregators learn every piece (offset, length) sent to them, and
    how many bytes come from each rank."""
    comm = f.comm
    incoming = np.zeros(f.size, np.int64)
    comm.Alltoall([piece_counts, INT64_T], [incoming, INT64_T])
    recv_displs = np.cumsum(incoming) - incoming
    their = np.empty((int(incoming.sum()), 2), np.int64)
    comm.Alltoallv([meta.reshape(-1), (piece_counts * 2, meta_displs * 2), INT64_T],
                   [their.reshape(-1), (incoming * 2, recv_displs * 2), INT64_T])
    their_len = their[:, 1]
    bytes_from = np.array([their_len[int(d):int(d + n)].sum()
                           for d, n in zip(recv_displs, incoming)], np.int64)
    return their[:, 0], their_len, bytes_from


def _sorted_layout(their_off, their_len):
    """The aggregator's pieces sorted by file offset: the order, where each piece sits in
    the received data and in the sorted buffer, and the merged runs of the sorted data."""
    recv_pos = np.cumsum(their_len) - their_len
    order = np.argsort(their_off, kind="stable")
    s_len = their_len[order]
    sorted_pos = np.cumsum(s_len) - s_len
    merged = R.merge_adjacent(their_off[order], s_len)
    return order, recv_pos, sorted_pos, s_len, merged


def _two_phase_write(f: OpenFile, p: Plan, offs, lens, data: np.ndarray, call: str
                     ) -> Optional[BaseException]:
    """Phase 1 (exchange) and phase 2 (aggregators write) once per round; a failing write
    is remembered and the rounds go on, so that every rank takes part in all of them."""
    pieces = Pieces(p, offs, lens)
    failure = None
    for k in range(p.rounds):
        meta, piece_counts, meta_displs, byte_counts, byte_displs = \
            pieces.for_round(k, f.size)
        their_off, their_len, bytes_from = _exchange_meta(f, meta, piece_counts, meta_displs)
        received = np.empty(int(bytes_from.sum()), np.uint8)
        f.comm.Alltoallv([data, (byte_counts, byte_displs), BYTE],
                         [received, (bytes_from, np.cumsum(bytes_from) - bytes_from), BYTE])
        if len(their_off) == 0 or failure is not None:
            continue
        order, recv_pos, sorted_pos, s_len, (m_off, m_len) = \
            _sorted_layout(their_off, their_len)
        if np.array_equal(order, np.arange(len(order))):
            ordered = received
        else:
            ordered = np.empty_like(received)
            R.gather_pieces(received, recv_pos[order], s_len, ordered)
        try:
            write_runs(f.fd, m_off, m_len, memoryview(ordered),
                       f.where(call + " (aggregator)"))
        except Exception as e:      # every rank hears of it (agree): none waits
            failure = e
    return failure


def _two_phase_read(f: OpenFile, p: Plan, offs, lens, target: np.ndarray, call: str) -> None:
    """The phases backwards, once per round: aggregators read their domain part and send
    each rank its pieces, which land in place in ``target`` (the packed data)."""
    pieces = Pieces(p, offs, lens)
    failure = None
    for k in range(p.rounds):
        meta, piece_counts, meta_displs, byte_counts, byte_displs = \
            pieces.for_round(k, f.size)
        their_off, their_len, bytes_from = _exchange_meta(f, meta, piece_counts, meta_displs)
        reply = np.zeros(int(bytes_from.sum()), np.uint8)
        if len(their_off) and failure is None:
            order, recv_pos, sorted_pos, s_len, (m_off, m_len) = \
                _sorted_layout(their_off, their_len)
            in_order = np.array_equal(order, np.arange(len(order)))
            ordered = reply if in_order else np.zeros(len(reply), np.uint8)
            try:
                read_runs(f.fd, m_off, m_len, memoryview(ordered),
                          f.where(call + " (aggregator)"))
            except Exception as e:      # every rank hears of it (agree): none waits
                failure = e
            if not in_order:
                # the reply in received order: piece i sits at sorted_pos[its place in order]
                where_sorted = np.empty_like(sorted_pos)
                where_sorted[order] = sorted_pos
                R.gather_pieces(ordered, where_sorted, their_len, reply)
        f.comm.Alltoallv([reply, (bytes_from, np.cumsum(bytes_from) - bytes_from), BYTE],
                         [target, (byte_counts, byte_displs), BYTE])
    if failure is not None:
        raise failure
