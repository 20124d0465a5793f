"""The front of the API: the one entry every public method of an API class goes through.

``Comm`` and its subclasses, ``Win``, ``File``, ``Session`` and ``Request`` are made by the
metaclass :class:`Fronted`. When such a class is created, each public function of its body
(written in minimpi) becomes a *front method*: a function with the same signature that calls
the original and does two things around it, decided once, here, for every class alike:

* **error handlers** - an ``MPI.Exception`` leaving the call goes to the object's error
  handler (``obj._handle_error(exc)``, :func:`minimpi.comm.errhandlers.handle_error`: a
  user function is called, ``ERRORS_ARE_FATAL``/``ERRORS_ABORT`` end the job) and is raised
  (``ERRORS_RETURN``). An error is handled once, by the innermost front method it leaves
  (the exception is marked), so a method calling another does not run the handler twice.
  Classes without ``_handle_error`` (requests) only raise.
* **call events** - while any subscriber of any bus in the process listens to calls
  (:attr:`minimpi.bus.Bus.call_listeners`), the outermost calls are published on the bus of
  the object's world (:meth:`minimpi.bus.Subscriber.call_entered`/``call_left``): what
  ``--trace``, ``--stats`` and the dashboard see. Otherwise this costs one test.

Nothing rewrites a method after its class exists. The front sits on the ground floor (it
knows only the bus and the error types), so classes of every layer use it; what an error
handler does is the communicator layer's (``_handle_error``).
The wrapper is generated with the original's exact signature (as :mod:`dataclasses` builds
``__init__``), so ``help()``, ``inspect.signature`` and argument errors read as they would
without it; ``__wrapped__`` is the original.
"""
from __future__ import annotations

import inspect
import linecache
import os
from typing import Any, Callable, Dict, Optional, Tuple

from .bus import Bus
from .errors import MinimpiError

_HERE = os.path.dirname(os.path.abspath(__file__))

#: methods whose errors are not routed to the error handler: they are its own calls
NOT_ROUTED = frozenset({"Get_errhandler", "Set_errhandler", "Call_errhandler",
                        "Create_errhandler", "Abort", "errhandler"})
#: prefixes of methods that are not communication: never published as calls
NOT_CALLS = ("Get_", "Set_", "Is_", "Create_keyval", "Free_keyval", "Delete_attr",
             "Compare", "f2py", "py2f", "is_", "to", "from", "free")
#: request methods that are calls (the rest of a request's methods are not)
REQUEST_CALLS = frozenset(("wait", "Wait", "test", "Test", "waitall", "Waitall", "waitany",
                           "Waitany", "testall", "Testall", "testany", "Testany", "waitsome",
                           "Waitsome", "testsome", "Testsome"))


def route(target: Any, exc: MinimpiError) -> None:
    """Hand ``exc`` to ``target``'s error handler (``target._handle_error(exc)``: see
    :func:`minimpi.comm.errhandlers.handle_error`), once per exception."""
    if getattr(exc, "_minimpi_errhandled", False):
        return
    try:
        exc._minimpi_errhandled = True
    except AttributeError:       # an exception type without a __dict__
        pass
    if isinstance(target, type):  # a class method (File.Open): no object, no handler yet
        return
    handle = getattr(target, "_handle_error", None)
    if handle is not None:       # (a request has none)
        handle(exc)


def bus_of(target: Any, args: tuple) -> Optional[Bus]:
    """The bus of the world ``target`` (an API object, or the class of a class method such
    as ``Request.Waitall(requests)``) belongs to, if any."""
    if isinstance(target, type):
        first = args[0] if args else None
        for item in first if isinstance(first, (list, tuple)) else ():
            find = getattr(item, "_front_bus", None)
            bus = find() if find is not None else None
            if bus is not None:
                return bus
        return None
    find = getattr(target, "_front_bus", None)
    return find() if find is not None else None


def published(target: Any, call: str, fn: Callable[..., Any], args: tuple,
              kwargs: Dict[str, Any], names: tuple, routed: bool) -> Any:
    """Run ``fn(target, *args, **kwargs)`` as a call published on ``target``'s bus."""
    bus = bus_of(target, args)
    if bus is None or not bus.calls or bus.depth:
        if bus is not None and bus.calls:
            bus.depth += 1            # a call made by another call: not outermost
        try:
            return fn(target, *args, **kwargs)
        except MinimpiError as exc:
            if routed:
                route(target, exc)
            raise
        finally:
            if bus is not None and bus.calls and bus.depth:
                bus.depth -= 1
    named = dict(zip(names, args))
    named.update(kwargs)
    listeners = bus.calls
    qualified = f"{(target if isinstance(target, type) else type(target)).__name__}.{call}"
    bus.depth = 1
    for s in listeners:
        s.call_entered(qualified, target, named)
    error = None
    try:
        return fn(target, *args, **kwargs)
    except BaseException as exc:
        error = exc
        if routed and isinstance(exc, MinimpiError):
            route(target, exc)
        raise
    finally:
        bus.depth = 0
        for s in listeners:
            s.call_left(qualified, error)


