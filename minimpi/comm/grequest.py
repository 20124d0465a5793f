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


class Grequest(Request):
    """A generalized request (``MPI.Grequest``); ``MPI.Grequest()`` is a null handle and
    ``Grequest(req)`` of another kind of request a TypeError (as in mpi4py)."""

    __slots__ = ("_query", "_free", "_cancel", "_args", "_kwargs", "_event", "_collected")

    def _check_handle_type(self, target: Request) -> None:
        if not isinstance(target, Grequest):
            raise TypeError(f"MPI.Grequest({target!r:.60}): not a generalized request")

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
        req = cls.__new__(cls)
        req._init_generalized(query_fn, free_fn, cancel_fn, tuple(args or ()), dict(kwargs or {}))
        return req

    def _init_generalized(self, query_fn: Any, free_fn: Any, cancel_fn: Any, args: Tuple[Any, ...],
               kwargs: dict) -> None:
        self._setup(None, "generalized request")
        self._query, self._free, self._cancel = query_fn, free_fn, cancel_fn
        self._args, self._kwargs = args, kwargs
        self._event = threading.Event()
        self._collected = False

    def Complete(self) -> None:
        """Report that the operation is complete (from any thread)."""
        target = self._target()
        if target._inactive or target.done:
            raise RequestError(f"Grequest.Complete: {target.description} is already "
                               f"complete")
        target.status = Status()
        target.done = True
        target._pending = 0
        target._event.set()

    def complete(self, obj: Any = None) -> None:
        """``Complete``, and make ``obj`` what ``wait()``/``test()`` return."""
        self._target()._result = obj
        self.Complete()

    def Cancel(self) -> None:
        """Call ``cancel_fn(completed)``; the operation itself is the program's to stop."""
        target = self._target()
        if not target._inactive:
            _callback(target._cancel, "cancel_fn", target.done, *target._args,
                      **target._kwargs)

    cancel = Cancel

    def _collect(self, status: Optional[Status]) -> Any:
        if self._collected:         # already waited for: an inactive request
            if status is not None:
                assign_status(status, Status())
            return None
        while not self.done:      # Waitall over generalized requests only: wait here
            self._event.wait(_NAP)
        self._collected = True
        self._inactive = True
        got = Status()
        try:
            _callback(self._query, "query_fn", got, *self._args, **self._kwargs)
        finally:
            _callback(self._free, "free_fn", *self._args, **self._kwargs)
        if status is not None:
            assign_status(status, got)
        return self._result

    def _wait(self, status: Optional[Status] = None) -> Any:
        return self._target()._collect(status)   # (naps until complete)

    def __repr__(self) -> str:
        state = "null" if self._is_null() else ("complete" if self._target().done else
                                                "active")
        return f"<Grequest ({state})>"
