"""How a collective algorithm talks and how its steps are run.

Every algorithm is a generator function: it starts the messages of one step with
``ch.isend``/``ch.irecv`` and ``yield``s them; whoever runs it completes that step and
resumes it. So the code reads like the textbook figure (one ``yield`` per step, each send
and receive spelled out), and one implementation serves three uses:

* a blocking call (:func:`run`) completes each step before asking for the next,
* a nonblocking call (:class:`CollectiveRequest`) advances the steps from the progress
  engine, so ``Iallreduce`` is an ordinary request,
* a recorder (``minimpi draw``, traces) sees where each step begins.

``ch.isend(data, dest)``: ``data`` is a numpy array (sent zero-copy) or any Python object
(pickled). ``ch.irecv(into, source)``: ``into`` is a numpy array the data lands in, or
``None`` to receive a Python object (``req.wait()`` returns it once the step is done).
"""
from __future__ import annotations

from typing import Any, Callable, Generator, List, Optional

import numpy as np

from ..data import serialization
from ..errors import (
    CollectiveMismatchError,
    PeerLostError,
    TruncationError,
)
from ..p2p.completion import Completion, LayeredRequest, hold
from ..p2p.endpoint import Endpoint
from ..p2p.request import Request, failed_request, has_finish, set_finish
from ..transports.frames import F_OBJECT
from .blocks import as_bytes
from .cost import CostModel, default_model
from .mismatch import abort_slot, watch_if_any
from .peers import host_groups
from .scratch import Scratch
from .slots import SEQ_MASK, announced

Step = List[Request]
Schedule = Generator[Step, None, Any]

#: Called at the start of every step: (channel, step index) - used by draw and trace.
StepHook = Callable[["Channel", int], None]


