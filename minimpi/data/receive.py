"""What a buffer receive checks when it completes: the message's type signature can match
the receive's.

MPI's type-matching rule says a receive's datatype must match the sender's type signature;
a program that breaks it is erroneous, and MPICH stops it (an assertion in its unpack). The
part of the rule a receiver can check without the sender's signature is the byte count: a
message that ends inside a basic element of the receive datatype (12 bytes of a
``struct{int32, float64}`` received as ``DOUBLE``: one double and half of another) cannot
come from a matching send, and ``Status.Get_elements`` would be ``MPI.UNDEFINED``. Such a
receive raises :class:`~minimpi.errors.TypeMismatchError` (``MPI.ERR_TYPE``) naming the
rank, the call, the source, the bytes received and the receive datatype, instead of leaving
a partial element and no error.

Where the receive goes through a temporary (a non-contiguous datatype, ``MPI.BOTTOM``
with absolute addresses), the check runs before the temporary is scattered, so nothing is
written. A receive straight into the user's memory (a contiguous array: the zero-copy path)
already holds the bytes when the check runs; the error says so.

Cost: a receive whose basic elements are all bytes has nothing to check (no completion work
at all); others get one function call at completion (:func:`finish_receive`), which is a
remainder test unless the count is odd.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np

from ..errors import TypeMismatchError
from .buffers import BufSpec, parse_buffer
from .datatypes import Datatype, dtype_of_code, from_numpy_dtype, held_handle

__all__ = ["ReceiveCheck", "receive_view", "finish_receive", "ends_on_element"]


class ReceiveCheck:
    """What one buffer receive does when it completes: check that the byte count can match
    ``datatype`` (whole items, or a partial last item that ends on an element boundary),
    then scatter a temporary (``spec``) into the user's layout."""

    __slots__ = ("granule", "datatype", "spec")

    def __init__(self, datatype: Datatype, spec: Optional[BufSpec] = None) -> None:
        #: bytes of one item: a count that is a multiple needs no further look
        self.granule = datatype.size if _splittable(datatype) else 0
        self.datatype = datatype
        self.spec = spec

    def needed(self) -> bool:
        return bool(self.granule) or self.spec is not None

    def mismatch(self, status: Any, comm: Any, call: str) -> TypeMismatchError:
        nbytes, dt = status.nbytes, self.datatype
        elements = ", then ".join(f"{n} of {size} bytes" for size, n in _element_sizes(dt))
        whole, rest = divmod(nbytes, dt.size)
        where = ("nothing was written to the buffer" if self.spec is not None else
                 f"the buffer holds the {nbytes} bytes received, the last {rest} of them "
                 f"a partial element")
        return TypeMismatchError(
            f"rank {comm.rank}: {call}(source={status.source}, tag={status.tag}) on "
            f"{comm.name}: the message from rank {status.source} is {nbytes} bytes, which "
            f"ends inside a basic element of the receive datatype {dt.name} (an item is "
            f"{dt.size} bytes, basic elements: {elements}); Status.Get_elements would be "
            f"MPI.UNDEFINED. The sender's "
            f"datatype does not match this receive's (MPI's type-matching rule: send and "
            f"receive the same basic types, e.g. both MPI.DOUBLE, or a struct on both "
            f"sides); {where}")


def _element_sizes(datatype: Datatype) -> list[tuple[int, int]]:
    return [(dtype_of_code(code).itemsize, n) for code, n in datatype.signature]


def ends_on_element(datatype: Datatype, rest: int) -> bool:
    """Whether the first ``rest`` bytes of an item of ``datatype`` (0 < rest < size) end on
    a basic element boundary. A MAXLOC/MINLOC pair (``DOUBLE_INT``...) counts as its two
    fields, as in MPI, whose items may end after the value (its padding, which minimpi
    carries, too)."""
    start = 0
    for code, n in datatype.signature:
        dt = dtype_of_code(code)
        end = start + n * dt.itemsize
        if rest <= end:
            inside = (rest - start) % dt.itemsize
            if inside == 0:
                return True
            fields = dt.fields or {}
            return any(offset + field.itemsize == inside
                       for field, offset, *_ in fields.values())
        start = end
    return rest == start


def _splittable(datatype: Datatype) -> bool:
    """Whether a byte count could end inside one of ``datatype``'s basic elements (no: all
    of them are single bytes, or it holds no data)."""
    return datatype.size > 0 and any(size > 1 for size, _ in _element_sizes(datatype))


#: the check of a receive straight into a contiguous numpy array, by dtype (made once)
_ARRAY_CHECKS: dict = {}


def _array_check(dtype: np.dtype) -> Optional[ReceiveCheck]:
    check = ReceiveCheck(held_handle(from_numpy_dtype(dtype)))
    _ARRAY_CHECKS[dtype] = found = check if check.needed() else None
    return found


def receive_view(buf: Any, call: str) -> Tuple[memoryview, Optional[ReceiveCheck]]:
    """The bytes a buffer receive fills (a writable byte memoryview: the user's memory, or
    a temporary) and what it must do when it completes (None: nothing; else pass it to
    :func:`finish_receive`). Plain contiguous numpy arrays and bytearrays take a fast path;
    every other form goes through :func:`~minimpi.data.buffers.parse_buffer` (which raises
    what mpi4py raises for buffers it cannot use)."""
    kind = type(buf)
    if kind is np.ndarray and buf.dtype.isnative:
        try:
            view = memoryview(buf)
        except (TypeError, ValueError):   # a dtype the buffer protocol cannot express
            view = None
        if view is not None and view.c_contiguous and not view.readonly:
            if view.itemsize == 1:
                return view.cast("B"), None
            dtype = buf.dtype
            check = _ARRAY_CHECKS.get(dtype, False)
            if check is False:
                check = _array_check(dtype)
            return view.cast("B"), check
    elif kind is bytearray:
        return memoryview(buf), None
    spec = parse_buffer(buf, writable=True, call=call, arg="buf")
    check = ReceiveCheck(spec.datatype, spec if spec.is_temporary else None)
    return spec.view, check if check.needed() else None


def finish_receive(status: Any, comm: Any, check: ReceiveCheck, call: str) -> None:
    """Complete a buffer receive (``status``: its status; ``comm``: the communicator, for
    the error's rank and name): raise :class:`TypeMismatchError` when the byte count ends
    inside a basic element, else scatter a temporary into the user's layout."""
    nbytes = status.nbytes
    granule = check.granule
    if granule and nbytes % granule and not ends_on_element(check.datatype, nbytes % granule):
        raise check.mismatch(status, comm, call)
    if check.spec is not None:
        check.spec.finish(nbytes)

