"""Attribute caching: keyvals and the attributes they name on communicators, datatypes and
windows (``Create_keyval``, ``Set_attr``, ``Get_attr``, ``Delete_attr``, ``Free_keyval``).

Each object kind has its own :class:`KeyvalTable` (a communicator keyval means nothing to a
datatype, as in MPI). A :class:`Keyval` keeps the two callbacks mpi4py takes:

* ``copy_fn(obj, keyval, value)`` runs when the object is duplicated (``Dup``): its result
  is the copy's value; ``NotImplemented`` means "no copy". ``None``/``False`` never copy,
  ``True`` copies the value itself.
* ``delete_fn(obj, keyval, value)`` runs when the value goes away: ``Delete_attr``, a
  ``Set_attr`` over it, and the object's ``Free``.

An exception in a callback is printed to stderr (its traceback) and raised as
``MPI.Exception`` of class ``ERR_OTHER``, as mpi4py does. ``nopython=True`` keyvals hold
plain integers in mpi4py (C-level attributes); here they hold the value as given.

An :class:`AttributeStore` is one object's attributes. It lives in the ground floor so that
``Datatype`` (here in ``data/``) and the layers above share one implementation.
"""
from __future__ import annotations

import itertools
import sys
import traceback
from typing import Any, Callable, Dict, Optional, Tuple

from ..errors import ERR_OTHER, MinimpiError

#: MPI's KEYVAL_INVALID and the error class of a bad keyval (MPICH's numbers)
KEYVAL_INVALID = -1
ERR_KEYVAL = 48


class KeyvalError(MinimpiError):
    """A keyval that was never created, was freed, or belongs to another kind of object."""

    error_class = ERR_KEYVAL


class Keyval:
    """One attribute key: its number and the callbacks given to ``Create_keyval``."""

    __slots__ = ("number", "kind", "copy_fn", "delete_fn", "nopython", "freed")

    def __init__(self, number: int, kind: str, copy_fn: Any, delete_fn: Any,
                 nopython: bool) -> None:
        self.number = number
        self.kind = kind
        self.copy_fn = copy_fn
        self.delete_fn = delete_fn
        self.nopython = bool(nopython)
        self.freed = False

    def copied(self, owner: Any, value: Any) -> Tuple[bool, Any]:
        """``(keep, value)`` for the duplicate of ``owner``."""
        fn = self.copy_fn
        if fn is None or fn is False:
            return False, None
        if fn is True:
            return True, value
        result = _run_callback(fn, owner, self, value, "copy_fn", "Dup")
        if result is NotImplemented:
            return False, None
        return True, result

    def deleted(self, owner: Any, value: Any, call: str) -> None:
        if callable(self.delete_fn):
            _run_callback(self.delete_fn, owner, self, value, "delete_fn", call)


def _run_callback(fn: Callable[..., Any], owner: Any, keyval: Keyval, value: Any,
                  which: str, call: str) -> Any:
    try:
        return fn(owner, keyval.number, value)
    except Exception as exc:   # noqa: BLE001 - the user's callback; reported as MPI does
        traceback.print_exc(file=sys.stderr)
        raise MinimpiError(f"{keyval.kind}.{call}: the {which} of keyval {keyval.number} "
                           f"raised {type(exc).__name__}: {exc}", ERR_OTHER) from exc


class KeyvalTable:
    """The keyvals of one object kind (``"Comm"``, ``"Datatype"``, ``"Win"``)."""

    def __init__(self, kind: str, first: int) -> None:
        self.kind = kind
        self._numbers = itertools.count(first)
        self._live: Dict[int, Keyval] = {}

    def create(self, copy_fn: Any = None, delete_fn: Any = None, nopython: bool = False) -> int:
        """A new keyval (``Create_keyval``)."""
        if copy_fn is not None and not isinstance(copy_fn, bool) and not callable(copy_fn):
            raise TypeError(f"{self.kind}.Create_keyval: copy_fn must be callable, None, True "
                            f"or False; got {type(copy_fn).__name__}")
        if delete_fn is not None and not callable(delete_fn):
            raise TypeError(f"{self.kind}.Create_keyval: delete_fn must be callable or None; "
                            f"got {type(delete_fn).__name__}")
        number = next(self._numbers)
        self._live[number] = Keyval(number, self.kind, copy_fn, delete_fn, nopython)
        return number

    def free(self, keyval: int) -> int:
        """Forget ``keyval`` (``Free_keyval``); attributes set with it keep their callbacks
        until they are deleted, as in MPI. Returns ``KEYVAL_INVALID``."""
        key = self.lookup(keyval, "Free_keyval")
        key.freed = True
        del self._live[key.number]
        return KEYVAL_INVALID

    def lookup(self, keyval: Any, call: str) -> Keyval:
        key = self._live.get(keyval) if isinstance(keyval, int) else None
        if key is None:
            raise KeyvalError(f"{self.kind}.{call}: {keyval!r} is not a live {self.kind} "
                              f"keyval (make one with {self.kind}.Create_keyval)")
        return key

    def is_user_keyval(self, keyval: Any) -> bool:
        return isinstance(keyval, int) and keyval in self._live


