"""Communicators between process groups: intercommunicators (:mod:`.intercomm`).

Importing this package installs :func:`~minimpi.dynamic.intercomm.create_intercomm` as the
builder behind ``Intracomm.Create_intercomm`` (``minimpi.comm`` cannot import this layer,
which sits above it); ``minimpi.MPI`` imports it.
"""
from __future__ import annotations

from ..comm.communicator import set_intercomm_builder
from .intercomm import Intercomm, create_intercomm

set_intercomm_builder(create_intercomm, Intercomm)

__all__ = ["Intercomm", "create_intercomm"]
