"""Ports and names: ``Open_port``, ``Accept``/``Connect``, ``Publish_name``/``Lookup_name``,
and ``Comm.Join``.

The job's launcher is the meeting point (``launcher/dynamic.py``): it hands out port names,
keeps the published names, and pairs an ``Accept`` with a ``Connect`` on the same port,
telling the connecting side where the accepting root is and both sides a tag for their
leaders' exchange; the two groups then join as a spawn's do (:func:`.join.join`, the
``Connect`` side calling, the ``Accept`` side answering). Every process the launcher started,
spawned or not, can use the ports and names of that launcher.

``Comm.Join(fd)`` needs no launcher: the two processes swap what they need (universe id,
address, host, free context) over the connected socket itself.
"""
from __future__ import annotations

import json
import socket
from typing import Any, Optional

from ..comm.collectives.common import check_root
from ..comm.communicator import Intercomm, Intracomm
from ..comm.intercomm import CONTEXTS
from ..data.cint import as_int
from ..errors import ArgumentError, PortError, ServiceNameError
from .join import Bridge, join
from .link import launcher_link, peer_of

#: how the launcher's refusals map to error classes
_ERRORS = {"port": PortError, "name": ServiceNameError}


def _ask(call: str, message: dict, timeout: Optional[float] = None) -> dict:
    """A request to the launcher; its refusal raised as the error class it names."""
    link = launcher_link(call)
    reply = link.request(message, timeout)
    if not reply.get("ok"):
        error = _ERRORS.get(reply.get("kind"), ArgumentError)
        raise error(f"{call}: {reply.get('error') or 'refused by the launcher'}")
    return reply


def _name(value: Any, what: str, call: str) -> str:
    if not isinstance(value, str) or not value:
        raise ArgumentError(f"{call}: {what} must be a non-empty str, got {value!r:.60}")
    return value


def open_port(info: Any = None) -> str:
    """``MPI.Open_port``: a new port name that ``Accept`` and ``Connect`` meet on."""
    return str(_ask("MPI.Open_port", {"t": "port", "op": "open"})["port"])


def close_port(port_name: str) -> None:
    """``MPI.Close_port``: the port can no longer be accepted on."""
    call = "MPI.Close_port"
    _ask(call, {"t": "port", "op": "close", "port": _name(port_name, "port_name", call)})


def publish_name(service_name: str, port_name: str, info: Any = None) -> None:
    """``MPI.Publish_name``: make ``port_name`` findable as ``service_name``."""
    call = "MPI.Publish_name"
    _ask(call, {"t": "publish", "service": _name(service_name, "service_name", call),
                "port": _name(port_name, "port_name", call)})


def unpublish_name(service_name: str, port_name: str, info: Any = None) -> None:
    """``MPI.Unpublish_name``."""
    call = "MPI.Unpublish_name"
    _ask(call, {"t": "unpublish", "service": _name(service_name, "service_name", call),
                "port": _name(port_name, "port_name", call)})


def lookup_name(service_name: str, info: Any = None) -> str:
    """``MPI.Lookup_name``: the port published as ``service_name``."""
    call = "MPI.Lookup_name"
    reply = _ask(call, {"t": "lookup", "service": _name(service_name, "service_name", call)})
    return str(reply["port"])


def _check_root(comm: Intracomm, root: Any, call: str) -> int:
    comm._alive(call)
    return check_root(comm, root, call)


def accept(comm: Intracomm, port_name: Any, info: Any, root: Any) -> Intercomm:
    """``Intracomm.Accept``: wait for the group that connects to ``port_name`` (the root's)."""
    call = "Intracomm.Accept"
    root = _check_root(comm, root, call)
    link = launcher_link(call)

    def swap(value: dict) -> dict:
        port = _name(port_name, "port_name", call)
        reply = _ask(call, {"t": "port", "op": "accept", "port": port,
                            "entry": value["peers"][root]}, timeout=float("inf"))
        return Bridge(link, comm._ep.engine, int(reply["tag"]), None, call)(value)

    return join(comm, root, swap, call, link)[0]


def connect(comm: Intracomm, port_name: Any, info: Any, root: Any) -> Intercomm:
    """``Intracomm.Connect``: join the group that accepts on ``port_name`` (the root's)."""
    call = "Intracomm.Connect"
    root = _check_root(comm, root, call)
    link = launcher_link(call)

    def swap(value: dict) -> dict:
        port = _name(port_name, "port_name", call)
        reply = _ask(call, {"t": "port", "op": "connect", "port": port}, timeout=float("inf"))
        accepter = reply["accepter"]
        link.add_peers([accepter])
        return Bridge(link, comm._ep.engine, int(reply["tag"]), int(accepter[0]), call)(value)

    return join(comm, root, swap, call, link)[0]


def comm_join(fd: Any) -> Intercomm:
    """``Comm.Join``: the intercommunicator between this process and the one at the other
    end of the connected socket ``fd`` (each side's COMM_SELF)."""
    call = "Comm.Join"
    link = launcher_link(call)
    try:
        fd = as_int(fd)
    except (TypeError, ValueError, OverflowError):
        raise ArgumentError(f"{call}(fd={fd!r}): expected a socket's file descriptor") from None
    engine = link.engine
    mine = {"entry": link.entry(), "max": engine.free_context()}
    sock = socket.socket(fileno=fd)
    try:
        sock.sendall(json.dumps(mine).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(4096)
            if not chunk:
                raise ArgumentError(f"{call}: the other end closed the socket before it "
                                    f"joined (does it call Comm.Join too?)")
            data += chunk
    finally:
        sock.detach()    # the caller still owns (and closes) the descriptor
    theirs = json.loads(data)
    link.add_peers([theirs["entry"]])
    context = max(mine["max"], int(theirs["max"]))
    engine.claim_contexts(context, CONTEXTS)
    return Intercomm._build(engine, [link.rank], [peer_of(link, int(theirs["entry"][0]))], 0,
                            context, "COMM_SELF.join")
