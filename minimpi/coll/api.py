"""Collective methods of ``Intracomm`` (filled in by the collectives modules)."""
from __future__ import annotations


class CollectiveMethods:
    """Mixin giving communicators their collective operations."""
