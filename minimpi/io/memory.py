"""The memory side of a data access: a user's buffer as packed bytes, and back.

A contiguous memory datatype (every predefined one) is used in place, zero-copy: writes
send the buffer's bytes, reads land straight in it. A non-contiguous one (once the
datatype seam gives ``pack``/``unpack``) goes through one packed temporary.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..data.buffers import BufSpec, parse_buffer
from ..data.datatypes import Datatype
from ..errors import NotABufferError
from .view import is_contiguous


def _parse(buf: Any, writable: bool, call: str, rank: int) -> BufSpec:
    """parse_buffer, with the rank in the message and without its hint about lowercase
    object calls (files have none)."""
    try:
        return parse_buffer(buf, writable=writable, call=f"{call} on rank {rank}", arg="buf")
    except NotABufferError as e:
        text = str(e).split(". To communicate Python objects")[0]
        raise NotABufferError(f"{text}; MPI-IO reads and writes buffers only") from None


class Outgoing:
    """The bytes a write takes from ``buf``: ``data`` (uint8 numpy, packed), ``datatype``,
    ``count``."""

    __slots__ = ("data", "datatype", "count")

    def __init__(self, buf: Any, call: str, rank: int) -> None:
        spec = _parse(buf, False, call, rank)
        self.datatype: Datatype = spec.datatype
        self.count: int = spec.count
        if is_contiguous(spec.datatype):
            self.data = np.frombuffer(spec.view, np.uint8) if spec.nbytes else np.zeros(0, np.uint8)
        else:
            packed = spec.datatype.pack(spec.view, spec.count)
            self.data = np.frombuffer(packed, np.uint8)

    @property
    def nbytes(self) -> int:
        return len(self.data)


class Incoming:
    """Where a read puts its bytes: ``data`` (writable uint8 numpy, packed); call
    :meth:`finish` with the number of bytes read to complete the user's buffer."""

    __slots__ = ("data", "datatype", "count", "_spec", "_packed")

    def __init__(self, buf: Any, call: str, rank: int) -> None:
        spec = _parse(buf, True, call, rank)
        self._spec = spec
        self.datatype: Datatype = spec.datatype
        self.count: int = spec.count
        self._packed = not is_contiguous(spec.datatype)
        nbytes = spec.count * int(spec.datatype.size)
        if self._packed:
            self.data = np.zeros(nbytes, np.uint8)
        elif nbytes:
            self.data = np.frombuffer(spec.view, np.uint8)
        else:
            self.data = np.zeros(0, np.uint8)

    @property
    def nbytes(self) -> int:
        return len(self.data)

    def finish(self, nread: int) -> None:
        """Scatter the packed bytes into the user's buffer (whole items only)."""
        if self._packed:
            items = nread // int(self.datatype.size)
            if items:
                self.datatype.unpack(memoryview(self.data), self._spec.view, items)
        self._spec.finish()
