"""Helpers shared by the multi-host test infrastructure (netns_hosts.py, slurm_cluster.py).

Everything here is bounded: every command runs under a timeout, every wait has a deadline
and a message saying what was waited for.  State of live set-ups (keys, configs, logs,
the owner's pid) lives under STATE_ROOT so that a later run can remove what a killed run
left behind.
"""
from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import shutil
import signal
import subprocess
import time
from typing import Iterable, Optional, Sequence

STATE_ROOT = "/run/minimpi-multihost"

# what tests/multihost/setup.sh installs, by the programs the fixtures run
SETUP_HINT = "run tests/multihost/setup.sh as root to install slurm-wlm munge openssh-server iproute2"


class InfraError(RuntimeError):
    """A set-up or tear-down step failed; the message names the step and shows its output."""


def run(argv: Sequence[str], timeout: float = 15.0, check: bool = True,
        env: Optional[dict] = None, input: Optional[str] = None) -> subprocess.CompletedProcess:
    """Run a command to completion (text output), never longer than ``timeout`` seconds."""
    try:
        cp = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                            env=env, input=input,
                            stdin=None if input is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise InfraError(f"`{' '.join(argv)}` did not finish within {timeout} s"
                         f"\nstdout: {exc.stdout!r}\nstderr: {exc.stderr!r}") from None
    except FileNotFoundError:
        raise InfraError(f"`{argv[0]}` is not installed ({SETUP_HINT})") from None
    if check and cp.returncode != 0:
        raise InfraError(f"`{' '.join(argv)}` failed with exit status {cp.returncode}"
                         f"\nstdout: {cp.stdout.strip()}\nstderr: {cp.stderr.strip()}")
    return cp


def proc_state(pid: int) -> Optional[str]:
    """The state letter of a process ('R', 'S', 'Z', ...), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return None


def proc_start_time(pid: int) -> Optional[int]:
    """Clock ticks since boot at which pid started (tells a reused pid from the original)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def alive(pid: int) -> bool:
    """True while pid runs.  A zombie counts as gone: PID 1 on these machines reaps late."""
    state = proc_state(pid)
    return state is not None and state != "Z"


def _reap(pids: Iterable[int]) -> None:
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


def wait_gone(pids: Iterable[int], timeout: float) -> list[int]:
    """Wait until none of pids is alive; return those still alive at the deadline."""
    pids = list(pids)
    deadline = time.monotonic() + timeout
    while True:
        _reap(pids)
        left = [p for p in pids if alive(p)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


def terminate(pids: Iterable[int], grace: float = 3.0) -> list[int]:
    """SIGTERM, wait up to ``grace`` s, then SIGKILL and wait 2 s more; return survivors."""
    pids = [p for p in set(pids) if p > 1 and p != os.getpid()]
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 2.0)):
        pids = [p for p in pids if alive(p)]
        for p in pids:
            try:
                os.kill(p, sig)
            except (ProcessLookupError, PermissionError):
                pass
        pids = wait_gone(pids, wait)
        if not pids:
            break
    return pids


def pids_with_env(var: str, value: str) -> list[int]:
    """Live processes (other than this one) started with var=value in their environment."""
    needle = f"{var}={value}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
        except OSError:
            continue
        if alive(int(name)):
            found.append(int(name))
    return found


class FileLock:
    """An exclusive flock on a file, taken within ``timeout`` seconds or InfraError."""

    def __init__(self, path: str, what: str):
        self.path, self.what, self.fd = path, what, None

    def acquire(self, timeout: float) -> "FileLock":
        os.makedirs(os.path.dirname(self.path), mode=0o755, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    raise
                if time.monotonic() >= deadline:
                    holder = _read(self.path).strip() or "unknown"
                    os.close(fd)
                    raise InfraError(f"{self.what}: the lock {self.path} is still held after "
                                     f"{timeout:.0f} s (holder pid {holder})") from None
                time.sleep(0.1)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def tail(path: str, lines: int = 15) -> str:
    text = _read(path).rstrip("\n").splitlines()
    return "\n".join(text[-lines:]) if text else "(empty)"


def write_owner(state_dir: str, persistent: bool) -> None:
    """Record who owns a set-up: a pid and its start time, or 'manual' (kept until `down`)."""
    with open(os.path.join(state_dir, "owner"), "w") as f:
        if persistent:
            f.write("manual\n")
        else:
            f.write(f"{os.getpid()} {proc_start_time(os.getpid())}\n")


def owner_gone(state_dir: str) -> bool:
    """True when the process that made state_dir has exited (never for manual set-ups)."""
    text = _read(os.path.join(state_dir, "owner")).split()
    if text[:1] == ["manual"]:
        return False
    if len(text) != 2:
        # made by a run that died before writing its owner: older than a few seconds -> stale
        try:
            return time.time() - os.stat(state_dir).st_mtime > 30
        except OSError:
            return True
    pid, start = int(text[0]), text[1]
    return not alive(pid) or str(proc_start_time(pid)) != start


def die_with_parent() -> None:
    """preexec_fn: the child gets SIGTERM when the process that started it dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


def missing_programs(paths: Iterable[str]) -> list[str]:
    return [p for p in paths if not (os.path.isfile(p) and os.access(p, os.X_OK))]


def rmtree(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
