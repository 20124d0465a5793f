"""Reduction operations (``MPI.Op``): on Python objects and, in place, on numpy buffers.

Order convention (the one every collective must respect)
--------------------------------------------------------
MPI defines a reduction step as ``inoutbuf[i] = inbuf[i] (op) inoutbuf[i]`` where
``inbuf`` holds the contribution of the **lower** ranks. :meth:`Op.reduce_into` follows
it exactly, so a non-commutative op reduced in rank order gives
``x0 (op) x1 (op) ... (op) x[n-1]``. For Python objects ``op(a, b)`` computes
``a (op) b`` with ``a`` from the lower ranks (as ``functools.reduce(op, values_in_rank_order)``).
When your accumulator holds the lower ranks and you receive a higher rank's block, use
:meth:`Op.reduce_into_lower` (``lower = lower (op) higher``).

Buffer reductions run as numpy ufuncs over whole arrays, never a Python loop per element.

Python-object semantics follow mpi4py: ``MAX(x, y)`` is ``y if y > x else x``,
``LAND/LOR/LXOR`` return ``bool``, ``MAXLOC/MINLOC`` take ``(value, index)`` pairs and break
ties towards the lower index, ``REPLACE(x, y) == y``, ``NO_OP(x, y) == x``. Two friendly
extensions: MAX/MIN/LAND/LOR/LXOR on two numpy arrays work element-wise (mpi4py raises
"truth value of an array is ambiguous").

User operations (:meth:`Op.Create`) are called as mpi4py calls them: ``fn(x, y, None)``
for Python objects (the result is the return value), and ``fn(inbuf, inoutbuf, datatype)``
for buffers (the function updates ``inoutbuf`` in place). Buffers are passed as flat 1-D
numpy arrays of the datatype's element dtype (``inbuf`` read-only), which also work with
code written for mpi4py's byte buffers that does ``np.frombuffer(inbuf, dtype=...)``.
Deviations, both lenient: a two-argument ``fn(x, y)`` is accepted (called as ``fn(x, y)``
for objects and ``fn(inbuf, inoutbuf)`` for buffers), and when a buffer function *returns*
an array of the right size instead of updating ``inoutbuf``, the result is copied into it.

Buffer ``REPLACE`` stores ``inbuf`` into ``inoutbuf`` and ``NO_OP`` leaves it alone (MPI's
accumulate meaning, where ``inbuf`` is the origin data).
"""
from __future__ import annotations

import inspect
import operator
import weakref
from typing import Any, Callable

import numpy as np

from ..errors import ERR_INTERN, CountError, MinimpiError, OpError
from ..handles import IntConversions, object_of, register
from .buffers import parse_buffer
from .datatypes import Datatype, from_numpy_dtype

__all__ = [
    "Op", "OP_NULL", "SUM", "PROD", "MAX", "MIN", "LAND", "LOR", "LXOR", "BAND", "BOR",
    "BXOR", "MAXLOC", "MINLOC", "REPLACE", "NO_OP", "PREDEFINED_OPS", "reduce_local",
]


# ----------------------------------------------------------------- Python-object kernels
def _py_max(x, y):
    if isinstance(x, np.ndarray) and isinstance(y, np.ndarray):
        return np.maximum(x, y)
    return y if y > x else x


def _py_min(x, y):
    if isinstance(x, np.ndarray) and isinstance(y, np.ndarray):
        return np.minimum(x, y)
    return y if y < x else x


def _py_logical(np_fn, py_fn):
    def op(x, y):
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            return np_fn(x, y)
        return py_fn(bool(x), bool(y))
    return op


def _py_maxloc(x, y):
    (u, i), (v, j) = x, y
    if u > v:
        return (u, i)
    if v > u:
        return (v, j)
    return (v, j) if j < i else (u, i)


def _py_minloc(x, y):
    (u, i), (v, j) = x, y
    if u < v:
        return (u, i)
    if v < u:
        return (v, j)
    return (v, j) if j < i else (u, i)


