"""Collective mismatch detection: every rank must call the same collectives in the same order.

MPI requires the ranks of a communicator to call the same collective operations in the same
order, with the same root, the same op and compatible sizes. A program that does not (rank 0
calls ``Bcast`` while rank 2 calls ``Reduce``) hangs or, worse, silently delivers one call's
data into another call's buffer. minimpi turns that into one clear error::

    rank 2 called Reduce(root=0, op=SUM) as collective #3 on COMM_WORLD while rank 0 called
    Bcast(root=0)

**How, at negligible cost.** Every collective call already has a private tag on the
communicator's collective context: the call's sequence number (:class:`~minimpi.coll.schedule.
Channel`). We fold a compact *signature* of the call into the high bits of that tag::

    tag = seq mod 2**14  |  signature << 14          (31 bits, never negative)
    signature (17 bits) = kind (5) | root (4) | op (4) | detail (4)

* ``kind``: which collective (``bcast``, ``reduce``...), exact (a fixed table);
* ``root``: 0 for none, ``root + 1`` for roots 0..13, 15 for larger roots (then the exact
  root is folded into ``detail``);
* ``op``: 0 for none, 1..14 the predefined ops, 15 a user op (its name goes into ``detail``);
* ``detail``: a 4-bit checksum of the algorithm, the byte count and the buffer-vs-object
  form - the things that must also agree but are not worth exact bits.

Consequences:

1. Mismatched calls can never match each other's messages (their tags differ), so no data
   is ever delivered into the wrong call - the worst failure, silent garbage, is gone.
2. The check itself costs nothing on the matching path: it runs only for a collective
   message that matched no posted receive (the *unexpected* path, which already allocates
   a buffer) - :meth:`Watch.arrived`, which the engine calls as the context's watcher
   (``Engine.watch_unexpected``) - and once per collective call,
   over this communicator's unexpected queue, which is almost always empty
   (:func:`open_call`). A message whose sequence number names one of this rank's recent
   collectives (the last :data:`HISTORY`) but whose signature differs is a mismatch: the
   receiver fails that collective's pending receives with
   :class:`~minimpi.errors.CollectiveMismatchError` (so it does not hang), or - when that
   call already returned - raises the error from its next collective on the communicator.
3. The receiver decodes the sender's kind, root and op from the signature, so the message
   names both sides. Differences only in ``detail`` are explained as well as the message
   allows (its byte count, the algorithm or object form when a candidate reproduces the
   checksum).

Limits (documented, not hidden): a mismatch in which no message ever crosses between the
two sides (e.g. two ranks that both only *receive* in their call) cannot be seen by either
rank; it shows up as a deadlock, and ``minimpi run``'s deadlock report names the collectives
each blocked rank is in. A ``detail`` difference escapes the signature with probability
1/16; buffer collectives then still catch a wrong size when the data arrives
(``Channel._check_size``). Sequence numbers are compared modulo 2**14: a rank more than
16 000 collectives ahead of another on one communicator could confuse the check.
"""
from __future__ import annotations

import zlib
from typing import Any, Dict, List, Optional, Tuple

from ..errors import CollectiveMismatchError
from . import slots
from .registry import REGISTRY
from .slots import SEQ_BITS, SEQ_MASK

#: how many recent collectives per communicator a late message is checked against
HISTORY = 64

#: collective kinds (registry names) with a fixed id each (index + 1); others hash to 23..31
KINDS = ["barrier", "bcast", "reduce", "allreduce", "gather", "gatherv", "scatter", "scatterv",
         "allgather", "allgatherv", "alltoall", "alltoallv", "alltoallw", "reduce_scatter",
         "reduce_scatter_block", "scan", "exscan", "neighbor_allgather", "neighbor_allgatherv",
         "neighbor_alltoall", "neighbor_alltoallv", "neighbor_alltoallw"]
_KIND_ID = {name: i + 1 for i, name in enumerate(KINDS)}
#: how each kind is named in messages (the mpi4py buffer method; objects use the lowercase)
DISPLAY = {name: name.capitalize() for name in KINDS}

