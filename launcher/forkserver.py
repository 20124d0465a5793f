"""The launcher's end of the fork server (``minimpi/_start/forkserver.py`` is the other end).

``minimpi run`` starts one template process per job, with the environment all ranks share,
and asks it for one forked process per rank instead of starting ``N`` interpreters that
each import numpy and minimpi. ``--no-fork-server`` (``JobSpec.fork_server = False``)
starts every rank as a fresh interpreter, as before.

What the job sees is the same either way: :meth:`ForkServer.start_rank` returns the
:class:`~minimpi.launcher.spawn.RankProcess` that :func:`~minimpi.launcher.spawn.spawn_rank`
returns, around a :class:`ForkedProcess` that answers ``pid``, ``stdout``, ``stderr``,
``poll()`` and ``wait()`` as ``subprocess.Popen`` does. The rank's stdin, stdout and stderr
are the launcher's pipes (passed with ``SCM_RIGHTS``), it leads its own session (the job's
``killpg`` teardown reaches it and what it starts), it gets the launcher's lifeline pipe at
the same number, and its pidfd comes from the server, which forks it (so it is taken before
the child can be reaped). The rank is the server's child, not the launcher's: the server
reaps it and sends its wait status, from which its return code is what ``Popen`` would give
(``-N`` for a signal). The server dies with the launcher (``PR_SET_PDEATHSIG``) and every
rank with the server, so nothing outlives the launcher.
"""
from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import time
from typing import Optional

from minimpi import _start  # the folder only: its scripts import minimpi, run in the ranks

from .spawn import RankProcess, _make_preexec

#: the server's script, and the start script whose semantics it reproduces
_START_DIR = os.path.dirname(os.path.abspath(_start.__file__))
SERVER_SCRIPT = os.path.join(_START_DIR, "forkserver.py")
RANK_SCRIPT = os.path.join(_START_DIR, "minimpi_rank.py")
#: largest message from the server, and most descriptors one carries (a reply has a pidfd)
MAX_DATAGRAM = 1 << 16
MAX_FDS = 4
#: how long a rank's fork may take, the first one included (it waits for the server's imports)
FORK_TIMEOUT = 120.0


class ForkServerError(OSError):
    """The fork server could not start a rank (the job reports it as a failed start)."""


class ForkedProcess:
    """A rank forked by the server, with the parts of ``subprocess.Popen`` the job uses."""

    def __init__(self, server: "ForkServer", pid: Optional[int], args: list[str], stdout,
                 stderr) -> None:
        self._server = server
        self.pid = pid
        self.args = args
        self.stdout = stdout
        self.stderr = stderr
        self.stdin = None
        self.returncode: Optional[int] = None

    def poll(self) -> Optional[int]:
        if self.returncode is None and self.pid is not None:
            self._server.collect(0.0)
            self.returncode = self._server.returncode(self.pid)
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        if self.pid is None and self.returncode is None:
            self._server.wait_started()
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self._server.collect(left)
        return self.returncode