# ------------------------------------------------------------------------ buffer kernels
# Each takes (a, b) = (inbuf, inoutbuf), numpy arrays of equal length, and sets b = a op b.
def _ufunc_kernel(ufunc):
    def kernel(a, b):
        ufunc(a, b, b)      # (out positional: a keyword doubles a small call's cost)
    return kernel


def _loc_kernel(greater: bool):
    def kernel(a, b):
        vn, iname = b.dtype.names
        av, ai, bv, bi = a[vn], a[iname], b[vn], b[iname]
        better = (av > bv) if greater else (av < bv)
        take = better | ((av == bv) & (ai < bi))
        np.copyto(bv, av, where=take)
        np.copyto(bi, ai, where=take)
    return kernel


def _replace_kernel(a, b):
    b[...] = a


def _noop_kernel(a, b):
    pass


_ARITH, _ORDER, _LOGIC, _BITS, _LOC, _ANY = "arith", "order", "logic", "bits", "loc", "any"


class _LazyLabel:
    """The text of ``_type_label``, computed only if an error message needs it."""

    __slots__ = ("datatype", "dtype")

    def __init__(self, datatype: Datatype | None, dtype: np.dtype) -> None:
        self.datatype, self.dtype = datatype, dtype

    def __str__(self) -> str:
        return _type_label(self.datatype, self.dtype)

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


def _type_label(datatype: Datatype | None, dtype: np.dtype) -> str:
    name = datatype.name if datatype is not None else from_numpy_dtype_name(dtype)
    return f"{dtype} data (datatype {name})"


def from_numpy_dtype_name(dtype: np.dtype) -> str:
    try:
        return from_numpy_dtype(dtype).name
    except Exception:
        return "?"


