"""The memory side of a data access: a user's buffer as packed bytes, and back.

``parse_buffer`` (data/buffers.py) already hands out a buffer's items as contiguous
bytes: the user's own memory for a contiguous datatype (zero-copy: writes send it, reads
land in it), a packed copy or temporary for a non-contiguous one (scattered back by
``BufSpec.finish``). This module adds what files need: the rank in error messages, and
the number of bytes a read really got, so only those items are scattered.
"""
from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from ..data.buffers import BufSpec, parse_buffer
from ..data.datatypes import Datatype
from ..errors import NotABufferError

# BufSpec.finish learns how many bytes arrived once non-contiguous datatypes exist (the
# datatypes work); before that it takes no argument and every buffer is used in place.
_FINISH_TAKES_NBYTES = len(inspect.signature(BufSpec.finish).parameters) > 1


def _parse(buf: Any, writable: bool, call: str, rank: int) -> BufSpec:
    """parse_buffer, with the rank in the message and without its hint about lowercase
    object calls (files have none)."""
    try:
        return parse_buffer(buf, writable=writable, call=f"{call} on rank {rank}", arg="buf")
    except NotABufferError as e:
        text = str(e).split(". To communicate Python objects")[0]
        raise NotABufferError(f"{text}; MPI-IO reads and writes buffers only") from None


def _bytes(spec: BufSpec) -> np.ndarray:
    return np.frombuffer(spec.view, np.uint8) if spec.nbytes else np.zeros(0, np.uint8)


class Outgoing:
    """The bytes a write takes from ``buf``: ``data`` (uint8 numpy, packed), ``datatype``,
    ``count``."""

    __slots__ = ("data", "datatype", "count")

    def __init__(self, buf: Any, call: str, rank: int) -> None:
        spec = _parse(buf, False, call, rank)
        self.datatype: Datatype = spec.datatype
        self.count: int = spec.count
        self.data = _bytes(spec)

    @property
    def nbytes(self) -> int:
        return len(self.data)


class Incoming:
    """Where a read puts its bytes: ``data`` (writable uint8 numpy, packed); call
    :meth:`finish` with the number of bytes read to complete the user's buffer."""

    __slots__ = ("data", "datatype", "count", "_spec")

    def __init__(self, buf: Any, call: str, rank: int) -> None:
        spec = _parse(buf, True, call, rank)
        self._spec = spec
        self.datatype: Datatype = spec.datatype
        self.count: int = spec.count
        self.data = _bytes(spec)

    @property
    def nbytes(self) -> int:
        return len(self.data)

    def finish(self, nread: int) -> None:
        """Complete the user's buffer with the ``nread`` bytes read (a non-contiguous
        datatype's items are scattered into its layout; the rest is left as it was)."""
        if _FINISH_TAKES_NBYTES:
            self._spec.finish(nread)
        else:
            self._spec.finish()
