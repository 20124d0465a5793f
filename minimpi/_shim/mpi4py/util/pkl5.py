"""``mpi4py.util.pkl5`` over minimpi: communicators whose lowercase (pickle-based) calls send
objects with pickle protocol 5 and out-of-band buffers, with no 2 GiB message limit.

minimpi's own lowercase calls already work that way (its transports carry any number of bytes),
so the ``Comm``/``Intracomm``/``Intercomm`` classes here are minimpi communicators that differ
from ``MPI``'s only where mpi4py's pkl5 module differs: ``irecv`` is refused (RuntimeError, as
in mpi4py: a nonblocking receive cannot know the size of the buffers to come), and ``isend``,
``mprobe`` and friends return this module's ``Request``/``Message`` types.

``pickle`` is this module's pickler (``Pickle``): its ``dumps_oob`` puts every buffer of at
least ``THRESHOLD`` bytes out of band, as ``MPI.buffer`` objects. ``_bigmpi`` holds
``blocksize``, mpi4py's chunk size for buffers past the C int count limit; minimpi has no
such limit, so it only records the value a program sets.
"""
from __future__ import annotations

import pickle as _stdlib_pickle
from typing import Any, List, Tuple

from minimpi import MPI

from .. import MPI as _bound  # noqa: F401  (binds mpi4py.MPI, as mpi4py's own import does)

__all__ = ["Pickle", "pickle", "Request", "Message", "Comm", "Intracomm", "Intercomm"]


class Pickle(MPI.Pickle):
    """Pickler whose ``dumps_oob`` honours ``THRESHOLD`` (buffers at least that large go out
    of band; ``-1`` sends them all out of band) and always uses protocol 5 for it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.THRESHOLD = 1024 ** 2

    @property
    def THRESHOLD(self) -> int:  # noqa: D401 - mpi4py's attribute name
        """Size in bytes from which a buffer travels out of band."""
        return self._threshold

    @THRESHOLD.setter
    def THRESHOLD(self, threshold: int | None) -> None:
        self._threshold = 1024 ** 2 if threshold is None else int(threshold)

    def dumps_oob(self, obj: Any) -> Tuple[bytes, List[Any]]:
        """``(pickle bytes, out-of-band buffers as MPI.buffer)`` with pickle protocol 5."""
        threshold = self.THRESHOLD
        bufs: List[Any] = []

        def keep_in_band(pbuf: _stdlib_pickle.PickleBuffer) -> bool:
            view = pbuf.raw()
            if view.nbytes < threshold:
                return True
            bufs.append(MPI.buffer(view))
            return False

        data = _stdlib_pickle.dumps(obj, protocol=5, buffer_callback=keep_in_band)
        return data, bufs

    def loads_oob(self, data: Any, buffers: Any) -> Any:
        """Reverse ``dumps_oob``."""
        return _stdlib_pickle.loads(data, buffers=buffers)


pickle = Pickle()


class _BigMPI:
    """mpi4py's chunking of buffers past the C int count limit: ``blocksize`` is kept so
    programs and tests may set it; minimpi's transports have no count limit to chunk for."""

    def __init__(self) -> None:
        self.blocksize = 1 << 30


_bigmpi = _BigMPI()


class Request(MPI.Request):
    """Request of a pkl5 nonblocking send (``Comm.isend``/``issend``, ``Message.irecv``)."""


class Message(MPI.Message):
    """Matched message of a pkl5 communicator (``mprobe``/``improbe``)."""

    @classmethod
    def probe(cls, comm: Any, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG,
              status: Any = None) -> "Message":
        """``comm.mprobe`` as a class method."""
        return cls(MPI.Comm.mprobe(comm, source, tag, status))

    @classmethod
    def iprobe(cls, comm: Any, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG,
               status: Any = None) -> "Message | None":
        """``comm.improbe`` as a class method (None when nothing matches)."""
        message = MPI.Comm.improbe(comm, source, tag, status)
        return None if message is None else cls(message)

    def irecv(self) -> Request:
        """Start receiving the matched message."""
        return Request(super().irecv())


class Comm(MPI.Comm):
    """Communicator whose lowercase calls follow mpi4py's pkl5 module."""

    def isend(self, obj: Any, dest: int, tag: int = 0) -> Request:
        return Request(super().isend(obj, dest, tag))

    def issend(self, obj: Any, dest: int, tag: int = 0) -> Request:
        return Request(super().issend(obj, dest, tag))

    def recv(self, buf: Any = None, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG,
             status: Any = None) -> Any:
        """Receive an object; ``buf`` is ignored (pkl5 sizes its own buffers)."""
        return super().recv(None, source, tag, status)

    def sendrecv(self, sendobj: Any, dest: int, sendtag: int = 0, recvbuf: Any = None,
                 source: int = MPI.ANY_SOURCE, recvtag: int = MPI.ANY_TAG,
                 status: Any = None) -> Any:
        """Send and receive objects at once; ``recvbuf`` is ignored, as in ``recv``."""
        return super().sendrecv(sendobj, dest, sendtag, None, source, recvtag, status)

    def irecv(self, buf: Any = None, source: int = MPI.ANY_SOURCE,
              tag: int = MPI.ANY_TAG) -> Request:
        raise RuntimeError(f"pkl5 {type(self).__name__}.irecv (source={source}, tag={tag}): "
                           "unsupported, as in mpi4py's pkl5; use mprobe()+Message.irecv()")

    def mprobe(self, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG,
               status: Any = None) -> Message:
        return Message(super().mprobe(source, tag, status))

    def improbe(self, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG,
                status: Any = None) -> "Message | None":
        message = super().improbe(source, tag, status)
        return None if message is None else Message(message)


class Intracomm(Comm, MPI.Intracomm):
    """Intra-communicator with pkl5's lowercase calls."""


class Intercomm(Comm, MPI.Intercomm):
    """Inter-communicator with pkl5's lowercase calls."""
