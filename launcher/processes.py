"""Starting and stopping rank processes on this host.

Each rank is ``python program args...`` (or ``python -m module args...``) in its own
session and process group, so that

* Ctrl-C in the terminal reaches only the launcher, which then ends the job in order;
* the launcher can kill a rank *and everything it started* with one ``killpg``.

On Linux each rank also gets ``PR_SET_PDEATHSIG = SIGKILL`` (it dies with the launcher's
spawning thread, so spawn from the thread that runs the job loop). As a second line the
rank's bootstrap watches a "lifeline" pipe whose write end only the launcher holds
(``MINIMPI_LIFELINE_FD``); see ``minimpi/bootstrap.py``.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Optional

if TYPE_CHECKING:
    from .forkserver import ForkServer

PR_SET_PDEATHSIG = 1
#: the launcher's exit code for a process that stopped sending heartbeats
EXIT_UNRESPONSIVE = 124
_TICKS = os.sysconf("SC_CLK_TCK")

_libc = None
if sys.platform.startswith("linux"):
    try:
        _libc = ctypes.CDLL(None, use_errno=True)   # loaded before any fork
        _libc.prctl  # noqa: B018 - presence check
    except (OSError, AttributeError):
        _libc = None


def _make_preexec(parent_pid: int, deathsig: int = signal.SIGKILL):
    """``deathsig``: what the child gets when the launcher dies (agents take SIGTERM, so
    that they can still end their ranks and remove their shared memory)."""
    libc = _libc
    if libc is None or os.environ.get("MINIMPI_LAUNCHER_NO_PDEATHSIG"):  # the latter: for tests
        return None

    def preexec() -> None:  # runs in the child between fork and exec: keep it tiny
        libc.prctl(PR_SET_PDEATHSIG, deathsig, 0, 0, 0)
        if os.getppid() != parent_pid:   # the launcher died before prctl took effect
            os._exit(1)

    return preexec


@dataclass
class RankProcess:
    rank: int
    popen: subprocess.Popen
    pidfd: Optional[int] = None          # becomes readable when the process exits
    returncode: Optional[int] = None     # set once reaped
    killed_by_launcher: bool = False
    job: int = 0                         # the spawned job it belongs to (0: the job's own)

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def alive(self) -> bool:
        return self.returncode is None

    def reap(self) -> Optional[int]:
        """Non-blocking: the return code if the process has ended (reaps it)."""
        if self.returncode is None:
            rc = self.popen.poll()
            if rc is not None:
                self.returncode = rc
                self.close_pidfd()
        return self.returncode

    def reap_exited(self, timeout: float = 1.0) -> Optional[int]:
        """The return code of a process its pidfd says has ended: reaped now, or after up to
        ``timeout`` s for the zombie to appear; None if it could not be reaped (yet)."""
        rc = self.reap()
        if rc is None:
            try:
                rc = self.popen.wait(timeout=timeout)
            except Exception:
                return None
            self.returncode = rc
            self.close_pidfd()
        return rc

    def close_pidfd(self) -> None:
        if self.pidfd is not None:
            try:
                os.close(self.pidfd)
            except OSError:
                pass
            self.pidfd = None

    def signal_group(self, sig: int) -> None:
        """Send ``sig`` to the rank's whole process group (the rank leads its group)."""
        if self.popen.pid is None:       # a fork that never happened (launcher/forkserver.py)
            return
        try:
            os.killpg(self.popen.pid, sig)
        except ProcessLookupError:
            # no such group: the rank ended with all it started, or it was forked an instant
            # ago (launcher/forkserver.py) and does not lead its group yet; its pidfd
            # reaches it either way, and never another process that took its pid
            if self.pidfd is not None and self.returncode is None:
                try:
                    signal.pidfd_send_signal(self.pidfd, sig)
                except OSError:
                    pass
        except PermissionError:
            pass


def signal_together(processes: Iterable[Any], sig: int) -> None:
    """Send ``sig`` to the process group of each of ``processes`` (each has
    ``signal_group``) as one event: every group is stopped (SIGSTOP) first and continued
    (SIGCONT) after, so none of them runs between two of the signals. Sent one after the
    other, a rank that ends at its signal at once is seen gone by a peer whose signal has
    not come yet - held back while it delivers a frame, or its own not sent yet while the
    launcher waits for a core -, and that peer reports it lost: a second failure, printed
    after the report of the one that ended the job."""
    processes = list(processes)
    together = len(processes) > 1 and sig not in (signal.SIGSTOP, signal.SIGCONT)
    if together:
        for proc in processes:
            proc.signal_group(signal.SIGSTOP)
    try:
        for proc in processes:
            proc.signal_group(sig)   # (also reaches leftovers of ranks that already exited)
    finally:
        if together:
            for proc in processes:
                proc.signal_group(signal.SIGCONT)


def rank_command(program: Optional[str], module: Optional[str], args: list[str]) -> list[str]:
    if module is not None:
        return [sys.executable, "-m", module, *args]
    assert program is not None
    return [sys.executable, program, *args]


def spawn_rank(rank: int, argv: list[str], env: dict[str, str], *, stdin_inherit: bool,
               pass_fds: tuple[int, ...] = (), cwd: Optional[str] = None,
               stdin: Optional[int] = None, fork_server: "Optional[ForkServer]" = None,
               request_id: Optional[str] = None) -> RankProcess:
    """Start one rank: the one way every launcher part starts a rank process on this host.

    ``stdin`` (e.g. ``subprocess.PIPE``, used by the multi-host agent) overrides
    ``stdin_inherit``. With ``fork_server`` (``launcher/forkserver.py``) the rank is forked
    from that job's template process instead of started as a fresh interpreter (``argv``
    must then be ``[sys.executable, minimpi_rank.py, ...]``); the returned
    :class:`RankProcess` behaves the same once ``fork_server.wait_started()`` has given it
    its pid (call it after asking for every rank: the requests go out back to back);
    ``request_id`` names the request where the rank alone does not (spawned jobs).
    """
    if fork_server is not None and stdin is None:
        return fork_server.start_rank(rank, argv, env, stdin_inherit=stdin_inherit,
                                      pass_fds=pass_fds, cwd=cwd, request_id=request_id)
    popen = subprocess.Popen(
        argv,
        env=env,
        cwd=cwd,
        stdin=stdin if stdin is not None else None if stdin_inherit else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=_make_preexec(os.getpid()),
        pass_fds=pass_fds,
        close_fds=True,
    )
    pidfd = None
    if hasattr(os, "pidfd_open"):
        try:
            pidfd = os.pidfd_open(popen.pid)
        except OSError:
            pidfd = None
    return RankProcess(rank, popen, pidfd)


def describe_returncode(rc: int) -> str:
    """'exited with code 1' or 'killed by signal 9 (SIGKILL)'."""
    if rc < 0:
        sig = -rc
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"killed by signal {sig} ({name})"
    return f"exited with code {rc}"


def exit_code_for(rc: int) -> int:
    """Shell convention: 128+signal for a process killed by a signal."""
    return 128 - rc if rc < 0 else rc


def process_state(pid: Optional[int]) -> tuple[str, Optional[float]]:
    """A local process's state letter from /proc ("stopped" for T and t: the usual reason
    for silence) and the CPU seconds it used; ("", None) when there is nothing to read (a
    process on another host, or gone). Cost: one read of /proc/PID/stat."""
    if pid is None:
        return "", None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        state = fields[0].decode()
        cpu = (int(fields[11]) + int(fields[12])) / _TICKS   # utime + stime
    except (OSError, IndexError, ValueError):
        return "", None
    return ("stopped" if state in ("T", "t") else state), cpu
