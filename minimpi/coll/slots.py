"""Collective slots: sequence numbers, and what happens when one rank fails inside one.

Every collective call on a communicator takes the next *slot*: a sequence number every
member draws in the same order (``Endpoint.next_coll_tag``), folded into the tags of the
call's messages (:mod:`minimpi.coll.mismatch` adds the call's signature above it). So the
members stay in step only if **every** member consumes every slot - including a member whose
call fails.

When a rank's call fails - it rejected its own arguments (a count only the root can check,
a bad buffer), or an error stopped it midway (a user-defined op that raised) - it still
consumes the slot, and tells every other member with an **abort marker**: an empty message
on the collective context whose tag carries the slot and the MPI error class. A member that

* is inside that call fails its pending receives and rendezvous sends of the slot with
  :class:`~minimpi.errors.CollectiveAbortedError` naming the failed rank, so it raises
  instead of waiting forever;
* has not reached the call yet finds the marker when it gets there and raises at once;
* already finished its part (a non-root ``Gather`` that only sends) is not disturbed: the
  call is over for it, as in MPI.

Messages of an aborted slot that arrive later are dropped, so they can never be matched by
a later call, and the next collective works on every rank.

Tags on the collective context, by their kind bits (bits 14..18):

* kind 1..31: a collective call's messages (``seq mod 2**14 | signature << 14``);
* kind 0 and the tag is the slot itself (``< 2**14``): a communicator-creation exchange
  (``Split``, ``Dup``...: ``Comm._exchange``), which consumes a slot too;
* kind 0 with root and op bits all ones, bit 30 clear, and an empty payload: an abort marker;
* kind 0 with bit 30 set: ``Create_group`` among a subgroup, which takes no slot
  (:func:`create_group_tag`), so it is never taken for part of one.
"""
from __future__ import annotations

from typing import Any, Optional

from ..errors import (
    ERR_ARG,
    ERR_BUFFER,
    ERR_COUNT,
    ERR_OP,
    ERR_OTHER,
    ERR_ROOT,
    ERR_TRUNCATE,
    ERR_TYPE,
    CollectiveAbortedError,
    CollectiveMismatchError,
    JobAbortedError,
    PeerLostError,
    error_string,
)

#: errors a rank does not announce to the other members when its collective call fails
#: with one: caused by another rank's failure, a mismatch (which the mismatch checks report
#: on every side), or the job going down
NOT_ANNOUNCED = (CollectiveAbortedError, CollectiveMismatchError, PeerLostError,
                 JobAbortedError)


def announced(exc: BaseException) -> bool:
    """Whether a rank whose collective call ends with ``exc`` tells the other members.
    Only errors are: a ``SystemExit`` or ``KeyboardInterrupt`` raised inside the call (a
    signal handler's, say) means this rank is going away, and the others must learn that
    from its exit - its code is the job's - not from an abort marker that makes them exit
    with an error of their own first."""
    return isinstance(exc, Exception) and not isinstance(exc, NOT_ANNOUNCED)

SEQ_BITS = 14
SEQ_MASK = (1 << SEQ_BITS) - 1

#: signature bits 0..12 of an abort marker (kind 0, root bits 15, op bits 15)
_MARKER_SIG = 15 << 5 | 15 << 9
#: the error class travels in 3 bits (0: another class); bit 30 of the tag stays clear
_CLASS_CODE = {ERR_BUFFER: 1, ERR_COUNT: 2, ERR_TYPE: 3, ERR_OP: 4, ERR_ROOT: 5, ERR_ARG: 6,
               ERR_TRUNCATE: 7}
_CODE_CLASS = {v: k for k, v in _CLASS_CODE.items()}


_KIND_MASK = 0x1F << SEQ_BITS
#: the kind bits of a tag: not zero for a collective call's messages (never a marker)
KIND_MASK = _KIND_MASK
_CREATE_GROUP_BIT = 1 << 30


def in_slot(tag: int, low: int) -> bool:
    """Whether a message or receive with ``tag`` belongs to slot ``low``."""
    if (tag & SEQ_MASK) != low:
        return False
    return bool(tag & _KIND_MASK) or tag == low or not tag & _CREATE_GROUP_BIT


def create_group_tag(tag: int) -> int:
    """The collective-context tag of ``Create_group(..., tag)``: kind bits 0 and bit 30 set,
    so it never meets a slot's messages (user tags equal modulo 2**25 share one)."""
    return _CREATE_GROUP_BIT | (tag & SEQ_MASK) | ((tag >> SEQ_BITS) & 0x7FF) << (SEQ_BITS + 5)


def marker_tag(low: int, error_class: int) -> int:
    """The tag of slot ``low``'s abort marker, carrying ``error_class``."""
    code = _CLASS_CODE.get(error_class, 0)
    return (low & SEQ_MASK) | (_MARKER_SIG | code << 13) << SEQ_BITS


def is_marker(tag: int, length: int) -> bool:
    return length == 0 and (tag >> SEQ_BITS) & 0x1FFF == _MARKER_SIG


def marker_class(tag: int) -> int:
    return _CODE_CLASS.get((tag >> (SEQ_BITS + 13)) & 0x7, ERR_OTHER)


def aborted_error(ep: Any, call_text: str, seq: int, culprit: int,
                  error_class: int) -> CollectiveAbortedError:
    """What a member raises when rank ``culprit`` failed in its collective ``call_text``."""
    why = error_string(error_class) if error_class != ERR_OTHER else "an error"
    return CollectiveAbortedError(
        f"rank {ep.rank}: {call_text} (collective #{seq} on {ep.name}) cannot complete: rank "
        f"{culprit} failed in this call ({why}, MPI error class {error_class}) - its own "
        f"error names the argument; every rank leaves the call, and the next collective "
        f"works normally", error_class)


def fail_slot(engine: Any, context: int, low: int, err: BaseException) -> None:
    """Fail this rank's pending receives and rendezvous sends of slot ``low``."""
    engine.fail_pending(context, err, lambda tag: in_slot(tag, low))


def purge_slot(engine: Any, context: int, low: int) -> None:
    """Drop the messages of slot ``low`` waiting in the unexpected queue."""
    engine.drop_unexpected(context, lambda tag: in_slot(tag, low))


def queued_marker(engine: Any, context: int, low: int) -> Optional[Any]:
    """An abort marker of slot ``low`` already waiting in the unexpected queue, if any."""
    for inc in engine.unexpected_messages(context):
        if in_slot(inc.tag, low) and is_marker(inc.tag, inc.length):
            return inc
    return None


def send_markers(ep: Any, low: int, error_class: int) -> None:
    """Tell every other member that this rank failed in slot ``low``."""
    tag = marker_tag(low, error_class)
    for dest in range(ep.size):
        if dest != ep.rank:
            ep.isend((), 0, dest, tag, 0, "collective abort", ep.coll_context)
