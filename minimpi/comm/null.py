"""``MPI.COMM_NULL``: what ``Split`` returns to ranks whose color is ``MPI.UNDEFINED``.

It lives apart from the communicator classes so that every module that hands out
communicators (``Create``, ``Create_group``, ``Create_cart``, ``Get_parent``) can return it
without importing them. It compares equal to any null communicator handle (``Comm()``, a
handle made from ``COMM_NULL``), which is falsy, as in mpi4py.
"""
from __future__ import annotations

import operator
from typing import Any, Tuple

from ..constants import UNDEFINED
from ..errors import CommError


class NullComm:
    """The type of ``MPI.COMM_NULL``; any use other than comparing it raises CommError."""

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "MPI.COMM_NULL"

    def __eq__(self, other: object) -> bool:
        return other is self or (isinstance(getattr(other, "_ep", None), NullEndpoint)
                                 and not other)

    def __hash__(self) -> int:
        return 0

    def Get_name(self) -> str:
        return "MPI_COMM_NULL"

    @property
    def name(self) -> str:
        return "MPI_COMM_NULL"

    def free(self) -> None:
        """Nothing to free (mpi4py 4's ``free`` leaves null handles alone)."""

    def __reduce__(self):   # pickles by name, to this very object
        return (_comm_null, ())

    # mpi4py's integer handles: a null handle is 0, and 0 names COMM_NULL again
    @property
    def handle(self) -> int:
        """0: the integer handle of a null communicator."""
        return 0

    def toint(self) -> int:
        """0: the integer handle of a null communicator."""
        return 0

    py2f = toint

    @classmethod
    def fromhandle(cls, handle: int) -> "NullComm":
        """``COMM_NULL`` for the null handle 0 (the only handle a ``NullComm`` has)."""
        if operator.index(handle) != 0:
            raise ValueError(f"MPI.COMM_NULL's type has only the null handle 0, "
                             f"not {handle!r}; use MPI.Comm.fromhandle")
        return COMM_NULL

    fromint = fromhandle
    f2py = fromhandle

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name[:1].isupper():
            # An MPI call (``COMM_NULL.Free``): as in mpi4py, the error comes from the call,
            # so ``f = COMM_NULL.Get_size`` is allowed and ``f()`` raises.
            def refuse(*args: Any, **kwargs: Any) -> Any:
                raise _not_a_member(name)
            refuse.__name__ = name
            return refuse
        # a property (``rank``, ``size``) or a lowercase call: refused on access
        raise _not_a_member(name)


def _not_a_member(name: str) -> CommError:
    return CommError(f"{name} on MPI.COMM_NULL: this rank is not a member of the communicator "
                     f"(Split with color=MPI.UNDEFINED returns COMM_NULL)")


class NullEndpoint:
    """What a null communicator handle (``Comm()``) answers for its identity."""
    engine = None
    group: Tuple[int, ...] = ()
    rank = UNDEFINED
    size = 0
    name = "COMM_NULL"


COMM_NULL = NullComm()


def _comm_null() -> NullComm:
    return COMM_NULL
NULL_ENDPOINT = NullEndpoint()
