"""What an algorithm holds besides the caller's buffers: its temporaries, and its phases.

Between two steps a rank keeps data in the caller's buffers *and* in the algorithm's own
working buffers: an accumulator, a slot a partial result is received into, a rotated copy
of the blocks. Those are local variables of the schedule generator, invisible from
outside; yet ``minimpi draw`` must show everything a rank holds after each step (a block a
rank sends must be drawn on that rank before it is sent), and a repeated call should not
allocate them again. So every working buffer an algorithm keeps across a step comes from
its channel's :class:`Scratch` - ``ch.scratch(size, dtype)``, ``ch.scratch_like(array)``,
``ch.scratch_copy(array)``:

* in a normal call, the buffers a call takes are kept, in the order it takes them; the next
  call on the same channel (a compiled collective reuses its channel: :mod:`.compiled`)
  gets the same buffers back when the sizes agree - no allocation on a repeat;
* while someone on the world's bus listens to temporaries (``minimpi draw``'s recorder:
  :meth:`minimpi.bus.Subscriber.temporary`), every buffer is new and zero-filled (zero is
  how the recorder's identifiable data reads "empty"), and handed to the listeners with its
  name; :meth:`Scratch.phase` tells them where a phase begins.

Buffers that only stage one message within a step - a packed copy of blocks about to be
sent, a landing area unpacked as soon as the message is in - are not kept across a step,
so they are plain numpy allocations: their blocks are in a watched buffer before and after.
"""
from __future__ import annotations

from typing import Any, List, Sequence

import numpy as np


class Scratch:
    """The working buffers of one channel (see the module docstring)."""

    __slots__ = ("_kept", "_at", "listeners", "nbytes")

    def __init__(self) -> None:
        self._kept: List[np.ndarray] = []
        self._at = 0
        #: the bytes of the buffers kept for the next call
        self.nbytes = 0
        #: who hears of temporaries and phases (the bus's ``scratch`` listeners)
        self.listeners: Sequence[Any] = ()

    def begin(self, listeners: Sequence[Any]) -> None:
        """A call starts on this channel: its buffers are taken again from the first."""
        self._at = 0
        self.listeners = listeners

    def take(self, size: int, dtype: Any, name: str = "tmp") -> np.ndarray:
        """A flat working buffer of ``size`` elements (contents undefined)."""
        if self.listeners:
            buf = np.zeros(size, dtype)
            for s in self.listeners:
                s.temporary(buf, name)
            return buf
        at = self._at
        self._at = at + 1
        kept = self._kept
        if at < len(kept):
            buf = kept[at]
            if buf.size != size or buf.dtype != dtype:
                self.nbytes -= buf.nbytes
                buf = kept[at] = np.empty(size, dtype)
                self.nbytes += buf.nbytes
            return buf
        buf = np.empty(size, dtype)
        kept.append(buf)
        self.nbytes += buf.nbytes
        return buf

    def like(self, like: np.ndarray, name: str = "tmp") -> np.ndarray:
        """A working buffer with the shape and dtype of ``like`` (contents undefined)."""
        return self.take(like.size, like.dtype, name).reshape(like.shape)

    def copy(self, source: np.ndarray, name: str = "acc") -> np.ndarray:
        """A working copy of ``source`` (an accumulator that must not change the caller's
        data)."""
        buf = self.like(source, name)
        buf[...] = source
        return buf

    def phase(self, name: str) -> None:
        """The steps from here on belong to phase ``name``."""
        for s in self.listeners:
            s.phase(name)
