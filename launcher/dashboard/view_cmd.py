"""``minimpi view TRACE.json``: the dashboard's page over a trace recorded with ``--trace``.

    minimpi run -n 4 --trace ring.json ring.py
    minimpi view ring.json                      # any free port
    minimpi view ring.json --port 8787
    minimpi: dashboard at http://127.0.0.1:8787/?token=...  (Ctrl-C ends it)

The page is the live one with a time slider: each rank's MPI call, the collectives in
progress and each rank's step, the messages sent so far and who was inside a blocking call
waiting for whom, at any moment of the recorded run (:mod:`.replay`). Same security as the
live page: 127.0.0.1 unless ``--bind`` says otherwise, a random token in the URL (403
without it), read-only.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import sys

from . import DEFAULT_BIND, port_number, shown_host


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.usage = "minimpi view TRACE.json [--port PORT] [--bind ADDR]"
    p.add_argument("trace", metavar="TRACE.json",
                   help="a trace written by minimpi run --trace FILE")
    p.add_argument("--port", type=port_number, default=0,
                   help="port to serve the page on (default 0: any free port)")
    p.add_argument("--bind", default=DEFAULT_BIND, metavar="ADDR",
                   help="address to listen on (default 127.0.0.1: this machine only)")


def main(args: argparse.Namespace) -> int:
    from .replay import TraceError, TraceReplay, load
    from .web import DashboardServer, Hub
    try:
        replay = TraceReplay(load(args.trace), title=os.path.basename(args.trace))
    except TraceError as exc:
        print(f"minimpi view: {exc}", file=sys.stderr)
        return 2
    hub = Hub()
    hub.publish(json.dumps(replay.frame(0.0), separators=(",", ":")).encode())
    try:
        server = DashboardServer(args.bind, args.port, secrets.token_urlsafe(24), hub,
                                 meta=replay.meta, frame=replay.frame)
    except OSError as exc:
        print(f"minimpi view: cannot listen on {args.bind} port {args.port}: "
              f"{exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"minimpi: dashboard at {server.url(shown_host(args.bind))}  (replay of "
          f"{args.trace}: {replay.nprocs} ranks, {replay.duration * 1e3:.1f} ms; Ctrl-C ends it)",
          file=sys.stderr, flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        hub.close()
        server.server_close()
    return 0