class Op(IntConversions):
    """A reduction operation handle (``MPI.Op``).

    ``MPI.Op()`` is a null handle (equal to ``MPI.OP_NULL``, falsy); ``MPI.Op(op)`` is a
    second handle on ``op``: equal to it, usable the same way, and freeing either frees the
    operation (as two mpi4py handles of one ``MPI_Op``). The predefined operations pickle by
    name (``loads(dumps(MPI.SUM)) is MPI.SUM``); a user-defined one pickles as its function.
    """

    __slots__ = ("_name", "_commute", "_py", "_kernel", "_kind", "_user", "_user_nargs",
                 "_predefined", "_freed_flag", "__weakref__", "_accepted", "_orig", "_handle")

    #: mpi4py keeps at most this many user-defined operations alive at once
    MAX_USER_OPS = 32
    #: the live user-defined operations, by id (handles are unhashable, as in mpi4py)
    _live_user: "weakref.WeakValueDictionary[int, Op]" = weakref.WeakValueDictionary()

    def __init__(self, op: "Op | None" = None) -> None:
        if op is None:
            self._setup("OP_NULL", None, None, kind=_ANY, commute=True, predefined=True)
            return
        if not isinstance(op, Op):
            raise TypeError(f"MPI.Op({op!r:.40}): expected an MPI.Op to make another handle of, "
                            f"or nothing (the null op)")
        target = op._target()
        for name in ("_name", "_commute", "_py", "_kernel", "_kind", "_user", "_user_nargs",
                     "_predefined", "_accepted"):
            setattr(self, name, getattr(target, name))
        self._freed_flag = False
        self._orig = target
        self._handle = 0

    @classmethod
    def _define(cls, name: str, py: Callable | None, kernel: Callable | None, *,
                kind: str = _ANY, commute: bool = True, predefined: bool = False) -> "Op":
        """A new operation (the predefined ones, and ``Create``)."""
        op = cls.__new__(cls)
        op._setup(name, py, kernel, kind=kind, commute=commute, predefined=predefined)
        return op

    def _setup(self, name: str, py: Callable | None, kernel: Callable | None, *, kind: str,
               commute: bool, predefined: bool) -> None:
        self._name = name
        self._py = py
        self._kernel = kernel
        self._kind = kind
        self._commute = bool(commute)
        self._user: Callable | None = None
        self._user_nargs = 3
        self._predefined = predefined
        self._freed_flag = False
        self._accepted: set = set()  # dtypes this op has been checked against
        self._orig: Op | None = None
        self._handle = 0

    def _target(self) -> "Op":
        """The operation this handle names (itself unless it is a second handle)."""
        return self if self._orig is None else self._orig

    @property
    def _freed(self) -> bool:
        return self._target()._freed_flag

    # ------------------------------------------------------------------ facts
    @property
    def name(self) -> str:
        return self._name

    @property
    def commutative(self) -> bool:
        return self._commute

    is_commutative = commutative

    def Is_commutative(self) -> bool:
        return self._commute

    @property
    def elementwise_ufunc(self) -> Any:
        """The numpy ufunc this predefined op applies elementwise, item by item in any
        order alike (``SUM``: ``np.add``, ``MAX``: ``np.maximum``, the bitwise ops), or None
        (user ops, the logical and location ops, ``REPLACE``/``NO_OP``): lets a reduction
        over many inputs at once be one ``ufunc.reduce``."""
        return _ELEMENTWISE.get(self._name) if self._predefined else None

    @property
    def is_predefined(self) -> bool:
        """True for MPI's operations (``MPI.SUM``... and ``MPI.OP_NULL``), False for
        ``Op.Create``'s."""
        return self._predefined

    @property
    def is_null(self) -> bool:
        return (self._py is None and self._user is None) or self._freed

    def __bool__(self) -> bool:
        return not self.is_null

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Op):
            return NotImplemented
        return self._target() is other._target() or (self.is_null and other.is_null)

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None  # type: ignore[assignment]   (handles are unhashable, as mpi4py's)

    def __repr__(self) -> str:
        if self._predefined or self.is_null and not self._freed:
            return f"MPI.{self._name}"
        state = " (freed)" if self._freed else ""
        kind = "commutative" if self._commute else "non-commutative"
        return f"<Op {self._name}: user-defined, {kind}{state}>"

    def __reduce__(self):
        if self._predefined or self._user is None:
            if self._orig is None and PREDEFINED_OPS.get(self._name, OP_NULL) is self \
                    or self is OP_NULL:
                return (_op_by_name, (self._name,))
            return (type(self), (_op_by_name(self._name),))
        if self._orig is not None:
            raise ValueError(f"cannot pickle {self!r}: it is a second handle (MPI.Op(op), "
                             f"Op.fromint...); pickle the operation Op.Create returned")
        return (_rebuild_user, (self._user, self._commute))

    # ------------------------------------------------------------------ handles
    @property
    def handle(self) -> int:
        """An integer naming this operation in this process (``fromhandle`` gives it back)."""
        target = self._target()
        if not target._handle:
            target._handle = register(target)
        return target._handle

    @classmethod
    def fromhandle(cls, handle: int) -> "Op":
        """A handle on the operation ``handle`` names."""
        target = object_of(operator.index(handle))
        if not isinstance(target, Op):
            raise ValueError(f"MPI.Op.fromhandle({handle}): no operation has this handle in "
                             f"this process")
        return cls(target)

    # ------------------------------------------------------------------ life cycle
    @classmethod
    def Create(cls, function: Callable, commute: bool = False) -> "Op":
        """A user-defined operation (see the module docstring for how ``function`` is called)."""
        if not callable(function):
            raise OpError(f"Op.Create: function must be callable, got {type(function).__name__}")
        live = cls._live_user
        if len(live) >= cls.MAX_USER_OPS:
            raise MinimpiError(
                f"Op.Create: {len(live)} user-defined operations already exist; mpi4py allows "
                f"at most {cls.MAX_USER_OPS} at once - Free() the ones no longer needed",
                ERR_INTERN)
        op = cls._define(getattr(function, "__name__", "user_op"), None, None,
                         commute=commute, kind=_ANY)
        op._user = function
        live[id(op)] = op
        op._user_nargs = _positional_arity(function)
        return op

    def Free(self) -> None:
        if self._predefined:
            raise OpError(f"Op.Free: cannot free the predefined operation MPI.{self._name}")
        if self.is_null:
            raise OpError("Op.Free: the operation is MPI.OP_NULL or already freed")
        target = self._target()
        target._freed_flag = True
        self._live_user.pop(id(target), None)

    def free(self) -> None:
        """``Free`` unless this is a null or predefined operation (mpi4py 4): the module's
        constants (``MPI.SUM``) stay as they are; another handle on a predefined operation
        (``Op(MPI.SUM)``) becomes a null handle."""
        if self.is_null or self is PREDEFINED_OPS.get(self._name):
            return
        if self._predefined:
            Op.__init__(self)                   # this handle only: now OP_NULL
            return
        self.Free()

    def check_usable(self, call: str) -> None:
        # every reduction step asks: the fields directly (what _freed and is_null read)
        if (self if self._orig is None else self._orig)._freed_flag:
            raise OpError(f"{call}: operation {self._name} has been freed")
        if self._py is None and self._user is None:
            raise OpError(f"{call}: MPI.OP_NULL is not a usable operation; pass e.g. MPI.SUM")

    # ------------------------------------------------------------------ Python objects
    def __call__(self, x: Any, y: Any) -> Any:
        """``x (op) y`` on Python objects, ``x`` from the lower ranks."""
        self.check_usable(self._name)
        if self._user is not None:
            if self._user_nargs == 2:
                return self._user(x, y)
            return self._user(x, y, None)
        return self._py(x, y)

    # ------------------------------------------------------------------ buffers
    def check_datatype(self, datatype: Datatype, call: str = "Reduce") -> None:
        """Raise :class:`OpError` if this op cannot reduce ``datatype`` (call this before
        any communication so that every rank reports the same error)."""
        self.check_usable(call)
        if self._user is not None:
            return
        if datatype.element_dtype is None and self._kind not in (_ANY,):
            raise OpError(
                f"{call}: MPI.{self._name} cannot reduce datatype {datatype.name}: its type map "
                f"mixes basic types {sorted({c for c, _ in datatype.signature})}; a predefined "
                "reduction needs one basic type (or a pair type for MAXLOC/MINLOC)")
        self._check_dtype(datatype.dtype, datatype, call)

    def _check_dtype(self, dtype: np.dtype, datatype: Datatype | None, call: str) -> None:
        if dtype in self._accepted:  # checked once per dtype: reductions run it every step
            return
        kind = self._kind
        label = _LazyLabel(datatype, dtype)
        if kind == _LOC:
            if dtype.names is None or len(dtype.names) != 2:
                raise OpError(
                    f"{call}: MPI.{self._name} needs (value, index) pairs, got {label}; use a "
                    "pair datatype such as MPI.DOUBLE_INT, MPI.FLOAT_INT, MPI.LONG_INT or MPI.2INT "
                    "(a numpy structured dtype [('value', 'f8'), ('index', 'i4')], align=True)")
            return
        if kind == _ANY:
            return
        if dtype.names is not None:
            raise OpError(
                f"{call}: MPI.{self._name} is not defined for {label}; pair datatypes only "
                "reduce with MPI.MAXLOC or MPI.MINLOC")
        if dtype.kind in "SUVOMm":
            raise OpError(f"{call}: MPI.{self._name} cannot reduce {label}; it needs numeric data")
        if kind == _BITS and dtype.kind not in "iub":
            raise OpError(
                f"{call}: MPI.{self._name} cannot reduce {label}: bitwise operations need "
                "integer, bool or BYTE data")
        if kind == _ORDER and dtype.kind == "c":
            raise OpError(
                f"{call}: MPI.{self._name} cannot reduce {label}: complex numbers have no order")
        self._accepted.add(dtype)

    def reduce_into(self, inbuf: Any, inoutbuf: np.ndarray, datatype: Datatype | None = None,
                    *, call: str = "Reduce") -> None:
        """In place: ``inoutbuf[i] = inbuf[i] (op) inoutbuf[i]``; ``inbuf`` = lower ranks.

        ``inoutbuf`` is a writable numpy array; ``inbuf`` a numpy array of the same dtype and
        length or any bytes-like object holding exactly that many bytes (e.g. a payload
        fresh from the wire), which is viewed, not copied.
        """
        self.check_usable(call)
        if not isinstance(inoutbuf, np.ndarray):
            raise OpError(f"{call}: inoutbuf must be a numpy array, got {type(inoutbuf).__name__}")
        a = _as_like(inbuf, inoutbuf, call)
        b = inoutbuf
        if self._user is not None:
            self._call_user_buffers(a, b, datatype, call)
            return
        if b.dtype not in self._accepted:
            self._check_dtype(b.dtype, datatype, call)
        try:
            self._kernel(a, b)
        except TypeError as exc:  # numpy's UFuncTypeError
            raise OpError(f"{call}: MPI.{self._name} cannot reduce {_type_label(datatype, b.dtype)}: {exc}") from None

    def reduce_into_lower(self, lower: np.ndarray, higher: Any, datatype: Datatype | None = None,
                          *, call: str = "Reduce") -> None:
        """In place: ``lower[i] = lower[i] (op) higher[i]`` (accumulator holds the lower ranks)."""
        if self._commute:
            # a (op) b == b (op) a: reduce the higher block into the accumulator directly
            self.reduce_into(higher, lower, datatype, call=call)
            return
        tmp = np.array(_as_like(higher, lower, call), copy=True)
        self.reduce_into(lower, tmp, datatype, call=call)
        lower[...] = tmp

    def _call_user_buffers(self, a: np.ndarray, b: np.ndarray, datatype, call: str) -> None:
        ro = a.view()
        ro.flags.writeable = False
        try:
            if self._user_nargs == 2:
                result = self._user(ro, b)
            else:
                result = self._user(ro, b, datatype)
        except Exception as exc:
            if isinstance(exc, OpError):
                raise
            raise OpError(
                f"{call}: user operation {self._name} raised {type(exc).__name__}: {exc}") from exc
        if result is not None and result is not b:
            res = np.asarray(result)
            if res.size == b.size and not np.shares_memory(res, b):
                b[...] = res.reshape(b.shape).astype(b.dtype, copy=False)

    def Reduce_local(self, inbuf: Any, inoutbuf: Any) -> None:
        """mpi4py's ``Op.Reduce_local``: ``inoutbuf = inbuf (op) inoutbuf`` on local buffers."""
        reduce_local(inbuf, inoutbuf, self)


