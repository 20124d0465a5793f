"""What the dynamic-process calls need from the runtime above them, and the universe ids.

``Spawn``, ports and names talk to the job's launcher through the rank's coordinator
connection, and reach processes of other jobs over the transport; both belong to the runtime
(``minimpi/runtime``), which sits above this layer. The runtime therefore installs a
:class:`LauncherLink` here when it starts (:func:`set_launcher_link`); without one (a world
built on threads, ``run_threads``) the calls refuse clearly.

**Universe ids.** Every process a launcher starts has one: ``(job number + 1) << 20 | world
rank``, where job 0 is the job ``minimpi run`` started and jobs 1, 2, ... are those ``Spawn``
started. Inside a process, a peer of its own job is known by its world rank (so nothing
changes for one job), a peer of another job by its universe id (never below ``1 << 20``);
the TCP transport's handshake carries the universe id and makes the same translation
(``minimpi.transports.tcp.UID_SHIFT``).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from ..errors import UnsupportedError
from ..transports.tcp import UID_RANK_MASK, UID_SHIFT


class LauncherLink:
    """The runtime's side of dynamic processes (:mod:`minimpi.runtime.launcher_link`)."""

    #: which job of its launcher this process belongs to (0: the one ``minimpi run`` started)
    job_number: int = 0
    #: this process's engine and world rank
    engine: Any = None
    rank: int = 0
    #: ``MPI.UNIVERSE_SIZE``: how many processes the launcher's universe holds
    universe_size: int = 1
    #: for a process that ``Spawn`` started: its parents' entries, the parent leader's index
    #: in them and the spawn's appnum (``{"peers": [...], "leader": i, "appnum": a}``)
    parent: Optional[dict] = None

    def entry(self) -> List[Any]:
        """``[universe id, address, host identity]`` of this process, for processes of
        other jobs to reach it (opens a network listener if this process has none)."""
        raise NotImplementedError

    def request(self, message: Dict[str, Any], timeout: float) -> Dict[str, Any]:
        """Send ``message`` to the launcher and return its reply (raises if there is no
        launcher to ask or no reply came)."""
        raise NotImplementedError

    def add_peers(self, entries: Sequence[Sequence[Any]]) -> None:
        """Make the processes of other jobs in ``entries`` reachable from this process."""
        raise NotImplementedError


_LINK: Dict[str, Optional[LauncherLink]] = {"link": None}


def set_launcher_link(link: Optional[LauncherLink]) -> None:
    """Install the runtime's link (the runtime calls this once the world is built)."""
    _LINK["link"] = link


def launcher_link(call: str) -> LauncherLink:
    """The installed link, or an ``UnsupportedError`` naming ``call``."""
    link = _LINK["link"]
    if link is None:
        raise UnsupportedError(f"{call}: dynamic processes need a process started by "
                               f"`minimpi run` (this world has no launcher to start or find "
                               f"other processes)")
    return link


def uid_of(link: LauncherLink, peer: int) -> int:
    """The universe id of the peer this process knows as ``peer``."""
    return peer if peer >> UID_SHIFT else ((link.job_number + 1) << UID_SHIFT) | peer


def peer_of(link: LauncherLink, uid: int) -> int:
    """The peer id this process knows universe id ``uid`` by."""
    return uid & UID_RANK_MASK if uid >> UID_SHIFT == link.job_number + 1 else uid


def describe_uid(uid: int) -> str:
    """``job 1, rank 2`` (for messages)."""
    return f"job {(uid >> UID_SHIFT) - 1}, rank {uid & UID_RANK_MASK}"
