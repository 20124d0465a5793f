"""``collect`` and ``compose``: futures built from other futures (mpi4py.futures.util)."""
from __future__ import annotations

import concurrent.futures as cf
import threading
from typing import Any, Callable, Iterable, Optional


def collect(fs: Iterable[cf.Future]) -> cf.Future:
    """A future of the list of the results of ``fs`` (in order); it fails with the first
    failure, and cancelling it cancels them."""
    fs = list(fs)
    out: cf.Future = cf.Future()
    lock = threading.Lock()
    left = [len(fs)]

    def done(_: cf.Future) -> None:
        with lock:
            left[0] -= 1
            if out.done():
                return
            failed = next((f for f in fs if f.done() and not f.cancelled() and f.exception()),
                          None)
            if failed is not None:
                _settle(out, exception=failed.exception())
            elif any(f.cancelled() for f in fs):
                out.cancel()
            elif left[0] == 0:
                _settle(out, result=[f.result() for f in fs])

    out.add_done_callback(lambda o: [f.cancel() for f in fs] if o.cancelled() else None)
    if not fs:
        _settle(out, result=[])
    for f in fs:
        f.add_done_callback(done)
    return out


def compose(future: cf.Future, resulthook: Optional[Callable[[Any], Any]] = None,
            excepthook: Optional[Callable[[BaseException], Any]] = None) -> cf.Future:
    """A future of ``resulthook(result)`` (or of ``excepthook(exception)``'s value, or its
    exception if it returns one) once ``future`` completes."""
    out: cf.Future = cf.Future()

    def done(f: cf.Future) -> None:
        if f.cancelled():
            out.cancel()
            return
        try:
            exc = f.exception()
            if exc is None:
                _settle(out, result=resulthook(f.result()) if resulthook else f.result())
            elif excepthook is None:
                _settle(out, exception=exc)
            else:
                value = excepthook(exc)
                if isinstance(value, BaseException):
                    _settle(out, exception=value)
                else:
                    _settle(out, result=value)
        except BaseException as error:   # a hook that raised
            _settle(out, exception=error)

    out.add_done_callback(lambda o: future.cancel() if o.cancelled() else None)
    future.add_done_callback(done)
    return out


def _settle(out: cf.Future, result: Any = None, exception: Optional[BaseException] = None
            ) -> None:
    """Complete ``out`` (once: the callers hold a lock or call it once)."""
    if not out.set_running_or_notify_cancel():
        return   # cancelled meanwhile
    if exception is not None:
        out.set_exception(exception)
    else:
        out.set_result(result)
