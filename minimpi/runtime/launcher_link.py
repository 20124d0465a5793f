"""The runtime's side of dynamic processes (:class:`minimpi.dynamic.link.LauncherLink`).

It knows what ``minimpi.dynamic`` cannot reach from its layer: the coordinator connection
(requests to the launcher), the transport (an address other jobs can reach, and their
processes as peers), and what the launcher said in the environment: the job number
(``MINIMPI_JOBNO``), the universe size (``MINIMPI_UNIVERSE_SIZE``) and, in a process that
``Spawn`` started, its parents and its command's index in the spawn (``MINIMPI_PARENT``,
JSON: ``MPI.APPNUM``).

A singleton (plain ``python``: no coordinator) starts its own launcher at its first request
(:meth:`RuntimeLauncherLink.attach_launcher`, ``launcher/singleton.py``) and registers with
it as rank 0; from then on it is a rank like those under ``minimpi run -n 1``.
"""
from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Sequence

from .. import transports
from ..dynamic.link import LauncherLink
from ..errors import MinimpiError
from ..p2p.engine import Engine
from ..transports.tcp import UID_SHIFT, job_number_of
from . import failures
from .bootstrap import (
    ENV_PARENT,
    ENV_UNIVERSE_SIZE,
    BootInfo,
    CoordinatorClient,
    host_identity,
)

#: how long a request may wait for the launcher beyond the start-up timeout (a spawn's
#: processes have that long to join; the launcher answers, with an error if need be, by then)
REPLY_MARGIN = 30.0
#: how long a singleton waits for the launcher it starts to say where its coordinator is
SINGLETON_START_TIMEOUT = 60.0
#: the launcher a singleton starts at its first request (launcher/singleton.py)
SINGLETON_LAUNCHER = "minimpi.launcher.singleton"



def universe_size_of(info: BootInfo) -> int:
    """``MPI.UNIVERSE_SIZE`` of this job: what the launcher says (``--universe-size``), else
    the world's size."""
    try:
        return int(info.env.get(ENV_UNIVERSE_SIZE) or info.size)
    except ValueError:
        return info.size

class RuntimeLauncherLink(LauncherLink):
    """A process's link to its launcher: see the module docstring."""

    def __init__(self, info: BootInfo, engine: Engine) -> None:
        self.info = info
        self.engine = engine
        self.rank = info.rank
        self.job_number = job_number_of(info.env)
        self.universe_size = universe_size_of(info)
        parent = info.env.get(ENV_PARENT)
        self.parent: Optional[dict] = json.loads(parent) if parent else None
        self._known: set = set()
        self._attach_lock = threading.Lock()
        #: the launcher this process started as a singleton (None: none, or not a singleton)
        self.launcher: Optional[subprocess.Popen] = None

    def _router(self) -> Any:
        """The transport, made now for a world of one (which needed none so far)."""
        if self.engine.transport is None:
            if self.info.coordinator is None:
                # a singleton: its launcher first, for the job secret other processes prove
                self.attach_launcher("dynamic processes")
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
        kind = message.get("t")
        client = self.info.coordinator
        if client is None:
            client = self.attach_launcher(kind)
        elif self.launcher is not None and self.launcher.poll() is not None:
            raise MinimpiError(f"rank {self.info.rank}: {kind}: the launcher this singleton "
                               f"started (pid {self.launcher.pid}) has ended (code "
                               f"{self.launcher.returncode}); no processes can be started")
        if timeout is None:
            timeout = client.startup_timeout + REPLY_MARGIN
        reply = client.request(message, timeout)
        if reply is None:
            raise MinimpiError(f"rank {self.info.rank}: {kind}: no answer from the launcher "
                               f"within {timeout:g} s")
        return reply

    def attach_launcher(self, kind: Any) -> CoordinatorClient:
        """A singleton's first request: start its launcher (``python -m
        minimpi.launcher.singleton``: a job of size 1 whose rank 0 is this process) and
        register with its coordinator as rank 0, as a rank under ``minimpi run`` does. The
        job's secret comes over a pipe only this process and the launcher hold. Afterwards
        requests go there as any rank's do. Cost: one interpreter start (about 0.2 s) and
        one registration, once per process."""
        with self._attach_lock:
            if self.info.coordinator is not None:
                return self.info.coordinator
            what = f"rank {self.info.rank}: {kind}: starting the launcher of this singleton"
            read_end, write_end = os.pipe()
            try:
                try:
                    launcher = subprocess.Popen(
                        [sys.executable, "-m", SINGLETON_LAUNCHER, str(os.getpid()),
                         str(write_end)],
                        stdin=subprocess.DEVNULL, pass_fds=(write_end,), close_fds=True,
                        start_new_session=True)
                except OSError as exc:
                    raise MinimpiError(f"{what}: {exc}") from None
                os.close(write_end)
                write_end = -1
                reply = _read_line(read_end, SINGLETON_START_TIMEOUT)
            finally:
                os.close(read_end)
                if write_end >= 0:
                    os.close(write_end)
            if reply is None:
                code = launcher.poll()
                if code is None:
                    launcher.kill()
                    launcher.wait()
                raise MinimpiError(
                    f"{what}: it " + (f"ended with code {code}" if code is not None else
                                      f"did not answer within {SINGLETON_START_TIMEOUT:g} s")
                    + f" (`{sys.executable} -m {SINGLETON_LAUNCHER}`); or run the program "
                    f"as `minimpi run -n 1 python ...`")
            secret = bytes.fromhex(reply["secret"])
            client = CoordinatorClient(str(reply["coord"]), secret, self.info.rank,
                                       self.info.size, str(reply["job_id"]))
            client.heartbeat_interval = float(reply.get("heartbeat") or 0.0)
            client.startup_timeout = float(reply.get("startup_timeout") or 60.0)
            try:
                client.exchange_addresses("none")   # registers; the table is this one rank
            except BaseException:
                client.close()
                launcher.kill()     # a next request starts afresh
                launcher.wait()
                raise
            self.launcher = launcher
            self.info.secret = secret   # what the data plane proves to spawned processes
            self.info.coordinator = client
            # the launcher tells which spawned processes are gone (a failure ends them all,
            # the singleton goes on): its calls with them then raise PeerLostError, also
            # with a process that never connected to it (no closed connection to see)
            failures.listen(self.engine, client)
            return client


def _read_line(fd: int, timeout: float) -> Optional[dict]:
    """One JSON line from the pipe ``fd`` within ``timeout`` seconds (None: the writer
    ended or said nothing). Cost: a few reads of one pipe."""
    data = b""
    deadline = time.monotonic() + timeout
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 4096)
        if not chunk:
            return None
        data += chunk
    try:
        reply = json.loads(data)
    except ValueError:
        return None
    return reply if isinstance(reply, dict) and "coord" in reply else None