#: predefined ops with a fixed id each (index + 1); 15 = another (user) op
OPS = ["SUM", "PROD", "MAX", "MIN", "LAND", "BAND", "LOR", "BOR", "LXOR", "BXOR", "MAXLOC",
       "MINLOC", "REPLACE", "NO_OP"]
_OP_ID = {name: i + 1 for i, name in enumerate(OPS)}
_OTHER_OP = 15
_BIG_ROOT = 15

#: element types with a fixed 4-bit id each (index + 1); 15 = another type (its name goes into
#: ``detail``); 0 = no type (objects, or an empty call)
TYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
         "float16", "float32", "float64", "complex64", "complex128"]
_TYPE_ID = {name: i + 1 for i, name in enumerate(TYPES)}
_OTHER_TYPE = 15
#: collectives that take an op: their type id goes where a root would be (or, for reduce,
#: which has both, into ``detail``); the others keep it where an op would be
_WITH_OP = frozenset(("reduce", "allreduce", "reduce_scatter", "reduce_scatter_block", "scan",
                      "exscan"))


def type_name(datatype: Any) -> Optional[str]:
    """The element type of a buffer call's datatype, as the signature names it (None: none).

    MPI's type-matching rule: the ranks of a collective must pass the same type signature.
    Two buffers of as many bytes but different element types (float64 here, int64 there)
    would otherwise be reduced or broadcast as reinterpreted bits.
    """
    if datatype is None:
        return None
    try:
        dt = datatype.element_dtype       # one basic type throughout (derived types too)
        if dt is None:                    # a struct of several: its signature names it
            return f"struct{tuple(datatype.signature)}"
    except Exception:       # a null or freed type: its own call reports it
        return None
    base = dt.base if dt.subdtype is not None else dt
    return base.name if base.fields is None else f"struct{base.descr}"


def _kind_id(collective: str) -> int:
    kid = _KIND_ID.get(collective)
    if kid is None:
        kid = 23 + zlib.crc32(collective.encode()) % 9
    return kid


def _op_name(op: Any) -> Optional[str]:
    if op is None or isinstance(op, str):    # already a name (what the bookkeeping keeps)
        return op
    name = getattr(op, "name", None)
    if isinstance(name, str):
        return name
    return getattr(op, "__name__", None) or type(op).__name__


def op_name(op: Any) -> Optional[str]:
    """How a signature and the bookkeeping name ``op`` (None: no op; a name stays a name)."""
    return _op_name(op)


def signature(collective: str, algorithm: str, root: Optional[int], op: Any, nbytes: int,
              objects: bool, typename: Optional[str] = None) -> int:
    """The 17-bit signature of one collective call (see the module docstring). A
    communicator computes it once per call signature (its plan keeps it), so it is not
    remembered here."""
    return _signature(collective, algorithm, root, op, nbytes, objects, typename)


def _signature(collective: str, algorithm: str, root: Optional[int], op: Any, nbytes: int,
               objects: bool, typename: Optional[str] = None) -> int:
    kind = _kind_id(collective)
    opname = _op_name(op)
    if root is None:
        rbits = 0
    elif 0 <= root < _BIG_ROOT - 1:
        rbits = root + 1
    else:
        rbits = _BIG_ROOT
    obits = 0 if opname is None else _OP_ID.get(opname, _OTHER_OP)
    text = f"{algorithm}|{nbytes}|{1 if objects else 0}"
    if rbits == _BIG_ROOT:
        text += f"|r{root}"
    if obits == _OTHER_OP:
        text += f"|o{opname}"
    tbits = 0 if typename is None else _TYPE_ID.get(typename, _OTHER_TYPE)
    if tbits:
        # the field this collective does not use holds the type (exact); reduce uses both
        if collective not in _WITH_OP:
            obits = tbits
        elif root is None:
            rbits = tbits
        else:
            tbits = _OTHER_TYPE
        if tbits == _OTHER_TYPE:
            text += f"|t{typename}"
    detail = zlib.crc32(text.encode()) & 0xF
    return kind | rbits << 5 | obits << 9 | detail << 13


