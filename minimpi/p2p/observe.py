"""What the engine holds and what the layers above are in the middle of: match statistics
(:meth:`Engine.match_stats <minimpi.p2p.engine.Engine.match_stats>`) and activities (a
window's synchronisation call, for the deadlock report).

Watching the engine's events (messages, steps, waits) is the bus's job: :mod:`minimpi.bus`.
"""
from __future__ import annotations

import threading
from typing import List, Optional


class MatchStats:
    """How much the engine holds now (:meth:`Engine.match_stats`): receives posted and
    messages unexpected (over all contexts), rendezvous transfers and synchronous sends
    under way, and self-advancing operations (nonblocking collectives) still running."""

    __slots__ = ("posted", "unexpected", "rendezvous_sends", "rendezvous_receives",
                 "sync_sends", "active")

    def __init__(self, posted: int, unexpected: int, rendezvous_sends: int,
                 rendezvous_receives: int, sync_sends: int, active: int) -> None:
        self.posted = posted
        self.unexpected = unexpected
        self.rendezvous_sends = rendezvous_sends
        self.rendezvous_receives = rendezvous_receives
        self.sync_sends = sync_sends
        self.active = active

    def communicating(self) -> bool:
        """Whether a receive, a rendezvous receive or an operation is still under way."""
        return bool(self.posted or self.rendezvous_receives or self.active)

    def __repr__(self) -> str:
        return ("MatchStats(" + ", ".join(f"{k}={getattr(self, k)}" for k in self.__slots__)
                + ")")


class Activity:
    """Something a layer above the engine is in the middle of (a window's ``Win.Fence``):
    :meth:`describe` is called only when a wait inside it lasts, so an activity costs its
    caller nothing more than creating it."""

    __slots__ = ()

    def describe(self) -> dict:
        """A plain (msgpack-able) dict saying what this is, for the deadlock report."""
        return {}


class Activities:
    """What the layers above the engine are in the middle of, for "what am I blocked on"
    reports: a one-sided window's synchronisation call pushes an :class:`Activity` for as
    long as it runs, and the deadlock reporter (:mod:`minimpi.runtime.diagnose`) reads
    :meth:`current` when a wait lasts. A stack per thread (such calls may nest, and each
    thread of a ``THREAD_MULTIPLE`` program is in its own calls)."""

    __slots__ = ("_local",)

    def __init__(self) -> None:
        self._local = threading.local()

    def _stack(self) -> List[Activity]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def push(self, what: Activity) -> None:
        """``what`` is under way in this thread (until the matching :meth:`pop`)."""
        self._stack().append(what)

    def pop(self) -> None:
        """This thread's innermost activity ended."""
        self._stack().pop()

    def current(self) -> Optional[Activity]:
        """This thread's innermost activity under way (None when there is none)."""
        stack = getattr(self._local, "stack", None)
        return stack[-1] if stack else None
