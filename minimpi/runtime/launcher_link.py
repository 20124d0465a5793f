"""The runtime's side of dynamic processes (:class:`minimpi.dynamic.link.LauncherLink`).

It knows what ``minimpi.dynamic`` cannot reach from its layer: the coordinator connection
(requests to the launcher), the transport (an address other jobs can reach, and their
processes as peers), and what the launcher said in the environment: the job number
(``MINIMPI_JOBNO``), the universe size (``MINIMPI_UNIVERSE_SIZE``) and, in a process that
``Spawn`` started, its parents (``MINIMPI_PARENT``, JSON).
"""
from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Sequence

from .. import transports
from ..dynamic.link import LauncherLink
from ..errors import MinimpiError, UnsupportedError
from ..p2p.engine import Engine
from ..transports.tcp import UID_SHIFT, job_number_of
from .bootstrap import ENV_PARENT, ENV_UNIVERSE_SIZE, BootInfo, host_identity

#: how long a request may wait for the launcher beyond the start-up timeout (a spawn's
#: processes have that long to join; the launcher answers, with an error if need be, by then)
REPLY_MARGIN = 30.0


class RuntimeLauncherLink(LauncherLink):
    """A process's link to its launcher: see the module docstring."""

    def __init__(self, info: BootInfo, engine: Engine) -> None:
        self.info = info
        self.engine = engine
        self.rank = info.rank
        self.job_number = job_number_of(info.env)
        try:
            self.universe_size = int(info.env.get(ENV_UNIVERSE_SIZE) or info.size)
        except ValueError:
            self.universe_size = info.size
        engine.universe_size = self.universe_size
        parent = info.env.get(ENV_PARENT)
        self.parent: Optional[dict] = json.loads(parent) if parent else None
        self._known: set = set()

    def _router(self) -> Any:
        """The transport, made now for a world of one (which needed none so far)."""
        if self.engine.transport is None:
            router = transports.create("tcp", self.info, host_identity())
            address = router.listen()
            router.set_peers([address])
            self.engine.set_transport(router)
        return self.engine.transport

    def entry(self) -> List[Any]:
        router = self._router()
        uid = ((self.job_number + 1) << UID_SHIFT) | self.info.rank
        return [uid, router.foreign_address(), host_identity()]

    def add_peers(self, entries: Sequence[Sequence[Any]]) -> None:
        new = [(int(uid), str(address), str(host)) for uid, address, host in entries
               if int(uid) not in self._known and int(uid) >> UID_SHIFT != self.job_number + 1]
        if not new:
            return
        self._router().add_foreign({uid: address for uid, address, _ in new})
        self.engine.add_foreign_peers({uid: host for uid, _, host in new})
        self._known.update(uid for uid, _, _ in new)

    def request(self, message: Dict[str, Any], timeout: Optional[float] = None) -> Dict[str, Any]:
        client = self.info.coordinator
        kind = message.get("t")
        if client is None:
            raise UnsupportedError(
                f"rank {self.info.rank}: {kind}: this process was started without `minimpi "
                f"run` (a singleton: plain `python`), so no launcher can start or find other "
                f"processes; run it as `minimpi run -n 1 python ...`")
        if timeout is None:
            timeout = client.startup_timeout + REPLY_MARGIN
        reply = client.request(message, timeout)
        if reply is None:
            raise MinimpiError(f"rank {self.info.rank}: {kind}: no answer from the launcher "
                               f"within {timeout:g} s")
        return reply
