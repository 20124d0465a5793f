"""Draw the schedule of a real collective algorithm (``minimpi draw``).

Nothing here knows how any algorithm works. :func:`record` runs the collective - the same
code every job runs - on ``p`` threads over the in-process transport
(:func:`minimpi.runtime.inproc.run_threads`) and watches it:

* the fabric's ``recorder`` sees every frame on the wire (eager or rendezvous),
* a subscriber of each rank's bus (:mod:`minimpi.bus`): its ``step_started``
  events (the collective framework reports the start of each step) mark step boundaries,
  and its ``message_sent`` / ``receive_posted`` events note in which step each message is
  posted, what it carries and which buffer it leaves from or lands in,
* the same subscriber's ``temporary`` and ``phase`` events hand over every working buffer
  the algorithm takes (its temporaries, :mod:`minimpi.coll.scratch`) and the phases it
  marks.

**What a rank holds.** After each step the drawing shows every buffer of the rank: the
caller's (``send``, ``recv``; ``buf`` for a broadcast) and the algorithm's temporaries that
are alive then (``acc``, ``tmp``, ``work``, ...; a temporary is alive while the algorithm
keeps a reference to it, and none outlives the call). So every block a message carries is
drawn on its sender before it leaves (the tests check this for every algorithm).

**Identifiable data.** Every rank's contribution is made of ``p`` blocks of float64 numbers
that name their origin: rank ``r`` (letter ``A`` for rank 0, ``B`` for rank 1, ...) puts
``2**r + i * 2**p`` into block ``i``. A sum of such values keeps both the set of contributing
ranks (the low ``p`` bits) and the block index, so after any mix of copies and ``SUM``
reductions a number still says what it is: ``B2`` (block 2 of rank 1), ``AB2`` (block 2 of
ranks 0 and 1, summed) or ``Σ2`` (block 2 summed over all ranks). Messages are labelled by
decoding their payload; buffer states by decoding the buffers.

**Steps as columns.** Each rank's steps are numbered locally; a message sent in the sender's
column ``c`` puts the step that receives it in column ``c`` or later, and each rank's steps
occupy increasing columns. The smallest columns meeting these rules give the textbook
picture (binomial broadcast on 8 ranks: 3 columns, with 1, 2 and 4 arrows). A phase that
sends nothing but changes what a rank holds (Bruck's rotations) is a step of its own,
"local work only".
"""
from __future__ import annotations

import shutil
import subprocess
import textwrap
import weakref
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..bus import Subscriber
from ..coll.registry import INTRA, REGISTRY, algorithms, load_all, serving
from ..coll.segment import SLOT_BYTES
from ..comm.communicator import endpoint_of
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


def _payload_values(payload: Sequence[Any]) -> Optional[np.ndarray]:
    raw = b"".join(bytes(seg) for seg in payload)
    return None if len(raw) % 8 else np.frombuffer(raw, dtype=np.float64)


def payload_label(payload: Sequence[Any], nbytes: int, p: int, with_index: bool = True) -> str:
    """What a message carries, e.g. ``A0-3`` or ``AB2`` (its size when it is not blocks)."""
    if nbytes == 0:
        return ""
    values = _payload_values(payload)
    if values is None:
        return f"{nbytes} B"
    labels: List[str] = []
    for v in values:
        text = label(decode(float(v), p), p, with_index)
        if not labels or labels[-1] != text:
            labels.append(text)
    if "?" in labels and len(labels) <= 2:
        return f"{nbytes} B"
    return compress(labels)


def payload_blocks(payload: Sequence[Any], p: int, with_index: bool = True) -> frozenset:
    """The distinct block labels in a message (empty values left out)."""
    values = _payload_values(payload)
    if values is None:
        return frozenset()
    return frozenset(label(decode(float(v), p), p, with_index) for v in values) - {EMPTY}


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
    """The caller's buffers, the call, and what the labels mean, for one collective."""
    #: (rank, p, root, m) -> the caller's numpy buffers by name, in drawing order
    setup: Callable[[int, int, int, int], Dict[str, np.ndarray]]
    #: (comm, buffers, root, algorithm) -> None: the real API call
    call: Callable[[Any, Dict[str, np.ndarray], int, str], None]
    #: (p, root) -> what a label means for this collective (the legend)
    legend: Callable[[int, int], str]
    #: (rank, root) -> names of the caller's buffers that matter on that rank (MPI ignores
    #: a non-root's receive buffer in a Reduce, for instance); None: all of them
    used: Optional[Callable[[int, int], Sequence[str]]] = None
    with_index: bool = True
    rooted: bool = False
    reduces: bool = False
    #: comm -> the communicator the call runs on, made before recording starts (the
    #: neighbourhood collectives need a topology); None: the world itself
    prepare: Optional[Callable[[Any], Any]] = None


def _blocks(rank: int, p: int, m: int, blocks: Optional[Sequence[int]] = None) -> np.ndarray:
    idx = range(p) if blocks is None else blocks
    return np.repeat(np.array([encode(rank, i, p) for i in idx]), m)


def _zeros(p: int, m: int) -> np.ndarray:
    return np.zeros(p * m)


def _sum():
    return SUM


def _letters(p: int, skip: int = -1) -> str:
    return ", ".join(f"{LETTERS[r]} = rank {r}" for r in range(p) if r != skip)


def _vector_legend(p: int, root: int) -> str:
    return (f"A2 = block 2 of rank 0's input vector ({_letters(p, 0)}); "
            f"AD2 = block 2 summed over ranks 0 and 3; Σ2 = block 2 summed over all ranks")


def _root_only(names: Sequence[str], at_root: Sequence[str]) -> Callable[[int, int], Sequence[str]]:
    return lambda rank, root: at_root if rank == root else names