class Channel:
    """The point-to-point view of one collective call: ranks of an endpoint, one private tag.

    Messages use the communicator's collective context and a tag drawn per call, so they
    never match a user's receive, and two outstanding nonblocking collectives never mix.
    The algorithms see only this: ``rank``, ``size``, ``isend`` and ``irecv``.
    """

    __slots__ = ("ep", "rank", "size", "tag", "call", "context", "step_hook", "step_index",
                 "objects", "watch", "finishing", "plan", "temps")

    def __init__(self, ep: Endpoint, call: str, step_hook: Optional[StepHook] = None,
                 objects: bool = False, plan: Any = None) -> None:
        self.ep = ep
        #: object mode (lowercase API): every message is pickled, numpy arrays included
        self.objects = objects
        self.rank = ep.rank
        self.size = ep.size
        self.call = call
        self.tag = ep.next_coll_tag()
        self.context = ep.coll_context
        self.step_hook = step_hook
        self.step_index = 0
        #: the mismatch/abort bookkeeping of the communicator (set by ``mismatch.open_call``)
        self.watch = None
        #: how many of its receives were given finishing work (a decode, a copy back)
        self.finishing = 0
        #: the communicator's plan (:class:`~minimpi.coll.plan.Plan`; None: a channel made
        #: without one, which reads the environment's model when asked)
        self.plan = plan
        #: the call's working buffers (kept for the next call on this channel) and who
        #: hears of them and of its phases (``minimpi draw``; asked once per call)
        self.temps = Scratch()
        self.temps.begin(ep.engine.bus.scratch)

    def reopen(self) -> None:
        """Make this channel the channel of the next call of its signature: a new slot (tag)
        of the communicator's sequence, step 0; its working buffers are kept for the call
        to take again (a compiled collective reuses its channel: :mod:`.compiled`)."""
        ep = self.ep
        self.tag = ep.next_coll_tag()
        self.step_index = 0
        self.watch = None
        self.finishing = 0
        bus = ep.engine.bus
        self.step_hook = bus.step_reporter() if bus.steps else None
        self.temps.begin(bus.scratch)

    def segment(self) -> Any:
        """The communicator's shared segment (:mod:`.segment`), for the algorithms that
        meet there."""
        return self.plan.segment(self.ep)

    @property
    def model(self) -> CostModel:
        """The cost model this call was planned with (segment sizes, hierarchical steps)."""
        return self.plan.model if self.plan is not None else default_model()

    @property
    def host_groups(self) -> List[List[int]]:
        """The ranks of each host (ascending; hosts in order of their lowest rank)."""
        return self.plan.groups if self.plan is not None else host_groups(self.ep.hosts)

    def _aborted(self) -> Optional[BaseException]:
        """The error of this call's slot if another rank's failure aborted it here."""
        watch = self.watch if self.watch is not None else watch_if_any(self.ep)
        if watch is None or not watch.aborted:
            return None
        return watch.aborted.get(self.tag & SEQ_MASK)

    def slot(self) -> Any:
        """The slot this call holds (what :meth:`abort` consumes)."""
        return self.tag & SEQ_MASK

    def abort(self, exc: BaseException) -> None:
        """This rank failed in the call: consume its slot and tell the other members."""
        abort_slot(self.ep, exc, self.tag & SEQ_MASK, self.call)

    def _failed(self, err: BaseException) -> Request:
        return failed_request(err)

    def isend(self, data: Any, dest: int) -> Request:
        watch = self.watch
        if watch is None or watch.aborted:          # (a slot aborted here: rarely)
            err = self._aborted()
            if err is not None:
                return self._failed(err)
        if not self.objects and isinstance(data, np.ndarray):
            view = memoryview(as_bytes(data))
            return self.ep.isend((view,), view.nbytes, dest, self.tag, 0, self.call,
                                          self.context)
        payload, nbytes = serialization.dumps(data, rank=self.rank, call=self.call)
        return self.ep.isend(payload, nbytes, dest, self.tag, F_OBJECT, self.call,
                                      self.context)

    def phase(self, name: str) -> None:
        """The steps from here on form the phase ``name`` of the algorithm (for instance the
        allgather half of the ring allreduce). Costs nothing; ``minimpi draw`` labels them."""
        if self.temps.listeners:
            self.temps.phase(name)

    def scratch(self, size: int, dtype: Any, name: str = "tmp") -> np.ndarray:
        """A flat working buffer of ``size`` items of ``dtype`` that the algorithm keeps
        across steps (contents undefined; :mod:`.scratch`)."""
        return self.temps.take(size, dtype, name)

    def scratch_like(self, like: np.ndarray, name: str = "tmp") -> np.ndarray:
        """A working buffer shaped as ``like`` (contents undefined)."""
        return self.temps.like(like, name)

    def scratch_copy(self, source: np.ndarray, name: str = "acc") -> np.ndarray:
        """A working copy of ``source`` (an accumulator that must not change the caller's
        data)."""
        return self.temps.copy(source, name)

    def irecv(self, into: Optional[np.ndarray], source: int) -> Request:
        watch = self.watch
        if watch is None or watch.aborted:
            err = self._aborted()
            if err is not None:
                return self._failed(err)
        if into is None:
            req = self.ep.irecv(None, source, self.tag, self.call, self.context)
            set_finish(req, lambda: serialization.loads(req.buffer))
            self.finishing += 1
            return req
        view = memoryview(as_bytes(into))  # a copy when not contiguous
        req = self.ep.irecv(view, source, self.tag, self.call, self.context)
        # The size is checked when the step ends (_finish_step: the posted view is what was
        # expected); only a temporary needs work afterwards: the copy back into ``into``.
        if not into.flags.c_contiguous:
            tmp = np.frombuffer(view, dtype=into.dtype).reshape(into.shape)
            set_finish(req, lambda: self._check_size(req, view.nbytes)
                       or into.__setitem__(..., tmp))
            self.finishing += 1
        return req

    def _check_size(self, req: Request, expected: int) -> None:
        got = req.status.nbytes
        if got != expected and req.error is None:
            raise CollectiveMismatchError(
                f"rank {self.rank}: {self.call} on {self.ep.name}: received {got} bytes from "
                f"rank {req.status.source} where {expected} were expected; every rank must pass "
                f"matching counts and datatypes (and the same root and op)")