def _positional_arity(fn: Callable) -> int:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return 3
    n = 0
    for p in sig.parameters.values():
        if p.kind == p.VAR_POSITIONAL:
            return 3
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            n += 1
    return 2 if n == 2 else 3


def _as_like(inbuf: Any, like: np.ndarray, call: str) -> np.ndarray:
    if isinstance(inbuf, np.ndarray):
        a = inbuf
        if a.dtype != like.dtype:
            if a.dtype == np.uint8 and a.size == like.size * like.itemsize:
                a = a.view(like.dtype)
            else:
                raise OpError(
                    f"{call}: reduction operands differ in dtype ({a.dtype} vs {like.dtype})")
    else:
        try:
            a = np.frombuffer(inbuf, dtype=like.dtype)
        except (TypeError, ValueError) as exc:
            raise OpError(f"{call}: inbuf is not a buffer of {like.dtype} items ({exc})") from None
    if a.size != like.size:
        raise CountError(
            f"{call}: reduction operands differ in length ({a.size} vs {like.size} {like.dtype} items)")
    if a.shape != like.shape:
        a = a.reshape(like.shape)
    return a


OP_NULL = Op()

#: The predefined operations by name.
PREDEFINED_OPS: dict[str, Op] = {}


def _def(name: str, py, kernel, kind: str) -> Op:
    # MPI.REPLACE and MPI.NO_OP are not commutative: x REPLACE y = y, x NO_OP y = x
    op = Op._define(name, py, kernel, kind=kind, commute=name not in ("REPLACE", "NO_OP"),
                    predefined=True)
    PREDEFINED_OPS[name] = op
    return op


