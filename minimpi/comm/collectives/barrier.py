"""The mpi4py-facing barrier methods of ``Intracomm``: arguments, buffers, ``IN_PLACE``."""
from __future__ import annotations

from typing import Any

from .common import collective, execute


def Barrier(comm, algorithm: str = None) -> None:
    """Block until every rank of the communicator has called Barrier."""
    _barrier(comm, "Barrier", algorithm, False)


def barrier(comm, algorithm: str = None) -> None:
    _barrier(comm, "barrier", algorithm, False)


def Ibarrier(comm, algorithm: str = None):
    return _barrier(comm, "Ibarrier", algorithm, True)


def ibarrier(comm, algorithm: str = None):
    return _barrier(comm, "ibarrier", algorithm, True)


@collective
def _barrier(comm, call: str, algorithm: Any, nonblocking: bool):
    return execute(comm, "barrier", call, 0, lambda alg, ch: alg(ch), algorithm=algorithm,
                   nonblocking=nonblocking)
