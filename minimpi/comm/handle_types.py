"""Small mpi4py handle types minimpi needs no machinery for, and the clear refusals.

* :class:`Errhandler` (``ERRORS_RETURN``/``ERRORS_ARE_FATAL``/``ERRORS_ABORT`` and user
  handlers from :func:`create_errhandler`); what they do on an error is
  :mod:`minimpi.comm.errhandlers`.
* :class:`Info`: a plain ordered dict of strings, enough for code that passes hints around.
* :func:`unsupported`: what out-of-scope features (one-sided ``Win``, ``Register_datarep``,
  ``Spawn``, intercommunicators, graph topologies, non-contiguous derived datatypes,
  ``MPI_T``) raise: :class:`~minimpi.errors.UnsupportedError`, a ``NotImplementedError``
  naming the feature.
"""
from __future__ import annotations

import copyreg
import itertools
import operator
from typing import Any, Dict, Iterator, Optional, Tuple

from ..errors import (
    ERR_ARG,
    ERR_INFO,
    ERR_INFO_NOKEY,
    ArgumentError,
    MinimpiError,
    UnsupportedError,
)
from ..handles import IntConversions, object_of, register

_WHY = {
    "Win": "one-sided communication (MPI.Win, Put/Get/Accumulate)",
    "File": "MPI-IO (MPI.File)",
    "Spawn": "dynamic process management (Spawn, Connect/Accept, Get_parent intercomms)",
    "Intercomm": "intercommunicators (Create_intercomm, Intercomm)",
    "Datatype": "derived datatypes other than contiguous ones",
    "MPI_T": "the MPI tool interface (MPI_T)",
    "Pack": "MPI_Pack/Unpack",
}


def unsupported(feature: str, call: str) -> UnsupportedError:
    what = _WHY.get(feature, feature)
    return UnsupportedError(f"{call}: minimpi does not implement {what}; see the README "
                            f"('Running mpi4py programs') for what is refused")


def refusing(feature: str, call: str):
    """A function that raises ``unsupported(feature, call)`` whatever its arguments."""
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise unsupported(feature, call)
    refuse.__name__ = call.rsplit(".", 1)[-1]
    refuse.__doc__ = f"Not implemented in minimpi: {_WHY.get(feature, feature)}."
    return refuse


class IntHandles(IntConversions):
    """mpi4py's integer handles of an object kind: ``handle``, ``fromhandle``, ``toint``,
    ``fromint``, ``py2f``, ``f2py``.

    minimpi's objects are no C handles, so an object gets a number (unique in the process)
    the first time it is asked for one, and ``fromhandle`` finds it again while it lives;
    a null object's handle is 0 and ``fromhandle(0)`` is a null object. A class using this
    needs an ``_int_handle`` attribute (a slot, with ``__weakref__``, if it has slots).
    """

    __slots__ = ()

    @property
    def handle(self) -> int:
        """An integer naming this object in this process (0 for a null handle)."""
        if not self:
            return 0
        number = getattr(self, "_int_handle", 0)
        if not number:
            number = self._int_handle = register(self)
        return number

    @classmethod
    def fromhandle(cls, handle: int) -> Any:
        """The object ``handle`` names (``handle`` of it; 0: a null object)."""
        number = operator.index(handle)
        if number == 0:
            return cls()
        found = object_of(number)
        if not isinstance(found, cls):
            raise ValueError(f"MPI.{cls.__name__}.fromhandle({handle!r}): no live "
                             f"{cls.__name__} has this handle in this process")
        return found


