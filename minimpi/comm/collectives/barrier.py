"""The mpi4py-facing barrier methods of ``Intracomm``: arguments, buffers, ``IN_PLACE``."""
from __future__ import annotations

from typing import Any

from .common import collective, execute


class BarrierMethods:
    """``Barrier``/``barrier``/``Ibarrier``."""

    def Barrier(self, algorithm: str = None) -> None:
        """Block until every rank of the communicator has called Barrier."""
        self._barrier("Barrier", algorithm, False)

    def barrier(self, algorithm: str = None) -> None:
        self._barrier("barrier", algorithm, False)

    def Ibarrier(self, algorithm: str = None):
        return self._barrier("Ibarrier", algorithm, True)

    def ibarrier(self, algorithm: str = None):
        return self._barrier("ibarrier", algorithm, True)

    @collective
    def _barrier(self, call: str, algorithm: Any, nonblocking: bool):
        return execute(self, "barrier", call, 0, lambda alg, ch: alg(ch), algorithm=algorithm,
                       nonblocking=nonblocking)