#: the predefined ops that are one numpy ufunc applied elementwise (Op.elementwise_ufunc)
_ELEMENTWISE = {"SUM": np.add, "PROD": np.multiply, "MAX": np.maximum, "MIN": np.minimum,
                "BAND": np.bitwise_and, "BOR": np.bitwise_or, "BXOR": np.bitwise_xor}

SUM = _def("SUM", lambda x, y: x + y, _ufunc_kernel(np.add), _ARITH)
PROD = _def("PROD", lambda x, y: x * y, _ufunc_kernel(np.multiply), _ARITH)
MAX = _def("MAX", _py_max, _ufunc_kernel(np.maximum), _ORDER)
MIN = _def("MIN", _py_min, _ufunc_kernel(np.minimum), _ORDER)
LAND = _def("LAND", _py_logical(np.logical_and, lambda a, b: a & b), _ufunc_kernel(np.logical_and), _LOGIC)
LOR = _def("LOR", _py_logical(np.logical_or, lambda a, b: a | b), _ufunc_kernel(np.logical_or), _LOGIC)
LXOR = _def("LXOR", _py_logical(np.logical_xor, lambda a, b: a ^ b), _ufunc_kernel(np.logical_xor), _LOGIC)
BAND = _def("BAND", lambda x, y: x & y, _ufunc_kernel(np.bitwise_and), _BITS)
BOR = _def("BOR", lambda x, y: x | y, _ufunc_kernel(np.bitwise_or), _BITS)
BXOR = _def("BXOR", lambda x, y: x ^ y, _ufunc_kernel(np.bitwise_xor), _BITS)
MAXLOC = _def("MAXLOC", _py_maxloc, _loc_kernel(True), _LOC)
MINLOC = _def("MINLOC", _py_minloc, _loc_kernel(False), _LOC)
REPLACE = _def("REPLACE", lambda x, y: y, _replace_kernel, _ANY)
NO_OP = _def("NO_OP", lambda x, y: x, _noop_kernel, _ANY)


