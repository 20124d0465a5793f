"""Error handlers at work: what happens when a call on a communicator, window or file fails.

In mpi4py an MPI error becomes a Python exception (``MPI.Exception``) because mpi4py sets
``ERRORS_RETURN`` on the objects it makes; a program may set another handler:

* ``ERRORS_RETURN`` (the default): the call raises ``MPI.Exception``.
* a user handler (``Create_errhandler(fn)``): ``fn(obj, errorcode)`` runs, then the call
  raises ``MPI.Exception`` as above (in C the call would return the code). An exception
  inside ``fn`` is fatal, as in mpi4py: its traceback is printed and the job ends.
* ``ERRORS_ARE_FATAL`` / ``ERRORS_ABORT``: the error is printed and the job ends with the
  error class as exit code (minimpi's abort ends every process of the job).

:func:`route_errors` puts this on every public method of a class. An error is handled
once, by the innermost routed call it leaves (the exception is marked then), so a method
that calls another of the same object does not run the handler twice.
``Call_errhandler(code)`` runs the handler for ``code`` without an error.
"""
from __future__ import annotations

import functools
import inspect
import sys
import traceback
from typing import Any, Callable, Iterable

from ..errors import SUCCESS, MinimpiError, error_string
from .handles import ERRORS_ABORT, ERRORS_ARE_FATAL, Errhandler

#: methods never routed: the error handler calls themselves
_NOT_ROUTED = frozenset({"Get_errhandler", "Set_errhandler", "Call_errhandler",
                         "Create_errhandler", "Abort", "errhandler"})


def invoke(obj: Any, handler: Errhandler, errorcode: int, message: str,
           abort: Callable[[int], None]) -> None:
    """Run ``handler`` for ``errorcode`` on ``obj``: a user function is called, the fatal
    handlers end the job through ``abort(code)``, ``ERRORS_RETURN`` does nothing."""
    if handler._fn is not None:
        try:
            handler._fn(obj, errorcode)
        except BaseException:   # noqa: BLE001 - fatal in mpi4py too
            traceback.print_exc(file=sys.stderr)
            print("Fatal Python error: exception in user-defined error handler function",
                  file=sys.stderr, flush=True)
            abort(1)
    elif handler == ERRORS_ARE_FATAL or handler == ERRORS_ABORT:
        print(f"{handler!r}: {message or error_string(errorcode)} (error class "
              f"{errorcode}); ending the job", file=sys.stderr, flush=True)
        abort(errorcode or 1)


def call_errhandler(obj: Any, handler: Errhandler, errorcode: int,
                    abort: Callable[[int], None]) -> None:
    """``Call_errhandler(errorcode)``: the handler runs as for an error of that class
    (``MPI.SUCCESS`` is no error: nothing runs); with ``ERRORS_RETURN`` it returns."""
    code = int(errorcode)
    if code != SUCCESS:
        invoke(obj, handler, code, f"Call_errhandler({code}): {error_string(code)}", abort)


def _routed(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def with_errhandler(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except MinimpiError as exc:
            if not getattr(exc, "_minimpi_errhandled", False):
                try:
                    exc._minimpi_errhandled = True
                except AttributeError:       # an exception type without a __dict__
                    pass
                current = getattr(self, "_current_errhandler", None)
                if current is None:     # called on MPI.COMM_NULL (``Comm.Compare(COMM_NULL, c)``)
                    raise
                handler = current()
                if handler._fn is not None or handler == ERRORS_ARE_FATAL \
                        or handler == ERRORS_ABORT:
                    invoke(self, handler, exc.error_class, str(exc), self._abort_on_error)
            raise
    with_errhandler._minimpi_routed = True   # type: ignore[attr-defined]
    return with_errhandler


def route_errors(cls: type, skip: Iterable[str] = ()) -> type:
    """Make every public method of ``cls`` (and of its bases) hand its ``MPI.Exception`` to
    the object's error handler (``cls`` defines ``_current_errhandler()`` and
    ``_abort_on_error(code)``). Methods already routed are left as they are."""
    skipped = _NOT_ROUTED | set(skip)
    for name in dir(cls):
        if name.startswith("_") or name in skipped:
            continue
        raw = inspect.getattr_static(cls, name)
        if inspect.isfunction(raw) and not getattr(raw, "_minimpi_routed", False):
            setattr(cls, name, _routed(raw))
    return cls