class ForkServer:
    """One job's template process (see the module docstring)."""

    def __init__(self, env: dict[str, str], *, private: tuple[str, ...] = ()) -> None:
        """Start the template with ``env``, less the names in ``private`` (the job secret):
        those travel only in each rank's request."""
        self.env = {k: v for k, v in env.items() if k not in private}
        self._ctl, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = subprocess.Popen(
                [sys.executable, SERVER_SCRIPT, str(theirs.fileno())],
                env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                start_new_session=True, preexec_fn=_make_preexec(os.getpid()),
                pass_fds=(theirs.fileno(),), close_fds=True)
        except BaseException:
            self._ctl.close()
            raise
        finally:
            theirs.close()
        self._devnull = os.open(os.devnull, os.O_RDONLY)
        self._status: dict[int, int] = {}          # pid -> wait status, once reaped
        self._forked: dict[int, dict] = {}         # request id -> its reply
        self._pidfds: dict[int, int] = {}          # request id -> pidfd from that reply
        self._ended = False                        # the server's end closed
        self._pending: dict[int, RankProcess] = {}  # asked for, pid not known yet

    # -- starting ranks -------------------------------------------------------------------
    @staticmethod
    def can_start(argv: list[str]) -> bool:
        """Whether ``argv`` is a command the server reproduces (a Python rank started
        through the rank start script under this interpreter)."""
        return argv[:2] == [sys.executable, RANK_SCRIPT] and len(argv) >= 3

    def start_rank(self, rank: int, argv: list[str], env: dict[str, str], *,
                   stdin_inherit: bool, pass_fds: tuple[int, ...] = (),
                   cwd: Optional[str] = None, request_id: Optional[str] = None
                   ) -> RankProcess:
        """Ask for rank ``rank`` running ``argv`` (``python minimpi_rank.py ARGS...``, the
        only command the server reproduces) with ``env``, as :func:`spawn_rank` starts it.

        Returns at once: the requests of a job go out back to back and the server forks
        while the launcher sends the next. The returned process has no pid until
        :meth:`wait_started` (which the job calls once it has asked for every rank)."""
        if argv[:2] != [sys.executable, RANK_SCRIPT] or len(argv) < 3:
            raise ValueError(f"the fork server starts ranks through {RANK_SCRIPT} under "
                             f"{sys.executable}, not {argv[:2]}")
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            rid = rank if request_id is None else request_id
            request = {"op": "fork", "id": rid, "args": argv[2:], "cwd": cwd,
                       "env": {k: v for k, v in env.items() if self.env.get(k) != v},
                       "unset": [k for k in self.env if k not in env],
                       "fds": [0, 1, 2, *pass_fds]}
            stdin = 0 if stdin_inherit else self._devnull
            self._send(json.dumps(request).encode(), [stdin, out_w, err_w, *pass_fds])
        except BaseException:
            os.close(out_r)
            os.close(err_r)
            raise
        finally:
            os.close(out_w)
            os.close(err_w)
        proc = ForkedProcess(self, None, argv, open(out_r, "rb"), open(err_r, "rb"))
        rp = RankProcess(rank, proc)
        self._pending[rid] = rp
        return rp

    def _send(self, data: bytes, fds: list[int]) -> None:
        """Send one request; while the server's queue is full, read its replies (it may be
        waiting for room in ours), so neither end blocks the other."""
        deadline = time.monotonic() + FORK_TIMEOUT
        while True:
            try:
                socket.send_fds(self._ctl, [data], fds, socket.MSG_DONTWAIT)
                return
            except BlockingIOError:
                if self._ended or time.monotonic() > deadline:
                    raise ForkServerError("the fork server takes no more requests") from None
                self.collect(0.05)
            except OSError as exc:
                raise ForkServerError(f"the fork server is gone ({exc})") from None

    def wait_started(self) -> None:
        """Wait for the server's answer to every request: each process gets its pid and
        pidfd. Raises :class:`ForkServerError` naming the first rank that could not be
        started (the others are started: the job ends them)."""
        failed = None
        for rank, rp in list(self._pending.items()):      # in the order asked
            try:
                reply = self._reply_for(rank)
            except ForkServerError as exc:
                rp.popen.returncode = rp.returncode = 255     # never ran
                failed = failed or exc
                continue
            rp.popen.pid = int(reply["pid"])
            rp.pidfd = self._pidfds.pop(rank, None)
        self._pending.clear()
        if failed is not None:
            raise failed

    def _reply_for(self, rank: int) -> dict:
        deadline = time.monotonic() + FORK_TIMEOUT
        while rank not in self._forked:
            if self._ended:
                code = self.process.poll()
                raise ForkServerError(
                    "the fork server ended before it started rank "
                    f"{rank}" + (f" (exit code {code})" if code is not None else ""))
            left = deadline - time.monotonic()
            if left <= 0:
                raise ForkServerError(f"the fork server did not start rank {rank} "
                                      f"within {FORK_TIMEOUT:g} s")
            self.collect(left)
        reply = self._forked.pop(rank)
        if reply.get("op") == "failed":
            raise ForkServerError(f"fork failed: {reply.get('error')}")
        return reply

    # -- what the server says -------------------------------------------------------------
    def collect(self, timeout: Optional[float]) -> None:
        """Read the server's messages: wait at most ``timeout`` seconds (None: until one
        comes) for the first, then take whatever else is there."""
        wait = timeout
        while not self._ended:
            ready, _, _ = select.select([self._ctl], [], [], wait)
            if not ready:
                return
            wait = 0.0
            try:
                data, fds, _flags, _addr = socket.recv_fds(self._ctl, MAX_DATAGRAM, MAX_FDS)
            except InterruptedError:
                continue
            except OSError:
                data, fds = b"", []
            if not data:
                self._ended = True
                return
            message = json.loads(data)
            op = message.get("op")
            if op == "exited":
                self._status[int(message["pid"])] = int(message["status"])
            elif op in ("forked", "failed"):
                self._forked[message.get("id")] = message
                if fds:
                    self._pidfds[message.get("id")] = fds.pop(0)
            for fd in fds:
                os.close(fd)

    def returncode(self, pid: int) -> Optional[int]:
        """``Popen.returncode`` of a forked rank: None while it runs."""
        status = self._status.get(pid)
        if status is not None:
            return os.waitstatus_to_exitcode(status)
        if self._ended:
            # the server is gone, and with it its children (they die with it)
            return -9
        return None

    def close(self, timeout: float = 5.0) -> None:
        """End the server (its ranks must have ended: they die with it)."""
        try:
            self._ctl.close()
        finally:
            os.close(self._devnull)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