def decode(sig: int) -> Tuple[int, Optional[int], Optional[str], int]:
    """(kind id, root or None (-1: a root above 13), op name or None, detail) of a signature."""
    kind, root, op, detail, _ = decode_full(sig)
    return kind, root, op, detail


def decode_full(sig: int) -> Tuple[int, Optional[int], Optional[str], int, Optional[str]]:
    """:func:`decode` and the element type (None: none recorded, or folded into detail)."""
    kind = sig & 0x1F
    rbits = (sig >> 5) & 0xF
    obits = (sig >> 9) & 0xF
    detail = (sig >> 13) & 0xF
    collective = KINDS[kind - 1] if 1 <= kind <= len(KINDS) else None
    tbits = 0
    if collective is not None and collective not in _WITH_OP:
        tbits, obits = obits, 0
    elif collective is not None and collective != "reduce":
        tbits, rbits = rbits, 0
    root = None if rbits == 0 else (-1 if rbits == _BIG_ROOT else rbits - 1)
    op = None if obits == 0 else (OPS[obits - 1] if obits <= len(OPS) else "a user-defined op")
    typename = TYPES[tbits - 1] if 1 <= tbits <= len(TYPES) else None
    return kind, root, op, detail, typename


def _kind_name(kind: int) -> str:
    if 1 <= kind <= len(KINDS):
        return DISPLAY[KINDS[kind - 1]]
    try:  # a collective outside the fixed table: look among the registered ones
        for name in REGISTRY:
            if _kind_id(name) == kind:
                return name.capitalize()
    except Exception:  # pragma: no cover - only for messages
        pass
    return "another collective"


class Call:
    """What this rank called as one collective (kept for the last :data:`HISTORY` calls)."""

    __slots__ = ("seq", "tag", "sig", "collective", "call", "algorithm", "root", "op", "nbytes",
                 "objects", "typename")

    def __init__(self, seq, tag, sig, collective, call, algorithm, root, op, nbytes, objects,
                 typename=None):
        self.seq = seq
        self.tag = tag
        self.sig = sig
        self.collective = collective
        self.call = call
        self.algorithm = algorithm
        self.root = root
        self.op = op
        self.nbytes = nbytes
        self.objects = objects
        self.typename = typename

    def text(self, with_size: bool = False) -> str:
        args = []
        if self.root is not None:
            args.append(f"root={self.root}")
        opname = _op_name(self.op)
        if opname is not None:
            args.append(f"op={opname}")
        out = f"{self.call}({', '.join(args)})"
        if with_size:
            out += f" with {self.nbytes} bytes per rank" if not self.objects else " on Python objects"
        return out


def describe_signature(sig: int, with_type: bool = False) -> str:
    """``Bcast(root=0)`` / ``Allreduce(op=SUM)``: what a signature says about a call (and,
    ``with_type``, ``... on float64 data`` where it records the element type)."""
    kind, root, op, _, typename = decode_full(sig)
    args = []
    if root is not None:
        args.append("root>=14" if root < 0 else f"root={root}")
    if op is not None:
        args.append(f"op={op}")
    text = f"{_kind_name(kind)}({', '.join(args)})"
    return text if typename is None or not with_type else f"{text} on {typename} data"


