"""Transports: one module per wire, all behind :class:`~minimpi.transports.base.Transport`.

A job's processes pick theirs by name (``minimpi run --transport``, env ``MINIMPI_TRANSPORT``):

- ``auto`` (the default): for each peer the first of :data:`AUTO` that reaches it - shared
  memory for ranks on this host, RDMA verbs for the others where both hosts have a usable
  device, else TCP (:mod:`~minimpi.transports.router`);
- any name in :data:`FACTORIES`: that transport for every peer (``tcp``; ``shm`` when every
  rank shares this host).

Adding one is a new module with a ``create(info)`` factory, one line in ``FACTORIES`` and, to
have ``auto`` use it, its name in ``AUTO``. ``inproc`` is not listed:
it connects threads of one process and is built directly by
:func:`minimpi.runtime.inproc.run_threads`.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ..errors import TransportError
from .router import RouterTransport

if TYPE_CHECKING:  # pragma: no cover
    from ..runtime.bootstrap import BootInfo

#: name -> module whose ``create(info: BootInfo) -> Transport`` builds it
FACTORIES = {
    "tcp": "minimpi.transports.tcp",
    "shm": "minimpi.transports.shm",
    "verbs": "minimpi.transports.verbs",   # RDMA; needs pyverbs (optional, see README)
}

#: what ``auto`` offers, in order of preference: each peer gets the first that reaches it
#: (shm only reaches ranks on this host); all but the last may be missing on a host
AUTO = ("shm", "verbs", "tcp")

#: the default of ``MINIMPI_TRANSPORT``
DEFAULT = "auto"


def create(name: str, info: "BootInfo", host: str) -> RouterTransport:
    """The transport of a ``minimpi run`` process: a router over ``name``'s members.
    ``host``: this process's host identity (``runtime.bootstrap.host_identity``)."""
    names = AUTO if name == "auto" else (name,)
    members = []
    skipped = {}        # auto: member -> why it cannot run on this host
    for member in names:
        module = FACTORIES.get(member)
        if module is None:
            raise TransportError(f"rank {info.rank}: unknown transport {name!r} "
                                 f"(MINIMPI_TRANSPORT); available: auto, {', '.join(FACTORIES)}")
        try:
            members.append(importlib.import_module(module).create(info))
        except TransportError as exc:
            if name != "auto" or member == names[-1]:
                raise
            # auto: a transport this host cannot run (no /dev/shm, no RDMA device, ...); peers
            # route around it
            skipped[member] = str(exc)
    optional = names[:-1] if name == "auto" else ()
    return RouterTransport(info.rank, info.size, members, host, optional=optional,
                           skipped=skipped,
                           network=lambda: importlib.import_module(FACTORIES["tcp"]).create(info))
