"""Reductions written once for buffers and Python objects, in MPI operand order.

* :class:`Operand` - how a reduction step combines two values: numpy arrays in place
  (``op.reduce_into``), Python objects with ``op(a, b)``. Its two combining methods say
  which side holds the lower ranks, so every algorithm states its operand order.
* :func:`received` - what a completed receive delivered: the buffer it filled, or the
  object (object mode receives with no buffer).
* :func:`fold_in` - the first step of the non-power-of-two fold (:mod:`.peers`) for a
  reduction: the even rank of each of the first pairs hands its vector to the odd one.
"""
from __future__ import annotations

from typing import Any, Generator, List, Optional

import numpy as np

from ..p2p.request import Request
from .blocks import segment_bounds
from .peers import fold_power_of_two


def received(req: Request, into: Optional[np.ndarray]) -> Any:
    """What a completed receive delivered: the buffer ``into`` it filled, or (``into`` is
    None) the object."""
    return req.wait() if into is None else into


class Operand:
    """How a reduction combines values: numpy arrays in place, or Python objects.

    ``lower_into(lower, acc)`` gives ``lower (op) acc`` and ``into_lower(acc, higher)`` gives
    ``acc (op) higher`` - the MPI order convention of :mod:`minimpi.data.ops` - so an algorithm
    states which side holds the lower ranks. ``objects``: Python-object mode; otherwise
    values are flat numpy arrays of ``datatype``'s element dtype.
    """

    def __init__(self, op: Any, objects: bool, datatype: Any = None, call: str = "Reduce") -> None:
        self.op = op
        self.objects = objects
        self.datatype = datatype
        self.call = call
        self._readonly: Optional[int] = None
        #: the working buffers of the call's channel (:meth:`on`; None: plain numpy)
        self.temps: Any = None

    def on(self, ch: Any) -> "Operand":
        """This operand, taking its working buffers from channel ``ch`` (returned)."""
        self.temps = ch.temps
        return self

    def _copy_of(self, value: np.ndarray, name: str) -> np.ndarray:
        temps = self.temps
        return temps.copy(value, name) if temps is not None else np.array(value, copy=True)

    def mine(self, value: Any, readonly: bool = True) -> Any:
        """This rank's contribution; a read-only one is copied before it is first changed."""
        if readonly and not self.objects:
            self._readonly = id(value)
        return value

    def _writable(self, acc: Any) -> Any:
        if self._readonly is not None and id(acc) == self._readonly:
            self._readonly = None
            return self._copy_of(acc, "acc")
        return acc

    def lower_into(self, lower: Any, acc: Any) -> Any:
        """``lower (op) acc``; buffers: stored in ``acc`` (returned)."""
        if self.objects:
            return self.op(lower, acc)
        acc = self._writable(acc)
        self.op.reduce_into(lower, acc, self.datatype, call=self.call)
        return acc

    def into_lower(self, acc: Any, higher: Any) -> Any:
        """``acc (op) higher``; buffers: stored in ``acc`` (returned)."""
        if self.objects:
            return self.op(acc, higher)
        acc = self._writable(acc)
        self.op.reduce_into_lower(acc, higher, self.datatype, call=self.call)
        return acc

    def assign(self, target: Any, value: Any) -> Any:
        """``target = value`` (buffers: copied into ``target``, which is returned)."""
        if self.objects:
            return value
        target[...] = value
        return target

    def copy(self, value: Any, name: str = "copy") -> Any:
        """A working copy of ``value`` (objects are immutable here: no copy)."""
        return value if self.objects else self._copy_of(value, name)

    def slot(self, like: Any, name: str = "tmp") -> Optional[np.ndarray]:
        """Where a value like ``like`` is received (None: as an object, see :func:`received`)."""
        if self.objects:
            return None
        temps = self.temps
        return temps.like(like, name) if temps is not None else np.empty_like(like)

    def pieces(self, value: Any, segment_bytes: int) -> List[Any]:
        """``value`` cut into pipeline segments (views); an object is one piece."""
        if self.objects:
            return [value]
        per = max(1, segment_bytes // max(1, value.itemsize))
        return [value[lo:hi] for lo, hi in segment_bounds(value.size, per)]


def fold_in(ch: Any, red: "Operand", acc: Any) -> Generator[List[Request], None, Any]:
    """The fold of a reduction, one step for the ranks below ``2*rem`` (none when p is a
    power of two): the even rank of each pair sends its vector to the odd rank above it,
    which combines it on the lower side (``acc = received (op) acc``). Returns the new
    accumulator (the sender's is unchanged); use as ``acc = yield from fold_in(...)``."""
    _, rem, newrank = fold_power_of_two(ch.rank, ch.size)
    ch.phase("fold")
    if ch.rank < 2 * rem:
        if newrank < 0:
            yield [ch.isend(acc, ch.rank + 1)]
        else:
            tmp = red.slot(acc)
            req = ch.irecv(tmp, ch.rank - 1)
            yield [req]
            acc = red.lower_into(received(req, tmp), acc)
    return acc
