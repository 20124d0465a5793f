"""Completion objects: how a request whose operation another layer runs completes.

A plain point-to-point request (``Isend``, ``Irecv``...) is completed by the engine, which
writes its state directly: nothing sits between a wait and that state. Every other kind of
request - persistent (``Prequest``), generalized (``Grequest``), partitioned rounds,
nonblocking collectives, ``Iagree``, one-sided operations - is a :class:`LayeredRequest`
that *holds* a :class:`Completion`, made by the layer that owns the operation. The request
asks its completion everything: whether it is done, its error, status and result, how a
wait brings it about, what a wait does once it is done, how it is cancelled and freed.

The owner works through public methods only:

* it reports the end of the operation with :meth:`Completion.complete` (a result) or
  :meth:`Completion.fail` (an error), from progress or from any thread;
* it may give :meth:`Completion.on_complete` a function that runs once, in the waiter, when
  a wait or test completes the request (a received object's decoding, a fetched value put
  into the origin's buffer...);
* a kind whose state comes from other requests (a persistent request's current operation,
  a partitioned round's parts) subclasses :class:`Completion` and redefines the public
  attributes (``done``, ``error``, ``status``, ``active``, as properties) and methods
  (``wait``, ``progress``, ``collect``, ``cancel``, ``free``, ``is_null``) it needs.

:func:`hold` gives a request its completion; :func:`held` makes a request of a class
holding one. Two handles on one request (``MPI.Prequest(p)``) share its completion.
"""
from __future__ import annotations

from operator import attrgetter
from typing import Any, Callable, Optional, Tuple, Type, TypeVar

from ..errors import MinimpiError, RequestError
from .request import Request, RequestEngine, Status, assign_status

#: the status of an operation that carries no message information (shared, never changed)
_NO_MESSAGE = Status()


class Completion:
    """The completion of one operation: its state, what runs when a waiter completes it
    (:meth:`on_complete`) and how waits and tests progress it.

    Attributes: ``engine`` (the point-to-point engine whose progress completes it, or None
    where only the program does), ``done`` (complete: a wait would not block), ``error``
    (what it ended with; the wait raises it), ``status`` (what its status reports),
    ``result`` (what ``wait()`` returns), ``active`` (False once a wait or test completed
    the request, or it was freed: the handle then equals ``REQUEST_NULL``; a persistent
    request is inactive until its next ``Start``). A kind whose state derives from other
    requests redefines ``done``, ``error``, ``status`` or ``active`` as read-only
    properties, and the methods that would set them.
    """

    #: what a handle of this kind names, for error messages (``MPI.Grequest(req)``...)
    kind = "request"

    __slots__ = ("engine", "result", "finish", "done", "error", "status", "active")

    def __init__(self, engine: Optional[RequestEngine] = None,
                 status: Optional[Status] = None) -> None:
        self.engine = engine
        #: what ``wait()`` returns once the operation is complete
        self.result: Any = None
        #: run once by the waiter that completes the request (see :meth:`on_complete`)
        self.finish: Optional[Callable[[], Any]] = None
        # The state, written through the slots themselves: a kind whose state derives from
        # other requests redefines these names as properties (and the methods that set them)
        _set_done(self, False)                  # whether the operation is complete
        _set_error(self, None)                  # the error it ended with (the wait raises it)
        _set_status(self, _NO_MESSAGE if status is None else status)  # what its status says
        # False once a wait or test completed the request, or it was freed: the handle then
        # equals REQUEST_NULL (a persistent request: inactive until its next Start)
        _set_active(self, True)

    @classmethod
    def null(cls) -> "Completion":
        """The completion of a null handle (``MPI.Grequest()``): complete and inactive."""
        how = cls.__new__(cls)
        Completion.__init__(how)
        _set_done(how, True)
        _set_active(how, False)
        return how

    # -- what the owner reports ----------------------------------------------------------
    def complete(self, result: Any = None) -> None:
        """The operation ended; ``result`` is what ``wait()`` returns."""
        self.result = result
        self.done = True

    def fail(self, error: BaseException) -> None:
        """The operation ended with ``error`` (kept if it already has one)."""
        if self.error is None:
            self.error = error
        self.done = True

    def on_complete(self, finish: Optional[Callable[[], Any]]) -> None:
        """Run ``finish()`` once, in the waiter whose wait or test completes the request
        (never inside progress): what it returns becomes the result, a
        :class:`~minimpi.errors.MinimpiError` it raises the request's error."""
        self.finish = finish

    # -- how waits and tests go (what a kind may redefine) -------------------------------
    def wait(self, request: Request) -> None:
        """Block until the operation is complete (``request`` is the handle waited on,
        named in a deadlock report)."""
        if not self.done:
            if self.engine is None:
                raise RequestError(f"{request!r}: waited on, but nothing can complete it")
            self.engine.wait_until(lambda: self.done, [request])

    def progress(self) -> None:
        """One round of progress without blocking (what a test does before it looks)."""
        if self.engine is not None:
            self.engine.poll()

    def collect(self, status: Optional[Status]) -> Any:
        """The operation is complete: make the request inactive, run the finishing work,
        fill ``status``; raise the error or return the result. A repeated wait on a
        completed request returns (or raises) the same again."""
        self.active = False
        finish, self.finish = self.finish, None
        if finish is not None and self.error is None and not self.status.cancelled:
            try:
                self.result = finish()
            except MinimpiError as exc:
                self.error = exc
        if status is not None:
            assign_status(status, self.status)
        if self.error is not None:
            raise self.error
        return self.result

    def cancel(self) -> None:
        """``Cancel()`` on the request: nothing to do unless the kind says otherwise."""

    def free(self, request: Request) -> None:
        """``Free()`` on the request: it becomes ``REQUEST_NULL``; the operation itself
        still completes in the background."""
        if self.is_null():
            raise RequestError(f"Request.Free on {request!r}: the request is already "
                               f"null (completed by a wait/test, or freed): nothing to free")
        self.active = False

    def is_null(self) -> bool:
        """Whether the handle now equals ``REQUEST_NULL``."""
        return not self.active


