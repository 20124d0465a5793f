"""mpi4py.futures on minimpi: pools of MPI processes behind ``concurrent.futures``.

``MPIPoolExecutor`` spawns its workers (``Spawn``), or uses the other ranks under
``python -m mpi4py.futures prog.py``; ``MPICommExecutor`` uses a communicator's ranks.
Written on minimpi's own MPI (see ``pool.py`` and ``protocol.py``).
"""
from concurrent.futures import (  # noqa: F401
    ALL_COMPLETED,
    FIRST_COMPLETED,
    FIRST_EXCEPTION,
    BrokenExecutor,
    CancelledError,
    Executor,
    Future,
    InvalidStateError,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
    TimeoutError,
    as_completed,
    wait,
)

from .. import MPI  # noqa: F401  (binds mpi4py.MPI: a task that imports mpi4py finds it)
from .pool import MPICommExecutor, MPIPoolExecutor, get_comm_workers
from .util import collect, compose

__all__ = [
    "Future", "Executor", "wait", "FIRST_COMPLETED", "FIRST_EXCEPTION", "ALL_COMPLETED",
    "as_completed", "CancelledError", "TimeoutError", "InvalidStateError", "BrokenExecutor",
    "MPIPoolExecutor", "MPICommExecutor", "ThreadPoolExecutor", "ProcessPoolExecutor",
    "get_comm_workers", "collect", "compose",
]
