"""What a null communicator handle (``MPI.COMM_NULL``, ``MPI.Comm()``, a freed one) is made of.

``MPI.COMM_NULL`` is an instance of ``MPI.Comm`` (as in mpi4py), made in
:mod:`minimpi.comm.communicator` once that class exists. The modules the communicator
classes are assembled from (``Create``, ``Create_group``, ``Create_cart``...) return it to
the ranks left out, through :func:`comm_null`, without importing those classes.
"""
from __future__ import annotations

from typing import Any, Dict, Tuple

from ..errors import CommError


def _not_a_member(what: str) -> CommError:
    return CommError(f"{what} of MPI.COMM_NULL: this rank is not a member of the "
                     f"communicator (Split with color=MPI.UNDEFINED returns COMM_NULL)")


class NullEndpoint:
    """What a null communicator handle answers for its identity: a name, no engine; asking
    it for a rank, size or group is the caller's error (``CommError``, MPI_ERR_COMM)."""
    engine = None
    name = "COMM_NULL"

    @property
    def rank(self) -> int:
        raise _not_a_member("the rank")

    @property
    def size(self) -> int:
        raise _not_a_member("the size")

    @property
    def group(self) -> Tuple[int, ...]:
        raise _not_a_member("the group")


NULL_ENDPOINT = NullEndpoint()


def null_state() -> Dict[str, Any]:
    """The shared state of a new null communicator handle (each gets its own)."""
    return {"_null": True, "_freed": True, "_attrs": {}, "_ep": NULL_ENDPOINT}


#: ``MPI.COMM_NULL``, once minimpi.comm.communicator has made it
_COMM_NULL: Dict[str, Any] = {}


def set_comm_null(comm: Any) -> None:
    """Record ``MPI.COMM_NULL`` (minimpi.comm.communicator calls this once)."""
    _COMM_NULL["comm"] = comm


def comm_null() -> Any:
    """``MPI.COMM_NULL``: what a communicator constructor returns to the ranks it leaves out."""
    return _COMM_NULL["comm"]
