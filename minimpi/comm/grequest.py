"""Generalized requests (``MPI.Grequest``): a request whose operation the program runs
itself (often in a thread) and whose completion it reports with ``Complete``.

``Grequest.Start(query_fn, free_fn, cancel_fn, args, kwargs)`` makes one. When a wait or
test finds it complete, ``query_fn(status, *args, **kwargs)`` fills the status the caller
sees, then ``free_fn(*args, **kwargs)`` runs (the request is then done with, as MPI frees
it). ``Cancel()`` calls ``cancel_fn(completed, *args, **kwargs)``. A callback that raises is
reported as mpi4py does: its traceback is printed and the call raises ``MPI.Exception``
with the exception's error class (``ERR_OTHER`` for a non-MPI exception). The lowercase
``complete(obj)`` also sets what ``wait()``/``test()`` return.

Waiting sleeps on an event that ``Complete`` sets (a thread completes it), so it never
spins. ``Waitall`` and friends over a mix of requests wait for the others first.
"""
from __future__ import annotations

import sys
import threading
import traceback
from typing import Any, Callable, Optional, Tuple

from ..errors import ERR_OTHER, MinimpiError, RequestError
from ..p2p.completion import Completion, LayeredRequest, held
from ..p2p.request import Request, Status, assign_status

#: how long one nap of a wait on the completion event lasts (seconds)
_NAP = 0.1


def _callback(fn: Optional[Callable[..., Any]], call: str, *args: Any, **kwargs: Any) -> None:
    if fn is None:
        return
    try:
        fn(*args, **kwargs)
    except MinimpiError:
        traceback.print_exc(file=sys.stderr)
        raise
    except Exception as exc:   # noqa: BLE001 - the program's callback, reported as MPI does
        traceback.print_exc(file=sys.stderr)
        raise MinimpiError(f"Grequest {call} raised {type(exc).__name__}: {exc}",
                           ERR_OTHER) from exc


class Generalized(Completion):
    """The completion of a generalized request: the program reports it (``Complete``,
    from any thread); collecting it runs ``query_fn`` then ``free_fn``."""

    kind = "generalized request (Grequest.Start)"

    __slots__ = ("query_fn", "free_fn", "cancel_fn", "args", "kwargs", "event")

    def __init__(self, query_fn: Any, free_fn: Any, cancel_fn: Any, args: Tuple[Any, ...],
                 kwargs: dict) -> None:
        super().__init__(None, Status())
        self.query_fn, self.free_fn, self.cancel_fn = query_fn, free_fn, cancel_fn
        self.args, self.kwargs = args, kwargs
        self.event = threading.Event()

    def complete(self, result: Any = None) -> None:
        if not self.active or self.done:
            raise RequestError("Grequest.Complete: generalized request is already complete")
        super().complete(result)
        self.event.set()

    def wait(self, request: Request) -> None:
        while not self.done:       # (Waitall over generalized requests only waits here)
            self.event.wait(_NAP)

    def collect(self, status: Optional[Status]) -> Any:
        if not self.active:         # already waited for: an inactive request
            if status is not None:
                assign_status(status, Status())
            return None
        self.wait(None)
        got = Status()
        try:
            super().collect(None)   # (inactive from here on, even if a callback raises)
            _callback(self.query_fn, "query_fn", got, *self.args, **self.kwargs)
        finally:
            _callback(self.free_fn, "free_fn", *self.args, **self.kwargs)
        if status is not None:
            assign_status(status, got)
        return self.result

    def cancel(self) -> None:
        """Call ``cancel_fn(completed)``; the operation itself is the program's to stop."""
        if self.active:
            _callback(self.cancel_fn, "cancel_fn", self.done, *self.args, **self.kwargs)


class Grequest(LayeredRequest):
    """A generalized request (``MPI.Grequest``); ``MPI.Grequest()`` is a null handle and
    ``Grequest(req)`` of another kind of request a TypeError (as in mpi4py)."""

    __slots__ = ()

    def __init__(self, request: Optional[Request] = None) -> None:
        super().__init__(request, completion_type=Generalized)

    @classmethod
    def Start(cls, query_fn: Optional[Callable[..., Any]] = None,
              free_fn: Optional[Callable[..., Any]] = None,
              cancel_fn: Optional[Callable[..., Any]] = None,
              args: Optional[Tuple[Any, ...]] = None,
              kwargs: Optional[dict] = None) -> "Grequest":
        """A new, active generalized request (complete it with ``Complete``)."""
        for fn, name in ((query_fn, "query_fn"), (free_fn, "free_fn"),
                         (cancel_fn, "cancel_fn")):
            if fn is not None and not callable(fn):
                raise TypeError(f"Grequest.Start: {name} must be callable or None, got "
                                f"{type(fn).__name__}")
        how = Generalized(query_fn, free_fn, cancel_fn, tuple(args or ()), dict(kwargs or {}))
        return held(cls, how, "generalized request")

    def Complete(self) -> None:
        """Report that the operation is complete (from any thread)."""
        how = self.completion
        how.complete(how.result)

    def complete(self, obj: Any = None) -> None:
        """``Complete``, and make ``obj`` what ``wait()``/``test()`` return."""
        self.completion.complete(obj)

    def __repr__(self) -> str:
        state = "null" if not self else ("complete" if self.completion.done else "active")
        return f"<Grequest ({state})>"
