"""Draw the epochs and operations of a small real one-sided program (``minimpi draw rma``).

:func:`record` runs one of :data:`PATTERNS` on ``p`` threads over the in-process transport
(:func:`minimpi.runtime.inproc.run_threads`), with the window calls traced as
``minimpi run --trace`` traces them: :func:`minimpi.runtime.trace.attach` subscribes the
trace observer to each rank's engine and wraps every public ``Win`` method, so each call
(``Fence``, ``Lock``, ``Put`` ...) becomes a slice naming its window, its target rank and
its origin buffer's size. Nothing here re-implements the program's effect: the epochs are
read off the recorded sequence of calls, and the window contents shown are the real window
memory of every rank after the run. (As with ``--trace``, the wrappers stay installed in
the process afterwards; a call on an engine without a trace observer goes straight through.)

Patterns (each rank ``r`` contributes the value ``10 * (r + 1)``):

* ``fence`` - ``Fence``; ``Put`` my value into the right neighbour's window; ``Fence``;
  ``Get`` the left neighbour's window into ``got``; ``Fence(MODE_NOSUCCEED)``.
* ``lock`` - every rank ``Lock(0)`` / ``Accumulate(SUM)`` of its value / ``Unlock(0)`` on
  rank 0's counter (passive target: rank 0 opens no epoch for it).
* ``pscw`` - rank 0 exposes its window (``Post`` to ranks 1..P-1, ``Wait``); every other
  rank ``Start([0])`` / ``Put`` its value into slot ``r`` of rank 0 / ``Complete``.

Cost: one run of ``p`` threads (a few milliseconds) plus O(calls) bookkeeping.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from ..comm.communicator import endpoint_of
from ..constants import LOCK_EXCLUSIVE, MODE_NOPRECEDE, MODE_NOSUCCEED
from ..data.ops import SUM
from ..rma.window import Win
from ..runtime import trace
from ..runtime.inproc import run_threads
from .draw import (
    CHAR,
    FS_CELL,
    FS_SMALL,
    FS_TITLE,
    LETTERS,
    MAX_RANKS,
    PALETTE,
    DrawError,
    _wrap_px,
    svg_document,
    svg_escape,
)

#: calls that open an epoch -> its kind; calls that close one -> the kind they close
OPENS = {"Fence": "fence", "Lock": "lock", "Lock_all": "lock_all", "Post": "exposure",
         "Start": "pscw access"}
#: (``Win.Test`` is left out: the trace does not say whether it returned True)
CLOSES = {"Fence": "fence", "Unlock": "lock", "Unlock_all": "lock_all", "Wait": "exposure",
          "Complete": "pscw access"}
#: one-sided operations: name -> whether the data flows from the target to the origin
OPERATIONS = {"Put": False, "Rput": False, "Get": True, "Rget": True, "Accumulate": False,
              "Raccumulate": False, "Get_accumulate": True, "Rget_accumulate": True,
              "Fetch_and_op": True, "Compare_and_swap": True}


def _value(rank: int) -> int:
    return 10 * (rank + 1)


# ----------------------------------------------------------------------------------------
# the programs (the real API calls; they return the rank's local buffers besides the window)
# ----------------------------------------------------------------------------------------
def _fence(comm: Any, win: Win, mem: np.ndarray) -> Dict[str, np.ndarray]:
    r, p = comm.Get_rank(), comm.Get_size()
    got = np.zeros(1, dtype=np.int64)
    win.Fence(MODE_NOPRECEDE)
    win.Put(np.array([_value(r)], dtype=np.int64), (r + 1) % p, 0)
    win.Fence()
    win.Get(got, (r - 1) % p, 0)
    win.Fence(MODE_NOSUCCEED)
    return {"got": got}


def _lock(comm: Any, win: Win, mem: np.ndarray) -> Dict[str, np.ndarray]:
    r = comm.Get_rank()
    win.Lock(0, LOCK_EXCLUSIVE)
    win.Accumulate(np.array([_value(r)], dtype=np.int64), 0, 0, SUM)
    win.Unlock(0)
    return {}


def _pscw(comm: Any, win: Win, mem: np.ndarray) -> Dict[str, np.ndarray]:
    r, p = comm.Get_rank(), comm.Get_size()
    group = comm.Get_group()
    if r == 0:
        if p > 1:
            win.Post(group.Incl(list(range(1, p))))
            win.Wait()
    else:
        win.Start(group.Incl([0]))
        win.Put(np.array([_value(r)], dtype=np.int64), 0, r)
        win.Complete()
    return {}


@dataclass
class Pattern:
    program: Callable[[Any, Win, np.ndarray], Dict[str, np.ndarray]]
    slots: Callable[[int], int]          # p -> int64 elements in each rank's window
    summary: str                         # one line for --list and the title
    expect: str                          # what the window should hold, for the student


PATTERNS: Dict[str, Pattern] = {
    "fence": Pattern(_fence, lambda p: 1,
                     "active target, fences: each rank Puts its value into its right "
                     "neighbour's window, Fence, then Gets its left neighbour's window",
                     "rank r's window holds the value of rank r-1; its 'got' the value of "
                     "rank r-2"),
    "lock": Pattern(_lock, lambda p: 1,
                    "passive target: each rank Lock(0) / Accumulate(SUM) its value / "
                    "Unlock(0) on rank 0's counter",
                    "rank 0's window holds the sum of all values"),
    "pscw": Pattern(_pscw, lambda p: p,
                    "general active target: rank 0 Posts/Waits, ranks 1..P-1 Start/Put "
                    "their value into slot r of rank 0/Complete",
                    "slot r of rank 0's window holds rank r's value (slot 0 stays 0)"),
}


def list_text() -> str:
    """The patterns ``minimpi draw rma --pattern`` knows, one line each."""
    lines = ["rma   (minimpi draw rma --pattern NAME -n P)"]
    lines += [f"  {name:<20} {pat.summary}" for name, pat in PATTERNS.items()]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------
# what is recorded
# ----------------------------------------------------------------------------------------
@dataclass
class Operation:
    call: str           # "Put", "Get", "Accumulate", ...
    origin: int
    target: int
    nbytes: str         # the origin buffer's size as the trace prints it ("8 B")
    epoch: int          # index into the origin's epochs
    order: int          # position of the call among all recorded calls (by start time)

    @property
    def reads(self) -> bool:
        """Whether the data flows from the target to the origin (Get and the fetching
        accumulates)."""
        return OPERATIONS[self.call]


@dataclass
class Epoch:
    kind: str           # "fence", "lock", "lock_all", "exposure", "pscw access"
    rank: int
    opened_by: str      # "Fence", "Lock(0)", "Post", ...
    closed_by: Optional[str]
    start: int          # call order of the opening and closing calls
    end: int
    ops: List[Operation] = field(default_factory=list)
    #: operations of other ranks that land in this epoch (fence and exposure epochs)
    incoming: List[Operation] = field(default_factory=list)


@dataclass
class RmaRecord:
    pattern: str
    p: int
    epochs: List[List[Epoch]]                    # per rank, in order
    operations: List[Operation]
    windows: List[List[int]]                     # each rank's window after the run
    locals_: List[Dict[str, List[int]]]          # each rank's other result buffers
    calls: List[List[Tuple[int, str]]]           # per rank: (order, call text)
    summary: str = ""
    expect: str = ""
    #: operations on a passive target (no epoch of the target's own): target -> ops
    passive: Dict[int, List[Operation]] = field(default_factory=dict)
    #: the drawing's column of each call (by its order): see :func:`columns`
    column: Dict[int, int] = field(default_factory=dict)

    @property
    def ncolumns(self) -> int:
        return max(list(self.column.values()) + [-1]) + 1


_NAME = re.compile(r"^(\w+)(?: (.*))?$")


def record(pattern: str, p: int, timeout: float = 30.0) -> RmaRecord:
    """Run ``pattern`` on ``p`` threads and record its epochs and operations; DrawError for
    an unknown pattern or a bad ``p``."""
    pat = PATTERNS.get(pattern.lower()) if isinstance(pattern, str) else None
    if pat is None:
        raise DrawError(f"rma: no pattern {pattern!r}; the patterns are: "
                        f"{', '.join(PATTERNS)}")
    pattern = pattern.lower()
    if not 2 <= p <= MAX_RANKS:
        raise DrawError(f"-n {p}: one-sided drawings are for 2..{MAX_RANKS} ranks")

    def body(comm: Any) -> Tuple[List[dict], List[int], Dict[str, List[int]]]:
        engine = endpoint_of(comm).engine
        obs = trace.attach(engine, comm.Get_rank(), comm.Get_size(),
                           {trace.ENV_TRACE: "1"}, sync=False)
        try:
            mem = np.zeros(pat.slots(p), dtype=np.int64)
            comm.Barrier()
            win = Win.Create(mem, 8, None, comm)
            mine = pat.program(comm, win, mem)
            comm.Barrier()          # every rank's operations are complete everywhere
            window = [int(v) for v in mem]
            win.Free()
        finally:
            engine.bus.unsubscribe(obs)
        slices = [e for e in obs.events
                  if e.get("ph") == "X" and "win" in e.get("args", {})]
        return slices, window, {k: [int(v) for v in a] for k, a in mine.items()}

    results = run_threads(p, body, timeout=timeout)
    everything = sorted(((e["ts"], r, e) for r, (sl, _, _) in enumerate(results) for e in sl),
                        key=lambda t: (t[0], t[1]))
    calls: List[List[Tuple[int, str]]] = [[] for _ in range(p)]
    epochs: List[List[Epoch]] = [[] for _ in range(p)]
    ops: List[Operation] = []
    order = 0
    for _, rank, ev in everything:
        m = _NAME.match(ev["name"])
        name, size = (m.group(1), m.group(2) or "") if m else (ev["name"], "")
        args = ev.get("args", {})
        if name not in OPENS and name not in CLOSES and name not in OPERATIONS:
            continue        # Free, tomemory...: neither epochs nor operations
        peer = args.get("target_rank", args.get("rank"))
        text = f"{name}({peer})" if peer is not None else name
        calls[rank].append((order, text))
        mine = epochs[rank]
        if name in CLOSES:
            kind = CLOSES[name]
            for ep in reversed(mine):
                if ep.closed_by is None and ep.kind == kind and (
                        kind != "lock" or ep.opened_by == f"Lock({peer})"):
                    ep.closed_by, ep.end = text, order
                    break
        if name in OPENS:
            mine.append(Epoch(OPENS[name], rank, text, None, order, order))
        if name in OPERATIONS:
            ep = _covering(mine, int(peer))
            if ep is None:
                raise DrawError(f"rank {rank}: {text} outside any epoch (the run should have "
                                f"raised MPI_ERR_RMA_SYNC)")
            op = Operation(name, rank, int(peer), size, mine.index(ep), order)
            ep.ops.append(op)
            ops.append(op)
        order += 1
    for rank in range(p):     # the epoch the last Fence(MODE_NOSUCCEED) "opened" is none
        epochs[rank] = [e for e in epochs[rank]
                        if not (e.kind == "fence" and e.closed_by is None and not e.ops)]
        for e in epochs[rank]:
            if e.closed_by is None:
                e.end = order
        for op in ops:
            if op.origin == rank:
                op.epoch = next(i for i, e in enumerate(epochs[rank]) if op in e.ops)
    passive: Dict[int, List[Operation]] = {}
    for op in ops:
        ep = epochs[op.origin][op.epoch]
        if ep.kind == "fence":
            k = [e for e in epochs[op.origin] if e.kind == "fence"].index(ep)
            target = [e for e in epochs[op.target] if e.kind == "fence"]
            if k < len(target):
                target[k].incoming.append(op)
                continue
        if ep.kind == "pscw access":
            k = [e for e in epochs[op.origin] if e.kind == "pscw access"].index(ep)
            target = [e for e in epochs[op.target] if e.kind == "exposure"]
            if k < len(target):
                target[k].incoming.append(op)
                continue
        passive.setdefault(op.target, []).append(op)
    rec = RmaRecord(pattern, p, epochs, ops, [w for _, w, _ in results],
                    [loc for _, _, loc in results], calls,
                    summary=f"rma {pattern} on {p} ranks: {pat.summary}", expect=pat.expect,
                    passive=passive)
    rec.column = columns(rec)
    return rec


def columns(rec: RmaRecord) -> Dict[int, int]:
    """A column for each call, the smallest meeting: a rank's calls in increasing columns;
    the k-th ``Fence`` of every rank in one column; a PSCW access epoch starts no earlier
    than the exposure it targets and that exposure's ``Wait`` comes after its ``Complete``;
    an operation under an exclusive lock comes after the ``Unlock`` of the epoch that held
    the lock before it (the order the run granted them). Cost: O(calls * rounds)."""
    col = {o: 0 for row in rec.calls for o, _ in row}
    after: List[Tuple[int, int]] = []          # (a, b): col[b] >= col[a] + 1
    same: List[List[int]] = []
    fences = [[o for o, t in row if t == "Fence"] for row in rec.calls]
    for k in range(max(len(f) for f in fences) if fences else 0):
        same.append([f[k] for f in fences if k < len(f)])
    for r in range(rec.p):
        for e in rec.epochs[r]:
            for op in e.incoming:
                ep = rec.epochs[op.origin][op.epoch]
                if e.kind == "exposure":
                    after.append((e.start, ep.start))
                    after.append((ep.end, e.end))
    for target, inc in rec.passive.items():
        eps = sorted({id(rec.epochs[o.origin][o.epoch]): rec.epochs[o.origin][o.epoch]
                      for o in inc}.values(), key=lambda e: e.end)
        for prev, nxt in zip(eps, eps[1:]):
            first = nxt.ops[0].order if nxt.ops else nxt.end
            after.append((prev.end, first))
    for _ in range(4 * len(col) + 4):
        changed = False
        for row in rec.calls:
            for (a, _), (b, _) in zip(row, row[1:]):
                if col[b] < col[a] + 1:
                    col[b], changed = col[a] + 1, True
        for a, b in after:
            if col[b] < col[a] + 1:
                col[b], changed = col[a] + 1, True
        for group in same:
            top = max((col[o] for o in group), default=0)
            for o in group:
                if col[o] != top:
                    col[o], changed = top, True
        if not changed:
            break
    return col


def _covering(mine: List[Epoch], target: int) -> Optional[Epoch]:
    """The open access epoch an operation to ``target`` belongs to: a lock on it, then a
    PSCW access epoch, then a fence epoch (innermost first)."""
    open_ = [e for e in mine if e.closed_by is None]
    for e in reversed(open_):
        if e.kind == "lock" and e.opened_by == f"Lock({target})" or e.kind == "lock_all":
            return e
    for kind in ("pscw access", "fence"):
        for e in reversed(open_):
            if e.kind == kind:
                return e
    return None


# ----------------------------------------------------------------------------------------
# text
# ----------------------------------------------------------------------------------------
def _op_text(op: Operation, incoming: bool = False) -> str:
    what = f"{op.call} {op.nbytes}".strip()
    if incoming:
        return (f"{what} by rank {op.origin} (reads this window)" if op.reads
                else f"<- {what} from rank {op.origin}")
    return f"{what} {'<-' if op.reads else '->'} rank {op.target}"


def to_text(rec: RmaRecord) -> str:
    """Per rank: its epochs in order (kind, the calls that open and close it, the operations
    inside), then every rank's window after the run."""
    lines = [rec.summary, ""]
    for r in range(rec.p):
        lines.append(f"rank {r} ({LETTERS[r]}): calls {', '.join(t for _, t in rec.calls[r])}")
        if not rec.epochs[r]:
            lines.append("  (no epoch of its own)")
        for i, e in enumerate(rec.epochs[r]):
            lines.append(f"  epoch {i + 1}: {e.kind}, opened by {e.opened_by}, closed by "
                         f"{e.closed_by or '(still open)'}")
            for op in e.ops:
                lines.append(f"    {_op_text(op)}")
            for op in e.incoming:
                lines.append(f"    {_op_text(op, True)}")
        for op in rec.passive.get(r, []):
            lines.append(f"  passive target: {_op_text(op, True)} (epoch {op.epoch + 1} of "
                         f"rank {op.origin})")
    lines += ["", "after the run:"]
    for r in range(rec.p):
        extra = "".join(f"  {k} = {v}" for k, v in rec.locals_[r].items())
        lines.append(f"  rank {r}: window = {rec.windows[r]}{extra}")
    lines.append(f"  (expected: {rec.expect}; rank r's value is 10*(r+1))")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------
