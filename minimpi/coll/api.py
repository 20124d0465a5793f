"""Collective methods of ``Intracomm``: one mixin per collective module, composed here."""
from __future__ import annotations

from .bcast import BcastMethods


class CollectiveMethods(BcastMethods):
    """Mixin giving communicators their collective operations."""
