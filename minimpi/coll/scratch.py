"""What an algorithm holds besides the caller's buffers: its temporaries, and its phases.

Between two steps a rank keeps data in the caller's buffers *and* in the algorithm's own
working buffers: an accumulator, a slot a partial result is received into, a rotated copy
of the blocks. Those are local variables of the schedule generator, invisible from
outside; yet ``minimpi draw`` must show everything a rank holds after each step (a block a
rank sends must be drawn on that rank before it is sent). So every working buffer an
algorithm keeps across a step is made here:

* :func:`scratch` (``np.empty``), :func:`scratch_like` (``np.empty_like``) and
  :func:`scratch_copy` (a copy) - in a normal call exactly what numpy gives, plus one
  thread-local lookup;
* on a thread that an observer watches (:func:`watching`: the recorder of ``minimpi
  draw``), the new buffer is also handed to the observer with its name, and it is
  zero-filled, because zero is how the recorder's identifiable data reads "empty" (garbage
  left by ``np.empty`` could read as someone's block).

Buffers that only stage one message within a step - a packed copy of blocks about to be
sent, a landing area unpacked as soon as the message is in - are not kept across a step,
so they are plain numpy allocations: their blocks are in a watched buffer before and after.

:func:`phase` marks where an algorithm's phases begin (``ch.phase("allgather")``; the ring
allreduce is a reduce-scatter followed by an allgather). A normal call ignores it; the
recorder names the steps after it.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Iterator, Optional

import numpy as np

_local = threading.local()


def _observer() -> Optional[Any]:
    return getattr(_local, "observer", None)


def scratch(size: int, dtype: Any, name: str = "tmp") -> np.ndarray:
    """A flat working buffer of ``size`` elements (contents undefined)."""
    observer = _observer()
    if observer is None:
        return np.empty(size, dtype)
    buf = np.zeros(size, dtype)
    observer.temporary(buf, name)
    return buf


def scratch_like(like: np.ndarray, name: str = "tmp") -> np.ndarray:
    """A working buffer with the shape and dtype of ``like`` (contents undefined)."""
    observer = _observer()
    if observer is None:
        return np.empty_like(like)
    buf = np.zeros_like(like)
    observer.temporary(buf, name)
    return buf


def scratch_copy(source: np.ndarray, name: str = "acc") -> np.ndarray:
    """A working copy of ``source`` (an accumulator that must not change the caller's data)."""
    observer = _observer()
    buf = np.array(source, copy=True)
    if observer is not None:
        observer.temporary(buf, name)
    return buf


def observer() -> Optional[Any]:
    """This thread's observer of temporaries and phases (``minimpi draw``), or None: a
    channel asks once per call, so an unobserved call pays nothing per phase."""
    return getattr(_local, "observer", None)


def phase(name: str) -> None:
    """The steps from here on belong to phase ``name`` (until the next call)."""
    observer = _observer()
    if observer is not None:
        observer.phase(name)


@contextmanager
def watching(observer: Any) -> Iterator[None]:
    """Hand this thread's temporaries and phases to ``observer`` (``temporary(buf, name)``,
    ``phase(name)``) for the duration of the block."""
    previous = _observer()
    _local.observer = observer
    try:
        yield
    finally:
        _local.observer = previous
