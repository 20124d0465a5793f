"""Collective methods of ``Intracomm``: one mixin per collective module, composed here."""
from __future__ import annotations

from .allreduce import AllreduceMethods
from .barrier import BarrierMethods
from .bcast import BcastMethods
from .gather import GatherMethods
from .reduce import ReduceMethods
from .scan import ScanMethods
from .scatter import ScatterMethods


class CollectiveMethods(BcastMethods, ScatterMethods, GatherMethods, ReduceMethods, ScanMethods,
                        BarrierMethods, AllreduceMethods):
    """Mixin giving communicators their collective operations."""
