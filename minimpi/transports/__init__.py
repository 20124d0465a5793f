"""Transports: one module per wire, all behind :class:`~minimpi.transports.base.Transport`.

A job's processes pick theirs by name (``MINIMPI_TRANSPORT``, default ``tcp``). Adding one
(shared memory, RDMA verbs) is a new module with a ``create(info)`` factory and one line in
``FACTORIES``. ``inproc`` is not listed: it connects threads of one process and is built
directly by :func:`minimpi.runtime.inproc.run_threads`.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ..errors import TransportError

if TYPE_CHECKING:  # pragma: no cover
    from ..runtime.bootstrap import BootInfo
    from .base import Transport

#: name -> module whose ``create(info: BootInfo) -> Transport`` builds it
FACTORIES = {
    "tcp": "minimpi.transports.tcp",
    "verbs": "minimpi.transports.verbs",   # RDMA; needs pyverbs (optional, see README)
}


def create(name: str, info: "BootInfo") -> "Transport":
    module = FACTORIES.get(name)
    if module is None:
        raise TransportError(f"rank {info.rank}: unknown transport {name!r} (MINIMPI_TRANSPORT); "
                             f"available: {', '.join(FACTORIES)}")
    return importlib.import_module(module).create(info)