def _explain_detail(mine: Call, their_sig: int, length: int, nbytes_known: bool) -> str:
    """Why two calls of the same kind, root and op differ: size, form or algorithm.

    The 4-bit checksum cannot be inverted, so the likely causes are tried in turn (the
    message's own byte count, the other form, the other algorithms) and the first one that
    reproduces the checksum is named.
    """
    their_detail = (their_sig >> 13) & 0xF

    def detail(alg, nbytes, objects):
        return (signature(mine.collective, alg, mine.root, mine.op, nbytes, objects,
                          mine.typename) >> 13) & 0xF

    algs = [mine.algorithm]
    try:
        algs += [a for a in REGISTRY.get(mine.collective, {}) if a != mine.algorithm]
    except Exception:  # pragma: no cover - only for messages
        pass
    candidates = []
    for objects in (mine.objects, not mine.objects):
        for alg in algs:
            for nbytes in ((0,) if objects else (mine.nbytes, length)):
                if (alg, nbytes, objects) != (mine.algorithm, mine.nbytes, mine.objects):
                    candidates.append((alg, nbytes, objects))
    for alg, nbytes, objects in candidates:
        if detail(alg, nbytes, objects) != their_detail:
            continue
        parts = []
        if objects != mine.objects:
            parts.append("the Python-object form (a lowercase call)" if objects else
                         "the buffer form (a Capitalized call)")
        if not objects and nbytes != mine.nbytes:
            parts.append(f"{nbytes} bytes per rank")
        if alg != mine.algorithm:
            parts.append(f"algorithm {alg!r} where this rank used {mine.algorithm!r} (every "
                         f"rank must choose the same algorithm: same algorithm= argument and "
                         f"MINIMPI_{mine.collective.upper()} setting)")
        return ", ".join(parts)
    if nbytes_known:
        return (f"a different buffer size (its message here has {length} bytes; this rank "
                f"passed {mine.nbytes} bytes)")
    return "a different buffer size, algorithm or object/buffer form"


