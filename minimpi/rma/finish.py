"""Windows that are still live when a rank finalizes: serve them until their other ranks
are done too.

MPI makes ``Win.Free`` collective, so a correct program frees its windows before
``MPI.Finalize``; but mpi4py programs often leave them to finalization, and a rank that
owns a window may reach the end of its program while the other ranks are still in
``Lock``/``Get``/``Unlock`` on it. Such a rank (:func:`finish_windows`, called by the
runtime's finalize) tells every other rank of each live window that no request will come
from it any more (a ``FINISHED`` request, after all its earlier ones on the same wire),
then keeps serving until every other rank of the window told it the same or is gone, and
only then stops serving. Both sides wait for each other's notice, so no notice arrives at a
server that already stopped.

The wait is bounded (``MINIMPI_FINALIZE_WINDOW_WAIT``, :data:`DEFAULT_WAIT` s by default):
a peer that never finishes - computing forever, or blocked elsewhere - makes the rank stop
serving with a message naming the window and the ranks, instead of hanging. While it waits
the rank is inside an MPI call, so the launcher's deadlock detection sees the wait (``MPI
finalize on window 'w' ... waiting for ranks 1, 3``) when every other rank is blocked too.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Tuple

from ..errors import MPITimeoutError
from ..p2p.observe import Activity
from .am import REQUEST_TAG, Server

#: how long a finalizing rank serves its live windows, at most, for their other ranks to
#: finish (seconds)
DEFAULT_WAIT = 60.0
ENV_WAIT = "MINIMPI_FINALIZE_WINDOW_WAIT"


def finish_wait(env: Mapping[str, str]) -> float:
    """Seconds :func:`finish_windows` serves at most: ``MINIMPI_FINALIZE_WINDOW_WAIT``."""
    try:
        return max(0.0, float(env.get(ENV_WAIT, "") or DEFAULT_WAIT))
    except ValueError:
        return DEFAULT_WAIT


def servers(engine: Any) -> List[Server]:
    """The request servers of this rank's windows that were not freed."""
    return [op for op in engine.active if isinstance(op, Server)]


def serving_receives(engine: Any) -> List[Any]:
    """The receives the window servers keep posted: not a user's communication (a rank
    whose only posted receives are these finished its program outside any call)."""
    return [req for server in servers(engine) for req in server.receives()]


def lock_reports(engine: Any) -> List[Dict[str, Any]]:
    """Who holds and who waits for the lock of each of this rank's windows where either is
    anybody (:meth:`Server.lock_report`), for the deadlock report."""
    return [report for server in servers(engine) for report in (server.lock_report(),)
            if report is not None]


def stop_serving(engine: Any) -> None:
    """Stop every window server now (a rank that is failing, or done waiting)."""
    for server in servers(engine):
        server.close()


class _PeerWait:
    """Stands in for a request in 'what am I blocked on' reports: the finished notice of
    one rank of one window."""

    done = False

    def __init__(self, server: Server, peer: int, comm: str) -> None:
        self.world = int(server.endpoint.group[peer])
        self.description = ("MPI finalize (window not freed)", "source", peer, REQUEST_TAG,
                            comm)


class _Finishing(Activity):
    __slots__ = ("waiting",)

    def __init__(self, waiting: Callable[[], List[Tuple[Server, List[int]]]]) -> None:
        self.waiting = waiting

    def describe(self) -> dict:
        pending = self.waiting()
        if not pending:
            return {}
        server, peers = pending[0]
        name, comm = server.names()
        group = server.endpoint.group
        return {"call": "MPI finalize (serving the window, not freed)", "win": name,
                "comm": comm, "label": server.target.label, "epoch": "passive target",
                "collective": False, "group": [int(w) for w in group],
                "peers": [int(group[p]) for p in peers]}


def finish_windows(engine: Any, wait: float, warn: Callable[[str], None]) -> None:
    """Serve every live window of this rank until each of its other ranks has finished or
    is gone, at most ``wait`` seconds; then stop serving. ``warn(text)`` tells which
    windows were still waited for when the time ran out."""
    live = servers(engine)
    if not live:
        return
    for server in live:
        left_open = server.open_epochs()
        if left_open:
            name, comm = server.names()
            warn(f"window {name!r} ({comm}) reaches finalize with {', '.join(left_open)} "
                 f"still open (Unlock, Unlock_all, Complete or Wait missing); the targets "
                 f"apply what it sent, then give its locks back")
        server.target.locks.forget(server.endpoint.rank)    # (its lock on itself, if any)
        server.announce_finished()

    def waiting() -> List[Tuple[Server, List[int]]]:
        return [(s, peers) for s in live for peers in (s.unfinished(),) if peers]

    try:
        if waiting():
            waits: Dict[Tuple[int, int], _PeerWait] = {}
            for server, peers in waiting():
                for peer in peers:
                    waits[id(server), peer] = _PeerWait(server, peer, server.names()[1])

            def done() -> bool:
                still = waiting()
                left = {(id(s), p) for s, peers in still for p in peers}
                for key, item in waits.items():
                    item.done = key not in left
                return not still

            engine.activities.push(_Finishing(waiting))
            try:
                engine.wait_until(done, list(waits.values()), timeout=wait)
            except MPITimeoutError:
                for server, peers in waiting():
                    name, comm = server.names()
                    who = ", ".join(str(server.endpoint.group[p]) for p in peers)
                    warn(f"window {name!r} ({comm}) was not freed, and after {wait:g} s "
                         f"rank{'s' if len(peers) > 1 else ''} {who} of it had still not "
                         f"finished; this rank stops serving it, so their one-sided calls "
                         f"to it fail (free windows with Win.Free before the end, or set "
                         f"{ENV_WAIT} to wait longer)")
            finally:
                engine.activities.pop()
    finally:
        for server in live:
            server.close()
