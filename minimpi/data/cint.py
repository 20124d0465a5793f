"""Integer arguments as mpi4py reads them (ranks, roots, tags, colors, group ranges).

mpi4py declares these as C ``int`` parameters of its Cython functions (``int dest``, ``int
root``, ``p[0], p[1], p[2] = ranks[i]`` for ``Range_incl`` triplets). Cython converts a Python
object to a C integer through the type's ``__int__`` slot (``nb_int``, in Cython 3's
``__Pyx_PyNumber_Long``), not through ``__index__``. So mpi4py takes an ``int`` (or ``bool``)
as it is, truncates a ``float`` toward zero (``dest=2.0`` and ``dest=2.7`` both mean rank 2),
takes numpy scalars and anything else with ``__int__`` likewise, and refuses a ``str``,
``None`` or an object without ``__int__`` (TypeError), a NaN (ValueError) and an infinity or a
value beyond a C int (OverflowError). :func:`as_int` and :func:`c_int` do the same, so that
minimpi accepts exactly these arguments; the callers turn a refusal into an MPI error that
names the call and the argument.
"""
from __future__ import annotations

from typing import Any

INT_MIN, INT_MAX = -2 ** 31, 2 ** 31 - 1     # what MPI's C int arguments can hold


def as_int(value: Any) -> int:
    """``value`` as a Python int, converted as Cython converts an argument to a C integer
    (``__int__``: floats truncated toward zero), without the C ``int`` range check.

    Raises TypeError (no ``__int__``: str, bytes, None...), ValueError (NaN) or
    OverflowError (an infinity).
    """
    if type(value) is int:
        return value
    if isinstance(value, int):          # bool, IntEnum: their int value
        return int(value)
    to_int = getattr(type(value), "__int__", None)
    if to_int is None:
        raise TypeError(f"an integer is required, not {type(value).__name__}")
    result = to_int(value)
    if not isinstance(result, int):
        raise TypeError(f"__int__ returned non-int (type {type(result).__name__})")
    return int(result)


def c_int(value: Any) -> int:
    """:func:`as_int`, and the result must fit a C ``int`` (else OverflowError, as mpi4py)."""
    result = as_int(value)
    if not INT_MIN <= result <= INT_MAX:
        raise OverflowError(f"value {result} does not fit a C int ({INT_MIN}..{INT_MAX})")
    return result
