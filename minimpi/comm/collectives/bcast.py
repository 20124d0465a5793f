"""The mpi4py-facing bcast methods of ``Intracomm``: arguments, buffers, ``IN_PLACE``."""
from __future__ import annotations

from typing import Any

from ...data.buffers import parse_buffer
from .common import check_root, collective, execute


class BcastMethods:
    """``Bcast``/``bcast``/``Ibcast`` of ``Intracomm``."""

    def Bcast(self, buf: Any, root: int = 0, algorithm: str = None) -> None:
        """Broadcast the root's buffer into every rank's ``buf`` (``algorithm``: see registry)."""
        self._ibcast(buf, root, algorithm, "Bcast", False)

    def Ibcast(self, buf: Any, root: int = 0, algorithm: str = None):
        return self._ibcast(buf, root, algorithm, "Ibcast", True)

    @collective
    def _ibcast(self, buf, root, algorithm, call, nonblocking):
        root = check_root(self, root, call)
        spec = parse_buffer(buf, writable=self.rank != root, call=call, arg="buf")
        return execute(self, "bcast", call, spec.nbytes,
                       lambda alg, ch: alg(ch, spec.array, root), root=root, algorithm=algorithm,
                       nonblocking=nonblocking, finalize=lambda _: spec.finish(),
                       datatype=spec.datatype)

    def bcast(self, obj: Any = None, root: int = 0, algorithm: str = None) -> Any:
        """Broadcast a Python object from ``root``; every rank returns it."""
        return self._bcast_obj(obj, root, algorithm, "bcast", False)

    def ibcast(self, obj: Any = None, root: int = 0, algorithm: str = None):
        return self._bcast_obj(obj, root, algorithm, "ibcast", True)

    @collective
    def _bcast_obj(self, obj, root, algorithm, call, nonblocking):
        root = check_root(self, root, call)
        return execute(self, "bcast", call, 0,
                       lambda alg, ch: alg(ch, obj if self.rank == root else None, root),
                       root=root, algorithm=algorithm, objects=True, nonblocking=nonblocking)
