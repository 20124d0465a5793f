"""Front methods are made at their first lookup (minimpi/front.py), and behave as if they
had been made with their class: same signature, name, docstring and error routing; made
once, in the class that defines them, whichever subclass or object looks them up first."""
from __future__ import annotations

import inspect

import pytest

from minimpi import front
from minimpi.errors import ArgumentError, MinimpiError


def _minimpi_function(fn):
    fn.__module__ = "minimpi.tests_front"      # only minimpi's own functions are fronted
    return fn


def _make_classes():
    handled = []

    @_minimpi_function
    def Send(self, buf, dest: int, tag: int = 0, *, sync: bool = False):
        """Send a buffer."""
        if dest < 0:
            raise ArgumentError(f"Send(dest={dest})")
        return (buf, dest, tag, sync)

    @_minimpi_function
    def Create(cls, n: int = 1):
        """A new one."""
        return (cls.__name__, n)

    @_minimpi_function
    def version():
        return 4

    class Api(metaclass=front.Fronted):
        def _handle_error(self, exc):
            handled.append(exc)

    # (the functions are minimpi's once their module says so: a class made from them now)
    Made = front.Fronted("Made", (Api,), {"Send": Send, "Create": classmethod(Create),
                                          "version": staticmethod(version)})

    class Sub(Made):
        pass
    return Made, Sub, Send, Create, handled


def test_nothing_is_made_until_looked_up():
    Made, _, _, _, _ = _make_classes()
    for name in ("Send", "Create", "version"):
        assert type(Made.__dict__[name]).__name__ == "_Unmade", name


def test_a_made_method_is_the_front_method_in_its_class():
    Made, _, send, _, handled = _make_classes()
    obj = Made()
    assert obj.Send(b"x", 1) == (b"x", 1, 0, False)
    method = Made.__dict__["Send"]
    assert inspect.isfunction(method) and method._minimpi_front and method.__wrapped__ is send
    assert method.__name__ == "Send" and method.__doc__ == "Send a buffer."
    assert inspect.signature(method) == inspect.signature(send)
    with pytest.raises(ArgumentError):
        obj.Send(b"x", -1)
    assert len(handled) == 1 and isinstance(handled[0], MinimpiError)   # routed once
    with pytest.raises(TypeError, match="Send"):
        obj.Send(b"x")                              # argument errors read as the original's


def test_class_and_static_methods_are_made_as_such():
    Made, Sub, _, create, _ = _make_classes()
    assert Sub.Create(3) == ("Sub", 3)
    assert isinstance(Made.__dict__["Create"], classmethod)
    assert Made.Create() == ("Made", 1)
    assert Made().version() == 4 and isinstance(Made.__dict__["version"], staticmethod)
    assert inspect.signature(Made.Create) == inspect.signature(classmethod(create).__get__(Made))


def test_a_subclass_lookup_makes_it_once_in_the_defining_class():
    Made, Sub, _, _, _ = _make_classes()
    first = Sub().Send
    assert "Send" not in Sub.__dict__ and inspect.isfunction(Made.__dict__["Send"])
    assert first.__func__ is Made.__dict__["Send"] is Sub.Send is Made.Send


def test_make_front_methods_makes_them_all_now():
    Made, Sub, _, _, _ = _make_classes()
    front.make_front_methods(Sub)
    assert not any(type(v).__name__ == "_Unmade" for v in vars(Made).values())


def test_the_api_classes_answer_every_public_method():
    from minimpi import MPI
    for cls in (MPI.Comm, MPI.Intracomm, MPI.Request):
        for name in dir(cls):
            if not name.startswith("_"):
                value = getattr(cls, name)
                assert type(value).__name__ != "_Unmade", (cls, name)
