"""What the engine tells those who watch it: the observer interface of :class:`~minimpi.p2p.engine.Engine`.

Tracing (``minimpi run --trace/--stats``), ``minimpi draw`` and the deadlock reporter see a
rank's messages and waits through this interface, never by replacing engine methods or
reading its fields. An observer subclasses :class:`EngineObserver`, overrides the events it
needs (the others do nothing) and calls ``engine.subscribe(observer)``.

**Cost.** At :meth:`subscribe <minimpi.p2p.engine.Engine.subscribe>` the engine notes which
events each observer overrides, and keeps one tuple of listeners per event; it tests that
tuple before building the event. So an event nobody listens to costs one test of an empty
tuple - the deadlock reporter that every real job subscribes listens only to long waits,
and sends, receives and steps stay as cheap as with no observer at all. Events are called synchronously, inside the engine (often
inside the transport's progress): an observer records and returns; it must not send,
receive or wait, and must not raise (diagnostics never break communication).

Events, in the order a message meets them:

* :meth:`message_sent` - a send starts, before any of its data goes (so an observer may look
  at the state of the sender's buffers first);
* :meth:`receive_posted` - a receive is posted, before it is matched;
* :meth:`message_received` - a receive got all its data (a flow from ``peer`` completes);
* :meth:`step_started` - a collective algorithm starts a step (the collective framework
  reports it through :meth:`Engine.step_started <minimpi.p2p.engine.Engine.step_started>`);
* :meth:`wait_ended` - a blocking wait returned (or raised), after ``seconds``;
* :meth:`blocked` / :meth:`still_blocked` / :meth:`still_waiting` / :meth:`unblocked` - a
  wait that lasts ``engine.block_report_after`` seconds, its progress while it lasts (or,
  about every ``POLL_INTERVAL``, that nothing moved), and its end.

With threads (``MPI.THREAD_MULTIPLE``) events come from whichever thread causes them:
the wait events from the waiting thread (so ``threading.get_ident()`` says whose wait it
is), the message events often from the progress owner on behalf of another thread. They are
called with the engine's lock held, never two at once.

Messages that match no posted receive are reported per context, not here: see
:meth:`Engine.watch_unexpected <minimpi.p2p.engine.Engine.watch_unexpected>`.
"""
from __future__ import annotations

import threading
from typing import Any, List, Optional, Sequence


class EngineObserver:
    """Base of every engine observer: each event does nothing until overridden."""

    def message_sent(self, context: int, dest: int, source: int, tag: int,
                     payload: Sequence[memoryview], nbytes: int, msg_id: int) -> None:
        """A send to world rank ``dest`` starts (``source``: the sender's communicator rank,
        ``msg_id``: the number the receiver will see for this message)."""

    def receive_posted(self, context: int, source: int, tag: int,
                       target: Optional[memoryview]) -> None:
        """A receive from communicator rank ``source`` (or ``ANY_SOURCE``) is being posted;
        ``target`` is where its data will land (None for an object)."""

    def message_received(self, peer: int, context: int, tag: int, msg_id: int,
                         nbytes: int) -> None:
        """A receive got all ``nbytes`` of message ``msg_id`` from world rank ``peer``."""

    def step_started(self, channel: Any, index: int) -> None:
        """Step ``index`` (from 0) of the collective call behind ``channel`` starts."""

    def wait_ended(self, seconds: float) -> None:
        """A blocking wait of the engine ended after ``seconds``."""

    def blocked(self, waiting_on: List[Any]) -> None:
        """A wait on the requests ``waiting_on`` has lasted ``block_report_after`` seconds."""

    def still_blocked(self, waiting_on: List[Any]) -> None:
        """That wait is still going, and a round of progress moved something (frames,
        bytes, connections): "a long transfer in flight" rather than "stuck"."""

    def still_waiting(self, waiting_on: List[Any]) -> None:
        """That wait is still going and nothing moved in its last round (about every
        ``POLL_INTERVAL``): for observers whose view depends on more than this wait (the
        deadlock reporter looks again at what the process's other threads do)."""

    def unblocked(self) -> None:
        """The wait reported by :meth:`blocked` ended."""


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
