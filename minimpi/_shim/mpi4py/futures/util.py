"""``collect`` and ``compose``: futures built from other futures (mpi4py.futures.util)."""
from __future__ import annotations

import concurrent.futures as cf
import threading
from typing import Any, Callable, Iterable, Optional


def collect(fs: Iterable[cf.Future]) -> cf.Future:
    """A future (of the first item's class) of the list of the results of ``fs``, in
    order (an item may appear several times). It fails with the first item that fails and
    is cancelled when an item is; once it is done (or cancelled), the items still pending
    are cancelled. Cost: one callback per distinct item."""
    fs = list(fs)
    if not fs:
        empty: cf.Future = cf.Future()
        empty.set_result([])
        return empty
    out: cf.Future = type(fs[0])()
    where: dict = {}
    for i, f in enumerate(fs):
        where.setdefault(f, []).append(i)
    results: list = [None] * len(fs)
    lock = threading.RLock()     # cancelling an item from out's callback calls item_done

    def item_done(item: cf.Future) -> None:
        with lock:
            if out.done() or item not in where:
                return
            if item.cancelled():
                out.cancel()
            elif item.exception() is not None:
                _settle(out, exception=item.exception())
            else:
                for i in where.pop(item):
                    results[i] = item.result()
                if not where:
                    _settle(out, result=results)

    def out_done(o: cf.Future) -> None:
        with lock:
            pending = list(where)
            where.clear()
        for item in pending:
            item.cancel()
        if o.cancelled():
            o.set_running_or_notify_cancel()      # wake wait()/as_completed on it

    out.add_done_callback(out_done)
    for item in list(where):
        item.add_done_callback(item_done)
    return out


def compose(future: cf.Future, resulthook: Optional[Callable[[Any], Any]] = None,
            excepthook: Optional[Callable[[BaseException], Any]] = None) -> cf.Future:
    """A future of ``resulthook(result)`` (or of ``excepthook(exception)``'s value, or its
    exception if it returns one) once ``future`` completes."""
    out: cf.Future = type(future)()

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

    def out_done(o: cf.Future) -> None:
        if o.cancelled():
            o.set_running_or_notify_cancel()      # wake wait()/as_completed on it
            future.cancel()

    out.add_done_callback(out_done)
    future.add_done_callback(done)
    return out


def _settle(out: cf.Future, result: Any = None, exception: Optional[BaseException] = None
            ) -> None:
    """Complete ``out`` (once: the callers hold a lock or call it once)."""
    if out.cancelled() or not out.set_running_or_notify_cancel():
        return   # cancelled meanwhile
    if exception is not None:
        out.set_exception(exception)
    else:
        out.set_result(result)