# SVG: one lane per rank, epochs as bands, operations as arrows
# ----------------------------------------------------------------------------------------
KIND_COLOR = {"fence": PALETTE[0], "lock": PALETTE[1], "lock_all": PALETTE[1],
              "exposure": PALETTE[2], "pscw access": PALETTE[4]}


def to_svg(rec: RmaRecord) -> str:
    """The record as a standalone SVG document."""
    col_w, lane_h, left = 78.0, 64.0, 110.0
    n = max(rec.ncolumns, 1)
    width = int(left + n * col_w + 20 + 0.999)
    width = max(width, 640)
    head: List[str] = []
    y = 10.0
    for line in _wrap_px(rec.summary, width - 20, FS_TITLE):
        y += FS_TITLE + 4
        head.append(f'<text x="10" y="{y:.1f}" font-size="{FS_TITLE}" font-weight="bold">'
                    f'{svg_escape(line)}</text>')
    y += FS_CELL + 6
    x = 10.0
    for k in ("fence", "lock", "exposure", "pscw access"):
        head.append(f'<rect x="{x:.1f}" y="{y - 10:.1f}" width="12" height="12" '
                    f'fill="{KIND_COLOR[k]}" fill-opacity="0.35" stroke="{KIND_COLOR[k]}"/>')
        head.append(f'<text x="{x + 16:.1f}" y="{y:.1f}" fill="#444">{svg_escape(k)} epoch'
                    f'</text>')
        x += 16 + (len(k) + 7) * CHAR * FS_CELL + 12
    top = y + 16

    def cx(order: int) -> float:
        return left + rec.column[order] * col_w + col_w / 2

    def lane_y(r: int) -> float:
        return top + r * lane_h + lane_h / 2

    body: List[str] = []
    for r in range(rec.p):
        ly = lane_y(r)
        body.append(f'<g class="lane" data-rank="{r}">')
        body.append(f'<text x="10" y="{ly + 4:.1f}" font-weight="bold">rank {r} '
                    f'({LETTERS[r]})</text>')
        body.append(f'<line x1="{left:.1f}" y1="{ly:.1f}" x2="{left + n * col_w:.1f}" '
                    f'y2="{ly:.1f}" stroke="#bbb"/>')
        for e in rec.epochs[r]:
            color = KIND_COLOR.get(e.kind, "#999")
            # a Fence ends one epoch and begins the next: the bands meet at its middle
            x0 = cx(e.start) + (4 if e.kind == "fence" else -col_w / 2 + 4)
            x1 = cx(e.end) + (-4 if e.kind == "fence" and e.closed_by else col_w / 2 - 4)
            body.append(f'<rect class="epoch" x="{x0:.1f}" y="{ly - 16:.1f}" '
                        f'width="{x1 - x0:.1f}" height="32" rx="4" fill="{color}" '
                        f'fill-opacity="0.18" stroke="{color}"><title>'
                        f'{svg_escape(f"{e.kind}: {e.opened_by} .. {e.closed_by}")}'
                        f'</title></rect>')
            body.append(f'<text x="{x0 + 3:.1f}" y="{ly - 19:.1f}" font-size="{FS_SMALL}" '
                        f'fill="{color}">{svg_escape(e.kind)}</text>')
        for order, text in rec.calls[r]:
            if not any(op.order == order for op in rec.operations):
                body.append(f'<text x="{cx(order):.1f}" y="{ly + 4:.1f}" text-anchor="middle" '
                            f'font-size="{FS_SMALL}">{svg_escape(text)}</text>')
        win = " ".join(str(v) for v in rec.windows[r])
        extra = "".join(f"  {k}={v}" for k, v in rec.locals_[r].items())
        body.append(f'<text x="{left:.1f}" y="{ly + 28:.1f}" font-size="{FS_SMALL}" '
                    f'fill="#555">{svg_escape(f"window after the run: [{win}]{extra}")}</text>')
        body.append("</g>")
    for op in rec.operations:
        x = cx(op.order)
        y0, y1 = lane_y(op.origin), lane_y(op.target)
        if op.reads:
            y0, y1 = y1, y0
        color = PALETTE[op.origin % len(PALETTE)]
        tx = x + 18 if y1 != y0 else x
        body.append(f'<line class="op" x1="{x:.1f}" y1="{y0:.1f}" x2="{tx:.1f}" '
                    f'y2="{y1 + (-8 if y1 > y0 else 8):.1f}" stroke="{color}" '
                    f'stroke-width="1.6" marker-end="url(#arrow)"/>')
        body.append(f'<text x="{x:.1f}" y="{lane_y(op.origin) - 3:.1f}" text-anchor="middle" '
                    f'font-size="{FS_SMALL}" fill="#000">'
                    f'{svg_escape(f"{op.call} {op.nbytes}".strip())}</text>')
    y = top + rec.p * lane_h + 8
    foot = (f"recorded from the real minimpi.rma code over the in-process transport "
            f"(the calls as minimpi run --trace records them); expected: {rec.expect}")
    return svg_document(width, y, foot, head, body)