class Watch:
    """Mismatch bookkeeping of one communicator's collective context (one per engine).

    It is the engine's watcher of that context (``Engine.watch_unexpected``): the engine
    calls it with each message there that matched no posted receive, and forgets it when
    the communicator is freed (``Engine.release_context``).
    """

    __slots__ = ("ep", "recent", "error", "aborted", "unlooked")

    def __init__(self, ep: Any) -> None:
        self.ep = ep
        #: the last HISTORY calls, call ``low`` (seq mod 2**14) at ``low % HISTORY``, each as
        #: the tuple (seq, tag, Call's fields...) (cheap to make: one store per call)
        self.recent: List[Optional[tuple]] = [None] * HISTORY
        self.error: Optional[CollectiveMismatchError] = None
        #: seq mod 2**14 -> the error that aborted that slot here (see minimpi.coll.slots)
        self.aborted: Dict[int, BaseException] = {}
        #: a message went to this context's unexpected queue since :func:`open_recorded`
        #: last found it empty (while False, a call need not look at the queue)
        self.unlooked = True

    def fields(self, low: int) -> Optional[tuple]:
        """Call ``low``'s record, if it is one of this rank's last :data:`HISTORY` calls."""
        entry = self.recent[low % HISTORY]
        return entry if entry is not None and entry[0] & SEQ_MASK == low else None

    def register(self, seq: int, tag: int, sig: int, collective: str, call: str,
                 algorithm: str = "", root: Optional[int] = None, op: Any = None,
                 nbytes: int = 0, objects: bool = False, typename: Optional[str] = None) -> int:
        """Record slot ``seq`` as this rank's call (kept for :data:`HISTORY` calls)."""
        if op is not None and not isinstance(op, str):
            op = _op_name(op)
        return self.record(seq, tag, (sig, collective, call, algorithm, root, op, nbytes,
                                      objects, typename))

    def record(self, seq: int, tag: int, fields: tuple) -> int:
        """:meth:`register` with the call's fields from :func:`call_fields` (a compiled call
        makes them once)."""
        low = seq & SEQ_MASK
        if self.aborted:
            self.aborted.pop(low, None)      # a new call in this slot (after wrap-around)
        self.recent[low % HISTORY] = (seq, tag, *fields)
        return low

    def abort(self, engine: Any, context: int, low: int, err: BaseException) -> None:
        """Slot ``low`` failed: fail what of it is pending here, drop what arrives for it."""
        self.aborted[low] = err
        slots.fail_slot(engine, context, low, err)
        slots.purge_slot(engine, context, low)

    def _marker(self, engine: Any, inc: Any) -> None:
        """Another rank's abort marker arrived (see :mod:`minimpi.coll.slots`)."""
        low = inc.tag & SEQ_MASK
        fields = self.fields(low)
        if fields is None:
            behind = (self.ep.coll_calls - low) & SEQ_MASK
            if 0 < behind < (SEQ_MASK + 1) // 2:   # a call finished long ago: nothing to do
                slots.purge_slot(engine, inc.context, low)
            return                  # else a call this rank has not reached: open_call sees it
        if low not in self.aborted:
            mine = Call(*fields)
            self.abort(engine, inc.context, low, slots.aborted_error(
                self.ep, mine.text(), mine.seq, inc.source, slots.marker_class(inc.tag)))
        else:
            slots.purge_slot(engine, inc.context, low)

    def call(self, low: int) -> Optional[Call]:
        fields = self.fields(low)
        return None if fields is None else Call(*fields)

    def error_for(self, mine: Call, source: int, their_tag: int, length: int,
                  rendezvous: bool) -> CollectiveMismatchError:
        ep = self.ep
        their_sig = their_tag >> SEQ_BITS
        theirs_full, mine_full = decode_full(their_sig), decode_full(mine.sig)
        if theirs_full[:3] == mine_full[:3] and theirs_full[4] != mine_full[4] and \
                mine.typename is not None and not mine.objects and \
                (theirs_full[4] is not None or mine_full[4] is None):
            their_type = theirs_full[4] or "another element type"
            return CollectiveMismatchError(
                f"collective mismatch: rank {ep.rank} called {mine.text()} on "
                f"{mine.typename} data as collective #{mine.seq} on {ep.name} while rank "
                f"{source} called {describe_signature(their_sig, with_type=True)}: the element types differ "
                f"({mine.typename} here, {their_type} there); MPI's type-matching rule "
                f"requires the same datatype signature on every rank (equal byte counts of "
                f"different types would be reinterpreted bits)")
        same_kind = theirs_full[:3] == mine_full[:3]   # the type fields aside
        if same_kind:
            theirs = (f"{describe_signature(their_sig)} with "
                      f"{_explain_detail(mine, their_sig, length, not mine.objects)}")
            mine_text = mine.text(with_size=True)
        else:
            theirs = describe_signature(their_sig)
            mine_text = mine.text()
        return CollectiveMismatchError(
            f"collective mismatch: rank {ep.rank} called {mine_text} as collective "
            f"#{mine.seq} on {ep.name} while rank {source} called {theirs}; every rank of a "
            f"communicator must call the same collectives in the same order, with the same "
            f"root, op and sizes")

    # -- called by the engine for a collective message that matched no posted receive -------
    def arrived(self, inc: Any) -> None:
        """A collective message went to the unexpected queue: is it from a mismatched call?

        Runs inside the transport's progress; never raises. The error is delivered by
        failing the pending receives (and rendezvous sends) of this communicator's collectives
        - the mismatched call's, or, when that call already returned, those of the call now
        running, since the communicator is out of step from here on - or, when none is
        pending, from this rank's next collective call on the communicator.
        """
        self.unlooked = True
        try:
            low = inc.tag & SEQ_MASK
            fields = self.fields(low)
            if low not in self.aborted and inc.tag & slots.KIND_MASK and (
                    fields is None or fields[1] == inc.tag):
                # a call's message (no marker): of the call this rank is in - all is well -
                # or of one it has not reached yet, which open_call checks when it gets there
                return
            engine = self.ep.engine
            if not slots.in_slot(inc.tag, low):    # Create_group's exchange: no slot
                return
            if slots.is_marker(inc.tag, inc.length):
                self._marker(engine, inc)
                return
            if low in self.aborted:     # a late message of a failed call: never matched
                slots.purge_slot(engine, inc.context, low)
                return
            fields = self.fields(low)
            if fields is None or fields[1] == inc.tag:
                return
            err = self.error_for(Call(*fields), inc.source, inc.tag, inc.length, inc.rendezvous)
            failed = engine.fail_pending(inc.context, err)
            if not failed and self.error is None:
                self.error = err
        except Exception:  # pragma: no cover - diagnostics must never break progress
            pass

    __call__ = arrived      # the engine calls the watcher itself


