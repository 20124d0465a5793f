"""The schedule drawings of the collectives a job is in (what ``minimpi draw`` shows).

For a collective in progress on at most :data:`minimpi.tools.draw.MAX_RANKS` ranks, the page
draws its schedule - one row per rank, one column per step, an arrow per message - and
moves each rank's marker to the step that rank has reached. The schedule is recorded as
``minimpi draw`` records it (:func:`minimpi.tools.draw.record`: the same algorithm run on
threads over the in-process transport), once per (collective, algorithm, ranks, root,
size, hosts), on a worker thread of its own so that the page never waits for it.
"""
from __future__ import annotations

import queue
import threading
from typing import Any, Dict, Optional, Sequence, Tuple

#: drawings recorded at most, then the oldest are forgotten
MAX_CACHED = 64
#: the largest message size a drawing is recorded with (steps seldom depend on more)
MAX_DRAW_BYTES = 1 << 16

Key = Tuple[str, str, int, int, int, Optional[Tuple[Any, ...]]]


def split_call(call: str) -> Tuple[str, str]:
    """``"Allreduce[ring]"`` -> ``("allreduce", "ring")``; no algorithm: ``(name, "")``."""
    base, _, rest = call.partition("[")
    return base.strip().lower(), rest.rstrip("]").strip()


def schedule_doc(schedule: Any) -> Dict[str, Any]:
    """What the page needs of a :class:`minimpi.tools.draw.Schedule`."""
    cols = schedule.rank_columns
    return {
        "steps": schedule.steps,
        "summary": schedule.summary,
        "rank_columns": [list(c) for c in cols],
        # [sender, receiver, sender's column, receiver's column, bytes]
        "messages": [[m.src, m.dst, m.column, cols[m.dst][m.dst_step], m.nbytes]
                     for m in schedule.messages],
        "phases": list(schedule.phases),
    }


class Pictures:
    """Recorded schedules by key; :meth:`get` never waits (None until recorded)."""

    def __init__(self) -> None:
        self._done: Dict[Key, Optional[Dict[str, Any]]] = {}
        self._asked: set = set()
        self._queue: "queue.Queue[Key]" = queue.Queue()
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None

    @staticmethod
    def key(call: str, size: int, root: Optional[int], nbytes: Optional[int],
            hosts: Optional[Sequence[Any]]) -> Optional[Key]:
        """The drawing of collective ``call`` on ``size`` ranks, if ``minimpi draw`` can make
        one (None otherwise)."""
        from minimpi.tools.draw import DRIVERS, MAX_RANKS
        collective, algorithm = split_call(call)
        if collective.startswith("i") and collective[1:] in DRIVERS:
            collective = collective[1:]          # a nonblocking collective: same schedule
        if collective not in DRIVERS or not algorithm or not 1 < size <= MAX_RANKS:
            return None
        unit = 8 * size
        n = unit if not nbytes else max(unit, min(int(nbytes), MAX_DRAW_BYTES) // unit * unit)
        root = root if isinstance(root, int) and 0 <= root < size else 0
        hosts_key = tuple(hosts) if hosts is not None and len(set(hosts)) > 1 else None
        return (collective, algorithm, size, root, n, hosts_key)

    def get(self, key: Key) -> Optional[Dict[str, Any]]:
        with self._lock:
            if key in self._done:
                return self._done[key]
            if key not in self._asked:
                self._asked.add(key)
                self._queue.put(key)
                if self._thread is None:
                    self._thread = threading.Thread(target=self._main, daemon=True,
                                                    name="minimpi-dashboard-draw")
                    self._thread.start()
        return None

    def get_now(self, key: Key) -> Optional[Dict[str, Any]]:
        """The drawing, recorded now if need be (``minimpi view``: a moment is asked for
        by the page, which may wait the fraction of a second that takes)."""
        with self._lock:
            if key in self._done:
                return self._done[key]
        return self._record(key)

    def _record(self, key: Key) -> Optional[Dict[str, Any]]:
        from minimpi.tools.draw import record
        collective, algorithm, size, root, nbytes, hosts = key
        try:
            doc: Optional[Dict[str, Any]] = schedule_doc(
                record(collective, algorithm, size, root, nbytes, timeout=20.0,
                       hosts=list(hosts) if hosts is not None else None))
        except Exception:      # an algorithm draw cannot run this way: no drawing
            doc = None
        with self._lock:
            if len(self._done) >= MAX_CACHED:
                self._done.pop(next(iter(self._done)))
            self._done[key] = doc
        return doc

    def _main(self) -> None:
        while True:
            self._record(self._queue.get())
