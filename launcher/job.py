"""One local job: spawn N ranks, run the coordinator, forward output, end it all cleanly.

Everything happens in one loop on one thread: a ``zmq.Poller`` waits on the coordinator's
ROUTER socket, every rank's stdout/stderr pipe, a pidfd per rank (readable when it exits)
and the signal wake-up pipe. The poll timeout is the time to the next deadline (job
timeout, startup timeout, SIGKILL after the grace period), so an idle launcher sleeps.

Failure policy: the first of {a rank exits non-zero, a rank is killed by a signal, a rank
calls abort, --timeout, startup timeout, SIGINT/SIGTERM to the launcher} ends the job:
SIGTERM to every rank's process group, SIGKILL after ``grace`` seconds, pipes read to EOF,
then one summary on stderr and the matching exit code.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import BinaryIO, Optional

import zmq

from minimpi.runtime.bootstrap import (
    ENV_BIND,
    ENV_COORD,
    ENV_JOBID,
    ENV_LAUNCHER_PID,
    ENV_LIFELINE,
    ENV_RANK,
    ENV_SECRET,
    ENV_SIZE,
    ENV_STARTUP_TIMEOUT,
)
from minimpi.runtime.diagnose import ENV_DEADLOCK_TIMEOUT
from minimpi.transports.shm import cleanup_job

from .coordinator import Coordinator, new_job_id, new_secret
from .deadlock import EXIT_DEADLOCK, DeadlockDetector, build_report
from .output import OutputForwarder
from .spawn import RankProcess, describe_returncode, exit_code_for, rank_command, spawn_rank

EXIT_TIMEOUT = 124
EXIT_STARTUP = 124
EXIT_VANISHED = 1


@dataclass
class JobSpec:
    nprocs: int
    program: Optional[str] = None          # a script path, or ...
    module: Optional[str] = None           # ... a module for `python -m`
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)   # extra env for every rank
    timeout: Optional[float] = None        # whole job
    startup_timeout: float = 60.0
    prefix: bool = True
    output_dir: Optional[str] = None
    bind: str = "127.0.0.1"                # ranks' data plane
    coord_host: str = "127.0.0.1"          # coordinator's ROUTER
    cwd: Optional[str] = None
    grace: float = 1.0                     # SIGTERM -> SIGKILL
    deadlock_timeout: float = 5.0          # 0: no deadlock detection (launcher/deadlock.py)


@dataclass
class Failure:
    kind: str          # exit | signal | abort | timeout | startup | interrupt | vanished
    exit_code: int
    summary: str       # the "minimpi: ..." line
    rank: Optional[int] = None
    details: list[str] = field(default_factory=list)


class Job:
    def __init__(self, spec: JobSpec, stdout: Optional[BinaryIO] = None,
                 stderr: Optional[BinaryIO] = None):
        self.spec = spec
        self.stdout = stdout or sys.stdout.buffer
        self.stderr = stderr or sys.stderr.buffer
        self.job_id = new_job_id()
        self.secret = new_secret()
        self.ranks: list[RankProcess] = []
        self.failure: Optional[Failure] = None
        self.kill_at: Optional[float] = None        # when to SIGKILL after SIGTERM
        self.all_done_at: Optional[float] = None    # when the last rank was reaped
        self.first_registered_at: Optional[float] = None   # when the first rank registered
        self._signal_received: Optional[int] = None
        self._wake_r = self._wake_w = None
        self._old_handlers: dict[int, object] = {}
        self._old_wakeup = -1

    # -- messages --------------------------------------------------------------------------
    def log(self, text: str) -> None:
        try:
            self.stderr.write(text.encode("utf-8", "replace") + b"\n")
            self.stderr.flush()
        except (OSError, ValueError):
            pass

    # -- environment -----------------------------------------------------------------------
    def rank_env(self, rank: int, coord_address: str, lifeline_fd: int) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.spec.env)
        env.update({
            ENV_RANK: str(rank),
            ENV_SIZE: str(self.spec.nprocs),
            ENV_COORD: coord_address,
            ENV_SECRET: self.secret.hex(),
            ENV_JOBID: self.job_id,
            ENV_BIND: self.spec.bind,
            ENV_LIFELINE: str(lifeline_fd),
            ENV_LAUNCHER_PID: str(os.getpid()),
            ENV_STARTUP_TIMEOUT: str(self.spec.startup_timeout),
            ENV_DEADLOCK_TIMEOUT: str(self.spec.deadlock_timeout),
            "PYTHONUNBUFFERED": "1",
        })
        return env

    # -- signals ---------------------------------------------------------------------------
    def _install_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._old_wakeup = signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            self._old_handlers[sig] = signal.signal(sig, self._on_signal)

    def _on_signal(self, signum, frame) -> None:
        if self._signal_received is not None and signum in (signal.SIGINT, signal.SIGTERM):
            self._signal_received = -signum   # second signal: kill at once
        else:
            self._signal_received = signum

    def _restore_signals(self) -> None:
        for sig, old in self._old_handlers.items():
            signal.signal(sig, old)
        if self._wake_w is not None:
            signal.set_wakeup_fd(self._old_wakeup)
            os.close(self._wake_r)
            os.close(self._wake_w)

    # -- teardown --------------------------------------------------------------------------
    def fail(self, failure: Failure) -> None:
        """Record the first failure and start ending the job (idempotent)."""
        if self.failure is not None:
            return
        self.failure = failure
        self.terminate_all(signal.SIGTERM)
        self.kill_at = time.monotonic() + self.spec.grace

    def terminate_all(self, sig: int) -> None:
        for rp in self.ranks:
            if rp.alive:
                rp.killed_by_launcher = True
            rp.signal_group(sig)   # also reaches leftovers of ranks that already exited

    # -- the loop --------------------------------------------------------------------------
    def run(self) -> int:
        spec = self.spec
        coord = Coordinator(spec.nprocs, self.secret, self.job_id, host=spec.coord_host,
                            log=self.log)
        self.coord = coord
        forward = OutputForwarder(self.stdout, self.stderr, prefix=spec.prefix,
                                  output_dir=spec.output_dir)
        self.forward = forward
        self._install_signals()
        lifeline_r, lifeline_w = os.pipe()   # both non-inheritable; only lifeline_r is passed
        start = time.monotonic()
        try:
            argv = rank_command(spec.program, spec.module, spec.args)
            try:
                for r in range(spec.nprocs):
                    rp = spawn_rank(r, argv, self.rank_env(r, coord.address, lifeline_r),
                                    stdin_inherit=(r == 0), pass_fds=(lifeline_r,), cwd=spec.cwd)
                    self.ranks.append(rp)
            except OSError as e:
                self.log(f"minimpi: could not start rank {len(self.ranks)}: {e}")
                self.terminate_all(signal.SIGKILL)
                for rp in self.ranks:
                    rp.popen.wait()
                return 2
            finally:
                os.close(lifeline_r)
            return self._loop(start)
        finally:
            self.terminate_all(signal.SIGKILL)   # no orphans, whatever happened
            for rp in self.ranks:
                if rp.alive:
                    try:
                        rp.popen.wait(timeout=5)
                    except Exception:
                        pass
                rp.close_pidfd()
            forward.close_all()
            os.close(lifeline_w)
            coord.close()
            cleanup_job(self.job_id)   # shared-memory segments of ranks that died early
            self._restore_signals()

    def _loop(self, start: float) -> int:
        spec, coord, forward = self.spec, self.coord, self.forward
        poller = zmq.Poller()
        poller.register(coord.socket, zmq.POLLIN)
        pidfds: dict[int, RankProcess] = {}
        for rp in self.ranks:
            forward.add(rp.rank, "stdout", rp.popen.stdout)
            forward.add(rp.rank, "stderr", rp.popen.stderr)
            if rp.pidfd is not None:
                pidfds[rp.pidfd] = rp
                poller.register(rp.pidfd, zmq.POLLIN)
        for fd in forward.open_fds():
            poller.register(fd, zmq.POLLIN)
        if self._wake_r is not None:
            poller.register(self._wake_r, zmq.POLLIN)
        need_reap_poll = any(rp.pidfd is None for rp in self.ranks)

        job_deadline = start + spec.timeout if spec.timeout else None
        deadlock = DeadlockDetector(coord, lambda r: self.ranks[r].alive, spec.deadlock_timeout)

        while True:
            now = time.monotonic()
            startup_deadline = self.startup_deadline()
            # ---- deadlines ----
            if job_deadline is not None and now >= job_deadline and self.failure is None:
                self._on_job_timeout()
            if startup_deadline is not None and now >= startup_deadline:
                self._on_startup_timeout()
            if self.failure is None and deadlock.check(now):
                self._on_deadlock()
            if self.kill_at is not None and now >= self.kill_at:
                self.terminate_all(signal.SIGKILL)
                self.kill_at = None
            # ---- done? ----
            all_reaped = all(not rp.alive for rp in self.ranks)
            if all_reaped:
                if self.all_done_at is None:
                    self.all_done_at = now
                    # leftovers of finished ranks may hold the pipes open: end them
                    self.terminate_all(signal.SIGKILL)
                if not forward.open_fds() or now - self.all_done_at > 2.0:
                    break
            # ---- wait ----
            waits = [d for d in (job_deadline, self.kill_at, self.startup_deadline())
                     if d is not None]
            if self.all_done_at is not None:
                waits.append(self.all_done_at + 2.0)
            if self.failure is None and deadlock.enabled:
                when = deadlock.next_deadline()
                if when is not None:
                    waits.append(when)
            timeout = max(0.0, min(waits) - now) if waits else 3600.0
            if need_reap_poll:
                timeout = min(timeout, 0.1)
            ready = dict(poller.poll(int(timeout * 1000) + 1))

            if self._wake_r is not None and self._wake_r in ready:
                try:
                    os.read(self._wake_r, 512)
                except OSError:
                    pass
            if self._signal_received is not None:
                self._on_signal_received()
            if coord.socket in ready:
                for ev in coord.receive():
                    self._on_coord_event(ev)
            for fd in [fd for fd in ready if isinstance(fd, int) and fd in forward.streams]:
                if not forward.read(fd):
                    poller.unregister(fd)
            for fd in [fd for fd in ready if isinstance(fd, int) and fd in pidfds]:
                rp = pidfds.pop(fd)
                poller.unregister(fd)
                self._reap(rp)
            if need_reap_poll:
                for rp in self.ranks:
                    if rp.pidfd is None and rp.alive:
                        self._reap(rp)
        return self._finish()

    def startup_deadline(self) -> Optional[float]:
        """When the ranks that have not registered are given up on: ``startup_timeout`` after
        the first rank registered (a program may initialize late, e.g. with
        ``mpi4py.rc.initialize = False``). None while there is nothing to time out: no rank
        registered yet (a program that never initializes minimpi is not waited for), the
        address table went out, or the job is already ending."""
        if self.first_registered_at is None or self.coord.table_sent or self.failure is not None:
            return None
        return self.first_registered_at + self.spec.startup_timeout

    # -- events ----------------------------------------------------------------------------
    def _reap(self, rp: RankProcess) -> None:
        rc = rp.reap()
        if rc is None:
            # pidfd readable means it exited; wait for the zombie briefly
            try:
                rc = rp.popen.wait(timeout=1.0)
            except Exception:
                return
            rp.returncode = rc
            rp.close_pidfd()
        how = describe_returncode(rc)
        self.coord.ranks[rp.rank].exit_status = how
        if self.failure is not None or rp.killed_by_launcher:
            return
        if rc != 0:
            kind = "signal" if rc < 0 else "exit"
            cause = self._first_error(rp.rank)
            if cause is not None:   # this rank only failed because another one did first
                r, error = cause
                self.fail(Failure(kind, exit_code_for(rc),
                                  f"minimpi: rank {r} failed: {error} (rank {rp.rank} {how} "
                                  f"as a consequence)", rank=r))
                return
            self.fail(Failure(kind, exit_code_for(rc), f"minimpi: rank {rp.rank} {how}",
                              rank=rp.rank))
            return
        self._check_vanished()

    def _first_error(self, rank: int):
        """(rank, error) of the rank whose uncaught error caused ``rank``'s, if that is known.

        Ranks report an uncaught exception to the coordinator before they exit
        (``minimpi.runtime.diagnose.failure_state``); an error that is only a consequence (a peer that
        vanished) is attributed to the earliest non-consequence error of another rank.
        """
        own = self.coord.ranks[rank].state
        if not (isinstance(own, dict) and own.get("consequence")):
            return None
        first = None
        for st in self.coord.ranks:
            s = st.state
            if st.rank != rank and isinstance(s, dict) and s.get("error") and not s.get("consequence"):
                if first is None or (st.state_time or 0) < (first.state_time or 0):
                    first = st
        return None if first is None else (first.rank, first.state["error"])

    def _check_vanished(self) -> None:
        """A rank that ended without registering while others wait for the table: fail now."""
        coord = self.coord
        if coord.table_sent or self.failure is not None or not coord.registered_ranks():
            return
        gone = [rp.rank for rp in self.ranks if not rp.alive and not coord.ranks[rp.rank].registered]
        if gone:
            waiting = coord.registered_ranks()
            text = (f"rank(s) {_ranks(gone)} ended without registering with the coordinator "
                    f"while rank(s) {_ranks(waiting)} wait for the address table")
            coord.fail_startup(gone, text)
            self.fail(Failure("vanished", EXIT_VANISHED, f"minimpi: {text}", rank=gone[0]))

    def _on_coord_event(self, ev) -> None:
        if ev.kind == "abort" and self.failure is None:
            text = f"minimpi: rank {ev.rank} called Abort({ev.code})"
            if ev.message:
                text += f": {ev.message}"
            self.fail(Failure("abort", ev.code & 0xFF if ev.code >= 0 else 1, text, rank=ev.rank))
        elif ev.kind == "registered":
            if self.first_registered_at is None:
                self.first_registered_at = time.monotonic()
            self._check_vanished()

    def _on_job_timeout(self) -> None:
        lines = []
        for st in self.coord.ranks:
            rp = self.ranks[st.rank]
            desc = st.describe() if (st.state is not None or not rp.alive) else "no state reported"
            lines.append(f"  rank {st.rank}: {desc}")
        self.fail(Failure("timeout", EXIT_TIMEOUT,
                          f"minimpi: job timed out after {self.spec.timeout:g} s (--timeout); "
                          "what each rank was doing:", details=lines))

    def _on_deadlock(self) -> None:
        summary, lines = build_report(self.coord, lambda r: self.ranks[r].alive,
                                      self.spec.deadlock_timeout)
        self.fail(Failure("deadlock", EXIT_DEADLOCK, summary, details=lines))

    def _on_startup_timeout(self) -> None:
        coord = self.coord
        missing = coord.missing_ranks()
        text = (f"startup timeout after {self.spec.startup_timeout:g} s: rank(s) {_ranks(missing)} "
                f"never registered with the coordinator "
                f"(registered: {_ranks(coord.registered_ranks())})")
        coord.fail_startup(missing, text)
        self.fail(Failure("startup", EXIT_STARTUP, f"minimpi: {text}"))

    def _on_signal_received(self) -> None:
        sig = self._signal_received
        if sig is None:
            return
        if self.failure is None:   # also when a second signal came before the first was seen
            name = signal.Signals(abs(sig)).name
            self.fail(Failure("interrupt", 128 + abs(sig),
                              f"minimpi: received {name}; terminating all ranks"))
        if sig < 0:   # second Ctrl-C: no more grace
            self.terminate_all(signal.SIGKILL)
            self.kill_at = None
            self._signal_received = -sig

    # -- the end ---------------------------------------------------------------------------
    def _finish(self) -> int:
        f = self.failure
        if f is None:
            return 0
        self.log(f.summary)
        for line in f.details:
            self.log(line)
        if f.rank is not None and f.kind in ("exit", "signal", "abort"):
            tail = self.forward.stderr_tail(f.rank)
            if tail:
                self.log(f"minimpi: last lines rank {f.rank} wrote to stderr:")
                for line in tail:
                    self.log(f"  | {line}")
        return f.exit_code


def _ranks(ranks: list[int]) -> str:
    return ", ".join(str(r) for r in ranks) if ranks else "none"


def run_job(spec: JobSpec, stdout: Optional[BinaryIO] = None,
            stderr: Optional[BinaryIO] = None) -> int:
    """Run one job to completion; returns the launcher's exit code."""
    return Job(spec, stdout, stderr).run()
