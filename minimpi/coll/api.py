"""Collective methods of ``Intracomm``: one mixin per collective module, composed here."""
from __future__ import annotations

from .barrier import BarrierMethods
from .bcast import BcastMethods
from .gather import GatherMethods
from .reduce import ReduceMethods
from .scan import ScanMethods
from .scatter import ScatterMethods


class CollectiveMethods(BcastMethods, ScatterMethods, GatherMethods, ReduceMethods, ScanMethods,
                        BarrierMethods):
    """Mixin giving communicators their collective operations."""