def _op_by_name(name: str) -> Op:
    return OP_NULL if name == "OP_NULL" else PREDEFINED_OPS[name]


def _rebuild_user(fn: Callable, commute: bool) -> Op:
    return Op.Create(fn, commute)


def reduce_local(inbuf: Any, inoutbuf: Any, op: Op, *, call: str = "Reduce_local") -> None:
    """``inoutbuf = inbuf (op) inoutbuf`` on two local buffer arguments (any form that
    :func:`minimpi.data.buffers.parse_buffer` accepts), as ``MPI.Op.Reduce_local``."""

    if not isinstance(op, Op):
        raise OpError(f"{call}: op must be an MPI.Op such as MPI.SUM, got {type(op).__name__}")
    src = parse_buffer(inbuf, writable=False, call=call, arg="inbuf")
    dst = parse_buffer(inoutbuf, writable=True, call=call, arg="inoutbuf")
    if src.count != dst.count or src.datatype.size != dst.datatype.size:
        raise CountError(
            f"{call}: inbuf has {src.count} x {src.datatype.name} but inoutbuf has "
            f"{dst.count} x {dst.datatype.name}; they must match")
    op.check_datatype(dst.datatype, call)
    a = src.array
    if a.dtype != dst.array.dtype:
        a = a.view(np.uint8).view(dst.array.dtype) if a.size else a.astype(dst.array.dtype)
    op.reduce_into(a, dst.array, dst.datatype, call=call)
    dst.finish()
