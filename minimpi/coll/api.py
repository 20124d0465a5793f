"""Collective methods of ``Intracomm``: one mixin per collective module, composed here."""
from __future__ import annotations

from .allgather import AllgatherMethods
from .allreduce import AllreduceMethods
from .alltoall import AlltoallMethods
from .barrier import BarrierMethods
from .bcast import BcastMethods
from .gather import GatherMethods
from .reduce import ReduceMethods
from .reduce_scatter import ReduceScatterMethods
from .scan import ScanMethods
from .scatter import ScatterMethods


class CollectiveMethods(BcastMethods, ScatterMethods, GatherMethods, ReduceMethods, ScanMethods,
                        BarrierMethods, AllreduceMethods, AllgatherMethods, ReduceScatterMethods,
                        AlltoallMethods):
    """Mixin giving communicators their collective operations."""
