"""Draw the schedule of a real collective algorithm (``minimpi draw``).

Nothing here knows how any algorithm works. :func:`record` runs the collective - the same
code every job runs - on ``p`` threads over the in-process transport
(:func:`minimpi.runtime.inproc.run_threads`) and watches it:

* the fabric's ``recorder`` sees every frame on the wire (eager or rendezvous),
* ``engine.step_hook`` (called by the collective framework at the start of each step)
  marks step boundaries and takes a snapshot of the rank's buffer,
* thin wrappers of each rank's ``engine.isend``/``engine.irecv`` note in which step each
  message is posted and what it carries.

**Identifiable data.** Every rank's contribution is made of ``p`` blocks of float64 numbers
that name their origin: rank ``r`` (letter ``A`` for rank 0, ``B`` for rank 1, ...) puts
``2**r + i * 2**p`` into block ``i``. A sum of such values keeps both the set of contributing
ranks (the low ``p`` bits) and the block index, so after any mix of copies and ``SUM``
reductions a number still says what it is: ``B2`` (block 2 of rank 1), ``AB2`` (block 2 of
ranks 0 and 1, summed) or ``Σ2`` (block 2 summed over all ranks). Messages are labelled by
decoding their payload; buffer states by decoding the buffer.

**Steps as columns.** Each rank's steps are numbered locally; a message sent in the sender's
column ``c`` puts the step that receives it in column ``c`` or later, and each rank's steps
occupy increasing columns. The smallest columns meeting these rules give the textbook
picture (binomial broadcast on 8 ranks: 3 columns, with 1, 2 and 4 arrows).
"""
from __future__ import annotations

import shutil
import subprocess
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..coll.registry import REGISTRY, _load_all, algorithms
from ..data.ops import SUM
from ..errors import AlgorithmError
from ..runtime.inproc import run_threads
from ..transports.frames import EAGER, RTS

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
MAX_RANKS = 16
EMPTY = "·"


class DrawError(Exception):
    """A request ``minimpi draw`` cannot serve (unknown collective, too many ranks, ...)."""


# ----------------------------------------------------------------------------------------
# identifiable values
# ----------------------------------------------------------------------------------------
def encode(origin: int, block: int, p: int) -> float:
    return float((1 << origin) + block * (1 << p))


def decode(value: float, p: int) -> Optional[Tuple[int, int]]:
    """value -> (mask of contributing ranks, block index), None for 0, (-1, -1) for garbage."""
    v = int(round(value))
    if v == 0:
        return None
    if v < 0 or v != value:
        return (-1, -1)
    mask = v & ((1 << p) - 1)
    k = bin(mask).count("1")
    if k == 0 or (v >> p) % k:
        return (-1, -1)
    return mask, (v >> p) // k


def label(item: Optional[Tuple[int, int]], p: int, with_index: bool = True) -> str:
    if item is None:
        return EMPTY
    mask, block = item
    if mask < 0:
        return "?"
    if mask == (1 << p) - 1 and p > 1:
        who = "Σ"
    else:
        who = "".join(LETTERS[r] for r in range(p) if mask >> r & 1)
    return f"{who}{block}" if with_index else who