def _finish_step(ch: Channel, step: Step, blocking: bool = False) -> None:
    """Surface the errors of a completed step, check that each buffer receive got as many
    bytes as it expected, and run the receives' finishing work. ``blocking``: the call's
    own thread runs it (not the engine's progress), so it may poll for an abort marker."""
    for req in step:
        target = getattr(req, "target", None)
        if target is not None and req.error is None and req.status.nbytes != target.nbytes:
            ch._check_size(req, target.nbytes)
        if req.error is not None or (ch.finishing and has_finish(req)):
            if isinstance(req.error, PeerLostError):
                _explained(ch, req.error, blocking)
            try:
                req.wait()
            except TruncationError as exc:
                raise CollectiveMismatchError(
                    f"rank {ch.rank}: {ch.call} on {ch.ep.name}: rank {req.status.source} sent "
                    f"{req.status.nbytes} bytes, more than this rank expected; every rank must pass "
                    f"matching counts and datatypes (and the same root and op)") from exc


def _explained(ch: Channel, lost: PeerLostError, poll: bool) -> None:
    """A peer of this call is gone: if it aborted the call before it went (its marker may
    still be on its way in, behind the failed send to it: ``poll`` takes it in), raise
    that error - it names the rank and its mistake - instead of the bare loss."""
    if poll:
        try:
            ch.ep.engine.poll()
        except PeerLostError:     # (the loss itself: raised below if nothing explains it)
            pass
    err = ch._aborted()
    if err is not None:
        raise err from lost


def run(ch: Channel, schedule: Schedule) -> Any:
    """Run a schedule to the end, completing each step before starting the next."""
    engine = ch.ep.engine
    hook = ch.step_hook
    try:
        step = next(schedule)
        while True:
            if hook is not None:
                hook(ch, ch.step_index)
            ch.step_index += 1
            if step:
                engine.wait_all(step)
                _finish_step(ch, step, True)
            step = schedule.send(None)
    except StopIteration as done:
        return done.value


class CollectiveRequest(LayeredRequest):
    """A nonblocking collective: the schedule advances whenever its current step is done."""

    __slots__ = ("_ch", "_schedule", "_step", "_finalize", "_release", "_outcome")

    def __init__(self, ch: Channel, schedule: Schedule,
                 finalize: Optional[Callable[[Any], Any]] = None,
                 release: Optional[Callable[[Channel], None]] = None) -> None:
        engine = ch.ep.engine
        self._outcome = Completion(engine)   # (its completion at hand: advance() reads it often)
        hold(self, self._outcome, ch.call)
        self._ch = ch
        self._schedule = schedule
        self._step: Optional[Step] = None
        self._finalize = finalize
        #: called with the channel once the collective is over (a compiled collective
        #: takes its channel back for the next call)
        self._release = release
        engine.add_active(self)

    @property
    def channel(self) -> Channel:
        """The collective call this request runs (for diagnostics)."""
        return self._ch

    def step_requests(self) -> List[Request]:
        """The messages of the step it waits for now (empty before the first and at the end)."""
        return list(self._step or ())

    def advance(self) -> bool:
        """Advance as far as completed messages allow; True once the collective is done."""
        if self._outcome.done:
            return True
        ch = self._ch
        try:
            while True:
                if self._step is not None:
                    if not all(r.done for r in self._step):
                        return False
                    _finish_step(ch, self._step)
                    self._step = self._schedule.send(None)
                else:
                    self._step = next(self._schedule)
                if ch.step_hook is not None:
                    ch.step_hook(ch, ch.step_index)
                ch.step_index += 1
        except StopIteration as finished:
            result = finished.value
            if self._release is not None:
                self._release(ch)
            if self._finalize is not None:
                result = self._finalize(result)
            self._outcome.complete(result)
            return True
        except Exception as exc:  # the error surfaces from wait()/test()
            if self._release is not None:
                self._release(ch)
            if announced(exc):   # tell the others
                ch.abort(exc)
                exc._minimpi_slot_aborted = True
            self._outcome.fail(exc)
            return True


def start(ch: Channel, schedule: Schedule, finalize: Optional[Callable[[Any], Any]] = None,
          release: Optional[Callable[[Channel], None]] = None) -> Request:
    """Start a schedule as a nonblocking collective (``release(ch)`` once it is over)."""
    return CollectiveRequest(ch, schedule, finalize, release)