def hand_written(general: Callable[..., Any], name: str) -> Tuple[Callable[..., Any], Callable]:
    """For a method whose every microsecond counts (``Comm.Send``, ``Comm.recv``...): the
    front method of ``general`` (its general path, published and routed as any other) and a
    decorator that marks the hand-written method as a front method, so the class leaves it
    as written. The hand-written method saves the front's frame on its express lane and
    must do there what a made front does: take the general path whenever
    :attr:`Bus.call_listeners` is set (so the call is published), and hand a
    :class:`MinimpiError` its lane raises to :func:`route` before raising it."""
    made = front_method(general, name, routed=True, publish=True)

    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn._minimpi_front = True
        fn.__wrapped__ = general
        return fn
    return made, mark


#: generated source of a front method's shape -> its compiled module code (front_method)
_SHAPES: Dict[str, Any] = {}


def front_method(fn: Callable[..., Any], name: str, *, routed: bool, publish: bool,
                 kind: str = "method") -> Callable[..., Any]:
    """The front method for ``fn`` (see the module docstring); ``kind`` is "method",
    "classmethod" or "staticmethod" (a static method is only routed: it has no object)."""
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    first = params[0].name if params and kind != "staticmethod" else None
    rest = params[1:] if first is not None else params
    namespace: Dict[str, Any] = {"_fn": fn, "_MinimpiError": MinimpiError, "_route": route,
                                 "_published": published, "_Bus": Bus}
    header, positional, keywords, call_args = [], [], [], []
    if first is not None:
        header.append(first)
    names = []
    star_done = False
    for i, p in enumerate(rest):
        default = ""
        if p.default is not inspect.Parameter.empty:
            namespace[f"_d{i}"] = p.default
            default = f"=_d{i}"
        if p.kind is p.POSITIONAL_ONLY or p.kind is p.POSITIONAL_OR_KEYWORD:
            header.append(p.name + default)
            positional.append(p.name)
            names.append(p.name)
            call_args.append(p.name)
        elif p.kind is p.VAR_POSITIONAL:
            header.append("*" + p.name)
            star_done = True
            call_args.append("*" + p.name)
        elif p.kind is p.KEYWORD_ONLY:
            if not star_done:
                header.append("*")
                star_done = True
            header.append(p.name + default)
            keywords.append(p.name)
            call_args.append(f"{p.name}={p.name}")
        else:   # VAR_KEYWORD
            header.append("**" + p.name)
            keywords.append("**" + p.name)
            call_args.append("**" + p.name)
    if any(p.kind is p.POSITIONAL_ONLY for p in rest):
        last = max(i for i, p in enumerate(rest) if p.kind is p.POSITIONAL_ONLY)
        header.insert(last + 1 + (first is not None), "/")
    namespace["_names"] = tuple(names)
    direct = ", ".join(([first] if first else []) + call_args)
    if kind == "staticmethod" or not publish:
        body = ["    try:", f"        return _fn({direct})"]
        if routed and first is not None:
            body += ["    except _MinimpiError as exc:", f"        _route({first}, exc)",
                     "        raise"]
        else:
            body = [f"    return _fn({direct})"]
    else:
        star = next((p.name for p in rest if p.kind is p.VAR_POSITIONAL), None)
        tup = "(" + "".join(f"{n}, " for n in positional) + ")"
        if star is not None:
            tup = f"{tup} + tuple({star})"
        kw = "{" + ", ".join(f"{k!r}: {k}" for k in keywords if not k.startswith("**")) + "}"
        varkw = next((k[2:] for k in keywords if k.startswith("**")), None)
        if varkw is not None:
            kw = f"{{**{kw}, **{varkw}}}"
        body = [
            "    if _Bus.call_listeners:",
            f"        return _published({first}, _call, _fn, {tup}, {kw}, _names, {routed})",
        ]
        if routed:
            body += ["    try:", f"        return _fn({direct})",
                     "    except _MinimpiError as exc:", f"        _route({first}, exc)",
                     "        raise"]
        else:
            body += [f"    return _fn({direct})"]
    # Methods of one shape (the same parameters, the same kind of body) share one compiled
    # code object: ~500 front methods have ~130 shapes, and compiling each was most of the
    # cost of importing minimpi.MPI. Each gets its own name and file name (code.replace).
    shape = f"def _front({', '.join(header)}):\n" + "\n".join(body) + "\n"
    code = _SHAPES.get(shape)
    if code is None:
        code = _SHAPES[shape] = compile(shape, "<front>", "exec")
    namespace["_call"] = name
    # The front's frames are minimpi's own, wherever stacks are read: the module name (the
    # finalize ledger looks for the user's frame by it), a file name inside the package (the
    # deadlock report does), and its source in linecache (tracebacks show it).
    namespace["__name__"] = fn.__module__
    filename = os.path.join(_HERE, f"<front of {fn.__module__}.{fn.__qualname__}>")
    source = shape.replace("def _front(", f"def {name}(", 1)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(code, namespace)   # noqa: S102 - built once per class
    method = namespace["_front"]
    names = {"co_name": name, "co_filename": filename}
    if hasattr(method.__code__, "co_qualname"):
        names["co_qualname"] = fn.__qualname__
    method.__code__ = method.__code__.replace(**names)
    method.__name__ = name
    method.__doc__ = fn.__doc__
    method.__module__ = fn.__module__
    method.__qualname__ = fn.__qualname__
    method.__annotations__ = dict(getattr(fn, "__annotations__", {}))
    method.__wrapped__ = fn
    method.__signature__ = sig
    method._minimpi_front = True
    return method


