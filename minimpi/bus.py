"""The instrumentation bus: one per world, the only way to watch what a rank does.

Tracing (``minimpi run --trace/--stats``), ``minimpi draw``, the deadlock reporter, the live
dashboard and tests see a rank's API calls, messages, collective steps, waits and the
algorithms' temporaries through one :class:`Bus`. The world creates it and hands it down
(the engine gets it at construction, the communicators read it from their engine); nothing
wraps or replaces another layer's methods to watch it.

A watcher subclasses :class:`Subscriber`, overrides the events it needs (the others do
nothing) and calls ``bus.subscribe(watcher)``. At that moment the bus works out which events
each subscriber overrides and keeps one tuple of listeners per event, so an event nobody
listens to costs its publisher one test of an empty tuple (``if bus.sent:``): a job without
tracing pays nothing per message.

Events are called synchronously, on the thread that causes them (often inside the
transport's progress): a subscriber records and returns; it must not send, receive or wait,
and must not raise (diagnostics never break communication).

Events, in the order a call meets them:

* :meth:`Subscriber.call_entered` / :meth:`Subscriber.call_left` - an outermost public MPI
  call (``Comm.Allreduce``, ``Request.Wait``, ``Win.Put``...) begins and ends (the front of
  the API publishes them while :attr:`Bus.calls` is not empty);
* :meth:`Subscriber.message_sent` - a send starts, before any of its data goes (a send
  of the express lane: once its frame is on its way);
* :meth:`Subscriber.receive_posted` - a receive is posted, before it is matched;
* :meth:`Subscriber.message_received` - a receive got all its data;
* :meth:`Subscriber.step_started` - a collective algorithm starts a step;
* :meth:`Subscriber.temporary` / :meth:`Subscriber.phase` - an algorithm takes a working
  buffer, or begins a named phase (``minimpi draw`` shows both);
* :meth:`Subscriber.wait_ended` - a blocking wait of the engine returned (or raised);
* :meth:`Subscriber.blocked` / :meth:`Subscriber.still_blocked` /
  :meth:`Subscriber.still_waiting` / :meth:`Subscriber.unblocked` - a wait that lasts
  ``engine.block_report_after`` seconds, its progress while it lasts (or, about every
  ``POLL_INTERVAL``, that nothing moved), and its end.

With threads (``MPI.THREAD_MULTIPLE``) the engine's events come from whichever thread causes
them: the wait events from the waiting thread (``threading.get_ident()`` says whose wait it
is), the message events often from the thread that runs progress on behalf of another; they
are published with the engine's lock held, never two at once.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple


class Subscriber:
    """Base of every watcher of a :class:`Bus`: each event does nothing until overridden."""

    # -- the API front ------------------------------------------------------------------
    def call_entered(self, call: str, target: Any, args: Dict[str, Any]) -> None:
        """An outermost public MPI call starts: ``call`` is its name after the class of the
        object it was called on (``"Intracomm.Allreduce"``), ``target`` that object (a
        communicator, window, request...; a class for ``Request.Waitall``), ``args`` its
        named arguments as passed (buffers included: look, do not keep)."""

    def call_left(self, call: str, error: Optional[BaseException]) -> None:
        """That call returned (``error`` None) or raised ``error``."""

    # -- the engine ---------------------------------------------------------------------
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

    def wait_ended(self, seconds: float) -> None:
        """A blocking wait of the engine ended after ``seconds``."""

    def blocked(self, waiting_on: List[Any]) -> None:
        """A wait on the requests ``waiting_on`` has lasted ``block_report_after`` seconds."""

    def still_blocked(self, waiting_on: List[Any]) -> None:
        """That wait is still going, and a round of progress moved something (frames,
        bytes, connections): "a long transfer in flight" rather than "stuck"."""

    def still_waiting(self, waiting_on: List[Any]) -> None:
        """That wait is still going and nothing moved in its last round (about every
        ``POLL_INTERVAL``): for subscribers whose view depends on more than this wait (the
        deadlock reporter looks again at what the process's other threads do)."""

    def unblocked(self) -> None:
        """The wait reported by :meth:`blocked` ended."""

    # -- the collectives ----------------------------------------------------------------
    def step_started(self, channel: Any, index: int) -> None:
        """Step ``index`` (from 0) of the collective call behind ``channel`` starts."""

    def temporary(self, buffer: Any, name: str) -> None:
        """A collective algorithm took working buffer ``buffer`` (a zero-filled numpy array,
        named ``name``: "acc", "slot"...): it holds part of what the rank has between steps
        (:mod:`minimpi.coll.scratch`). While anyone listens, every such buffer is new."""

    def phase(self, name: str) -> None:
        """The algorithm's steps from here on form its phase ``name`` (the ring allreduce:
        "reduce-scatter", then "allgather")."""


#: event -> the Bus attribute holding the tuple of its listeners
_ROUTES: Tuple[Tuple[str, Tuple[str, ...]], ...] = (
    ("calls", ("call_entered", "call_left")),
    ("sent", ("message_sent",)),
    ("posted", ("receive_posted",)),
    ("received", ("message_received",)),
    ("steps", ("step_started",)),
    ("scratch", ("temporary", "phase")),
    ("waits", ("wait_ended",)),
    ("blocks", ("blocked", "still_blocked", "still_waiting", "unblocked")),
)


class Bus:
    """The subscribers of one world, and per event the tuple of those that listen to it.

    Publishers test the tuple and call each listener::

        if bus.sent:
            for s in bus.sent:
                s.message_sent(...)
    """

    __slots__ = ("subscribers", "depth") + tuple(attr for attr, _ in _ROUTES)

    #: subscribers listening to call events, over every bus of the process: the API front
    #: tests this one number before it looks for an object's bus (:mod:`minimpi.front`)
    call_listeners = 0

    def __init__(self) -> None:
        self.subscribers: Tuple[Subscriber, ...] = ()
        #: how deep the API calls under way are (the front publishes only outermost calls:
        #: a ``Sendrecv`` that calls ``Isend``... is one call)
        self.depth = 0
        self._route()

    def subscribe(self, subscriber: Subscriber) -> None:
        """Tell ``subscriber`` about this world's events from now on (once, however often
        it subscribes)."""
        if not isinstance(subscriber, Subscriber):
            raise TypeError(f"Bus.subscribe: expected a minimpi.bus.Subscriber, got "
                            f"{type(subscriber).__name__}")
        if subscriber not in self.subscribers:
            self.subscribers = self.subscribers + (subscriber,)
            self._route()

    def unsubscribe(self, subscriber: Subscriber) -> None:
        """Stop telling ``subscriber`` (no error if it was not subscribed)."""
        self.subscribers = tuple(s for s in self.subscribers if s is not subscriber)
        self._route()

    def _route(self) -> None:
        before = len(getattr(self, "calls", ()))
        for attr, events in _ROUTES:
            setattr(self, attr, tuple(
                s for s in self.subscribers
                if any(getattr(type(s), e) is not getattr(Subscriber, e) for e in events)))
        Bus.call_listeners += len(self.calls) - before

    def step_reporter(self) -> Optional[Any]:
        """What a collective call should call at each step start (``fn(channel, index)``),
        or None while nobody listens to steps: decided once per call, so an unobserved
        call pays nothing per step."""
        return self.step_started if self.steps else None

    def step_started(self, channel: Any, index: int) -> None:
        """Publish :meth:`Subscriber.step_started`."""
        for s in self.steps:
            s.step_started(channel, index)
