"""``Spawn``, ``Spawn_multiple`` and ``Get_parent``: new processes started by the job's launcher.

The spawning communicator's root asks the launcher (through its coordinator connection:
``{"t": "spawn", "apps": [...], "parents": [...]}``); the launcher (``launcher/dynamic.py``)
starts the processes as a job of their own, with their own ``COMM_WORLD`` and the parents'
addresses, and answers once every one of them has joined its world, or with the reason it
could not (no such command, a process that ended first, a universe too small). At start-up
the new job's processes join the parents (:func:`join_parent`, called by the runtime) while
the parents join them (:func:`spawn`): :func:`minimpi.dynamic.join.join` on both sides.
"""
from __future__ import annotations

import os
from typing import Any, List, Optional, Sequence

from ..comm.collectives.common import check_root
from ..comm.communicator import Intercomm, Intracomm
from ..data.cint import as_int
from ..errors import SpawnError, UnsupportedError
from .join import Bridge, join
from .link import LauncherLink, launcher_link

#: the intercommunicator to the parents, in a process that Spawn started
_PARENT: dict = {"comm": None}


def _info_dict(info: Any, call: str) -> dict:
    """The keys of ``info`` that Spawn reads (``wdir``, ``path``, ``host``), as a dict."""
    if info is None:
        return {}
    if isinstance(info, dict):
        items = info
    elif hasattr(info, "Get"):
        items = {k: info.Get(k) for k in ("wdir", "path", "host")} if info else {}
    else:
        raise TypeError(f"{call}: info must be an MPI.Info (or INFO_NULL), got "
                        f"{type(info).__name__}")
    return {k: str(v) for k, v in items.items() if k in ("wdir", "path", "host") and v is not None}


def _app(command: Any, args: Any, maxprocs: Any, info: Any, call: str) -> dict:
    """One application of a spawn request, checked as mpi4py checks it."""
    if not isinstance(command, (str, bytes, os.PathLike)):
        raise ValueError(f"{call}: command must be a str or a path, got {type(command).__name__}")
    command = os.fsdecode(command)
    if args is None:
        args = []
    elif isinstance(args, (str, bytes, os.PathLike)):
        raise ValueError(f"{call}: args must be a sequence of strings, not one string "
                         f"({args!r:.60})")
    args = [os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a) for a in args]
    try:
        count = as_int(maxprocs)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{call}: maxprocs must be an int, got {maxprocs!r:.60}") from None
    if count < 1:
        raise ValueError(f"{call}: maxprocs={count}: expected at least 1 process")
    return {"cmd": command, "args": args, "maxprocs": count, "info": _info_dict(info, call)}


def _apps_multiple(command: Any, args: Any, maxprocs: Any, info: Any, call: str) -> List[dict]:
    """The applications of ``Spawn_multiple`` (sequences of equal length; ``maxprocs`` and
    ``info`` may be one value for all)."""
    if isinstance(command, (str, bytes, os.PathLike)) or not isinstance(command, Sequence):
        raise ValueError(f"{call}: command must be a sequence of commands, got "
                         f"{type(command).__name__}")
    n = len(command)

    def each(value: Any, what: str, default: Any) -> list:
        if value is None:
            return [default] * n
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            if what == "args":
                raise ValueError(f"{call}: args must be a sequence of {n} argument lists")
            return [value] * n
        if len(value) != n:
            raise ValueError(f"{call}: {n} commands but {len(value)} {what}")
        return list(value)

    return [_app(c, a, m, i, call) for c, a, m, i in
            zip(command, each(args, "args", None), each(maxprocs, "maxprocs", 1),
                each(info, "info", None))]


def spawn(comm: Intracomm, apps_of_root: Any, root: Any, errcodes: Optional[list],
          call: str, multiple: bool) -> Intercomm:
    """The spawn collective over ``comm`` (``apps_of_root``: a function that parses the
    root's arguments, run at the root only)."""
    comm._alive(call)
    link = launcher_link(call)
    root = check_root(comm, root, call)

    def swap(value: dict) -> dict:
        apps = apps_of_root()
        shown = " ".join([apps[0]["cmd"], *apps[0]["args"]])
        try:
            reply = link.request({"t": "spawn", "apps": apps, "parents": value["peers"],
                                  "leader": root}, timeout=None)
        except UnsupportedError as exc:
            raise UnsupportedError(f"{call}(`{shown}`): {exc}") from None
        if not reply.get("ok"):
            error = UnsupportedError if reply.get("kind") == "unsupported" else SpawnError
            raise error(f"rank {comm.rank}: {call}(`{shown}`): {reply.get('error') or 'refused'}")
        theirs = Bridge(link, comm._ep.engine, int(reply["job"]), None, call)(value)
        theirs["extra"] = [a["maxprocs"] for a in apps]
        return theirs

    inter, counts = join(comm, root, swap, call, link)
    if errcodes is not None:
        codes = [[0] * c for c in counts]     # MPI.SUCCESS for every process started
        errcodes[:] = codes if multiple else codes[0]
    return inter


def join_parent(world: Intracomm, link: LauncherLink) -> Intercomm:
    """At start-up of a process that ``Spawn`` started: join the parents (collective over
    this job's ``COMM_WORLD``)."""
    parent = link.parent
    peers = parent["peers"]
    link.add_peers(peers)
    leader_uid = peers[int(parent["leader"])][0]
    bridge = Bridge(link, world._ep.engine, link.job_number, leader_uid, "Spawn (child side)")
    comm, _ = join(world, 0, bridge, "Spawn", link)
    comm._ep.name = comm._local_endpoint.name = "parent"
    _PARENT["comm"] = comm
    return comm


def get_parent() -> Intercomm:
    """``Comm.Get_parent``: the intercommunicator to the parents (a null one where this
    process was not spawned, or after it was disconnected)."""
    comm = _PARENT["comm"]
    return comm if comm is not None else Intercomm()


def spawn_call(comm: Intracomm, command: Any, args: Any, maxprocs: Any, info: Any, root: Any,
               errcodes: Optional[list]) -> Intercomm:
    """``Intracomm.Spawn``."""
    call = "Intracomm.Spawn"
    return spawn(comm, lambda: [_app(command, args, maxprocs, info, call)], root, errcodes,
                 call, multiple=False)


def spawn_multiple_call(comm: Intracomm, command: Any, args: Any, maxprocs: Any, info: Any,
                        root: Any, errcodes: Optional[list]) -> Intercomm:
    """``Intracomm.Spawn_multiple``."""
    call = "Intracomm.Spawn_multiple"
    return spawn(comm, lambda: _apps_multiple(command, args, maxprocs, info, call), root,
                 errcodes, call, multiple=True)