class Errhandler(IntHandles):
    """An error handler handle (``MPI.Errhandler``): a predefined one (``ERRORS_RETURN``:
    raise ``MPI.Exception``, mpi4py's default; ``ERRORS_ARE_FATAL``/``ERRORS_ABORT``: end
    the job) or a user one from ``Comm/Win/File/Session.Create_errhandler(fn)`` (see
    :mod:`minimpi.comm.errhandlers`). Every handle of one error handler compares equal;
    ``Free`` makes that handle ``ERRHANDLER_NULL``."""

    __slots__ = ("_name", "_fn", "_kind", "_int_handle", "__weakref__")

    def __init__(self, errhandler: Optional["Errhandler"] = None, _name: str = "ERRHANDLER_NULL",
                 _fn: Any = None, _kind: Optional[str] = None) -> None:
        if errhandler is not None and not isinstance(errhandler, Errhandler):
            raise TypeError(f"MPI.Errhandler({errhandler!r:.40}): expected an error handler "
                            f"or nothing")
        if errhandler is not None:
            _name, _fn, _kind = errhandler._name, errhandler._fn, errhandler._kind
        self._name = _name
        self._fn = _fn          # the user function (None: predefined)
        self._kind = _kind      # "Comm", "Win", "File" or "Session" for a user handler

    def Free(self) -> None:
        """This handle becomes ``ERRHANDLER_NULL`` (objects using the handler keep it); the
        predefined constants themselves stay usable. Freeing the handle ``Create_errhandler``
        returned gives its slot back (mpi4py allows 32 user handlers of each kind). Freeing
        a null handle is an error (MPI.Exception, MPI_ERR_ARG)."""
        if not self:
            raise ArgumentError("MPI.Errhandler.Free on MPI.ERRHANDLER_NULL: expected an error "
                                "handler (from Get_errhandler or Create_errhandler)")
        if any(self is c for c in _CONSTANT_ERRHANDLERS):
            return
        slots = _USER_ERRHANDLERS.get(self._kind)
        if slots is not None and self in slots and slots[slots.index(self)] is self:
            slots[slots.index(self)] = None       # the handle Create_errhandler gave
        self._name, self._fn, self._kind = "ERRHANDLER_NULL", None, None

    def free(self) -> None:
        """``Free`` unless this is a null or predefined error handler (mpi4py 4)."""
        if self:
            self.Free()

    def __bool__(self) -> bool:
        return self._name != "ERRHANDLER_NULL"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Errhandler) and other._name == self._name

    __hash__ = None  # type: ignore[assignment]   (handles are unhashable, as mpi4py's)

    def __reduce__(self) -> Any:
        for constant in _CONSTANT_ERRHANDLERS:
            if self is constant:
                return constant._name       # the module's global: the same object back
        if self._fn is not None:
            raise ValueError(f"cannot pickle the user error handler {self._name}")
        for constant in _CONSTANT_ERRHANDLERS:
            if self == constant:            # another handle on a predefined one
                return (type(self), (constant,))
        raise ValueError(f"cannot pickle {self!r}")

    def __repr__(self) -> str:
        return f"MPI.{self._name}" if self._fn is None else f"<MPI.Errhandler {self._name}>"


#: the user error handlers of each kind, by slot (mpi4py's limit: 32 of each kind at a time)
_USER_ERRHANDLERS: Dict[str, list] = {kind: [None] * 32
                                      for kind in ("Session", "Comm", "Win", "File")}
_user_numbers = itertools.count(1)


def checked_errhandler(errhandler: Any, kind: str, where: str) -> Errhandler:
    """A handle of its own on ``errhandler`` for a ``Set_errhandler`` of an object of
    ``kind`` (a user handler of another kind, or no error handler, is a TypeError/
    MPI.Exception as in MPI)."""
    if not isinstance(errhandler, Errhandler):
        raise TypeError(f"{where}: expected an MPI.Errhandler, got "
                        f"{type(errhandler).__name__}")
    if not errhandler:
        raise ArgumentError(f"{where}: MPI.ERRHANDLER_NULL is not an error handler")
    if errhandler._kind not in (None, kind):
        raise ArgumentError(f"{where}: {errhandler!r} was made by {errhandler._kind}."
                            f"Create_errhandler; a {kind} needs one of its own kind")
    return Errhandler(errhandler)


def create_errhandler(kind: str, fn: Any) -> Errhandler:
    """``Comm/Win/File/Session.Create_errhandler(fn)``: a user error handler whose ``fn(obj,
    errorcode)`` runs on the errors of the objects it is set on."""
    if not callable(fn):
        raise TypeError(f"{kind}.Create_errhandler: expected a function fn(obj, errorcode), "
                        f"got {type(fn).__name__}")
    slots = _USER_ERRHANDLERS[kind]
    if None not in slots:
        raise RuntimeError(f"{kind}.Create_errhandler: cannot create too many user-defined "
                           f"error handlers ({len(slots)} are live; Free some first)")
    handler = Errhandler(_name=f"{kind}_errhandler#{next(_user_numbers)}", _fn=fn, _kind=kind)
    slots[slots.index(None)] = handler
    return handler

