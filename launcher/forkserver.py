"""The launcher's end of the fork server (``minimpi/_start/forkserver.py`` is the other end).

``minimpi run`` starts one template process per job, with the environment all ranks share,
and asks it for one forked process per rank instead of starting ``N`` interpreters that
each import numpy and minimpi. ``--no-fork-server`` (``JobSpec.fork_server = False``)
starts every rank as a fresh interpreter, as before.

What the job sees is the same either way: :meth:`ForkServer.start_rank` returns the
:class:`~minimpi.launcher.processes.RankProcess` that :func:`~minimpi.launcher.processes.spawn_rank`
returns, around a :class:`ForkedProcess` that answers ``pid``, ``stdout``, ``stderr``,
``poll()`` and ``wait()`` as ``subprocess.Popen`` does. The rank's stdin, stdout and stderr
are the launcher's pipes (passed with ``SCM_RIGHTS``), it leads its own session (the job's
``killpg`` teardown reaches it and what it starts), it gets the launcher's lifeline pipe at
the same number, and its pidfd comes from the server, which forks it (so it is taken before
the child can be reaped). The rank is the server's child, not the launcher's: the server
reaps it and sends its wait status, from which its return code is what ``Popen`` would give
(``-N`` for a signal). The server dies with the launcher (``PR_SET_PDEATHSIG``) and every
rank with the server, so nothing outlives the launcher.

Flow. Requests go out without ever blocking the launcher (``MSG_DONTWAIT``; while the
server has no room, its answers are read), at most :data:`MAX_IN_FLIGHT` unanswered, so
neither end can wait for the other however many ranks a job or a ``Spawn`` asks for. Every
wait on the server wakes at a signal to the launcher (:meth:`ForkServer.watch_signals`) and
gives up with :class:`StartInterrupted` once the job must end; requests then left without
an answer are abandoned (:meth:`ForkServer.abandon_pending`: killed as soon as forked, the
server killed at :meth:`ForkServer.close`).
"""
from __future__ import annotations

import array
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from typing import Callable, Optional

from minimpi import _start  # the folder only: its scripts import minimpi, run in the ranks

from .processes import RankProcess, _make_preexec

#: the server's script, and the start script whose semantics it reproduces
_START_DIR = os.path.dirname(os.path.abspath(_start.__file__))
SERVER_SCRIPT = os.path.join(_START_DIR, "forkserver.py")
RANK_SCRIPT = os.path.join(_START_DIR, "minimpi_rank.py")
#: largest message from the server, and most descriptors one carries (a reply has a pidfd)
MAX_DATAGRAM = 1 << 16
MAX_FDS = 4
#: how long the server may go without answering while requests wait (the first answer
#: included: it comes after the server's imports)
FORK_TIMEOUT = 120.0
#: requests sent and not answered yet, at most. The launcher never blocks on the server
#: (nor the server on it for long: the launcher reads the answers while it waits for room),
#: and the descriptors riding along in the socket (stdio and lifeline: four per request,
#: which the kernel counts against the launcher's RLIMIT_NOFILE until the server takes
#: them) stay few.
MAX_IN_FLIGHT = 32


class ForkServerError(OSError):
    """The fork server could not start a rank (the job reports it as a failed start)."""


