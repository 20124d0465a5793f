"""What a rank leaves behind when it finishes: messages never received, requests never completed.

An MPI program must receive every message it is sent and complete every request it starts;
one that does not is wrong even when it ends normally. Collectives called differently on
different ranks (``Bcast(root=1)`` on one rank, ``root=0`` on the others; ``Bcast`` on one,
``Reduce`` on the others) often end like that: every rank sends, nobody's receive matches, and
the job exits 0 with wrong results. So at finalize each rank checks what is left
(:func:`finalize_check`), as MPICH's and Open MPI's debug modes do:

* a collective message never received, of a call this rank made differently, is a
  :class:`~minimpi.errors.CollectiveMismatchError` naming both calls (the mismatch check of
  :mod:`minimpi.coll.mismatch` decodes the sender's call from the message's tag) - the rank
  exits with an error; one of a call this rank never made (it made fewer) is a warning, since
  the rank may have ended early on purpose (``sys.exit(7)``: an exit handler cannot see that
  code, and must not replace it);
* a point-to-point message never received, a receive that never matched and a nonblocking
  request never completed by a wait or test are warnings naming source or destination, tag,
  size, communicator and the script line they came from (:mod:`minimpi.comm.ledger`).

**Everything sent has arrived** before the check, or it would race with messages still on
the way. MPI's finalize is collective, and here it is an exchange: every rank sends each
peer an end-of-messages marker on a context of its own (:data:`FINAL_CONTEXT`), carrying the
script lines of the messages it sent that peer, and waits for every peer's marker (a peer
that is gone counts as done). A connection delivers in order, so a peer's marker comes after
all its earlier messages. The wait is bounded (:func:`finalize_wait`: 2 s by default, less
than half the deadlock timeout): ranks of one program finish close together, while a rank
that ends early - maybe with ``sys.exit(1)``, which an exit handler cannot tell from a clean
end - must not keep the others, which may be waiting for it, from failing as they would. So
the check is complete when the ranks finish within that time of each other, and otherwise
covers what had arrived: a message in the queue then is one this rank never received,
whatever comes later. The markers travel on the connections small jobs open at start-up;
a job that connects lazily (more than ``MINIMPI_CONNECT_ALL_MAX`` ranks) checks what has
arrived without the exchange, rather than open a connection to every rank at exit. While it waits the rank has told the launcher that it finished, so the
deadlock detector looks only at the ranks still running.

:func:`waiting_messages` lists, for a blocked wait, the messages that wait unreceived in the
same communicators (a tag or source mix-up): the deadlock report prints them.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from ..coll.mismatch import SEQ_BITS, SEQ_MASK, describe_signature, watches
from ..coll.schedule import CollectiveRequest
from ..coll.segment import segments_of
from ..comm.ledger import Ledger
from ..data import serialization
from ..data.units import format_size
from ..errors import CollectiveMismatchError, MPITimeoutError
from ..p2p.request import RecvRequest, describe
from ..transports.frames import F_OBJECT

#: the context of the finalize markers: no communicator gets it (ids are allocated upwards
#: in pairs from 4)
FINAL_CONTEXT = 0xFFFF_FFF0
_MARKER_TAG = 0
#: at most this many leftovers of each kind are listed per rank
SHOWN = 10
#: how long finalize waits for the other ranks' markers by default (seconds)
FINALIZE_WAIT = 2.0
ENV_FINALIZE_WAIT = "MINIMPI_FINALIZE_WAIT"


def finalize_wait(env: Dict[str, str]) -> float:
    """Seconds finalize waits for the other ranks' markers: ``MINIMPI_FINALIZE_WAIT`` (0: no
    exchange, the check sees what has arrived), at most half the deadlock timeout, so that
    the ranks that finished have left before the ranks still running are called deadlocked."""
    try:
        wait = float(env.get(ENV_FINALIZE_WAIT, "") or FINALIZE_WAIT)
    except ValueError:
        wait = FINALIZE_WAIT
    try:
        deadlock = float(env.get("MINIMPI_DEADLOCK_TIMEOUT", "") or 0.0)
    except ValueError:
        deadlock = 0.0
    if deadlock > 0:
        wait = min(wait, deadlock / 2)
    return max(0.0, wait)


def _context_name(engine: Any, context: int) -> str:
    base = context - context % 2
    for watch in watches(engine).values():
        if watch.ep.context == base:
            return watch.ep.name
    return {0: "COMM_WORLD", 2: "COMM_SELF"}.get(base, f"the communicator of context {base}")


# ----------------------------------------------------------------------------------------
# the exchange: after it every message sent to this rank has arrived
# ----------------------------------------------------------------------------------------
def exchange_markers(engine: Any, wait: Optional[float] = None
                     ) -> Dict[int, Dict[Tuple[int, int], Tuple[str, str, int]]]:
    """Send every peer the end-of-messages marker and wait for theirs, at most ``wait``
    seconds (None: as long as it takes). Returns, per peer whose marker came, where it sent
    the point-to-point messages it sent here ((context, tag) -> (file:line, call, count))."""
    me, size = engine.rank, engine.size
    ledger: Optional[Ledger] = engine.ledger
    peers = [r for r in range(size) if r != me]
    if not peers or engine.transport is None or wait == 0:
        return {}
    engine.register_context(FINAL_CONTEXT, range(size))   # sources are world ranks here
    what = ("MPI finalize (every rank waits there for the others)", "source")
    recvs = {peer: engine.irecv(FINAL_CONTEXT, peer, _MARKER_TAG, None, True,
                                (what[0], what[1], peer, _MARKER_TAG, "COMM_WORLD"))
             for peer in peers}
    sends = []
    for peer in peers:
        sites = ledger.sites_for(peer) if ledger is not None else {}
        payload, nbytes = serialization.dumps(sites)
        sends.append(engine.isend(FINAL_CONTEXT, peer, me, _MARKER_TAG, payload, nbytes,
                                  F_OBJECT, (what[0], "dest", peer, _MARKER_TAG, "COMM_WORLD")))
    try:                                   # (a lost peer fails its requests: done too)
        engine.wait_all(list(recvs.values()) + sends, timeout=wait)
    except MPITimeoutError:                # some rank is still running: check what is here
        pass
    notes = {}
    for peer, req in recvs.items():
        if req.done and req.error is None and req.buffer is not None:
            try:
                notes[peer] = serialization.loads(req.buffer)
            except Exception:   # a marker we cannot read still marks the end of the messages
                notes[peer] = {}
    return notes


# ----------------------------------------------------------------------------------------
# the check
# ----------------------------------------------------------------------------------------
def _collective_leftover(engine: Any, context: int, inc: Any) -> Tuple[bool, str]:
    """A collective message this rank never received, naming both calls: (whether this rank
    made that call differently - a mismatch - rather than fewer calls, text)."""
    watch = watches(engine).get(context)
    low = inc.tag & SEQ_MASK
    mine = watch.call(low) if watch is not None else None
    if mine is not None and mine.tag != inc.tag:
        return True, str(watch.error_for(mine, inc.source, inc.tag, inc.length, inc.rendezvous))
    name = _context_name(engine, context)
    made = watch.ep.coll_calls if watch is not None else 0
    theirs = describe_signature(inc.tag >> SEQ_BITS)
    calls = ("no collective call" if made == 0 else
             f"only {made} collective call{'s' if made != 1 else ''}")
    return False, (f"rank {inc.source} called {theirs} as collective #{low} on {name}, but "
                   f"rank {engine.rank} made {calls} there before it finished; every rank of a "
                   f"communicator must call the same collectives in the same order")


def _message_text(inc: Any, name: str, notes: Dict[int, Dict]) -> str:
    size = (f"a pickled object of {format_size(inc.length)}" if inc.flags & F_OBJECT
            else format_size(inc.length))
    who = f"rank {inc.source}" + (f" (world rank {inc.peer})" if inc.peer != inc.source else "")
    text = f"from {who}: tag {inc.tag}, {size}, on {name}"
    site = notes.get(inc.peer, {}).get((inc.context, inc.tag))
    if site is not None:
        line, call, count = site
        text += (f", sent by {call} at {line}" if count == 1 else
                 f", sent by {call} (the last of {count} such sends was at {line})")
    return text


def check(engine: Any, notes: Optional[Dict[int, Dict]] = None) -> Tuple[List[str], List[str]]:
    """(errors, warnings) about what is left in ``engine`` now (see the module docstring);
    ``notes``: what :func:`exchange_markers` brought from the peers."""
    notes = notes or {}
    errors: List[str] = []
    fewer: List[str] = []
    unreceived: List[str] = []
    unmatched: List[str] = []
    reported = set()
    ledger: Optional[Ledger] = engine.ledger
    coll_watches = watches(engine)
    for watch in coll_watches.values():          # found after the call returned
        if watch.error is not None:
            errors.append(str(watch.error))
    for context in engine.contexts():
        if context == FINAL_CONTEXT or engine.context_kind(context) == "control":
            continue   # (a layer's own traffic: fault tolerance's agreements and notices)
        collective = context % 2 == 1             # contexts come in pairs: p2p, collective
        name = _context_name(engine, context)
        for inc in engine.unexpected_messages(context):
            if collective and not (inc.tag >> SEQ_BITS) & 0x1F:
                # kind 0: an abort marker (a call that failed elsewhere; a rank done with
                # its part may leave it unread, as in MPI) or a communicator-creation
                # exchange (minimpi.coll.slots) - not a collective call's message
                continue
            if collective:
                # A call made differently is an error. Fewer calls is a warning: the rank
                # may have ended early on purpose (sys.exit(7), whose code an exit handler
                # cannot see and must not replace), and the ranks still in that call then
                # fail or are named by the launcher anyway.
                mismatch, text = _collective_leftover(engine, context, inc)
                watch = coll_watches.get(context)
                if mismatch and text not in errors and not (watch and watch.error):
                    errors.append(text)
                elif not mismatch and text not in fewer:
                    fewer.append(text)
            else:
                unreceived.append(_message_text(inc, name, notes))
        for req in engine.posted_receives(context):
            if collective:
                continue                          # a nonblocking collective: reported below
            reported.add(id(req))
            line = ledger.line_of(req) if ledger is not None else None
            unmatched.append(f"{describe(req)}" + (f", posted at {line}" if line else "")
                             + ", never matched a message")
    # collectives that met in shared memory leave no messages: their slots tell instead
    finished = set(notes) | {engine.rank}
    for seg in segments_of(engine):
        members = [m for m, w in enumerate(seg.ep.group) if w in finished]
        seg_errors, seg_fewer = seg.leftovers(members)
        errors += [text for text in seg_errors if text not in errors]
        fewer += [text for text in seg_fewer if text not in fewer]
    warnings: List[str] = []
    if fewer:
        warnings.append(_listing(
            f"{len(fewer)} collective message{'s' if len(fewer) != 1 else ''} of calls this "
            f"rank never made {'were' if len(fewer) != 1 else 'was'} never received", fewer))
    if unreceived:
        warnings.append(_listing(
            f"{len(unreceived)} message{'s' if len(unreceived) != 1 else ''} sent to this rank "
            f"{'were' if len(unreceived) != 1 else 'was'} never received (every message must "
            f"be received; a tag or source that does not match is the usual cause)", unreceived))
    if unmatched:
        warnings.append(_listing(
            f"{len(unmatched)} receive{'s' if len(unmatched) != 1 else ''} never matched a "
            f"message (nobody sent what {'they wait' if len(unmatched) != 1 else 'it waits'} "
            f"for)", unmatched))
    if ledger is not None:
        open_ = [f"{describe(req)}, started at {line}" for req, line in ledger.never_completed()
                 if id(req) not in reported]
        if open_:
            warnings.append(_listing(
                f"{len(open_)} nonblocking request{'s' if len(open_) != 1 else ''} never "
                f"completed with wait() or test() (MPI requires it: until then a send may not "
                f"have left and a receive's data is not yours)", open_))
    return errors, warnings


def _listing(head: str, items: List[str]) -> str:
    shown = items[:SHOWN]
    more = [f"... and {len(items) - SHOWN} more"] if len(items) > SHOWN else []
    return head + ":\n" + "\n".join(f"  {item}" for item in shown + more)


def finalize_check(engine: Any, warn: Any, wait: Optional[float] = None) -> None:
    """Exchange the markers (waiting at most ``wait`` s), then report leftovers: ``warn(text)``
    for each warning, and :class:`CollectiveMismatchError` for collective messages never
    received."""
    notes = exchange_markers(engine, wait)
    errors, warnings = check(engine, notes)
    for text in warnings:
        warn(text)
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise CollectiveMismatchError(f"rank {engine.rank} at finalize: {errors[0]}{more}")


# ----------------------------------------------------------------------------------------
# for deadlock reports
# ----------------------------------------------------------------------------------------
def waiting_messages(engine: Any, waiting_on: List[Any], limit: int = 5) -> List[Dict[str, Any]]:
    """The messages waiting unreceived in the communicators that the receives of a blocked
    wait use (a tag or source mix-up shows there), as plain dicts for the launcher."""
    contexts = []
    for req in waiting_on:
        if isinstance(req, RecvRequest) and not req.done and req.context not in contexts:
            contexts.append(req.context)
        steps = req.step_requests() if isinstance(req, CollectiveRequest) else ()
        for sub in steps:                                   # a nonblocking collective's step
            if isinstance(sub, RecvRequest) and not sub.done and sub.context not in contexts:
                contexts.append(sub.context)
    out: List[Dict[str, Any]] = []
    for context in contexts:
        for inc in engine.unexpected_messages(context):
            out.append({"source": inc.source, "world": inc.peer, "tag": inc.tag,
                        "comm": _context_name(engine, context), "nbytes": inc.length,
                        "coll": (describe_signature(inc.tag >> SEQ_BITS)
                                 if context % 2 == 1 else None),
                        "seq": inc.tag & SEQ_MASK if context % 2 == 1 else None})
            if len(out) >= limit:
                return out
    return out
