"""mpi4py's integer handles, for every handle class: one table for the process.

mpi4py's objects wrap C handles, and programs pass them as integers (``comm.handle``,
``MPI.Comm.fromhandle(n)``, ``toint``/``fromint``, ``py2f``/``f2py``). minimpi's objects
are no C handles, so an object gets a number, unique in the process, the first time it is
asked for one (:func:`register`; the class keeps the number on the object), and :func:`object_of` finds it again while it lives (the
table holds it weakly: a handle names an object only while that object lives). Number 0 is
every class's null handle. :class:`IntConversions` gives a class the four spellings of the
same conversion (``toint``/``py2f``, ``fromint``/``f2py``) from its ``handle`` and
``fromhandle``.
"""
from __future__ import annotations

import itertools
import weakref
from typing import Any, Optional

#: number -> the live object it names
_TABLE: "weakref.WeakValueDictionary[int, Any]" = weakref.WeakValueDictionary()
_numbers = itertools.count(1)


def register(target: Any) -> int:
    """A new handle number for ``target`` (which must not have one yet), entered in the
    table."""
    number = next(_numbers)
    _TABLE[number] = target
    return number


def point(number: int, target: Any) -> None:
    """Handle ``number`` names ``target`` from now on (another live object standing for the
    same thing: several handle objects share one datatype, and the table must hold a live
    one)."""
    _TABLE[number] = target


def object_of(number: int) -> Optional[Any]:
    """The live object handle ``number`` names (None: none does)."""
    return _TABLE.get(number)


class IntConversions:
    """``toint``/``py2f`` and ``fromint``/``f2py`` as ``handle`` and ``fromhandle`` (minimpi
    has no separate Fortran or C integer handles)."""

    __slots__ = ()

    def toint(self) -> int:
        """As ``handle`` (minimpi has no separate Fortran/C integer handles)."""
        return self.handle  # type: ignore[attr-defined]

    py2f = toint

    @classmethod
    def fromint(cls, value: int) -> Any:
        """As ``fromhandle``."""
        return cls.fromhandle(value)  # type: ignore[attr-defined]

    f2py = fromint