def block_labels(values: np.ndarray, p: int, per_block: int, with_index: bool = True) -> List[str]:
    """One label per block of ``per_block`` values; a partly filled block gets a ``*``."""
    out = []
    for b in range(len(values) // per_block if per_block else 0):
        chunk = values[b * per_block:(b + 1) * per_block]
        items = {decode(float(v), p) for v in chunk}
        filled = {i for i in items if i is not None}
        if not filled:
            out.append(EMPTY)
        elif len(filled) == 1:
            text = label(filled.pop(), p, with_index)
            out.append(text + ("*" if None in items else ""))
        else:
            out.append("?")
    return out


def payload_label(payload: Sequence[Any], nbytes: int, p: int, with_index: bool = True) -> str:
    """What a message carries, e.g. ``A0-3`` or ``AB2`` (``obj`` for a pickled object)."""
    if nbytes == 0:
        return ""
    raw = b"".join(bytes(seg) for seg in payload)
    if len(raw) % 8:
        return f"{nbytes} B"
    values = np.frombuffer(raw, dtype=np.float64)
    labels: List[str] = []
    for v in values:
        text = label(decode(float(v), p), p, with_index)
        if not labels or labels[-1] != text:
            labels.append(text)
    if "?" in labels and len(labels) <= 2:
        return f"{nbytes} B"
    return compress(labels)


def _split(text: str) -> Tuple[str, Optional[int]]:
    i = len(text)
    while i > 0 and text[i - 1].isdigit():
        i -= 1
    return (text[:i], int(text[i:])) if i < len(text) else (text, None)


def compress(labels: Sequence[str]) -> str:
    """['A0','A1','A2','·','·','·'] -> 'A0-2 ·×3'."""
    parts: List[str] = []
    i = 0
    while i < len(labels):
        who, idx = _split(labels[i])
        j = i
        if idx is not None:
            while j + 1 < len(labels):
                w2, i2 = _split(labels[j + 1])
                if w2 != who or i2 != idx + (j + 1 - i):
                    break
                j += 1
        else:
            while j + 1 < len(labels) and labels[j + 1] == labels[i]:
                j += 1
        n = j - i + 1
        if idx is not None and n > 1:
            parts.append(f"{who}{idx}-{idx + n - 1}")
        elif idx is None and n >= 3:
            parts.append(f"{labels[i]}×{n}")
        else:
            parts.extend(labels[i:j + 1])
        i = j + 1
    return " ".join(parts)


# ----------------------------------------------------------------------------------------
# how to call each collective on identifiable buffers
# ----------------------------------------------------------------------------------------
@dataclass
class Driver:
    """Buffers, the call, and what each rank's "buffer" is, for one collective."""
    #: (rank, p, root, m) -> dict of numpy buffers
    setup: Callable[[int, int, int, int], Dict[str, np.ndarray]]
    #: (comm, buffers, root, algorithm) -> None: the real API call
    call: Callable[[Any, Dict[str, np.ndarray], int, str], None]
    #: (rank, p, root, buffers, initial) -> the values shown as the rank's buffer (p blocks)
    view: Callable[[int, int, int, Dict[str, np.ndarray], bool], np.ndarray]
    with_index: bool = True
    rooted: bool = False
    reduces: bool = False


def _blocks(rank: int, p: int, m: int, blocks: Optional[Sequence[int]] = None) -> np.ndarray:
    idx = range(p) if blocks is None else blocks
    return np.repeat(np.array([encode(rank, i, p) for i in idx]), m)


def _zeros(p: int, m: int) -> np.ndarray:
    return np.zeros(p * m)


def _slot(p: int, m: int, rank: int, values: np.ndarray) -> np.ndarray:
    out = np.zeros(p * m)
    out[rank * m:(rank + 1) * m] = values
    return out


def _or_send(b: Dict[str, np.ndarray], initial: bool) -> np.ndarray:
    if initial or not b["recv"].any():
        return b["send"]
    return b["recv"]


def _sum():
    return SUM


DRIVERS: Dict[str, Driver] = {
    "bcast": Driver(
        setup=lambda r, p, root, m: {"buf": _blocks(r, p, m) if r == root else _zeros(p, m)},
        call=lambda c, b, root, a: c.Bcast(b["buf"], root=root, algorithm=a),
        view=lambda r, p, root, b, initial: b["buf"], rooted=True),
    "scatter": Driver(
        setup=lambda r, p, root, m: {"send": _blocks(r, p, m) if r == root else _zeros(p, m),
                                     "recv": np.zeros(m), "m": np.zeros(m)},
        call=lambda c, b, root, a: c.Scatter(b["send"], b["recv"], root=root, algorithm=a),
        view=lambda r, p, root, b, initial: (
            np.where(_slot(p, len(b["m"]), r, b["recv"]) != 0, _slot(p, len(b["m"]), r, b["recv"]),
                     b["send"]) if r == root else _slot(p, len(b["m"]), r, b["recv"])),
        rooted=True),
    "gather": Driver(
        setup=lambda r, p, root, m: {"send": _blocks(r, p, m, [r]), "recv": _zeros(p, m),
                                     "m": np.zeros(m)},
        call=lambda c, b, root, a: c.Gather(b["send"], b["recv"], root=root, algorithm=a),
        view=lambda r, p, root, b, initial: (
            np.where(b["recv"] != 0, b["recv"], _slot(p, len(b["m"]), r, b["send"]))
            if r == root else _slot(p, len(b["m"]), r, b["send"])),
        with_index=False, rooted=True),
    "allgather": Driver(
        setup=lambda r, p, root, m: {"send": _blocks(r, p, m, [r]), "recv": _zeros(p, m),
                                     "m": np.zeros(m)},
        call=lambda c, b, root, a: c.Allgather(b["send"], b["recv"], algorithm=a),
        view=lambda r, p, root, b, initial: np.where(
            b["recv"] != 0, b["recv"], _slot(p, len(b["m"]), r, b["send"])),
        with_index=False),
    "alltoall": Driver(
        setup=lambda r, p, root, m: {"send": _blocks(r, p, m), "recv": _zeros(p, m)},
        call=lambda c, b, root, a: c.Alltoall(b["send"], b["recv"], algorithm=a),
        view=lambda r, p, root, b, initial: _or_send(b, initial)),
    "alltoallv": Driver(   # equal counts, so the picture compares with alltoall
        setup=lambda r, p, root, m: {"send": _blocks(r, p, m), "recv": _zeros(p, m)},
        call=lambda c, b, root, a: c.Alltoallv(
            [b["send"], [len(b["send"]) // c.size] * c.size],
            [b["recv"], [len(b["recv"]) // c.size] * c.size], algorithm=a),
        view=lambda r, p, root, b, initial: _or_send(b, initial)),
    "reduce": Driver(
        setup=lambda r, p, root, m: {"send": _blocks(r, p, m), "recv": _zeros(p, m)},
        call=lambda c, b, root, a: c.Reduce(b["send"], b["recv"], op=_sum(), root=root,
                                            algorithm=a),
        view=lambda r, p, root, b, initial: b["send"] if r != root else _or_send(b, initial),
        rooted=True, reduces=True),
    "allreduce": Driver(
        setup=lambda r, p, root, m: {"send": _blocks(r, p, m), "recv": _zeros(p, m)},
        call=lambda c, b, root, a: c.Allreduce(b["send"], b["recv"], op=_sum(), algorithm=a),
        view=lambda r, p, root, b, initial: _or_send(b, initial), reduces=True),
    "reduce_scatter": Driver(
        setup=lambda r, p, root, m: {"send": _blocks(r, p, m), "recv": np.zeros(m),
                                     "m": np.zeros(m)},
        call=lambda c, b, root, a: _reduce_scatter(c, b, a),
        view=lambda r, p, root, b, initial: (
            b["send"] if initial or not b["recv"].any()
            else _slot(p, len(b["m"]), r, b["recv"])),
        reduces=True),
    "scan": Driver(
        setup=lambda r, p, root, m: {"send": _blocks(r, p, m, [0]), "recv": np.zeros(m)},
        call=lambda c, b, root, a: c.Scan(b["send"], b["recv"], op=_sum(), algorithm=a),
        view=lambda r, p, root, b, initial: _or_send(b, initial),
        with_index=False, reduces=True),
    "exscan": Driver(
        setup=lambda r, p, root, m: {"send": _blocks(r, p, m, [0]), "recv": np.zeros(m)},
        call=lambda c, b, root, a: c.Exscan(b["send"], b["recv"], op=_sum(), algorithm=a),
        view=lambda r, p, root, b, initial: _or_send(b, initial),
        with_index=False, reduces=True),
    "barrier": Driver(
        setup=lambda r, p, root, m: {},
        call=lambda c, b, root, a: c.Barrier(algorithm=a),
        view=lambda r, p, root, b, initial: np.zeros(0)),
}


def _reduce_scatter(comm: Any, b: Dict[str, np.ndarray], algorithm: str) -> None:
    if hasattr(comm, "Reduce_scatter_block"):
        comm.Reduce_scatter_block(b["send"], b["recv"], op=_sum(), algorithm=algorithm)
    else:
        comm.Reduce_scatter(b["send"], b["recv"], op=_sum(), algorithm=algorithm)


def _blocks_in_view(collective: str, p: int) -> int:
    return 1 if collective in ("scan", "exscan") else (0 if collective == "barrier" else p)


# ----------------------------------------------------------------------------------------
# recording
# ----------------------------------------------------------------------------------------
@dataclass
class Message:
    src: int
    dst: int
    column: int          # 0-based step column
    label: str           # the data it carries
    nbytes: int
    protocol: str        # "eager" or "rendezvous"
    src_step: int        # the sender's and receiver's own step numbers (0-based)
    dst_step: int


@dataclass
class Schedule:
    collective: str
    algorithm: str
    p: int
    root: int
    nbytes: int
    per_block: int               # float64 values per block
    messages: List[Message]
    steps: int                   # number of columns
    #: states[rank][column + 1]: block labels after that column (index 0: before the call)
    states: List[List[List[str]]]
    rank_columns: List[List[int]]   # each rank's local step -> its column
    summary: str = ""

    def messages_in(self, column: int) -> List[Message]:
        return [m for m in self.messages if m.column == column]


@dataclass
class _RankLog:
    hooks: int = 0
    sends: List[tuple] = field(default_factory=list)   # (step, dst, ctx, tag, label, n, msg_id)
    recvs: List[tuple] = field(default_factory=list)   # (step, src, ctx, tag)
    snaps: List[np.ndarray] = field(default_factory=list)


def record(collective: str, algorithm: str, p: int, root: int = 0,
           nbytes: Optional[int] = None, timeout: float = 30.0,
           hosts: Optional[Sequence[Any]] = None) -> Schedule:
    """Run ``collective`` with ``algorithm`` on ``p`` threads and record its schedule;
    ``hosts``: the host of each rank, to pretend they run on several machines."""

    collective = collective.lower()
    try:
        table = algorithms(collective)
    except AlgorithmError as exc:
        raise DrawError(str(exc)) from None
    if algorithm not in table:
        raise DrawError(f"{collective} has no algorithm {algorithm!r}; it has: "
                        f"{', '.join(table)}")
    driver = DRIVERS.get(collective)
    if driver is None:
        raise DrawError(f"minimpi draw does not know how to call {collective!r} yet; it can draw: "
                        f"{', '.join(sorted(DRIVERS))}")
    if not 1 <= p <= MAX_RANKS:
        raise DrawError(f"-n {p}: drawings are for 1..{MAX_RANKS} ranks")
    if not 0 <= root < p:
        raise DrawError(f"--root {root}: expected 0..{p - 1}")
    if hosts is not None and len(hosts) != p:
        raise DrawError(f"--hosts: {len(hosts)} ranks placed for -n {p}")
    unit = 8 * p
    if nbytes is None:
        nbytes = unit
    if nbytes < unit:
        raise DrawError(f"--bytes {nbytes}: at least {unit} (one float64 per block, {p} blocks)")
    per_block = nbytes // unit
    nbytes = per_block * unit
    why = table[algorithm].refusal(p, nbytes, _sum() if driver.reduces else None, False)
    if why:
        raise DrawError(f"{collective} {algorithm} cannot run here: it {why}")

    logs = [_RankLog() for _ in range(p)]
    protocols: Dict[Tuple[int, int], str] = {}
    shown = _blocks_in_view(collective, p)

    def recorder(src: int, dest: int, header: Any) -> None:
        if header.kind == EAGER:
            protocols[(src, header.msg_id)] = "eager"
        elif header.kind == RTS:
            protocols[(src, header.msg_id)] = "rendezvous"

    def snapshot(rank: int, bufs: Dict[str, np.ndarray], initial: bool) -> np.ndarray:
        view = driver.view(rank, p, root, bufs, initial)
        return np.array(view[:shown * per_block], dtype=np.float64, copy=True)

    def body(comm: Any) -> None:
        rank = comm.rank
        log = logs[rank]
        engine = comm._ep.engine
        bufs = driver.setup(rank, p, root, per_block)
        isend, irecv = engine.isend, engine.irecv
        groups = engine._groups

        # The state after step k is taken just before step k+1 posts its first message
        # (posting a receive may copy an early message straight into the buffer).
        pending = [False]

        def settle() -> None:
            if pending[0]:
                pending[0] = False
                log.snaps.append(snapshot(rank, bufs, False))

        def step_hook(ch: Any, index: int) -> None:
            settle()
            log.hooks += 1
            pending[0] = True

        def rec_isend(context, dest, source, tag, payload, n, flags=0, description=None):
            settle()
            text = payload_label(payload, n, p, driver.with_index)
            req = isend(context, dest, source, tag, payload, n, flags, description)
            log.sends.append((log.hooks, dest, context, tag, text, n, getattr(req, "msg_id", 0)))
            return req

        def rec_irecv(context, source, tag, target, is_object, description=None):
            group = groups.get(context)
            world = group[source] if group is not None and 0 <= source < len(group) else source
            settle()
            log.recvs.append((log.hooks, world, context, tag))
            return irecv(context, source, tag, target, is_object, description)

        engine.step_hook = step_hook
        engine.isend = rec_isend
        engine.irecv = rec_irecv
        log.snaps.append(snapshot(rank, bufs, True))
        driver.call(comm, bufs, root, algorithm)
        settle()
        engine.isend, engine.irecv = isend, irecv
        del engine.step_hook

    run_threads(p, body, timeout=timeout, recorder=recorder, hosts=hosts)
    sched = _assemble(collective, algorithm, p, root, nbytes, per_block, logs, protocols,
                      driver.with_index)
    if hosts is not None:
        sched.summary += "  -  hosts: " + " ".join(
            f"{h}={','.join(str(r) for r in range(p) if hosts[r] == h)}" for h in dict.fromkeys(hosts))
    return sched


def _assemble(collective, algorithm, p, root, nbytes, per_block, logs, protocols, with_index):
    # pair sends and receives: same (src, dst, context, tag) match in order (non-overtaking)
    queues: Dict[tuple, deque] = defaultdict(deque)
    for dst, log in enumerate(logs):
        for step, src, ctx, tag in log.recvs:
            queues[(src, dst, ctx, tag)].append(step)
    pairs = []
    for src, log in enumerate(logs):
        for step, dst, ctx, tag, text, n, msg_id in log.sends:
            q = queues.get((src, dst, ctx, tag))
            if not q:
                raise DrawError(f"recorded a send {src}->{dst} (tag {tag}) without its receive")
            pairs.append((src, step, dst, q.popleft(), text, n, protocols.get((src, msg_id), "local")))
    # columns: each rank's steps increase; a receiving step is no earlier than the send
    nsteps = [log.hooks for log in logs]
    col = [list(range(n)) for n in nsteps]
    changed = True
    while changed:
        changed = False
        for src, ss, dst, ds, *_ in pairs:
            if col[dst][ds] < col[src][ss]:
                col[dst][ds] = col[src][ss]
                changed = True
        for c in col:
            for k in range(1, len(c)):
                if c[k] < c[k - 1] + 1:
                    c[k] = c[k - 1] + 1
                    changed = True
    steps = max((c[-1] + 1 for c in col if c), default=0)
    messages = [Message(src, dst, col[src][ss], text, n, proto, ss, ds)
                for src, ss, dst, ds, text, n, proto in pairs]
    messages.sort(key=lambda m: (m.column, m.src, m.dst))
    shown = _blocks_in_view(collective, p)
    states: List[List[List[str]]] = []
    for r, log in enumerate(logs):
        labels = [block_labels(s, p, per_block, with_index) if shown else [] for s in log.snaps]
        row = [labels[0]]
        for c in range(steps):
            # the state after column c: after the last local step in a column <= c
            done = [k for k, kc in enumerate(col[r]) if kc <= c]
            row.append(labels[done[-1] + 1] if done else labels[0])
        states.append(row)
    sched = Schedule(collective, algorithm, p, root, nbytes, per_block, messages, steps, states,
                     col)
    sched.summary = (f"{collective} [{algorithm}]  p={p}" + (f"  root={root}" if _rooted(collective) else "")
                     + f"  {nbytes} B ({per_block * 8} B per block)  -  {steps} steps, "
                       f"{len(messages)} messages")
    return sched


def _rooted(collective: str) -> bool:
    d = DRIVERS.get(collective)
    return bool(d and d.rooted)


# ----------------------------------------------------------------------------------------
# text
# ----------------------------------------------------------------------------------------
def to_text(s: Schedule) -> str:
    lines = [s.summary]
    legend = ", ".join(f"rank {r} = {LETTERS[r]}" for r in range(s.p))
    lines.append(f"data: block i of {legend}; AB2 = block 2 summed over ranks 0 and 1; "
                 f"Σ = all ranks; {EMPTY} = empty; * = partly there")
    lines.append("")
    for c in range(s.steps):
        msgs = s.messages_in(c)
        text = ",  ".join(f"{m.src}->{m.dst} {m.label}".rstrip() +
                          (" (rndv)" if m.protocol == "rendezvous" else "") for m in msgs)
        lines.append(f"step {c + 1}: {text or '(local work only)'}")
    if any(any(cell for cell in row[0]) for row in s.states):
        lines.append("")
        lines.append("buffer after each step:")
        head = ["", "start"] + [f"step {c + 1}" for c in range(s.steps)]
        rows = [[f"rank {r}"] + [compress(st) for st in s.states[r]] for r in range(s.p)]
        widths = [max(len(x[i]) for x in [head] + rows) for i in range(len(head))]
        for x in [head] + rows:
            lines.append("  ".join(v.ljust(w) for v, w in zip(x, widths)).rstrip())
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------
# SVG (written by hand) and PNG
# ----------------------------------------------------------------------------------------
_PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
            "#ff9da7", "#9c755f", "#bab0ac", "#86bcb6", "#d37295", "#fabfd2", "#8cd17d",
            "#b6992d", "#499894"]


def _esc(text: str) -> str:
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


def _cell_color(text: str, p: int) -> str:
    if text == EMPTY:
        return "#ffffff"
    who = _split(text.rstrip("*"))[0]
    if who == "Σ":
        return "#c9a227"
    if len(who) == 1 and who in LETTERS:
        return _PALETTE[LETTERS.index(who) % len(_PALETTE)]
    if who and all(ch in LETTERS for ch in who):
        return "#9aa5b1"   # a partial sum
    return "#dddddd"


def to_svg(s: Schedule) -> str:
    p = s.p
    blocks = max((len(st) for row in s.states for st in row), default=0)
    longest = max([len(c) for row in s.states for st in row for c in st] + [2])
    cell_w = max(22, 7 * longest + 8)
    cell_h = 22
    state_w = max(cell_w * blocks, 30)
    gap = max(140, 9 * max([len(m.label) for m in s.messages] + [4]) + 40)
    row_h = 48
    left, top = 90, 70
    cols = s.steps + 1
    width = left + cols * state_w + s.steps * gap + 30
    height = top + p * row_h + 50

    def state_x(c: int) -> float:     # left edge of state column c (0 = start)
        return left + c * (state_w + gap)

    def row_y(r: int) -> float:       # vertical centre of rank r
        return top + r * row_h + row_h / 2

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans Mono, monospace" '
           f'font-size="11">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
           'markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" '
           'fill="#333"/></marker></defs>',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left}" y="22" font-size="14" font-weight="bold">{_esc(s.summary)}</text>',
           f'<text x="{left}" y="40" fill="#555">block i of rank r is labelled '
           f'{_esc("A" if p else "")}i, Bi, ... by rank; AB2 = block 2 summed over ranks 0,1; '
           f'Σ = all ranks</text>']
    for c in range(cols):
        x = state_x(c)
        title = "start" if c == 0 else f"after step {c}"
        out.append(f'<text x="{x + state_w / 2}" y="{top - 8}" text-anchor="middle" '
                   f'fill="#555">{title}</text>')
        if c < s.steps:
            gx = x + state_w + gap / 2
            out.append(f'<text x="{gx}" y="{top - 8}" text-anchor="middle" font-weight="bold">'
                       f'step {c + 1}</text>')
            out.append(f'<rect x="{x + state_w + 4}" y="{top}" width="{gap - 8}" '
                       f'height="{p * row_h}" fill="#f6f6f6"/>')
    for r in range(p):
        y = row_y(r)
        out.append(f'<text x="10" y="{y + 4}" font-weight="bold">rank {r} ({LETTERS[r]})</text>')
        for c in range(cols):
            cells = s.states[r][c] if c < len(s.states[r]) else []
            x = state_x(c)
            if not cells:
                out.append(f'<line x1="{x}" y1="{y}" x2="{x + state_w}" y2="{y}" '
                           f'stroke="#ccc" stroke-dasharray="3,3"/>')
            for i, text in enumerate(cells):
                cx = x + i * cell_w
                fill = _cell_color(text, p)
                fg = "#000" if fill in ("#ffffff", "#dddddd", "#edc948", "#fabfd2", "#c9a227",
                                        "#bab0ac", "#9aa5b1", "#ff9da7", "#8cd17d", "#86bcb6",
                                        "#76b7b2") else "#fff"
                out.append(f'<rect x="{cx}" y="{y - cell_h / 2}" width="{cell_w}" '
                           f'height="{cell_h}" fill="{fill}" stroke="#444" stroke-width="0.8"/>')
                out.append(f'<text x="{cx + cell_w / 2}" y="{y + 4}" text-anchor="middle" '
                           f'fill="{fg}">{_esc(text)}</text>')
    for c in range(s.steps):
        msgs = s.messages_in(c)
        for j, m in enumerate(msgs):
            dst_col = min(s.rank_columns[m.dst][m.dst_step], s.steps - 1)
            x1 = state_x(c) + state_w + 8
            x2 = state_x(dst_col) + state_w + gap - 8
            y1, y2 = row_y(m.src), row_y(m.dst)
            if m.src == m.dst:
                y2 = y1 + 1
            dash = ' stroke-dasharray="6,3"' if m.protocol == "rendezvous" else ""
            out.append(f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="#333" '
                       f'stroke-width="1.4" marker-end="url(#arrow)"{dash}/>')
            if m.label:
                t = 0.5 if len(msgs) < 3 else 0.3 + 0.4 * (j % 3) / 2
                lx, ly = x1 + (x2 - x1) * t, y1 + (y2 - y1) * t
                w = 7 * len(m.label) + 6
                out.append(f'<rect x="{lx - w / 2}" y="{ly - 8}" width="{w}" height="14" '
                           f'rx="3" fill="#fffbe6" stroke="#c8b56a" stroke-width="0.6"/>')
                out.append(f'<text x="{lx}" y="{ly + 3}" text-anchor="middle" '
                           f'font-size="10">{_esc(m.label)}</text>')
    out.append(f'<text x="{left}" y="{height - 16}" fill="#777" font-size="10">recorded from '
               f'the real minimpi.coll code over the in-process transport; dashed arrows: '
               f'rendezvous (large) messages</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def svg_to_png(svg: str, path: str) -> None:
    """Convert with cairosvg or rsvg-convert, whichever exists; DrawError if neither does."""
    try:
        import cairosvg  # optional
    except ImportError:
        cairosvg = None
    if cairosvg is not None:
        cairosvg.svg2png(bytestring=svg.encode("utf-8"), write_to=path, scale=1.5)
        return
    tool = shutil.which("rsvg-convert")
    if tool:
        subprocess.run([tool, "-o", path], input=svg.encode("utf-8"), check=True)
        return
    raise DrawError("writing PNG needs an SVG converter: `pip install 'minimpi[draw]'` "
                    "(cairosvg) or install "
                    "rsvg-convert (librsvg); or write .svg instead")


def list_text() -> str:
    """Every collective and algorithm in the registry, with the first line of its docstring."""
    _load_all()
    lines = []
    for coll in sorted(REGISTRY):
        mark = "" if coll in DRIVERS else "   (no drawing driver yet)"
        lines.append(f"{coll}{mark}")
        for name, alg in REGISTRY[coll].items():
            lines.append(f"  {name:<20} {alg.summary}")
    return "\n".join(lines)