class AttributeStore:
    """The user attributes of one object: keyval number -> (Keyval, value)."""

    __slots__ = ("_values",)

    def __init__(self) -> None:
        self._values: Dict[int, Tuple[Keyval, Any]] = {}

    def __bool__(self) -> bool:
        return bool(self._values)

    def get(self, keyval: int) -> Optional[Any]:
        entry = self._values.get(keyval)
        return None if entry is None else entry[1]

    def has(self, keyval: Any) -> bool:
        return keyval in self._values

    def set(self, owner: Any, key: Keyval, value: Any) -> None:
        """Attach ``value`` under ``key``; an old value is deleted (its delete_fn runs)."""
        old = self._values.get(key.number)
        self._values[key.number] = (key, value)
        if old is not None:
            old[0].deleted(owner, old[1], "Set_attr")

    def delete(self, owner: Any, keyval: int, call: str = "Delete_attr") -> None:
        """Remove the attribute, then run its delete_fn (whose error is raised: the
        attribute is gone either way, so freeing the object later does not fail again)."""
        entry = self._values.pop(keyval, None)
        if entry is not None:
            entry[0].deleted(owner, entry[1], call)

    def copy_into(self, owner: Any, target: "AttributeStore") -> None:
        """The attributes of ``owner``'s duplicate, through each keyval's copy_fn."""
        for number, (key, value) in list(self._values.items()):
            keep, new = key.copied(owner, value)
            if keep:
                target._values[number] = (key, new)

    def clear(self, owner: Any, call: str = "Free") -> None:
        """Delete every attribute (the object is being freed), newest first; every
        delete_fn runs, and the first error among them is raised at the end."""
        first: Optional[BaseException] = None
        for number in reversed(list(self._values)):
            try:
                self.delete(owner, number, call)
            except MinimpiError as exc:
                first = first or exc
        if first is not None:
            raise first


#: the keyvals of each object kind (numbers far from the predefined keyvals and each other)
COMM_KEYVALS = KeyvalTable("Comm", 0x1000_0000)
DATATYPE_KEYVALS = KeyvalTable("Datatype", 0x2000_0000)
WIN_KEYVALS = KeyvalTable("Win", 0x3000_0000)


class Attributed:
    """The mpi4py attribute methods of an object kind, mixed into its class:
    ``Get_attr``/``Set_attr``/``Delete_attr`` and the class methods ``Create_keyval``/
    ``Free_keyval``. The class names its :class:`KeyvalTable` (``_keyvals``) and defines
    ``_attribute_store(call)`` (the object's store, after checking it is usable) and, if it
    has predefined keyvals, ``_predefined_attr(keyval)``."""

    __slots__ = ()
    _keyvals: KeyvalTable

    def _attribute_store(self, call: str) -> AttributeStore:
        raise NotImplementedError

    def _predefined_attr(self, keyval: int) -> Tuple[bool, Any]:
        """``(True, value)`` for a predefined keyval, ``(False, None)`` otherwise."""
        return False, None

    def Get_attr(self, keyval: int) -> Any:
        """The value attached under ``keyval``; None if none is."""
        known, value = self._predefined_attr(keyval)
        if known:
            return value
        store = self._attribute_store("Get_attr")
        if not self._keyvals.is_user_keyval(keyval) and not store.has(keyval):
            # (KEYVAL_INVALID, a number never made by Create_keyval): MPI_ERR_KEYVAL
            self._keyvals.lookup(keyval, "Get_attr")
        return store.get(keyval)

    def Set_attr(self, keyval: int, attrval: Any) -> None:
        """Attach ``attrval`` under ``keyval`` (one from ``Create_keyval``)."""
        store = self._attribute_store("Set_attr")
        if self._predefined_attr(keyval)[0]:
            raise KeyvalError(f"{self._keyvals.kind}.Set_attr: keyval {keyval} is predefined "
                              f"and cannot be set")
        store.set(self, self._keyvals.lookup(keyval, "Set_attr"), attrval)

    def Delete_attr(self, keyval: int) -> None:
        """Remove the value attached under ``keyval`` (its keyval's delete_fn runs)."""
        store = self._attribute_store("Delete_attr")
        if store.has(keyval):
            store.delete(self, keyval)
        else:
            self._keyvals.lookup(keyval, "Delete_attr")    # an unknown keyval is an error

    @classmethod
    def Create_keyval(cls, copy_fn: Any = None, delete_fn: Any = None,
                      nopython: bool = False) -> int:
        """A new attribute keyval; ``copy_fn(obj, keyval, value)`` makes a duplicate's
        value (``NotImplemented``: none; True: the same value), ``delete_fn(obj, keyval,
        value)`` runs when the value goes away."""
        return cls._keyvals.create(copy_fn, delete_fn, nopython)

    @classmethod
    def Free_keyval(cls, keyval: int) -> int:
        """Free ``keyval``; returns ``MPI.KEYVAL_INVALID``."""
        return cls._keyvals.free(keyval)
