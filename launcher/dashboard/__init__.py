"""``minimpi run --dashboard``: a live page of the job; ``minimpi view TRACE``: the same page
over a recorded trace.

    minimpi run -n 8 --dashboard ring.py            # any free port
    minimpi run -n 8 --dashboard=8787 ring.py       # that port
    minimpi: dashboard at http://127.0.0.1:8787/?token=Qx3...

For the life of the job the launcher serves one page (``launcher/dashboard/static``, no CDN)
that shows, updated four times a second over a push channel (Server-Sent Events):

* a row per rank: host, pid, CPU %, memory, the MPI call it is in (call, communicator, peer
  or root, tag, bytes, for how long) and its state: computing, in MPI, blocked, finished,
  exited (with its code);
* who waits for whom (the wait-for graph), a cycle in red, and the deadlock report - as
  soon as every running rank is blocked, and the launcher's own once it declares it;
* a heat map of the messages and bytes each rank sent to each, per communicator;
* the collectives in progress, their algorithm and the step each rank has reached (on up to
  16 ranks the schedule ``minimpi draw`` draws, with every rank's position on it);
* each rank's recent output, the launcher's messages and, at the end, the exit summary.

Where the data comes from: the ranks sample themselves (:mod:`minimpi.runtime.dashboard`)
and send a snapshot four times a second to the launcher's coordinator over a second
authenticated connection; the launcher adds what it knows (blocked states, exits, output,
its summary) in :mod:`.live`, and :mod:`.server` pushes the result to every open page.

Security: the server listens on 127.0.0.1 unless ``--dashboard-bind`` says otherwise, the URL
carries a random token without which every request gets 403, and nothing on the page can
change the job (it only reads). The environment variable ``MINIMPI_DASHBOARD=PORT`` turns
the dashboard on for every ``minimpi run`` (0: any free port).
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import sys
import threading
import time
from typing import Any, Callable, Dict, Optional, TextIO

from minimpi.runtime.observe_env import DEFAULT_INTERVAL, ENV_LIVE, ENV_LIVE_INTERVAL

ENV_DASHBOARD = "MINIMPI_DASHBOARD"
DEFAULT_BIND = "127.0.0.1"
#: how long the page's last document (the exit summary) may take to reach open pages
FINAL_DRAIN_S = 1.0


def port_number(text: str) -> int:
    """A TCP port for ``--dashboard=PORT`` (0: any free one)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number (0-65535, 0: any free "
                                         f"port), got {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number (0-65535), got {port}")
    return port


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("live dashboard")
    default = os.environ.get(ENV_DASHBOARD)
    g.add_argument("--dashboard", nargs="?", const=0, metavar="PORT",
                   type=port_number, default=port_number(default) if default else None,
                   help="serve a live page of the job on http://127.0.0.1:PORT (written as "
                        "--dashboard=PORT; no PORT: any free port) and print its URL, which "
                        "carries a random token; env MINIMPI_DASHBOARD=PORT")
    g.add_argument("--dashboard-bind", default=DEFAULT_BIND, metavar="ADDR",
                   help="address the dashboard listens on (default 127.0.0.1: this machine "
                        "only; 0.0.0.0: every interface - anyone with the URL sees the job)")


def shown_host(bind: str) -> str:
    """The host to put in the printed URL for a server listening on ``bind``."""
    if bind in ("0.0.0.0", "::", ""):
        return socket.gethostname()
    return bind


class LiveDashboard:
    """One job's dashboard: the server, the view of the job and the thread that pushes it."""

    def __init__(self, title: str, nprocs: int, port: int, bind: str = DEFAULT_BIND,
                 interval: float = DEFAULT_INTERVAL) -> None:
        from .live import LiveState
        from .web import DashboardServer, Hub
        self.interval = interval
        self.state = LiveState(title, nprocs, interval)
        self.hub = Hub()
        self.token = secrets.token_urlsafe(24)
        self.server = DashboardServer(bind, port, self.token, self.hub,
                                      meta=lambda: {"mode": "live", "title": title,
                                                    "nprocs": nprocs},
                                      refresh=self.refresh)
        self.url = self.server.url(shown_host(bind))
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._publish_lock = threading.Lock()
        self._published = 0.0
        self.publish()

    def env(self) -> Dict[str, str]:
        """What every rank needs to report (minimpi.runtime.dashboard)."""
        return {ENV_LIVE: "1", ENV_LIVE_INTERVAL: repr(self.interval)}

    def start(self, stream: TextIO = sys.stderr) -> "LiveDashboard":
        self.server.serve_in_thread()
        self._thread = threading.Thread(target=self._main, name="minimpi-dashboard",
                                        daemon=True)
        self._thread.start()
        print(f"minimpi: dashboard at {self.url}", file=stream, flush=True)
        return self

    def attach(self, job: Any) -> None:
        """Called by the job once its coordinator and output forwarder exist."""
        self.state.attach(job)

    def publish(self) -> None:
        """Make the view document now and push it to every open page."""
        with self._publish_lock:
            data = json.dumps(self.state.view(), separators=(",", ":"), default=str).encode()
            self._published = time.monotonic()
            self.hub.publish(data)

    def refresh(self) -> None:
        """Publish unless the latest document is recent (``/state``)."""
        if time.monotonic() - self._published >= self.interval / 2:
            self.publish()

    def _main(self) -> None:
        # a document every interval while a page watches; none while nobody does
        while not self._stop.wait(self.interval):
            if not self.server.streams:
                continue
            try:
                self.publish()
            except Exception as exc:   # the page must never take the job down
                print(f"minimpi: dashboard: {type(exc).__name__}: {exc}", file=sys.stderr)

    def finish(self, code: int) -> None:
        """The job ended with ``code``: push the exit summary, then stop serving."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        self.state.ended(code)
        try:
            self.publish()
        finally:
            self.server.close(drain=FINAL_DRAIN_S)

    def run(self, runner: Callable[[Any], int], spec: Any) -> int:
        """``runner(spec)`` with this dashboard watching; the exit code."""
        spec.env = {**spec.env, **self.env()}
        spec.dashboard = self
        code = 1
        try:
            code = runner(spec)
            return code
        finally:
            self.finish(code)


def start(args: argparse.Namespace, title: str) -> Optional[LiveDashboard]:
    """The dashboard ``minimpi run``'s options ask for, serving and announced (None: none).
    Raises OSError when its port cannot be had."""
    port = getattr(args, "dashboard", None)
    if port is None:
        return None
    return LiveDashboard(title, args.nprocs, port, getattr(args, "dashboard_bind", DEFAULT_BIND)
                         ).start()
