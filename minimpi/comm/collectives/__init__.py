"""The mpi4py-facing collective methods of ``Intracomm``: one mixin per collective.

Each module here parses a collective's arguments (buffer specs, ``IN_PLACE``, counts, root,
op), then runs the algorithm the registry chooses from :mod:`minimpi.coll` through
:func:`~minimpi.comm.collectives.common.execute`. The dependency points one way: this layer
imports the algorithms, never the reverse.
"""
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
