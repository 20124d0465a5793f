"""Error handlers at work: what happens when a call on a communicator, window or file fails.

In mpi4py an MPI error becomes a Python exception (``MPI.Exception``) because mpi4py sets
``ERRORS_RETURN`` on the objects it makes; a program may set another handler:

* ``ERRORS_RETURN`` (the default): the call raises ``MPI.Exception``.
* a user handler (``Create_errhandler(fn)``): ``fn(obj, errorcode)`` runs, then the call
  raises ``MPI.Exception`` as above (in C the call would return the code). An exception
  inside ``fn`` is fatal, as in mpi4py: its traceback is printed and the job ends.
* ``ERRORS_ARE_FATAL`` / ``ERRORS_ABORT``: the error is printed and the job ends with the
  error class as exit code (minimpi's abort ends every process of the job).

:func:`handle_error` is what the API front (:mod:`minimpi.front`) runs for an error leaving
any public method of a communicator, window, file or session. An error is handled once, by
the innermost public call it leaves (the exception is marked then), so a method that calls
another of the same object does not run the handler twice.
``Call_errhandler(code)`` runs the handler for ``code`` without an error.
"""
from __future__ import annotations

import sys
import traceback
from typing import Any, Callable

from ..errors import SUCCESS, MinimpiError, error_string
from .handle_types import ERRORS_ABORT, ERRORS_ARE_FATAL, Errhandler


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


def handle_error(obj: Any, exc: MinimpiError) -> None:
    """What an error leaving a public method of ``obj`` does before it is raised (the API
    front calls it as ``obj._handle_error(exc)``, :mod:`minimpi.front`): ``obj``'s handler
    (``obj._current_errhandler()``) runs - a user function is called, ``ERRORS_ARE_FATAL``/
    ``ERRORS_ABORT`` end the job through ``obj._abort_on_error(code)`` - and nothing happens
    for ``ERRORS_RETURN``."""
    try:
        handler = obj._current_errhandler()
    except AttributeError:      # a null object: no handler to run
        return
    if handler._fn is not None or handler == ERRORS_ARE_FATAL or handler == ERRORS_ABORT:
        invoke(obj, handler, exc.error_class, str(exc), obj._abort_on_error)