def open_call(ch: Any, collective: str, call: str, algorithm: str,
              root: Optional[int], op: Any, nbytes: int, objects: bool,
              typename: Optional[str] = None) -> None:
    """Give channel ``ch`` its signed tag and check it against what already arrived.

    Called once per collective call, after the channel drew its sequence number (a
    communicator's calls go through :func:`open_signed` with the signature their plan
    kept). Raises :class:`CollectiveMismatchError` when a message of this call's sequence
    number with another signature is already here, or when an earlier call on this
    communicator was found mismatched after it returned.
    """
    opname = _op_name(op)
    open_signed(ch, watch_of(ch.ep), signature(collective, algorithm, root, opname, nbytes,
                                               objects, typename),
                collective, call, algorithm, root, opname, nbytes, objects, typename)


def open_signed(ch: Any, watch: "Watch", sig: int, collective: str, call: str,
                algorithm: str, root: Optional[int], opname: Optional[str], nbytes: int,
                objects: bool, typename: Optional[str] = None) -> None:
    """:func:`open_call` with the call's signature ``sig`` and the communicator's
    bookkeeping ``watch`` (:func:`watch_of`) already known."""
    ch.watch = watch
    ch.tag = open_slot(ch.ep, watch, ch.tag, sig, collective, call, algorithm, root, opname,
                       nbytes, objects, typename)


def call_fields(sig: int, collective: str, call: str, algorithm: str, root: Optional[int],
                opname: Optional[str], nbytes: int, objects: bool,
                typename: Optional[str] = None) -> tuple:
    """What the bookkeeping records of a call besides its slot and tag (:func:`open_slot`):
    the same for every call of a compiled signature, so made once for it."""
    return (sig, collective, call, algorithm, root, opname, nbytes, objects, typename)


def open_slot(ep: Any, watch: "Watch", seq: int, sig: int, collective: str, call: str,
              algorithm: str, root: Optional[int], opname: Optional[str], nbytes: int,
              objects: bool, typename: Optional[str] = None) -> int:
    """The signed tag of the call in slot ``seq`` (drawn from the endpoint), recorded in the
    communicator's bookkeeping and checked against what already arrived: raises the error a
    message of this slot with another signature, or an earlier call, left."""
    return open_recorded(ep, watch, seq, call_fields(sig, collective, call, algorithm, root,
                                                     opname, nbytes, objects, typename))


def open_recorded(ep: Any, watch: "Watch", seq: int, fields: tuple) -> int:
    """:func:`open_slot` with the call's :func:`call_fields`, made once for its signature."""
    if watch.error is not None:
        err, watch.error = watch.error, None
        raise err
    tag = (seq & SEQ_MASK) | fields[0] << SEQ_BITS
    # watch.record(seq, tag, fields), inline (every collective call opens its slot here)
    low = seq & SEQ_MASK
    if watch.aborted:
        watch.aborted.pop(low, None)
    watch.recent[low % HISTORY] = (seq, tag, *fields)
    if not watch.unlooked:        # nothing arrived unexpected since the queue was empty
        return tag
    # (cleared before the look: a message arriving meanwhile, in another thread's progress,
    # sets it again)
    watch.unlooked = False
    waiting = ep.engine.unexpected_messages(ep.coll_context)
    if waiting:
        watch.unlooked = True
    # a message of this very call (the common case: a peer was first) needs no look
    for inc in waiting:
        if inc.tag != tag and (inc.tag & SEQ_MASK) == low:
            check_marker(ep, low)          # another rank's abort marker: raises that
            raise watch.error_for(watch.call(low), inc.source, inc.tag, inc.length,
                                  inc.rendezvous)
    return tag


