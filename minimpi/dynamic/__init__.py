"""Communicators between process groups: intercommunicators and dynamic processes.

Importing this package installs, in the layer below (``minimpi.comm`` cannot import this
one), the dynamic-process calls (``Spawn``, ``Spawn_multiple``, ``Get_parent``,
``Accept``...; :mod:`.spawn`, :mod:`.ports`) through ``set_dynamic_calls``. Intercommunicators
themselves are ``minimpi.comm``'s (:class:`minimpi.comm.communicator.Intercomm`).
``minimpi.MPI`` imports it; the runtime installs the link to the launcher (:mod:`.link`).
"""
from __future__ import annotations

from ..comm.communicator import Intercomm
from ..comm.management import set_dynamic_calls
from .link import LauncherLink, set_launcher_link
from .ports import (
    accept,
    close_port,
    comm_join,
    connect,
    lookup_name,
    open_port,
    publish_name,
    unpublish_name,
)
from .spawn import get_parent, join_parent, spawn_call, spawn_multiple_call

set_dynamic_calls(spawn=spawn_call, spawn_multiple=spawn_multiple_call, get_parent=get_parent,
                  accept=accept, connect=connect, join=comm_join)

__all__ = ["Intercomm", "LauncherLink", "set_launcher_link",
           "join_parent", "get_parent", "open_port", "close_port", "publish_name",
           "unpublish_name", "lookup_name"]