class StartInterrupted(OSError):
    """Starting processes was cut short by a signal to the launcher (SIGTERM, SIGINT...):
    the job ends now; what was asked for and not started never runs."""


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
        self._unanswered: set = set()              # request ids sent, no answer read yet
        self._abandoned: set = set()               # ... whose process nobody waits for
        self._heard = time.monotonic()             # when the server last said something
        #: set by the job: its signal wake-up pipe, and what says whether a signal asks the
        #: launcher to end (the name of the signal, or None)
        self._wake_fd: Optional[int] = None
        self._interrupted: Callable[[], Optional[str]] = lambda: None

    def watch_signals(self, wake_fd: Optional[int],
                      interrupted: Callable[[], Optional[str]]) -> None:
        """While it waits for the server (room for a request, answers), wake at a signal and
        raise :class:`StartInterrupted` once ``interrupted()`` names one: starting many
        ranks never keeps the launcher from ending the job at SIGTERM or Ctrl-C."""
        self._wake_fd = wake_fd
        self._interrupted = interrupted

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
        rid = rank if request_id is None else request_id
        try:
            self._room_for_a_request(rid)
        except OSError:
            self.abandon_pending()
            raise
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            request = {"op": "fork", "id": rid, "args": argv[2:], "cwd": cwd,
                       "env": {k: v for k, v in env.items() if self.env.get(k) != v},
                       "unset": [k for k in self.env if k not in env],
                       "fds": [0, 1, 2, *pass_fds]}
            stdin = 0 if stdin_inherit else self._devnull
            self._send(json.dumps(request).encode(), [stdin, out_w, err_w, *pass_fds])
        except BaseException:
            os.close(out_r)
            os.close(err_r)
            self.abandon_pending()
            raise
        finally:
            os.close(out_w)
            os.close(err_w)
        if not self._unanswered:
            self._heard = time.monotonic()    # the server's silence counts from the first
        self._unanswered.add(rid)
        proc = ForkedProcess(self, None, argv, open(out_r, "rb"), open(err_r, "rb"))
        rp = RankProcess(rank, proc)
        self._pending[rid] = rp
        return rp

    def _room_for_a_request(self, rid) -> None:
        """Wait until fewer than :data:`MAX_IN_FLIGHT` requests are unanswered."""
        while len(self._unanswered) >= MAX_IN_FLIGHT:
            self._check(f"start rank {rid}")
            self._wait_for_server(writing=False)

    def _send(self, data: bytes, fds: list[int]) -> None:
        """Send one request without ever blocking: while the server's queue is full, read
        its replies (it may be waiting for room in ours) until it takes the request.
        (``socket.send_fds`` is not used: CPython's ignores its ``flags`` (python/cpython
        issue 107898, 3.11 at least), so its MSG_DONTWAIT blocked, and the launcher and the
        server could each wait forever to write to the other: 280 of 1000 ranks started,
        neither end moving.)"""
        ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
        while True:
            self._check("send a request")
            try:
                self._ctl.sendmsg([data], ancillary, socket.MSG_DONTWAIT)
                return
            except BlockingIOError:
                self._wait_for_server(writing=True)
            except OSError as exc:
                raise ForkServerError(f"the fork server is gone ({exc})") from None

    def _check(self, what: str) -> None:
        """Raise when the start must stop: a signal to the launcher, the server ended or
        silent for :data:`FORK_TIMEOUT` while requests wait."""
        sig = self._interrupted()
        if sig is not None:
            raise StartInterrupted(f"the launcher received {sig}")
        if self._ended:
            code = self.process.poll()
            raise ForkServerError(f"the fork server ended before it could {what}"
                                  + (f" (exit code {code})" if code is not None else ""))
        if self._unanswered and time.monotonic() - self._heard > FORK_TIMEOUT:
            raise ForkServerError(f"the fork server answered nothing for {FORK_TIMEOUT:g} s "
                                  f"({len(self._unanswered)} request(s) waiting)")

    def _wait_for_server(self, writing: bool) -> None:
        """Sleep until the server says something (read at once), has room for a request
        (``writing``), or a signal comes; at most one second between checks."""
        wait = max(0.0, min(1.0, self._heard + FORK_TIMEOUT - time.monotonic()))
        readers = [self._ctl] + ([self._wake_fd] if self._wake_fd is not None else [])
        readable, writable, _ = select.select(readers, [self._ctl] if writing else [], [],
                                              wait)
        if self._ctl in readable:
            self.collect(0.0)
        elif self._wake_fd in readable and self._interrupted() is None:
            _drain(self._wake_fd)    # a signal that does not end the job

    def wait_started(self) -> None:
        """Wait for the server's answer to every request: each process gets its pid and
        pidfd. Raises :class:`ForkServerError` naming the first rank that could not be
        started (the others are started: the job ends them), and
        :class:`StartInterrupted` at a signal that ends the job (what has no answer yet
        is given up: :meth:`abandon_pending`)."""
        failed = None
        try:
            for rid, rp in list(self._pending.items()):      # in the order asked
                try:
                    reply = self._reply_for(rid)
                except StartInterrupted:
                    raise
                except ForkServerError as exc:
                    del self._pending[rid]
                    rp.popen.returncode = rp.returncode = 255     # never ran
                    failed = failed or exc
                    if self._ended or rid in self._unanswered:
                        raise             # the server is gone, or stuck: give up on it
                    continue
                del self._pending[rid]
                rp.popen.pid = int(reply["pid"])
                rp.pidfd = self._pidfds.pop(rid, None)
        except OSError:
            self.abandon_pending()
            raise
        if failed is not None:
            raise failed

    def _reply_for(self, rid) -> dict:
        while rid not in self._forked:
            self._check(f"start rank {rid}")
            self._wait_for_server(writing=False)
        reply = self._forked.pop(rid)
        if reply.get("op") == "failed":
            raise ForkServerError(f"fork failed: {reply.get('error')}")
        return reply

    def pending_ended(self) -> bool:
        """Whether a process forked for a request not waited for yet (:meth:`wait_started`)
        has already ended (as far as the server's messages read so far say)."""
        return any(rid in self._pending and reply.get("pid") in self._status
                   for rid, reply in self._forked.items())

    def abandon_pending(self) -> None:
        """Give up the requests not waited for yet (a start that failed or was interrupted
        half-way): a process already forked gets its pid and pidfd (the job ends and reaps
        it as any other); one not answered yet counts as never run and is killed as soon
        as the server says it forked it; so nothing is left behind and nothing waited for."""
        for rid, rp in list(self._pending.items()):
            reply = self._forked.pop(rid, None)
            if reply is not None and reply.get("op") == "forked":
                rp.popen.pid = int(reply["pid"])
                rp.pidfd = self._pidfds.pop(rid, None)
                continue
            rp.popen.returncode = rp.returncode = 255
            rp.killed_by_launcher = True
            if rid in self._unanswered:
                self._abandoned.add(rid)
        self._pending.clear()

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
            self._heard = time.monotonic()
            message = json.loads(data)
            op = message.get("op")
            rid = message.get("id")
            if op == "exited":
                self._status[int(message["pid"])] = int(message["status"])
            elif op in ("forked", "failed") and rid in self._abandoned:
                self._abandoned.discard(rid)
                self._unanswered.discard(rid)
                if op == "forked":
                    _kill_forked(int(message["pid"]), fds[0] if fds else None)
            elif op in ("forked", "failed"):
                self._unanswered.discard(rid)
                self._forked[rid] = message
                if fds:
                    self._pidfds[rid] = fds.pop(0)
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
        """End the server (its ranks must have ended: they die with it). Requests it has
        not answered are not served: it is killed at once then (what it forked dies with
        it), instead of forking processes nobody waits for before it sees the end."""
        try:
            self._ctl.close()
        finally:
            os.close(self._devnull)
            for fd in self._pidfds.values():
                os.close(fd)
            self._pidfds.clear()
            if self._unanswered:
                self.process.kill()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _kill_forked(pid: int, pidfd: Optional[int]) -> None:
    """Kill a process the server forked for a request that was given up (through its
    pidfd where there is one: the server may have reaped it, and its pid be another's)."""
    try:
        if pidfd is not None:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def _drain(fd: int) -> None:
    try:
        os.read(fd, 512)
    except OSError:
        pass
