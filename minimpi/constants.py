"""MPI constants shared by every layer (values match what mpi4py programs expect to compare)."""
from __future__ import annotations

ANY_SOURCE = -1
ANY_TAG = -1
PROC_NULL = -2
ROOT = -3
UNDEFINED = -32766
TAG_UB = 2**31 - 1  # largest valid user tag

# Comparison results (Comm.Compare, Group.Compare)
IDENT = 0
CONGRUENT = 1
SIMILAR = 2
UNEQUAL = 3

# Topology kinds
GRAPH = 1
CART = 2
DIST_GRAPH = 3

# Thread levels
THREAD_SINGLE = 0
THREAD_FUNNELED = 1
THREAD_SERIALIZED = 2
THREAD_MULTIPLE = 3


class _InPlace:
    """``MPI.IN_PLACE``: the receive buffer is also the send buffer."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MPI.IN_PLACE"

    def __reduce__(self):
        return (_InPlace, ())


IN_PLACE = _InPlace()
BOTTOM = None