def _class_attribute(cls: type, name: str) -> Any:
    """What ``inspect.getattr_static(cls, name)`` gives for a name a class or one of its
    bases defines (the first entry in the dicts of its MRO, no descriptor called); None for
    one only the metaclass has. A class's creation asks for every name it has: this lookup
    is what keeps making the ~20 API classes (~400 front methods) cheap at import."""
    for klass in cls.__mro__:
        found = klass.__dict__.get(name, _MISSING)
        if found is not _MISSING:
            return found
    return None


_MISSING = object()


class Fronted(type):
    """The metaclass of the API classes: when a class is created, every public function it
    has (its own, and those of plain mixin bases such as ``Attributed``) that is written in
    minimpi becomes a front method (module docstring); a user's subclass keeps its own
    methods as written. ``_front_calls`` (a class attribute) lists which methods are
    published as calls (default: all but those of :data:`NOT_CALLS`); ``_front_routed =
    False`` leaves errors unrouted (requests, which have no error handler)."""

    def __new__(mcs, name: str, bases: tuple, namespace: Dict[str, Any], **kwargs: Any):
        cls = super().__new__(mcs, name, bases, namespace, **kwargs)
        routed_class = getattr(cls, "_front_routed", True)
        calls = getattr(cls, "_front_calls", None)
        for attr in dir(cls):
            if attr.startswith("_"):
                continue
            raw = _class_attribute(cls, attr)
            kind, fn = "method", raw
            if isinstance(raw, classmethod):
                kind, fn = "classmethod", raw.__func__
            elif isinstance(raw, staticmethod):
                kind, fn = "staticmethod", raw.__func__
            if not inspect.isfunction(fn) or getattr(fn, "_minimpi_front", False) \
                    or not (fn.__module__ or "").startswith("minimpi"):
                continue
            publish = kind != "staticmethod" and (
                attr in calls if calls is not None else not attr.startswith(NOT_CALLS))
            routed = routed_class and attr not in NOT_ROUTED
            setattr(cls, attr, _Unmade(cls, fn, attr, routed, publish, kind))
        return cls


class _Unmade:
    """A front method decided when its class was created and made at its first lookup.

    The API classes have ~400 public methods and a program calls a few dozen: making each
    front method (its signature read, its code compiled or shared, its name given) was
    ~60 ms of every ``import minimpi.MPI`` - of every job's start. Looked up (on the class
    or an object, ``getattr``, ``inspect.signature``, ``help``), this descriptor makes the
    front method once, puts it in its place in the class (so later lookups find the method
    itself) and returns it bound as the method would be: what a program sees is the same.
    """

    __slots__ = ("owner", "fn", "name", "routed", "publish", "kind")

    def __init__(self, owner: type, fn: Callable[..., Any], name: str, routed: bool,
                 publish: bool, kind: str) -> None:
        self.owner, self.fn, self.name = owner, fn, name
        self.routed, self.publish, self.kind = routed, publish, kind

    def make(self) -> Any:
        """The front method (wrapped as the original was: classmethod, staticmethod), in
        its class from now on."""
        wrapped = front_method(self.fn, self.name, routed=self.routed, publish=self.publish,
                               kind=self.kind)
        made = classmethod(wrapped) if self.kind == "classmethod" else \
            staticmethod(wrapped) if self.kind == "staticmethod" else wrapped
        if self.owner.__dict__.get(self.name) is self:   # (two threads may both make it)
            type.__setattr__(self.owner, self.name, made)
        return made

    def __get__(self, obj: Any, objtype: Optional[type] = None) -> Any:
        return self.make().__get__(obj, objtype)

    @property
    def __wrapped__(self) -> Callable[..., Any]:
        return self.fn


def make_front_methods(cls: type) -> None:
    """Make every front method ``cls`` has now (not at its first lookup)."""
    for klass in cls.__mro__:
        for value in list(vars(klass).values()):
            if isinstance(value, _Unmade) and value.owner is klass:
                value.make()
