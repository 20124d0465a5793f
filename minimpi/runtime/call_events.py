"""The API's call events on the bus (:meth:`minimpi.bus.Subscriber.call_entered` /
:meth:`~minimpi.bus.Subscriber.call_left`): who publishes them.

:func:`publish_calls` wraps the public communication methods of ``Comm`` (and its
subclasses), ``Win`` and ``Request`` once per process, so that every outermost MPI call is
published on the bus of the engine it runs on. A wrapper first asks that bus whether anyone
listens to calls, so a rank with no such subscriber (another in-process rank) pays one tuple
test, and a process that never calls :func:`publish_calls` (no ``--trace``/``--stats``, no
dashboard) has no wrappers at all.
"""
from __future__ import annotations

import threading
from typing import Any

from ..comm.communicator import Comm, endpoint_of
from ..p2p.request import Request, engine_of
from ..rma.window import Win

#: methods that are not communication (never wrapped)
_NOT_CALLS = ("Get_", "Set_", "Is_", "Create_keyval", "Free_keyval", "Delete_attr", "Compare",
              "f2py", "py2f")
_REQUEST_CALLS = ("wait", "Wait", "test", "Test", "waitall", "Waitall", "waitany", "Waitany",
                  "testall", "Testall", "testany", "Testany", "waitsome", "Waitsome",
                  "testsome", "Testsome")

_install_lock = threading.Lock()
_wrapped = False


def _wrap_method(cls: type, name: str, fn: Any, classmethod_: bool) -> None:
    import inspect
    try:
        params = list(inspect.signature(fn).parameters)[1:]
    except (TypeError, ValueError):
        params = []
    qualname = f"{cls.__name__}.{name}"

    def bus_of(first: Any, args: tuple) -> Any:
        if classmethod_:
            reqs = args[0] if args else ()
            for r in reqs or ():
                engine = engine_of(r) if isinstance(r, Request) else None
                if engine is not None:
                    return engine.bus
            return None
        # a communicator or a window (its own communicator's endpoint); else a request
        ep = endpoint_of(first) or getattr(first, "endpoint", None)
        engine = ep.engine if ep is not None else (
            engine_of(first) if isinstance(first, Request) else None)
        return engine.bus if engine is not None else None

    def published(first, *args, **kwargs):
        bus = bus_of(first, args)
        if bus is None or not bus.calls:
            return fn(first, *args, **kwargs)
        if bus.depth:                       # a call made by another call: not outermost
            bus.depth += 1
            try:
                return fn(first, *args, **kwargs)
            finally:
                bus.depth -= 1
        named = dict(zip(params, args))
        named.update(kwargs)
        call = f"{(first if classmethod_ else type(first)).__name__}.{name}"
        listeners = bus.calls
        bus.depth = 1
        for s in listeners:
            s.call_entered(call, first, named)
        error = None
        try:
            return fn(first, *args, **kwargs)
        except BaseException as exc:
            error = exc
            raise
        finally:
            bus.depth = 0
            for s in listeners:
                s.call_left(call, error)

    published.__name__ = name
    published.__qualname__ = qualname
    published.__doc__ = fn.__doc__
    published.__wrapped__ = fn
    published._minimpi_traced = True
    setattr(cls, name, classmethod(published) if classmethod_ else published)


def publish_calls() -> None:
    """Publish every outermost public communication call of Comm (and subclasses), Win and
    Request on its engine's bus from now on (once per process; idempotent)."""
    global _wrapped
    with _install_lock:
        if _wrapped:
            return
        _wrapped = True
        classes, todo = [], [Comm, Win]
        while todo:
            klass = todo.pop()
            if klass not in classes:
                classes.append(klass)
                todo.extend(klass.__subclasses__())
        for klass in classes:
            for name in dir(klass):
                if name.startswith("_") or name.startswith(_NOT_CALLS):
                    continue
                attr = None
                for base in klass.__mro__:
                    if name in base.__dict__:
                        attr = base.__dict__[name]
                        break
                if (not callable(attr) or isinstance(attr, (staticmethod, classmethod, type))
                        or getattr(attr, "_minimpi_traced", False)):
                    continue
                _wrap_method(klass, name, attr, False)
        for name in _REQUEST_CALLS:
            attr = Request.__dict__.get(name)
            if isinstance(attr, classmethod):
                _wrap_method(Request, name, attr.__func__, True)
            elif callable(attr):
                _wrap_method(Request, name, attr, False)
