"""Helpers for tests that start real jobs: run `minimpi run` with a hard timeout, find leftover processes.

    result = run_minimpi("-n", "3", script, timeout=20)     # CompletedProcess (text)
    proc = start_minimpi("-n", "3", script)                  # Popen, for signals mid-run
    finish(proc, timeout=10)                                 # -> CompletedProcess
    leftover_processes(marker)                               # pids whose environ has the marker
    others_segments(paths)                                   # segments of jobs this test did not start
    assert_no_leftovers(marker)                              # waits up to 3 s, kills and fails
    progress_until(transports, until, timeout)               # drive transports in this process
    connect_all_in_threads(transports, timeout)              # their connect_all, one thread each

The ``job_marker`` fixture gives a unique value; pass ``-x`` ``MINIMPI_TEST_MARKER=<value>``
(``marker_args(job_marker)``) so every rank carries it, and it checks at teardown that no
process with that marker is left.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

MARKER_VAR = "MINIMPI_TEST_MARKER"
#: set for each test (conftest) and so inherited by every process it starts: a live process
#: without it that belongs to a job is another's (a developer's job, another test run)
OWNER_VAR = "MINIMPI_TEST_OWNER"
MINIMPI = [sys.executable, "-m", "minimpi"]


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def start_minimpi(*args: str, cwd=None, env=None, stdin=subprocess.DEVNULL) -> subprocess.Popen:
    """Start `python -m minimpi run ARGS...` in its own process group (text pipes)."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    return subprocess.Popen([*MINIMPI, "run", *map(str, args)], cwd=cwd, env=full_env,
                            stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def finish(proc: subprocess.Popen, timeout: float = 20.0, input: str | None = None
           ) -> subprocess.CompletedProcess:
    """Wait for a started launcher; on timeout kill its whole group and fail the test."""
    try:
        out, err = proc.communicate(input=input, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        pytest.fail(f"minimpi did not finish within {timeout} s\n--- stdout ---\n{out}"
                    f"\n--- stderr ---\n{err}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def run_minimpi(*args: str, timeout: float = 20.0, input: str | None = None, cwd=None,
                env=None) -> subprocess.CompletedProcess:
    """Run `minimpi run ARGS...` to completion with a hard timeout."""
    proc = start_minimpi(*args, cwd=cwd, env=env,
                         stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL)
    return finish(proc, timeout=timeout, input=input)


def leftover_processes(marker: str, var: str = MARKER_VAR) -> list[int]:
    """PIDs of live (non-zombie) processes whose environment contains var=marker."""
    needle = f"{var}={marker}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read().split(b"\0")
            if needle not in env:
                continue
            with open(f"/proc/{name}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
            if state != b"Z":
                found.append(int(name))
        except OSError:
            continue
    return found


def _jobs_mapped_by(pid: str, paths: tuple[bytes, ...]) -> set[str]:
    """The job ids of those of ``paths`` that process ``pid`` has mapped now."""
    try:
        with open(f"/proc/{pid}/maps", "rb") as f:
            maps = f.read()
    except OSError:
        return set()
    return {os.path.basename(p.decode())[len("minimpi-"):].rsplit("-", 1)[0]
            for p in paths if p in maps}


def others_segments(paths: list[str]) -> set[str]:
    """The shared-memory segments among ``paths`` (``/dev/shm/minimpi-<job>-<rank>``) of jobs
    that someone else runs: a live process of that job (``MINIMPI_JOBID``) does not carry
    this test's ``MINIMPI_TEST_OWNER``. A segment no live process is left to account for is
    not counted as another's."""
    jobs = {os.path.basename(p)[len("minimpi-"):].rsplit("-", 1)[0]: p for p in paths}
    if not jobs:
        return set()
    owner = f"{OWNER_VAR}={os.environ.get(OWNER_VAR, '')}".encode()
    wanted = tuple(p.encode() for p in paths)
    theirs = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if owner in env and os.environ.get(OWNER_VAR):
            continue
        if int(name) != os.getpid():
            # ranks run as threads of another process (another pytest worker, a notebook):
            # its environment names no job, but it has the segments mapped
            theirs.update(_jobs_mapped_by(name, wanted))
        for var in env:
            if var.startswith(b"MINIMPI_JOBID="):
                job = var.split(b"=", 1)[1].decode(errors="replace")
                if job in jobs:
                    theirs.add(job)
    return {p for p in paths
            if os.path.basename(p)[len("minimpi-"):].rsplit("-", 1)[0] in theirs}


def assert_no_leftovers(marker: str, wait: float = 3.0, var: str = MARKER_VAR) -> None:
    deadline = time.monotonic() + wait
    pids = leftover_processes(marker, var)
    while pids and time.monotonic() < deadline:
        time.sleep(0.1)
        pids = leftover_processes(marker, var)
    if pids:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        pytest.fail(f"processes left behind by the job: {pids}")


def marker_args(marker: str) -> list[str]:
    return ["-x", f"{MARKER_VAR}={marker}"]


def wire(transports, sinks) -> None:
    """Ranks of this process: attach each transport's sink, then give every transport the
    address every one of them listens at."""
    for t, s in zip(transports, sinks):
        t.attach(s)
    addresses = [t.listen() for t in transports]
    for t in transports:
        t.set_peers(addresses)


def connect_all_in_threads(transports, timeout: float) -> tuple:
    """Ranks of this process: every transport's ``connect_all(timeout)`` at once, one thread
    each (each waits for its peers' handshakes); (the errors they raised, the threads still
    alive ``timeout`` + 10 s later)."""
    import threading

    errors = []

    def connect(t):
        try:
            t.connect_all(timeout=timeout)
        except Exception as exc:       # reported by the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=connect, args=(t,)) for t in transports]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout + 10)
    return errors, [th for th in threads if th.is_alive()]


def progress_until(transports, until, timeout: float = 5.0, wait: float = 0.0) -> None:
    """Call ``progress(wait)`` on each transport (ranks of this process) until ``until()``;
    fail the test when ``timeout`` s pass first."""
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, f"transports made no progress to it in {timeout} s"
        for t in transports:
            t.progress(wait)