def watch_of(ep: Any) -> Watch:
    """The mismatch/abort bookkeeping of ``ep``'s collective context (made on first use)."""
    watch = ep.engine.unexpected_watcher(ep.coll_context)
    if watch is None:
        watch = Watch(ep)
        ep.engine.watch_unexpected(ep.coll_context, watch)
    return watch


def watches(engine: Any) -> Dict[int, Watch]:
    """The bookkeeping of every collective context of ``engine`` (of communicators not
    freed), by context."""
    return {c: w for c, w in engine.unexpected_watchers().items() if isinstance(w, Watch)}


def watch_if_any(ep: Any) -> Optional[Watch]:
    """The bookkeeping of ``ep``'s collective context if a collective call made it."""
    return ep.engine.unexpected_watcher(ep.coll_context)


def check_marker(ep: Any, low: int) -> None:
    """Raise (and abort the slot here) if another rank's abort marker for slot ``low`` - a
    call this rank has just opened - is already waiting."""
    engine = ep.engine
    inc = slots.queued_marker(engine, ep.coll_context, low)
    if inc is None:
        return
    watch = watch_of(ep)
    mine = watch.call(low)
    err = slots.aborted_error(ep, mine.text() if mine else "a collective call", low,
                              inc.source, slots.marker_class(inc.tag))
    watch.abort(engine, ep.coll_context, low, err)
    raise err


def abort_slot(ep: Any, exc: BaseException, low: Optional[int] = None,
               call: str = "collective") -> None:
    """This rank's collective call failed with ``exc``: consume its slot (``low``, or the
    next one if the call failed before taking it), drop what arrives for it, and send every
    other member the abort marker. Never raises (it runs while ``exc`` propagates)."""
    try:
        engine = ep.engine
        watch = watch_of(ep)
        if low is None:
            seq = ep.next_coll_tag()
            low = watch.register(seq, slots.marker_tag(seq, 0), 0, "aborted", call)
        watch.abort(engine, ep.coll_context, low, exc)
        slots.send_markers(ep, low, getattr(exc, "error_class", slots.ERR_OTHER))
    except Exception:  # noqa: S110 - the caller's own error is what must surface
        pass


def abort_groups(remote: Any, local: Any, exc: BaseException,
                 lows: Optional[Tuple[int, int]] = None, call: str = "collective") -> None:
    """:func:`abort_slot` for an intercommunicator's call: consume its slot on both
    endpoints (``lows``, or the next ones if the call failed before taking them) and send
    every other process of both groups an abort marker on **both** collective contexts - a
    rank may be waiting on either (a leader on its group, its group on the leader). Both
    groups use the same context ids and draw the same slot numbers, so one marker means the
    same call everywhere. Never raises."""
    try:
        error_class = getattr(exc, "error_class", slots.ERR_OTHER)
        markers = []
        for ep, low in zip((remote, local), lows or (None, None)):
            watch = watch_of(ep)
            if low is None:
                seq = ep.next_coll_tag()
                low = watch.register(seq, slots.marker_tag(seq, 0), 0, "aborted", call)
            watch.abort(ep.engine, ep.coll_context, low, exc)
            markers.append((ep.coll_context, slots.marker_tag(low, error_class)))
        for ep, everyone in ((remote, True), (local, False)):
            for dest in range(ep.size):
                if everyone or dest != ep.rank:   # the remote group: every rank
                    for context, tag in markers:
                        ep.isend((), 0, dest, tag, 0, "collective abort", context)
    except Exception:  # noqa: S110 - the caller's own error is what must surface
        pass


def call_of(ep: Any, tag: int) -> Optional[Call]:
    """This rank's recent collective call with channel tag ``tag`` on endpoint ``ep`` (for
    deadlock reports)."""
    watch = watch_if_any(ep)
    if watch is None:
        return None
    mine = watch.call(tag & SEQ_MASK)
    return mine if mine is not None and mine.tag == tag else None
