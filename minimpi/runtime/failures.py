"""Failed processes under ``minimpi run --fault-tolerant`` (ULFM, :mod:`minimpi.comm.ulfm`).

With the flag the launcher does not end the job when a rank dies: it sends every survivor a
``proc_failed`` notice (the world rank and how it ended) through the coordinator. A small
daemon thread of each rank reads the coordinator's socket every :data:`NOTICE_INTERVAL`
seconds and hands each notice to the engine (:meth:`~minimpi.p2p.engine.Engine.notify_failed`,
safe from any thread), whose own thread applies it at its next progress: operations that need
the failed rank then raise ``MPI.ERR_PROC_FAILED``. A transport that sees the peer go first
(a closed connection, an exited process) tells the engine directly; whichever comes first
counts, once.
"""
from __future__ import annotations

import threading
from typing import Any, Mapping

from ..p2p.engine import Engine
from ..transports.signal_guard import start_thread_blocked
from .bootstrap import ENV_FAULT_TOLERANT

#: how often the notice reader looks at the coordinator's socket (seconds)
NOTICE_INTERVAL = 0.1


def fault_tolerant(env: Mapping[str, str]) -> bool:
    """Whether the launcher ran this job with ``--fault-tolerant``."""
    return env.get(ENV_FAULT_TOLERANT, "") not in ("", "0")


def listen(engine: Engine, client: Any) -> threading.Thread:
    """Hand the launcher's failure notices to ``engine``; returns the reading thread (it
    ends when the coordinator connection is closed)."""
    def notice(msg: dict) -> None:
        try:
            engine.notify_failed(int(msg["rank"]), str(msg.get("why") or "it failed"))
        except (KeyError, TypeError, ValueError):
            pass   # a malformed notice is no failure

    client.on_message("proc_failed", notice)
    stop = client.closed_event

    def main() -> None:
        while not stop.wait(NOTICE_INTERVAL):
            client.read_notices()

    thread = threading.Thread(target=main, name="minimpi-failure-notices", daemon=True)
    start_thread_blocked(thread)
    return thread
