"""The names by which the launcher turns on a job's observers - the live view's sampler
(:mod:`minimpi.runtime.dashboard`), ``--trace`` and ``--stats`` (:mod:`minimpi.runtime.trace`)
- in the ranks' environment. Names only: the launcher imports this module without the
communicator layer or numpy (``minimpi run`` starts faster for it)."""
from __future__ import annotations

#: set (to "1") in a rank's environment when the job's live view is on
ENV_LIVE = "MINIMPI_LIVE"
#: seconds between two snapshots of a rank, as the launcher asks for them
ENV_LIVE_INTERVAL = "MINIMPI_LIVE_INTERVAL"
#: seconds between two snapshots of a rank (the page needs at least two a second)
DEFAULT_INTERVAL = 0.25
#: the trace file ``--trace FILE`` writes, and ``--stats``
ENV_TRACE = "MINIMPI_TRACE"
ENV_STATS = "MINIMPI_STATS"
#: the directory the ranks' trace and statistics files are collected in
ENV_DIR = "MINIMPI_OBSERVE_DIR"