# (the slots themselves, past a subclass's properties of the same names)
_set_done = Completion.done.__set__         # type: ignore[attr-defined]
_set_error = Completion.error.__set__       # type: ignore[attr-defined]
_set_status = Completion.status.__set__     # type: ignore[attr-defined]
_set_active = Completion.active.__set__     # type: ignore[attr-defined]


class LayeredRequest(Request):
    """A request that holds a :class:`Completion` (module docstring): its state and its
    waits, tests, cancels and frees are its completion's.

    ``LayeredRequest(req, completion_type=C)`` is a second handle on ``req`` when ``req``
    holds a ``C`` (else a TypeError), and a null handle for ``None`` or a null request.
    """

    __slots__ = ("_how",)

    def __init__(self, request: Optional[Request] = None, *,
                 completion_type: Type[Completion] = Completion) -> None:
        if request is self:                     # Request(req) of req's own type (__new__)
            return
        if request is None or (isinstance(request, Request) and request._is_null()):
            hold(self, completion_type.null(), "REQUEST_NULL")
        elif isinstance(request, LayeredRequest) and \
                isinstance(request._target()._how, completion_type):
            target = request._target()
            hold(self, target._how, target.description)
            self._orig = target
        else:
            raise TypeError(f"MPI.{type(self).__name__}({request!r:.60}): expected a "
                            f"{completion_type.kind}, or nothing (a null handle)")

    @property
    def completion(self) -> Completion:
        """The completion this request holds (shared by every handle on it)."""
        return self._how

    # the state is the completion's (read by C getters: no Python call per look, which
    # progress loops make many of)
    done = property(attrgetter("_how.done"), doc="Whether the operation is complete.")
    error = property(attrgetter("_how.error"), doc="The error the operation ended with.")
    status = property(attrgetter("_how.status"), doc="The operation's status.")

    @property
    def _inactive(self) -> bool:
        return not self._how.active

    def _is_null(self) -> bool:
        return self._how.is_null()

    def _complete(self, error: Optional[BaseException] = None) -> None:
        if error is None:
            self._how.complete(self._how.result)
        else:
            self._how.fail(error)

    def _fail(self, error: BaseException) -> None:
        self._how.fail(error)

    def _collect(self, status: Optional[Status]) -> Any:
        how = self._how
        if not how.done:        # (Waitall over requests no engine progresses)
            how.wait(self)
        return how.collect(status)

    def _wait(self, status: Optional[Status] = None) -> Any:
        how = self._how
        how.wait(self)
        return how.collect(status)

    def _test(self, status: Optional[Status] = None) -> Tuple[bool, Any]:
        how = self._how
        if not how.active:
            # completed by a wait/test already (or an inactive persistent request)
            if status is not None:
                assign_status(status, Status())
            return True, None
        if not how.done:
            how.progress()
            if not how.done:
                return False, None
        return True, how.collect(status)

    def Get_status(self, status: Optional[Status] = None) -> bool:
        how = self._how
        if not how.done:
            how.progress()
        done = how.done
        if done and status is not None:
            assign_status(status, how.status if how.active else Status())
        return done

    get_status = Get_status

    def Cancel(self) -> None:
        self._how.cancel()

    cancel = Cancel

    def Free(self) -> None:
        self._how.free(self)


R = TypeVar("R", bound=LayeredRequest)


def hold(request: LayeredRequest, completion: Completion, description: Any) -> None:
    """Make ``request`` (new, not yet initialized) a live request holding ``completion``;
    ``description`` names it in errors and deadlock reports."""
    request._how = completion
    request._engine = completion.engine
    request._finish = None
    request._result = None
    request.description = description
    request._pending = 0
    request._orig = None
    request._handle = 0


def held(cls: Type[R], completion: Completion, description: Any) -> R:
    """A new request of class ``cls`` holding ``completion``."""
    request = cls.__new__(cls)
    hold(request, completion, description)
    return request


def layered(completion: Completion, description: Any) -> LayeredRequest:
    """A plain request holding ``completion`` (an operation started inside another one: a
    partitioned round of a persistent request)."""
    return held(LayeredRequest, completion, description)
