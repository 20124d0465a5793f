"""The mpi4py-facing barrier methods of ``Intracomm``: arguments, buffers, ``IN_PLACE``."""
from __future__ import annotations

from typing import Any

from ...coll.fused import FusedBarrier
from .common import collective, compiled_call, execute, fused_call, keep_fused


def Barrier(comm, algorithm: str = None) -> None:
    """Block until every rank of the communicator has called Barrier."""
    fused = fused_call(comm, ("barrier", 0, algorithm))
    if fused is not None and fused.run():
        return
    _barrier(comm, "Barrier", algorithm, False)


def barrier(comm, algorithm: str = None) -> None:
    _barrier(comm, "barrier", algorithm, False)


def Ibarrier(comm, algorithm: str = None):
    return _barrier(comm, "Ibarrier", algorithm, True)


def ibarrier(comm, algorithm: str = None):
    return _barrier(comm, "ibarrier", algorithm, True)


@collective
def _barrier(comm, call: str, algorithm: Any, nonblocking: bool):
    result = execute(comm, "barrier", call, 0, lambda alg, ch: alg(ch), algorithm=algorithm,
                     nonblocking=nonblocking)
    if call == "Barrier":      # the fused form of a segment barrier for the next calls
        compiled = compiled_call(comm, "barrier", call, 0, algorithm=algorithm)
        if compiled.algorithm.segment:
            keep_fused(comm, ("barrier", 0, algorithm),
                       FusedBarrier(compiled, comm._plan.segment(comm._ep)))
    return result