ERRHANDLER_NULL = Errhandler()
ERRORS_RETURN = Errhandler(_name="ERRORS_RETURN")
ERRORS_ARE_FATAL = Errhandler(_name="ERRORS_ARE_FATAL")
ERRORS_ABORT = Errhandler(_name="ERRORS_ABORT")
_CONSTANT_ERRHANDLERS = (ERRHANDLER_NULL, ERRORS_RETURN, ERRORS_ARE_FATAL, ERRORS_ABORT)


class Info(IntHandles):
    """``MPI.Info``: string key/value hints (kept, never interpreted by minimpi).

    As in mpi4py, ``Info(info)`` is a second handle on the same info object (it sees the
    same keys and compares equal); ``Dup``/``Create`` make new ones. Every null handle
    compares equal to ``INFO_NULL``; a null info has no keys, and the Python mapping
    methods that would change it raise ``KeyError``.
    """

    def __new__(cls, info: Optional["Info"] = None) -> "Info":
        # The handle is made here, from what reaches ``__new__``: mpi4py's subclassing idiom
        # ``def __new__(cls, info=None): return MPI.Info.__new__(cls, info)`` works, and the
        # ``__init__`` Python calls next with the caller's argument changes nothing.
        if info is not None and not isinstance(info, Info):
            raise TypeError(f"MPI.{cls.__name__}({info!r:.40}): expected an MPI.Info or "
                            f"nothing")
        self = super().__new__(cls)
        # the key/value store is shared by every handle on one info object
        self._d: Dict[str, str] = info._d if info is not None else {}
        self._null = info is None or info._null
        return self

    def __init__(self, info: Optional["Info"] = None) -> None:
        """A null info (no argument) or another handle on ``info``: see ``__new__``."""

    @classmethod
    def Create(cls, items: Any = None) -> "Info":
        """A new info holding ``items`` (a mapping or key/value pairs)."""
        i = cls()
        i._d = {}
        i._null = False
        if items is not None:
            try:
                pairs = dict(items)
            except (TypeError, ValueError) as exc:
                raise TypeError(f"MPI.Info.Create(items={items!r:.40}): expected a mapping "
                                f"or (key, value) pairs") from exc
            for k, v in pairs.items():
                i.Set(k, v)
        return i

    @classmethod
    def Create_env(cls, args: Any = None) -> "Info":
        """A new info describing how this process was started (MPI-4
        ``MPI_Info_create_env``): ``command`` and ``argv`` from ``args`` (a command line
        as a string or sequence, ``sys.argv`` if None), plus ``wdir``, ``host`` and
        ``arch``. Keys minimpi cannot tell here (``maxprocs``, ``soft``, ``file``,
        ``thread_level``) are left out, as the standard allows."""
        import os
        import platform
        import socket
        import sys
        if args is None:
            words = list(sys.argv)
        elif isinstance(args, str):
            words = [args]
        else:
            words = [str(a) for a in args]
        env = cls.Create()
        if words:
            env.Set("command", words[0])
            env.Set("argv", " ".join(words[1:]))
        env.Set("wdir", os.getcwd())
        env.Set("host", socket.gethostname())
        if platform.machine():
            env.Set("arch", platform.machine())
        return env

    def _live(self, call: str) -> Dict[str, str]:
        """The key/value store, or MPI.Exception (MPI_ERR_INFO) for a null info: the MPI
        calls on ``INFO_NULL`` are errors (its Python mapping methods raise KeyError)."""
        if self._null:
            raise MinimpiError(f"MPI.Info.{call} on MPI.INFO_NULL: expected an info object "
                               f"(from MPI.Info.Create)", ERR_INFO)
        return self._d

    def Dup(self) -> "Info":
        """A new info with the same keys and values."""
        return type(self).Create(self._live("Dup"))

    def Free(self) -> None:
        """This handle becomes a null info (other handles on the info keep its keys)."""
        self._live("Free")
        self._d = {}
        self._null = True

    def free(self) -> None:
        """``Free`` unless this is a null or predefined info (mpi4py 4)."""
        if not self._null and self is not INFO_ENV:
            self.Free()

    def _writable(self, call: str) -> Dict[str, str]:
        """The store to change, or KeyError for a null info (mpi4py's mapping methods)."""
        if self._null:
            raise KeyError(f"MPI.Info.{call}: MPI.INFO_NULL has no keys and takes none")
        return self._d

    # -- the rest of the mapping protocol mpi4py's Info has --------------------------------
    def copy(self) -> "Info":
        """A new info with the same keys and values (as ``Dup``; a null info for a null)."""
        return type(self)() if self._null else self.Dup()

    def clear(self) -> None:
        """Remove every key (nothing for a null info)."""
        if not self._null:
            self._d.clear()

    def update(self, other: Any = (), **kwds: str) -> None:
        """Set the keys of ``other`` (a mapping or key/value pairs) and ``kwds``."""
        self._writable("update")
        for key, value in dict(other, **kwds).items():
            self.Set(key, value)

    def pop(self, key: str, *default: Any) -> Any:
        """Remove ``key`` and return its value (``default`` if absent, else KeyError)."""
        if key in self._d:
            return self._writable("pop").pop(key)
        if default:
            return default[0]
        raise KeyError(key)

    def popitem(self) -> Tuple[str, str]:
        """Remove and return the last (key, value) pair (KeyError if empty)."""
        if not self._d:
            raise KeyError("popitem(): MPI.Info is empty")
        return self._writable("popitem").popitem()

    def Set(self, key: str, value: str) -> None:
        self._live("Set")[str(key)] = str(value)

    def Get(self, key: str) -> Optional[str]:
        """The value of ``key``, None if the info has no such key."""
        return self._live("Get").get(key)

    def Delete(self, key: str) -> None:
        """Remove ``key`` (MPI.Exception, MPI_ERR_INFO_NOKEY, if the info has no such key)."""
        store = self._live("Delete")
        if key not in store:
            raise MinimpiError(f"MPI.Info.Delete({key!r}): the info has no such key "
                               f"(it has {sorted(store)})", ERR_INFO_NOKEY)
        del store[key]

    def Get_nkeys(self) -> int:
        return len(self._live("Get_nkeys"))

    def Get_nthkey(self, n: int) -> str:
        """The ``n``-th key (0-based; MPI.Exception, MPI_ERR_ARG, past the last one)."""
        keys = list(self._live("Get_nthkey"))
        index = operator.index(n)
        if not 0 <= index < len(keys):
            raise MinimpiError(f"MPI.Info.Get_nthkey({n!r}): expected 0..{len(keys) - 1} "
                               f"(the info has {len(keys)} keys)", ERR_ARG)
        return keys[index]

    # dict-like, as mpi4py's Info
    def __len__(self) -> int:
        return len(self._d)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._d))

    def __getitem__(self, key: str) -> str:
        return self._d[key]

    def __setitem__(self, key: str, value: str) -> None:
        self._writable("__setitem__")[str(key)] = str(value)

    def __delitem__(self, key: str) -> None:
        del self._writable("__delitem__")[key]

    def __contains__(self, key: object) -> bool:
        return key in self._d

    def get(self, key: str, default: Any = None) -> Any:
        return self._d.get(key, default)

    def keys(self) -> list:
        """The keys, as a list (as mpi4py)."""
        return list(self._d.keys())

    def values(self) -> list:
        """The values, as a list (as mpi4py)."""
        return list(self._d.values())

    def items(self) -> list:
        """The (key, value) pairs, as a list (as mpi4py)."""
        return list(self._d.items())

    def __bool__(self) -> bool:
        return not self._null

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Info):
            return NotImplemented
        if self._null or other._null:
            return self._null and other._null
        return self._d is other._d          # handles on the same info object

    __hash__ = None  # type: ignore[assignment]   (handles are unhashable, as mpi4py's)

    def __reduce__(self) -> Any:
        if self is INFO_NULL:
            return "INFO_NULL"              # the module's global: the same object back
        if self is INFO_ENV:
            return "INFO_ENV"
        if self._null:
            return (copyreg.__newobj__, (type(self), INFO_NULL))
        if self == INFO_ENV:                # another handle on the predefined info
            return (copyreg.__newobj__, (type(self), INFO_ENV))
        return (type(self).Create, (self.items(),))

    def __repr__(self) -> str:
        return "MPI.INFO_NULL" if self._null else f"<Info {self._d}>"


INFO_NULL = Info()
INFO_ENV = Info.Create({"command": "", "maxprocs": ""})
