"""Communicators between process groups: intercommunicators and dynamic processes.

Importing this package installs, in the layer below (``minimpi.comm`` cannot import this
one): :func:`~minimpi.dynamic.intercomm.create_intercomm` as the builder behind
``Intracomm.Create_intercomm``, and the dynamic-process calls (``Spawn``,
``Spawn_multiple``, ``Get_parent``; :mod:`.spawn`) through ``set_dynamic_calls``.
``minimpi.MPI`` imports it; the runtime installs the link to the launcher (:mod:`.link`).
"""
from __future__ import annotations

from ..comm.communicator import set_intercomm_builder
from ..comm.management import set_dynamic_calls
from .intercomm import Intercomm, create_intercomm
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

set_intercomm_builder(create_intercomm, Intercomm)
set_dynamic_calls(spawn=spawn_call, spawn_multiple=spawn_multiple_call, get_parent=get_parent,
                  accept=accept, connect=connect, join=comm_join)

__all__ = ["Intercomm", "create_intercomm", "LauncherLink", "set_launcher_link",
           "join_parent", "get_parent", "open_port", "close_port", "publish_name",
           "unpublish_name", "lookup_name"]
