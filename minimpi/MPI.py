"""mpi4py's ``MPI`` namespace over minimpi: ``from minimpi import MPI``.

Importing this module initializes the runtime (as importing ``mpi4py.MPI`` does).
"""
from __future__ import annotations

import socket as _socket
import time as _time

from . import runtime as _runtime
from .comm import COMM_NULL, Comm, Intracomm
from .constants import *  # noqa: F401,F403
from .constants import IN_PLACE, TAG_UB as _TAG_UB_VALUE
from .datatypes import *  # noqa: F401,F403
from .datatypes import Datatype
from .errors import *  # noqa: F401,F403
from .errors import MinimpiError as Exception  # noqa: A001  (mpi4py's name)
from .ops import *  # noqa: F401,F403
from .ops import Op
from .p2p.request import Request, Status

TAG_UB = 1  # keyval for Comm.Get_attr(MPI.TAG_UB), as in mpi4py

COMM_WORLD: Intracomm = _runtime.comm_world()
COMM_SELF: Intracomm = _runtime.comm_self()
REQUEST_NULL = None


def Wtime() -> float:
    return _time.perf_counter()


def Wtick() -> float:
    return _time.get_clock_info("perf_counter").resolution


def Get_processor_name() -> str:
    return _socket.gethostname()


def Is_initialized() -> bool:
    return _runtime.initialized()


def Is_finalized() -> bool:
    return _runtime.finalized()


def Init() -> None:
    _runtime.world_state()


def Finalize() -> None:
    _runtime.finalize()