DRIVERS: Dict[str, Driver] = {
    "bcast": Driver(
        setup=lambda r, p, root, m: {"buf": _blocks(r, p, m) if r == root else _zeros(p, m)},
        call=lambda c, b, root, a: c.Bcast(b["buf"], root=root, algorithm=a),
        legend=lambda p, root: (f"{LETTERS[root]}2 = block 2 of the root's buffer (the root is "
                                f"rank {root} = {LETTERS[root]})"),
        rooted=True),
    "scatter": Driver(
        setup=lambda r, p, root, m: {"send": _blocks(r, p, m) if r == root else _zeros(p, m),
                                     "recv": np.zeros(m)},
        call=lambda c, b, root, a: c.Scatter(b["send"], b["recv"], root=root, algorithm=a),
        legend=lambda p, root: (f"{LETTERS[root]}2 = block 2 of the root's send buffer (the "
                                f"root is rank {root} = {LETTERS[root]}), meant for rank 2"),
        used=_root_only(["recv"], ["send", "recv"]), rooted=True),
    "gather": Driver(
        setup=lambda r, p, root, m: {"send": _blocks(r, p, m, [r]), "recv": _zeros(p, m)},
        call=lambda c, b, root, a: c.Gather(b["send"], b["recv"], root=root, algorithm=a),
        legend=lambda p, root: f"A = rank 0's block ({_letters(p, 0)})",
        used=_root_only(["send"], ["send", "recv"]), with_index=False, rooted=True),
    "allgather": Driver(
        setup=lambda r, p, root, m: {"send": _blocks(r, p, m, [r]), "recv": _zeros(p, m)},
        call=lambda c, b, root, a: c.Allgather(b["send"], b["recv"], algorithm=a),
        legend=lambda p, root: f"A = rank 0's block ({_letters(p, 0)})",
        with_index=False),
    "alltoall": Driver(
        setup=lambda r, p, root, m: {"send": _blocks(r, p, m), "recv": _zeros(p, m)},
        call=lambda c, b, root, a: c.Alltoall(b["send"], b["recv"], algorithm=a),
        legend=lambda p, root: (f"B2 = block 2 of rank 1's send buffer, meant for rank 2 "
                                f"({_letters(p, 1)})")),
    "alltoallv": Driver(   # equal counts, so the picture compares with alltoall
        setup=lambda r, p, root, m: {"send": _blocks(r, p, m), "recv": _zeros(p, m)},
        call=lambda c, b, root, a: c.Alltoallv(
            [b["send"], [len(b["send"]) // c.size] * c.size],
            [b["recv"], [len(b["recv"]) // c.size] * c.size], algorithm=a),
        legend=lambda p, root: (f"B2 = block 2 of rank 1's send buffer, meant for rank 2 "
                                f"({_letters(p, 1)})")),
    "reduce": Driver(
        setup=lambda r, p, root, m: {"send": _blocks(r, p, m), "recv": _zeros(p, m)},
        call=lambda c, b, root, a: c.Reduce(b["send"], b["recv"], op=_sum(), root=root,
                                            algorithm=a),
        legend=_vector_legend, used=_root_only(["send"], ["send", "recv"]),
        rooted=True, reduces=True),
    "allreduce": Driver(
        setup=lambda r, p, root, m: {"send": _blocks(r, p, m), "recv": _zeros(p, m)},
        call=lambda c, b, root, a: c.Allreduce(b["send"], b["recv"], op=_sum(), algorithm=a),
        legend=_vector_legend, reduces=True),
    "reduce_scatter": Driver(
        setup=lambda r, p, root, m: {"send": _blocks(r, p, m), "recv": np.zeros(m)},
        call=lambda c, b, root, a: _reduce_scatter(c, b, a),
        legend=_vector_legend, reduces=True),
    "scan": Driver(
        setup=lambda r, p, root, m: {"send": _blocks(r, p, m, [0]), "recv": np.zeros(m)},
        call=lambda c, b, root, a: c.Scan(b["send"], b["recv"], op=_sum(), algorithm=a),
        legend=lambda p, root: (f"A = rank 0's value ({_letters(p, 0)}); ABC = the sum of "
                                f"the values of ranks 0, 1 and 2"),
        with_index=False, reduces=True),
    "exscan": Driver(
        setup=lambda r, p, root, m: {"send": _blocks(r, p, m, [0]), "recv": np.zeros(m)},
        call=lambda c, b, root, a: c.Exscan(b["send"], b["recv"], op=_sum(), algorithm=a),
        legend=lambda p, root: (f"A = rank 0's value ({_letters(p, 0)}); ABC = the sum of "
                                f"the values of ranks 0, 1 and 2"),
        with_index=False, reduces=True),
    "neighbor_allgather": Driver(
        setup=lambda r, p, root, m: {"send": _blocks(r, p, m, [r]), "recv": np.zeros(2 * m)},
        call=lambda c, b, root, a: c.Neighbor_allgather(b["send"], b["recv"], algorithm=a),
        legend=lambda p, root: (f"A = rank 0's block ({_letters(p, 0)}); the ranks form a "
                                f"periodic ring (Create_cart([p], periods=[True])): each "
                                f"receives from the rank before it, then the rank after it"),
        with_index=False, prepare=lambda c: c.Create_cart([c.size], periods=[True])),
    "neighbor_alltoall": Driver(
        setup=lambda r, p, root, m: {"send": _blocks(r, p, m, [(r - 1) % p, (r + 1) % p]),
                                     "recv": np.zeros(2 * m)},
        call=lambda c, b, root, a: c.Neighbor_alltoall(b["send"], b["recv"], algorithm=a),
        legend=lambda p, root: (f"B2 = rank 1's block meant for rank 2 ({_letters(p, 1)}); "
                                f"the ranks form a periodic ring (Create_cart([p], "
                                f"periods=[True])): blocks go to the rank before, then after"),
        prepare=lambda c: c.Create_cart([c.size], periods=[True])),
    "barrier": Driver(
        setup=lambda r, p, root, m: {},
        call=lambda c, b, root, a: c.Barrier(algorithm=a),
        legend=lambda p, root: "the messages carry no data: each one says \"I have arrived\""),
}


def _reduce_scatter(comm: Any, b: Dict[str, np.ndarray], algorithm: str) -> None:
    if hasattr(comm, "Reduce_scatter_block"):
        comm.Reduce_scatter_block(b["send"], b["recv"], op=_sum(), algorithm=algorithm)
    else:
        comm.Reduce_scatter(b["send"], b["recv"], op=_sum(), algorithm=algorithm)


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
    src_buffer: Optional[str] = None   # the buffer it leaves from / lands in (None: a
    dst_buffer: Optional[str] = None   # packed copy or landing area of this message alone)
    carries: frozenset = frozenset()   # the distinct block labels in it


#: what one rank holds at one moment: buffer name -> one label per block
Holding = Dict[str, List[str]]


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
    #: states[rank][i]: what the rank holds before its first step (i = 0) and after
    #: column i - 1: the caller's buffers, then the algorithm's live temporaries
    states: List[List[Holding]]
    rank_columns: List[List[int]]   # each rank's local step -> its column
    #: each rank's buffer names in drawing order (the caller's first, then temporaries)
    buffers: List[List[str]] = field(default_factory=list)
    #: the phase(s) each column belongs to ("" where the algorithm names none)
    phases: List[str] = field(default_factory=list)
    #: the caller's buffers on each rank (the other buffers are the algorithm's)
    user_buffers: List[List[str]] = field(default_factory=list)
    legend: str = ""
    summary: str = ""

    def messages_in(self, column: int) -> List[Message]:
        return [m for m in self.messages if m.column == column]

    def held(self, rank: int, state: int) -> List[str]:
        """Every block label rank ``rank`` holds in state ``state`` (all its buffers)."""
        return [c for cells in self.states[rank][state].values() for c in cells]

    def phase_spans(self) -> List[Tuple[str, int, int]]:
        """(phase, first column, last column) runs, only when the algorithm has phases."""
        spans: List[Tuple[str, int, int]] = []
        for c, name in enumerate(self.phases):
            if spans and spans[-1][0] == name:
                spans[-1] = (name, spans[-1][1], c)
            else:
                spans.append((name, c, c))
        named = [s for s in spans if s[0]]
        return spans if len({s[0] for s in named}) > 1 else []


class _Holdings:
    """What one rank holds while the algorithm runs: the caller's buffers and the
    temporaries the algorithm allocated (:mod:`minimpi.coll.scratch`) that are still alive."""

    def __init__(self, user: Dict[str, np.ndarray], on_phase: Callable[[str], None]) -> None:
        self.user = user
        self.temps: List[Tuple[str, "weakref.ref[np.ndarray]"]] = []
        self.on_phase = on_phase
        self.closed = False       # the call returned: its temporaries are gone

    # -- what the recorder hears of the algorithm's temporaries and phases ----------------
    def temporary(self, buf: np.ndarray, name: str) -> None:
        live = {n for n, ref in self.temps if ref() is not None}
        unique, k = name, 1
        while unique in live or unique in self.user:
            k += 1
            unique = f"{name}{k}"
        # a dead temporary's row is reused by the next one of the same name
        self.temps = [(n, ref) for n, ref in self.temps if n != unique]
        self.temps.append((unique, weakref.ref(buf)))

    def phase(self, name: str) -> None:
        self.on_phase(name)

    # -- what is held ----------------------------------------------------------------------
    def buffers(self) -> List[Tuple[str, np.ndarray]]:
        out = list(self.user.items())
        if not self.closed:
            for name, ref in self.temps:
                buf = ref()
                if buf is not None:
                    out.append((name, buf))
        return out

    def owner(self, view: Any) -> Optional[str]:
        """The buffer a message's bytes lie in (None: a copy made for that message alone)."""
        lo = _address(view)
        if lo is None:
            return None
        hi = lo + memoryview(view).nbytes
        for name, buf in self.buffers():
            if buf.size == 0:
                continue
            start = buf.ctypes.data
            if start <= lo and hi <= start + buf.nbytes:
                return name
        return None


def _contents_changed(before: Holding, after: Holding) -> bool:
    """Whether a buffer now holds blocks it did not hold before (new empty buffers and
    buffers that went away do not count)."""
    for name, cells in after.items():
        if any(c != EMPTY for c in cells) and before.get(name) != cells:
            return True
    return False


def _address(view: Any) -> Optional[int]:
    try:
        arr = np.frombuffer(view, dtype=np.uint8)
    except (TypeError, ValueError):
        return None
    return arr.ctypes.data if arr.size else None


def _labels(buf: np.ndarray, p: int, per_block: int, with_index: bool) -> List[str]:
    raw = np.ascontiguousarray(buf).view(np.uint8).tobytes()
    if len(raw) % 8:
        return []
    values = np.frombuffer(raw, dtype=np.float64)
    return block_labels(values, p, per_block, with_index)


@dataclass
class _RankLog:
    hooks: int = 0
    #: (step, dst, ctx, tag, label, n, msg_id, buffer, block labels)
    sends: List[tuple] = field(default_factory=list)
    recvs: List[tuple] = field(default_factory=list)   # (step, src, ctx, tag, buffer)
    snaps: List[Holding] = field(default_factory=list)
    phases: List[str] = field(default_factory=list)    # the phase of each local step
    names: List[str] = field(default_factory=list)     # buffer names, first appearance
    user: List[str] = field(default_factory=list)


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
    if INTRA not in table[algorithm].kinds:
        raise DrawError(f"{collective} {algorithm} serves intercommunicators (two groups), "
                        f"which minimpi draw does not draw yet; `minimpi explain {collective} "
                        f"--inter` shows its formula and cost. It draws: "
                        f"{', '.join(serving(table, INTRA))}")
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
    # the ranks are threads of this process: on one host they share memory (segments)
    segment_bytes = SLOT_BYTES if hosts is None or len(set(hosts)) == 1 else 0
    why = table[algorithm].refusal(p, nbytes, _sum() if driver.reduces else None, False,
                                   None, segment_bytes)
    if why:
        raise DrawError(f"{collective} {algorithm} cannot run here: it {why}")

    logs = [_RankLog() for _ in range(p)]
    protocols: Dict[Tuple[int, int], str] = {}

    def recorder(src: int, dest: int, header: Any) -> None:
        if header.kind == EAGER:
            protocols[(src, header.msg_id)] = "eager"
        elif header.kind == RTS:
            protocols[(src, header.msg_id)] = "rendezvous"

    def body(comm: Any) -> None:
        if driver.prepare is not None:
            comm = driver.prepare(comm)
        rank = comm.rank
        log = logs[rank]
        engine = endpoint_of(comm).engine
        bufs = driver.setup(rank, p, root, per_block)
        log.user = list(driver.used(rank, root) if driver.used else bufs)
        # what the recorder knows between events: is the state before the next step still
        # to be taken (True until the first step starts), the current phase, and how many
        # steps it has had
        now = {"pending": True, "phase": "", "phase_steps": 0}

        def snapshot() -> Holding:
            held: Holding = {}
            for name, buf in holdings.buffers():
                if name in bufs and name not in log.user:
                    continue
                held[name] = _labels(buf, p, per_block, driver.with_index)
                if name not in log.names:
                    log.names.append(name)
            return held

        # The state after step k is taken just before step k+1 posts its first message
        # (posting a receive may copy an early message straight into the buffer), when a
        # phase begins, or when the call returns; the first one is the state the first step
        # starts from (after the call copied its input where the algorithm wants it).
        def settle() -> None:
            if now["pending"]:
                now["pending"] = False
                log.snaps.append(snapshot())

        def close_phase() -> None:
            # a phase that sent nothing but changed what the rank holds (Bruck's rotation)
            # is a local step; merely allocating an empty temporary, or the temporaries
            # going away when the call returns, is not
            if now["phase"] and not now["phase_steps"]:
                held = snapshot()
                if log.snaps and _contents_changed(log.snaps[-1], held):
                    log.snaps.append(held)
                    log.phases.append(now["phase"])
                    log.hooks += 1

        def on_phase(name: str) -> None:
            if name == now["phase"]:
                return
            settle()
            close_phase()
            now["phase"], now["phase_steps"] = name, 0

        holdings = _Holdings(bufs, on_phase)

        class Recorder(Subscriber):
            def step_started(self, ch: Any, index: int) -> None:
                settle()
                log.phases.append(now["phase"])
                log.hooks += 1
                now["phase_steps"] += 1
                now["pending"] = True

            def message_sent(self, context, dest, source, tag, payload, n, msg_id):
                settle()
                text = payload_label(payload, n, p, driver.with_index)
                blocks = payload_blocks(payload, p, driver.with_index)
                where = holdings.owner(payload[0]) if payload else None
                log.sends.append((log.hooks, dest, context, tag, text, n, msg_id, where,
                                  blocks))

            def temporary(self, buf, name):
                holdings.temporary(buf, name)

            def phase(self, name):
                holdings.phase(name)

            def receive_posted(self, context, source, tag, target):
                group = engine.group_of(context)
                world = group[source] if group is not None and 0 <= source < len(group) else source
                settle()
                where = holdings.owner(target) if target is not None else None
                log.recvs.append((log.hooks, world, context, tag, where))

        recorder_ = Recorder()
        engine.bus.subscribe(recorder_)
        try:
            driver.call(comm, bufs, root, algorithm)
            holdings.closed = True
            settle()
            close_phase()
        finally:
            engine.bus.unsubscribe(recorder_)

    run_threads(p, body, timeout=timeout, recorder=recorder, hosts=hosts)
    sched = _assemble(collective, algorithm, p, root, nbytes, per_block, logs, protocols,
                      driver.legend(p, root))
    if hosts is not None:
        sched.summary += "  -  hosts: " + " ".join(
            f"{h}={','.join(str(r) for r in range(p) if hosts[r] == h)}" for h in dict.fromkeys(hosts))
    return sched


def _assemble(collective, algorithm, p, root, nbytes, per_block, logs, protocols, legend):
    # pair sends and receives: same (src, dst, context, tag) match in order (non-overtaking)
    queues: Dict[tuple, deque] = defaultdict(deque)
    for dst, log in enumerate(logs):
        for step, src, ctx, tag, where in log.recvs:
            queues[(src, dst, ctx, tag)].append((step, where))
    pairs = []
    for src, log in enumerate(logs):
        for step, dst, ctx, tag, text, n, msg_id, where, blocks in log.sends:
            q = queues.get((src, dst, ctx, tag))
            if not q:
                raise DrawError(f"recorded a send {src}->{dst} (tag {tag}) without its receive")
            dst_step, dst_where = q.popleft()
            pairs.append((src, step, dst, dst_step, text, n,
                          protocols.get((src, msg_id), "local"), where, dst_where, blocks))
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
    messages = [Message(src, dst, col[src][ss], text, n, proto, ss, ds, sw, dw, blocks)
                for src, ss, dst, ds, text, n, proto, sw, dw, blocks in pairs]
    messages.sort(key=lambda m: (m.column, m.src, m.dst))
    states: List[List[Holding]] = []
    for r, log in enumerate(logs):
        snaps = log.snaps or [{}]
        row = [snaps[0]]
        for c in range(steps):
            # the state after column c: after the last local step in a column <= c
            done = [k for k, kc in enumerate(col[r]) if kc <= c]
            row.append(snaps[min(done[-1] + 1, len(snaps) - 1)] if done else snaps[0])
        states.append(row)
    for m in messages:
        # a message packed into (or landing in) a copy of its own: draw it from the one
        # buffer that held all its blocks (to the one that holds them only afterwards)
        if m.src_buffer is None and m.carries:
            m.src_buffer = _only_holder(states[m.src][m.column], m.carries)
        if m.dst_buffer is None and m.carries:
            dst_col = col[m.dst][m.dst_step]
            after = states[m.dst][dst_col + 1]
            before = states[m.dst][dst_col]
            gained = {n: c for n, c in after.items()
                      if not m.carries <= set(before.get(n, ()))}
            m.dst_buffer = _only_holder(gained, m.carries)
    phases = []
    for c in range(steps):
        names: List[str] = []
        for r, log in enumerate(logs):
            for k, kc in enumerate(col[r]):
                if kc == c and log.phases[k] and log.phases[k] not in names:
                    names.append(log.phases[k])
        phases.append(" / ".join(names))
    sched = Schedule(collective, algorithm, p, root, nbytes, per_block, messages, steps, states,
                     col, [log.names for log in logs], phases, [log.user for log in logs],
                     legend)
    sched.summary = (f"{collective} [{algorithm}]  p={p}" + (f"  root={root}" if _rooted(collective) else "")
                     + f"  {nbytes} B ({per_block * 8} B per block)  -  {steps} steps, "
                       f"{len(messages)} messages")
    return sched


def _only_holder(held: Holding, blocks: frozenset) -> Optional[str]:
    """The one buffer among ``held`` holding all these blocks (None: none, or several)."""
    names = [n for n, cells in held.items() if blocks <= {c.rstrip("*") for c in cells}]
    return names[0] if len(names) == 1 else None


def _rooted(collective: str) -> bool:
    d = DRIVERS.get(collective)
    return bool(d and d.rooted)


def legend_text(s: Schedule) -> str:
    """What the labels mean for this collective, and the marks every drawing uses."""
    marks = f"{EMPTY} = empty"
    if any("*" in c for row in s.states for st in row for cells in st.values() for c in cells):
        marks += "; * = partly there"
    return f"{s.legend}; {marks}" if s.p and s.collective != "barrier" else s.legend




# ----------------------------------------------------------------------------------------
# text
# ----------------------------------------------------------------------------------------
#: the text table of buffers is cut into column groups no wider than this
TEXT_WIDTH = 110


def to_text(s: Schedule) -> str:
    lines = [s.summary]
    lines.extend(textwrap.wrap("data: " + legend_text(s), TEXT_WIDTH, subsequent_indent="  "))
    spans = s.phase_spans()
    if spans:
        parts = [f"{name or 'other'} (step{'s' if b > a else ''} {a + 1}"
                 f"{f'-{b + 1}' if b > a else ''})" for name, a, b in spans]
        lines.extend(textwrap.wrap("phases: " + ", ".join(parts), TEXT_WIDTH,
                                   subsequent_indent="  "))
    lines.append("")
    starts = {a: name for name, a, _ in spans}
    for c in range(s.steps):
        if c in starts and starts[c]:
            lines.append(f"{starts[c]}:")
        items = [f"{m.src}->{m.dst} {m.label}".rstrip() +
                 (" (rndv)" if m.protocol == "rendezvous" else "") for m in s.messages_in(c)]
        line = f"step {c + 1}: "
        if not items:
            line += "(local work only)"
        for i, item in enumerate(items):      # wrap between messages, never inside one
            piece = item + (",  " if i + 1 < len(items) else "")
            if len(line) + len(piece.rstrip()) > TEXT_WIDTH and line.strip():
                lines.append(line.rstrip())
                line = " " * len(f"step {c + 1}: ")
            line += piece
        lines.append(line.rstrip())
    if any(s.buffers):
        lines.append("")
        lines.extend(textwrap.wrap(f"what each rank holds ({buffers_note(s)}):", TEXT_WIDTH,
                                   subsequent_indent="  "))
        lines.extend(_holdings_table(s))
    return "\n".join(lines)


def _holdings_table(s: Schedule) -> List[str]:
    heads = ["start"] + [f"step {c + 1}" for c in range(s.steps)]
    label_rows: List[List[str]] = []
    cells: List[List[str]] = []
    for r in range(s.p):
        for i, name in enumerate(s.buffers[r]):
            label_rows.append([f"rank {r}" if i == 0 else "", name])
            cells.append([compress(st[name]) if name in st else "" for st in s.states[r]])
    if not label_rows:
        return []
    lead = [max(len(x[k]) for x in label_rows) for k in range(2)]
    widths = [max([len(heads[i])] + [len(row[i]) for row in cells]) for i in range(len(heads))]
    # cut the columns in groups that fit TEXT_WIDTH (each group repeats the row names)
    groups: List[List[int]] = [[]]
    used = sum(lead) + 2
    for i, w in enumerate(widths):
        if groups[-1] and used + 2 + w > TEXT_WIDTH:
            groups.append([])
            used = sum(lead) + 2
        groups[-1].append(i)
        used += 2 + w
    out: List[str] = []
    for g in groups:
        if out:
            out.append("")
        out.append(("".ljust(lead[0]) + " " + "".ljust(lead[1]) + "  " +
                    "  ".join(heads[i].ljust(widths[i]) for i in g)).rstrip())
        for names, row in zip(label_rows, cells):
            out.append((names[0].ljust(lead[0]) + " " + names[1].ljust(lead[1]) + "  " +
                        "  ".join(row[i].ljust(widths[i]) for i in g)).rstrip())
    return out


# ----------------------------------------------------------------------------------------
# SVG (written by hand) and PNG
# ----------------------------------------------------------------------------------------
PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
            "#ff9da7", "#9c755f", "#bab0ac", "#86bcb6", "#d37295", "#fabfd2", "#8cd17d",
            "#b6992d", "#499894"]


def svg_document(width: int, y: float, foot: str, head: List[str], body: List[str]) -> str:
    """The whole SVG: ``head`` and ``body`` (appended to), then ``foot`` wrapped in grey lines
    from ``y`` down, on a white page with the arrow marker every drawing uses."""
    for line in _wrap_px(foot, width - 20, FS_SMALL):
        y += FS_SMALL + 4
        body.append(f'<text x="10" y="{y:.1f}" fill="#777" font-size="{FS_SMALL}">'
                    f'{svg_escape(line)}</text>')
    height = int(y + 10)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans Mono, monospace" '
           f'font-size="{FS_CELL}">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
           'markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" '
           'fill="#333"/></marker></defs>',
           f'<rect width="{width}" height="{height}" fill="white"/>']
    return "\n".join(out + head + body + ["</svg>"]) + "\n"


def svg_escape(text: str) -> str:
    """``text`` for an SVG text node or attribute value."""
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


def _cell_color(text: str, p: int) -> str:
    if text == EMPTY:
        return "#ffffff"
    who = _split(text.rstrip("*"))[0]
    if who == "Σ":
        return "#c9a227"
    if len(who) == 1 and who in LETTERS:
        return PALETTE[LETTERS.index(who) % len(PALETTE)]
    if who and all(ch in LETTERS for ch in who):
        return "#9aa5b1"   # a partial sum
    return "#dddddd"


#: the widest drawing: scaled to a printed page (about 18 cm wide), 11 px text stays
#: legible; longer schedules continue on further rows of steps (strips)
MAX_WIDTH = 1400
#: advance of one character of a monospace font, per px of font size (DejaVu Sans Mono:
#: 0.602); text boxes are estimated with it, so the layout never lets two texts touch
CHAR = 0.62
_FG_DARK = {"#ffffff", "#dddddd", "#edc948", "#fabfd2", "#c9a227", "#bab0ac", "#9aa5b1",
            "#ff9da7", "#8cd17d", "#86bcb6", "#76b7b2"}


def _text_w(text: str, size: float) -> float:
    return len(text) * CHAR * size


def _wrap_px(text: str, width: float, size: float) -> List[str]:
    return textwrap.wrap(text, max(20, int(width / (CHAR * size)))) or [""]


def buffers_note(s: Schedule) -> str:
    """Which rows are the caller's buffers and which the algorithm's temporaries."""
    user = [n for n in ("buf", "send", "recv") if any(n in u for u in s.user_buffers)]
    temps: List[str] = []
    for r in range(s.p):
        for name in s.buffers[r]:
            if name not in s.user_buffers[r] and name not in temps:
                temps.append(name)
    note = (f"{', '.join(user)}: the caller's buffer{'s' if len(user) > 1 else ''}"
            if user else "")
    if temps:
        note += (f"; {', '.join(temps)}: the algorithm's temporar{'ies' if len(temps) > 1 else 'y'}"
                 f", shown while {'they exist' if len(temps) > 1 else 'it exists'}")
    return note


def _strips(s: Schedule, widths: List[float], room: float) -> List[Tuple[int, int]]:
    """Cut the steps into rows (strips) whose steps' widths fit ``room``, as evenly as the
    widths allow, and where possible where no message crosses the cut:
    [(first step, end step), ...]."""
    def crossing(cut: int) -> bool:
        return any(m.column < cut <= s.rank_columns[m.dst][m.dst_step] for m in s.messages)

    def greedy(limit: float) -> List[Tuple[int, int]]:
        out, a = [], 0
        while a < s.steps:
            b, used = a, 0.0
            while b < s.steps and (b == a or used + widths[b] <= limit):
                used += widths[b]
                b += 1
            cut = b
            while a + 1 < cut < s.steps and crossing(cut):
                cut -= 1
            out.append((a, cut if not crossing(cut) or cut == s.steps else b))
            a = out[-1][1]
        return out

    strips = greedy(room)
    if len(strips) > 1:      # the same number of rows, filled evenly: shrink the limit
        lo, hi = max(widths), room
        for _ in range(20):
            mid = (lo + hi) / 2
            if len(greedy(mid)) <= len(strips):
                hi = mid
            else:
                lo = mid
        strips = greedy(hi)
    return strips or [(0, 0)]


class _Boxes:
    """Text boxes already placed (x0, y0, x1, y1), to keep message labels apart."""

    def __init__(self) -> None:
        self.boxes: List[Tuple[float, float, float, float]] = []

    def free(self, box: Tuple[float, float, float, float], margin: float = 2.0) -> bool:
        x0, y0, x1, y1 = box
        return all(x1 + margin <= a or b + margin <= x0 or y1 + margin <= c or d + margin <= y0
                   for a, c, b, d in self.boxes)

    def overlap(self, box: Tuple[float, float, float, float]) -> float:
        x0, y0, x1, y1 = box
        return sum(max(0.0, min(x1, b) - max(x0, a)) * max(0.0, min(y1, d) - max(y0, c))
                   for a, c, b, d in self.boxes)


#: where along its first gap a message label may sit (fractions), most central first
_LABEL_SPOTS = [0.5, 0.35, 0.65, 0.2, 0.8, 0.27, 0.73, 0.42, 0.58, 0.12, 0.88, 0.05, 0.95]
FS_CELL, FS_SMALL, FS_TITLE = 11, 10, 14


def to_svg(s: Schedule) -> str:
    base = max(110.0, max([_text_w(m.label, FS_SMALL) + 6 for m in s.messages] + [0.0]) + 40)
    local = _text_w(f"step {s.steps} (local)", FS_SMALL) + 16     # nothing to draw in it
    gaps = [base if s.messages_in(c) else local for c in range(s.steps)]
    for _ in range(10):   # widen the gaps of crowded steps until every label has its own spot
        svg, crowded = _svg(s, gaps)
        if not crowded:
            break
        for c in crowded:
            gaps[c] *= 1.3
    return svg


class _Layout:
    """Sizes shared by every strip of one drawing (y positions relative to the bands' top)."""

    def __init__(self, s: Schedule) -> None:
        p = s.p
        cells_max = max([len(cells) for row in s.states for st in row
                         for cells in st.values()] + [1])
        longest = max([len(c) for row in s.states for st in row for cells in st.values()
                       for c in cells] + [2])
        self.cell_w = max(24.0, _text_w("x" * longest, FS_CELL) + 8)
        self.cell_h, self.row_h, band_gap = 18.0, 22.0, 12.0
        self.state_w = max(cells_max * self.cell_w,
                           _text_w(f"after step {s.steps}", FS_SMALL) + 8)
        rank_w = max(_text_w(f"rank {r} ({LETTERS[r]})", FS_CELL) for r in range(p)) if p else 0
        name_w = max([_text_w(n, FS_SMALL) for names in s.buffers for n in names] + [0.0])
        self.left = 10 + rank_w + 10 + name_w + 8
        self.right = 16.0
        self.rows = [max(1, len(s.buffers[r])) for r in range(p)]
        self.band_tops = [0.0]
        for r in range(p):
            self.band_tops.append(self.band_tops[-1] + self.rows[r] * self.row_h + band_gap)
        self.s = s

    def row_y(self, r: int, name: Optional[str]) -> float:
        names = self.s.buffers[r]
        if name not in names:             # a copy made for one message: the band's middle
            return self.band_tops[r] + self.rows[r] * self.row_h / 2
        return self.band_tops[r] + names.index(name) * self.row_h + self.row_h / 2


def _svg(s: Schedule, gaps: List[float]) -> Tuple[str, List[int]]:
    """The drawing with these gap widths, and the steps whose labels had to overlap."""
    g = _Layout(s)
    room = MAX_WIDTH - g.left - g.right - g.state_w
    strips = _strips(s, [g.state_w + gap for gap in gaps], room)
    width = int(max([g.left + g.state_w + sum(g.state_w + gaps[c] for c in range(a, b))
                     + g.right for a, b in strips] + [g.left + g.state_w + g.right]) + 0.999)
    head: List[str] = []
    y = 10.0
    for line in _wrap_px(s.summary, width - 20, FS_TITLE):
        y += FS_TITLE + 4
        head.append(f'<text x="10" y="{y:.1f}" font-size="{FS_TITLE}" font-weight="bold">'
                    f'{svg_escape(line)}</text>')
    for text in [legend_text(s), buffers_note(s)]:
        for line in _wrap_px(text, width - 20, FS_CELL) if text else []:
            y += FS_CELL + 4
            head.append(f'<text x="10" y="{y:.1f}" fill="#444">{svg_escape(line)}</text>')
    y += 10
    crowded: List[int] = []
    body: List[str] = []
    for si, (a, b) in enumerate(strips):
        part, used = _strip(s, g, gaps, a, b, y, crowded)
        body.extend(part)
        y += used + (24 if si + 1 < len(strips) else 8)
    foot = ("recorded from the real minimpi.coll code over the in-process transport; an arrow "
            "runs from the buffer its blocks leave to the buffer they land in; dashed arrows: "
            "rendezvous (large) messages; dashed cells: the algorithm's temporaries")
    return svg_document(width, y, foot, head, body), crowded


def _strip(s: Schedule, g: _Layout, gaps: List[float], a: int, b: int, top: float,
           crowded: List[int]) -> Tuple[List[str], float]:
    """Steps a..b-1 (state columns a..b) as one row of the drawing, starting at ``top``;
    returns its elements and height, and adds the steps whose labels overlap to
    ``crowded``."""
    out: List[str] = []
    p, sw = s.p, g.state_w
    y_phase, y_step, y_state = top + FS_SMALL, top + 2 * FS_SMALL + 6, top + 3 * FS_SMALL + 12
    bands = top + 3 * FS_SMALL + 20
    xs = [g.left]                        # left edge of state columns a, a+1, ..., b
    for c in range(a, b):
        xs.append(xs[-1] + sw + gaps[c])

    def state_x(c: int) -> float:
        return xs[c - a]

    for name, first, last in s.phase_spans():   # a bracket over each phase's steps, named
        lo, hi = max(first, a), min(last, b - 1)
        if not name or lo > hi:
            continue
        x0, x1 = state_x(lo) + sw + 4, state_x(hi) + sw + gaps[hi] - 4
        out.append(f'<line x1="{x0:.1f}" y1="{y_phase + 3:.1f}" x2="{x1:.1f}" '
                   f'y2="{y_phase + 3:.1f}" stroke="#b07aa1" stroke-width="2"/>')
        fits = max(1, int((x1 - x0) / (CHAR * FS_SMALL)))
        text = name if len(name) <= fits else name[:fits - 1] + "…"
        out.append(f'<text x="{x0:.1f}" y="{y_phase - 1:.1f}" font-size="{FS_SMALL}" '
                   f'fill="#7b4a73">{svg_escape(text)}</text>')
    for c in range(a, b + 1):
        x = state_x(c)
        title = "start" if c == 0 else f"after step {c}"
        out.append(f'<text x="{x + sw / 2:.1f}" y="{y_state:.1f}" text-anchor="middle" '
                   f'font-size="{FS_SMALL}" fill="#555">{title}</text>')
        if c < b:
            out.append(f'<rect x="{x + sw + 4:.1f}" y="{bands - 4:.1f}" '
                       f'width="{gaps[c] - 8:.1f}" height="{g.band_tops[-1]:.1f}" fill="#f6f6f6"/>')
            step = f"step {c + 1}" + ("" if s.messages_in(c) else " (local)")
            out.append(f'<text x="{x + sw + gaps[c] / 2:.1f}" y="{y_step:.1f}" '
                       f'text-anchor="middle" font-size="{FS_SMALL}" font-weight="bold">'
                       f'{step}</text>')
    for r in range(p):
        by = bands + g.band_tops[r]
        out.append(f'<text x="10" y="{by + g.row_h / 2 + 4:.1f}" font-weight="bold">'
                   f'rank {r} ({LETTERS[r]})</text>')
        if not s.buffers[r]:
            yy = by + g.row_h / 2
            out.append(f'<line x1="{g.left:.1f}" y1="{yy:.1f}" x2="{state_x(b) + sw:.1f}" '
                       f'y2="{yy:.1f}" stroke="#ccc" stroke-dasharray="3,3"/>')
        for i, name in enumerate(s.buffers[r]):
            yy = by + i * g.row_h + g.row_h / 2
            temp = name not in s.user_buffers[r]
            style = ' font-style="italic" fill="#8a5a00"' if temp else ' fill="#333"'
            out.append(f'<text x="{g.left - 8:.1f}" y="{yy + 4:.1f}" text-anchor="end" '
                       f'font-size="{FS_SMALL}"{style}>{svg_escape(name)}</text>')
            dash = ' stroke-dasharray="3,2"' if temp else ""
            for c in range(a, b + 1):
                for k, text in enumerate(s.states[r][c].get(name) or []):
                    cx = state_x(c) + k * g.cell_w
                    fill = _cell_color(text, p)
                    fg = "#000" if fill in _FG_DARK else "#fff"
                    out.append(f'<rect x="{cx:.1f}" y="{yy - g.cell_h / 2:.1f}" '
                               f'width="{g.cell_w:.1f}" height="{g.cell_h:.1f}" fill="{fill}" '
                               f'stroke="#444" stroke-width="0.8"{dash}/>')
                    out.append(f'<text x="{cx + g.cell_w / 2:.1f}" y="{yy + 4:.1f}" '
                               f'text-anchor="middle" fill="{fg}">{svg_escape(text)}</text>')
    boxes = _Boxes()
    labels: List[str] = []
    for c in range(a, b):
        gap_lo, gap_hi = state_x(c) + sw + 6, state_x(c) + sw + gaps[c] - 6
        for m in s.messages_in(c):
            dst_col = s.rank_columns[m.dst][m.dst_step]
            cut = dst_col >= b                 # received in a later strip: arrow cut short
            x1 = gap_lo
            x2 = state_x(min(dst_col, b - 1)) + sw + gaps[min(dst_col, b - 1)] - 6
            y1, y2 = bands + g.row_y(m.src, m.src_buffer), bands + g.row_y(m.dst, m.dst_buffer)
            if m.src == m.dst and y1 == y2:
                y2 += 1
            dash = ' stroke-dasharray="6,3"' if m.protocol == "rendezvous" else ""
            out.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
                       f'stroke="#333" stroke-width="1.4" marker-end="url(#arrow)"{dash}/>')
            text = m.label + (f" (to step {dst_col + 1})" if cut else "")
            if not text:
                continue
            w, h = _text_w(text, FS_SMALL) + 6, FS_SMALL + 4
            best = None
            for t in _LABEL_SPOTS:
                lx = gap_lo + w / 2 + 2 + t * max(0.0, gap_hi - gap_lo - w - 4)
                ly = y1 + (y2 - y1) * (lx - x1) / (x2 - x1)
                box = (lx - w / 2, ly - h / 2, lx + w / 2, ly + h / 2)
                if boxes.free(box):
                    best = box
                    break
                if best is None or boxes.overlap(box) < boxes.overlap(best):
                    best = box
            if not boxes.free(best) and c not in crowded:
                crowded.append(c)
            boxes.boxes.append(best)
            x0, y0, xe, ye = best
            labels.append(f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{w:.1f}" height="{h:.1f}" '
                          f'rx="3" fill="#fffbe6" stroke="#c8b56a" stroke-width="0.6"/>')
            labels.append(f'<text x="{(x0 + xe) / 2:.1f}" y="{ye - 4:.1f}" text-anchor="middle" '
                          f'font-size="{FS_SMALL}">{svg_escape(text)}</text>')
    out.extend(labels)
    return out, bands - top + g.band_tops[-1]


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
    """Every collective and algorithm in the registry, with the first sentence of its
    docstring."""
    load_all()
    lines = []
    for coll in sorted(REGISTRY):
        mark = "" if coll in DRIVERS else "   (no drawing driver yet)"
        lines.append(f"{coll}{mark}")
        for name, alg in REGISTRY[coll].items():
            # the whole first sentence, wrapped under itself: never cut mid-sentence
            summary = alg.summary if INTRA in alg.kinds else \
                f"{alg.summary} (intercommunicators: not drawn)"
            lines.extend(textwrap.wrap(summary, TEXT_WIDTH, initial_indent=f"  {name:<20} ",
                                       subsequent_indent=" " * 23, break_long_words=False,
                                       break_on_hyphens=False))
    return "\n".join(lines)
