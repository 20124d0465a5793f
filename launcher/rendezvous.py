"""The coordinator of a job started without ``minimpi run`` (srun, environment rendezvous).

Rank 0 starts it next to itself (``minimpi/runtime/sources.py:host_coordinator``):

    python -m minimpi.launcher.rendezvous        # settings: one JSON line on stdin

It binds the port every rank agreed on beforehand (derived from Slurm's ids, or given by
``MINIMPI_COORDINATOR``/``MASTER_PORT``), answers ``ready`` or ``error <why>`` on stdout, then
serves the coordinator protocol (``launcher/coordinator.py``): the address table, startup
diagnostics, abort acknowledgements, state reports. There is no launcher here to end the
other ranks; a failing rank's peers notice its closed connections (and ``srun -K`` ends the
whole step). The process ends when its stdin reaches EOF, that is, when rank 0 exits,
however it exits: it never outlives the rank that started it.
"""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Optional

import zmq

from .coordinator import Coordinator


def _log(text: str) -> None:
    try:
        os.write(2, text.encode("utf-8", "replace") + b"\n")
    except OSError:
        pass


def serve(config: dict, stdin_fd: int) -> int:
    try:
        coord = Coordinator(int(config["size"]), bytes.fromhex(config["secret"]),
                            str(config["job_id"]), host=config.get("host", "0.0.0.0"),
                            log=_log, port=int(config["port"]))
    except zmq.ZMQError as exc:
        print(f"error port {config.get('port')} cannot be bound: {exc}", flush=True)
        return 1
    print("ready", flush=True)
    startup = float(config.get("startup_timeout", 60.0))
    first_registered: Optional[float] = None
    poller = zmq.Poller()
    poller.register(coord.socket, zmq.POLLIN)
    poller.register(stdin_fd, zmq.POLLIN)
    # connections whose handshake fails: a rank with another secret (said at the timeout)
    monitor = coord.socket.get_monitor_socket(
        zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
        | zmq.EVENT_HANDSHAKE_FAILED_AUTH)
    poller.register(monitor, zmq.POLLIN)
    failed_handshakes = 0
    try:
        while True:
            wait = 3600.0
            if first_registered is not None and not coord.table_sent:
                deadline = first_registered + startup
                if time.monotonic() >= deadline:
                    missing = coord.missing_ranks()
                    text = (f"startup timeout after {startup:g} s: rank(s) "
                            f"{', '.join(map(str, missing))} never registered with the "
                            f"coordinator of job {config['job_id']} ({config.get('origin', '')})")
                    if failed_handshakes:
                        text += (f"; {failed_handshakes} connection attempt(s) failed "
                                 f"authentication: a rank with another secret?")
                    coord.fail_startup(missing, text)
                    _log(f"minimpi: {text}")
                    first_registered = None     # reported once; the ranks exit now
                else:
                    wait = deadline - time.monotonic()
            ready = dict(poller.poll(int(wait * 1000) + 1))
            if stdin_fd in ready:
                try:
                    if not os.read(stdin_fd, 4096):
                        return 0          # rank 0 is gone: so is the job's coordinator
                except OSError:
                    return 0
            if monitor in ready:
                while monitor.poll(0):
                    monitor.recv_multipart()     # (each a failed handshake: the only events
                    failed_handshakes += 1       # asked for)
            if coord.socket in ready:
                for ev in coord.receive():
                    if ev.kind == "registered" and first_registered is None \
                            and not coord.table_sent:
                        first_registered = time.monotonic()
    finally:
        try:
            coord.socket.disable_monitor()
        except zmq.ZMQError:
            pass
        monitor.close(linger=0)
        coord.close()


def main() -> int:
    line = sys.stdin.buffer.readline()
    try:
        config = json.loads(line)
    except ValueError:
        print("error no settings on stdin (this helper is started by rank 0)", flush=True)
        return 2
    return serve(config, sys.stdin.fileno())


if __name__ == "__main__":
    sys.exit(main())
