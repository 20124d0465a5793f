"""One local job: spawn N ranks, run the coordinator, forward output, end it all cleanly.

Everything happens in one loop on one thread: a poller (zmq's ``zmq_poll``) waits on the coordinator's
ROUTER socket, every rank's stdout/stderr pipe, a pidfd per rank (readable when it exits)
and the signal wake-up pipe. The poll timeout is the time to the next deadline (job
timeout, startup timeout, SIGKILL after the grace period), so an idle launcher sleeps.

Failure policy (``--fault-tolerant`` changes it: see below): the first of {a rank exits non-zero, a rank is killed by a signal, a rank
calls abort, --timeout, startup timeout, a rank that stops sending heartbeats,
SIGINT/SIGTERM to the launcher} ends the job: SIGTERM to every rank's process group,
SIGKILL after ``grace`` seconds, pipes read to EOF, then one summary on stderr and the
matching exit code.

The culprit. When rank X ends (sys.exit(7), os._exit, kill -9, or even a clean exit while
others still wait for it), its peers see their connections to X close and fail with
PeerLostError, often before the launcher has reaped X. So a rank that failed only because
a peer vanished is never blamed: every rank reports the error that ends it, acknowledged,
before it exits (``failed``: the error, the user's file:line, the peers it lost), and
:meth:`Job._judge` follows those "lost" links to the rank that ended first, waiting (at most
``settle`` seconds) for that rank to be reaped so that its own exit code is the job's.

Fault tolerance (``--fault-tolerant``, ULFM). A rank that ends abnormally (non-zero exit,
signal) does not end the job: the launcher sends every other running rank a ``proc_failed``
notice (its world rank and how it ended) through the coordinator, and their runtimes mark it
failed (:mod:`minimpi.runtime.failures`), so their operations with it raise
``MPI.ERR_PROC_FAILED`` instead of waiting. The job ends when every rank has ended; its exit
code is the survivors' - 0 when some rank finished with 0 - else the first failed rank's, and
the summary names every rank that failed, with its error and traceback. Everything else
(``Abort``, ``--timeout``, deadlocks, signals to the launcher) ends the job as before.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import BinaryIO, Callable, Optional

import zmq

import minimpi.errors  # its directory is the package (not the root: minimpi.launch imports us)
from minimpi.runtime.bootstrap import (
    ENV_BIND,
    ENV_COORD,
    ENV_FAULT_TOLERANT,
    ENV_HEARTBEAT_INTERVAL,
    ENV_JOBID,
    ENV_LAUNCHER_PID,
    ENV_LIFELINE,
    ENV_RANK,
    ENV_SECRET,
    ENV_SIZE,
    ENV_STARTUP_TIMEOUT,
    ENV_UNIVERSE_SIZE,
)
from minimpi.runtime.states import ENV_DEADLOCK_TIMEOUT
from minimpi.transports.shm import ENV_LOCAL_RANKS, cleanup_job, format_ranks

from .coordinator import Coordinator, new_job_id, new_secret
from .deadlock import EXIT_DEADLOCK, DeadlockDetector, build_report
from .dynamic import DynamicProcesses
from .forkserver import ForkServer, StartInterrupted
from .output import OutputForwarder
from .processes import (
    EXIT_UNRESPONSIVE,
    RankProcess,
    describe_returncode,
    exit_code_for,
    rank_command,
    signal_together,
    spawn_rank,
)
from .processes import process_state as _process_state

#: how long the end of a job may wait, in all, for its processes to go once they were
#: sent SIGKILL (each is reaped as soon as it is gone)
REAP_WAIT = 5.0
EXIT_TIMEOUT = 124
EXIT_STARTUP = 124
EXIT_VANISHED = 1
#: our stdout's reader went away (``| head``): the shell's code for death by SIGPIPE
EXIT_STDOUT_CLOSED = 128 + signal.SIGPIPE
DEFAULT_HEARTBEAT_TIMEOUT = 30.0
#: a loop turn this much longer than its poll timeout means the launcher itself was stopped
#: (Ctrl-Z, SIGSTOP, a debugger, a starved machine): the ranks are not judged on that time
STOP_GAP = 1.0
#: a silent rank whose process is not stopped is running (one long call holding the GIL),
#: not hung, while it uses CPU time at least once in max(BUSY_PROBE, --heartbeat-timeout/4)
BUSY_PROBE = 1.0

#: frames of these directories are minimpi's own, left out of the tracebacks the launcher
#: prints (the user's lines are what matter); ``launcher/`` installs as minimpi.launcher but
#: lives beside the package in a checkout
_OWN_DIRS = tuple(os.path.dirname(os.path.abspath(m)) + os.sep
                  for m in (minimpi.errors.__file__, os.path.dirname(os.path.abspath(__file__))))


class LoopPoller:
    """The job loop's poller: ``zmq.Poller``'s ``register``, ``unregister`` and ``poll``
    (milliseconds; ``[(socket or fd, events)]``) over zmq sockets and descriptors, with
    ``register`` and ``unregister`` in O(1). (zmq's ``unregister`` renumbers every later
    entry: with a pipe pair and a pidfd per process, the end of a job of a thousand spawned
    processes spent seconds there.) The list ``zmq_poll`` takes is rebuilt at the first
    poll after a change."""

    def __init__(self) -> None:
        self._events: dict = {}
        self._items: Optional[list] = []

    def register(self, what, flags: int = zmq.POLLIN | zmq.POLLOUT) -> None:
        if flags:
            self._events[what] = flags
        else:
            self._events.pop(what, None)
        self._items = None

    def unregister(self, what) -> None:
        del self._events[what]      # (KeyError for one not registered, as zmq's)
        self._items = None

    def poll(self, timeout: Optional[int] = None) -> list:
        if self._items is None:
            self._items = list(self._events.items())
        return zmq.zmq_poll(self._items, -1 if timeout is None or timeout < 0 else
                            int(timeout))


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
    heartbeat_timeout: float = DEFAULT_HEARTBEAT_TIMEOUT   # 0: no liveness check
    settle: float = 3.0                    # how long to wait for the rank a failure points at
    #: fork the ranks from one template process that has numpy and minimpi imported
    #: (launcher/forkserver.py); only for ranks started through minimpi's start script
    fork_server: bool = False
    universe_size: Optional[int] = None    # --universe-size (None: -n, and no limit on Spawn)
    #: how a Python program's rank starts (run.rank_start: program, module, args -> the start
    #: script's); Spawn starts Python programs the same way
    rank_start: Optional[Callable] = None
    #: --fault-tolerant: a rank that fails is reported to the others, the job goes on (ULFM)
    fault_tolerant: bool = False
    #: --dashboard: the live page (launcher/dashboard), told about the job once it runs
    dashboard: Optional[object] = None


@dataclass
class Failure:
    kind: str          # exit | signal | abort | timeout | startup | interrupt | vanished
    exit_code: int
    summary: str       # the "minimpi: ..." line
    rank: Optional[int] = None
    details: list[str] = field(default_factory=list)
    #: kind "host": the ranks of the lost host (the others are summed up, not their tracebacks)
    lost_ranks: list[int] = field(default_factory=list)
    #: a spawned process that failed: (its spawned job's number, its rank)
    spawned: Optional[tuple[int, int]] = None


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
        self.forward: Optional[OutputForwarder] = None   # set by run()
        self.reap_order: list[int] = []               # ranks, in the order they were reaped
        self._suspect_until: Optional[float] = None   # _judge waits for a culprit until then
        self._suspect_since: Optional[float] = None   # ... counting from this first look
        self._wake_r = self._wake_w = None
        self._old_handlers: dict[int, object] = {}
        self._old_wakeup = -1
        self._last_turn: Optional[float] = None      # when the loop's previous turn began
        self._last_wait = 0.0                          # ... and how long its poll could wait
        self._heartbeat_epoch = float("-inf")   # silence before this (launcher stopped) is not counted
        self._busy: dict[int, tuple[float, float]] = {}   # silent rank -> (CPU seconds, when)
        self.deadlock: Optional[DeadlockDetector] = None
        self.dynamic = DynamicProcesses(self)   # Spawn's jobs, ports, names (launcher/dynamic.py)
        #: --fault-tolerant: the ranks that failed and the job survived, in order
        self.tolerated: list[int] = []
        #: the job's template process while the job runs (spawned Python ranks fork from it
        #: too); None with --no-fork-server
        self.fork_server: Optional[ForkServer] = None

    # -- messages --------------------------------------------------------------------------
    def log(self, text: str) -> None:
        data = text.encode("utf-8", "replace") + b"\n"
        if self.forward is not None and not self.forward.closed:
            self.forward.log(data)   # queued in order with the ranks' output, never blocks
            return
        try:
            self.stderr.write(data)
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
            ENV_HEARTBEAT_INTERVAL: str(heartbeat_interval(self.spec.heartbeat_timeout)),
            ENV_LOCAL_RANKS: format_ranks(range(self.spec.nprocs)),   # all here (shm.py)
            ENV_UNIVERSE_SIZE: str(self.dynamic.universe_size),
            "PYTHONUNBUFFERED": "1",
        })
        if self.spec.fault_tolerant:
            env[ENV_FAULT_TOLERANT] = "1"
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

    def interrupted(self) -> Optional[str]:
        """The name of the signal (SIGINT, SIGTERM, SIGHUP) that asks the launcher to end
        the job, once one came; None before. Long starts (many ranks, a big Spawn) look
        at it between processes, so that a signal ends the job in every state."""
        sig = self._signal_received
        return None if sig is None else signal.Signals(abs(sig)).name

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

    def fail_with(self, kind: str, exit_code: int, summary: str,
                  details: Optional[list[str]] = None,
                  spawned: Optional[tuple[int, int]] = None) -> None:
        """``fail`` for a process that is not one of ``ranks`` (a spawned one: ``spawned``
        is its job number and rank, when one process is to blame)."""
        self.fail(Failure(kind, exit_code, summary, details=list(details or []),
                          spawned=spawned))

    def terminate_all(self, sig: int) -> None:
        """Send ``sig`` to every rank and spawned process, all at once
        (:func:`~launcher.processes.signal_together`)."""
        everyone = [*self.ranks, *self.dynamic.processes()]
        for rp in everyone:
            if rp.alive:
                rp.killed_by_launcher = True
        signal_together(everyone, sig)

    # -- the loop --------------------------------------------------------------------------
    def _start_fork_server(self, coord_address: str, lifeline_fd: int) -> Optional[ForkServer]:
        """The job's template process; None with --no-fork-server, or if it cannot start
        (then each rank starts alone). Its environment is the ranks' less the rank and the
        secret: what it starts with is what /proc/PID/environ shows of every rank (tools
        find a job's processes by MINIMPI_JOBID there)."""
        if not self.spec.fork_server:
            return None
        try:
            server = ForkServer(self.rank_env(0, coord_address, lifeline_fd),
                                private=(ENV_RANK, ENV_SECRET))
        except OSError as exc:
            self.log(f"minimpi: no fork server ({exc}); starting each rank on its own")
            return None
        server.watch_signals(self._wake_r, self.interrupted)
        return server

    def _start_ranks(self, coord_address: str, lifeline_r: int,
                     fork_server: Optional[ForkServer]) -> None:
        """Start the job's ranks into ``self.ranks`` (a singleton's launcher attaches its
        rank 0 instead: launcher/singleton.py); raises OSError when one cannot start."""
        spec = self.spec
        argv = rank_command(spec.program, spec.module, spec.args)
        for r in range(spec.nprocs):
            if self.interrupted() is not None:
                raise StartInterrupted(f"the launcher received {self.interrupted()}")
            rp = spawn_rank(r, argv, self.rank_env(r, coord_address, lifeline_r),
                            stdin_inherit=(r == 0), pass_fds=(lifeline_r,), cwd=spec.cwd,
                            fork_server=fork_server)
            self.ranks.append(rp)
        if fork_server is not None:
            fork_server.wait_started()   # the requests went out back to back

    def run(self) -> int:
        spec = self.spec
        coord = Coordinator(spec.nprocs, self.secret, self.job_id, host=spec.coord_host,
                            log=self.log)
        self.coord = coord
        forward = OutputForwarder(self.stdout, self.stderr, prefix=spec.prefix,
                                  output_dir=spec.output_dir)
        self.forward = forward
        if spec.dashboard is not None:
            spec.dashboard.attach(self)
        self._install_signals()
        lifeline_r, lifeline_w = os.pipe()   # both non-inheritable; only lifeline_r is passed
        start = time.monotonic()
        fork_server = None
        try:
            fork_server = self.fork_server = self._start_fork_server(coord.address, lifeline_r)
            try:
                self._start_ranks(coord.address, lifeline_r, fork_server)
            except OSError as e:
                if self.interrupted() is not None:   # a signal during start-up: 128 + it
                    self._on_signal_received()
                    self.log(self.failure.summary)
                    return self.failure.exit_code
                self.log(f"minimpi: could not start rank {len(self.ranks)}: {e}")
                return 2
            finally:
                os.close(lifeline_r)
            return self._loop(start)
        finally:
            self.terminate_all(signal.SIGKILL)   # no orphans, whatever happened
            deadline = time.monotonic() + REAP_WAIT
            for rp in self.ranks:
                if rp.alive:
                    try:
                        rp.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
                    except Exception:
                        pass
                rp.close_pidfd()
            self.dynamic.close(deadline)
            if fork_server is not None:
                fork_server.close()   # after its ranks: they die with it
            forward.close_all(give_up=lambda: self._signal_received is not None)
            os.close(lifeline_w)
            coord.close()
            cleanup_job(self.job_id)   # shared-memory segments of ranks that died early
            self._restore_signals()

    def _wakeups_signals_and_coordinator(self, ready: dict) -> None:
        """What every launcher loop does first once its poll returns."""
        if self._wake_r is not None and self._wake_r in ready:
            try:
                os.read(self._wake_r, 512)
            except OSError:
                pass
        if self._signal_received is not None:
            self._on_signal_received()
        if self.forward is not None and self.forward.writers.wake_fd in ready:
            self.forward.writers.clear_wake()
        if self.forward is not None and self.forward.writers.stdout_broken:
            self._on_stdout_closed()
        if self.coord.socket in ready:
            for ev in self.coord.receive():
                self._on_coord_event(ev)

    def _turn(self, poller: LoopPoller) -> float:
        """The start of a loop turn: the time now. A turn that came much later than its poll
        could wait means this process was stopped (Ctrl-Z then fg): the silence of the ranks
        in that time is not theirs, so heartbeats and the deadlock clock count from now, and
        what the ranks sent meanwhile is read first."""
        now = time.monotonic()
        if self._last_turn is not None and now - self._last_turn > self._last_wait + STOP_GAP:
            self._heartbeat_epoch = now
            self._busy.clear()
            if self.deadlock is not None:
                self.deadlock.restart(now)
            self._wakeups_signals_and_coordinator(dict(poller.poll(0)))
        self._last_turn = now
        return now

    def _poll(self, poller: LoopPoller, timeout: float) -> dict:
        self._last_wait = timeout
        return dict(poller.poll(int(timeout * 1000) + 1))

    def _sync_output(self, poller: LoopPoller, polled: set[int]) -> None:
        """Poll the ranks' pipes whose output has somewhere to go; leave out those whose
        destination (our stdout or stderr) is full, so their ranks wait, not the loop."""
        want = set(self.forward.readable_fds())
        for fd in polled - want:
            poller.unregister(fd)
        for fd in want - polled:
            poller.register(fd, zmq.POLLIN)
        polled.clear()
        polled.update(want)

    def _loop(self, start: float) -> int:
        spec, coord, forward = self.spec, self.coord, self.forward
        poller = LoopPoller()
        poller.register(coord.socket, zmq.POLLIN)
        pidfds: dict[int, RankProcess] = {}
        for rp in self.ranks:
            if rp.popen.stdout is not None:   # (None: a rank attached, not started by us)
                forward.add(rp.rank, "stdout", rp.popen.stdout)
                forward.add(rp.rank, "stderr", rp.popen.stderr)
            if rp.pidfd is not None:
                pidfds[rp.pidfd] = rp
                poller.register(rp.pidfd, zmq.POLLIN)
        polled: set[int] = set()   # the pipes being read (_sync_output)
        poller.register(forward.writers.wake_fd, zmq.POLLIN)
        if self._wake_r is not None:
            poller.register(self._wake_r, zmq.POLLIN)
        need_reap_poll = any(rp.pidfd is None for rp in self.ranks)

        job_deadline = start + spec.timeout if spec.timeout else None
        deadlock = DeadlockDetector(coord, lambda r: self.ranks[r].alive, spec.deadlock_timeout)
        self.deadlock = deadlock
        self.dynamic.attach(poller)

        while True:
            now = self._turn(poller)
            startup_deadline = self.startup_deadline()
            # ---- deadlines ----
            if job_deadline is not None and now >= job_deadline and self.failure is None:
                self._on_job_timeout()
            if startup_deadline is not None and now >= startup_deadline:
                self._on_startup_timeout()
            if self.failure is None and self.dynamic.quiet(now) and deadlock.check(now):
                self._on_deadlock()
            spawn_due = self.dynamic.check(now)
            if self._suspect_until is not None and now >= self._suspect_until:
                self._judge(now, give_up=True)
            heartbeat_due = self._check_heartbeats(now)
            held_due = forward.release_stale(now, self._alive)
            if self.kill_at is not None and now >= self.kill_at:
                self.terminate_all(signal.SIGKILL)
                self.kill_at = None
            # ---- done? ----
            all_reaped = all(not rp.alive for rp in self.ranks) and self.dynamic.all_reaped()
            if all_reaped and self._suspect_until is not None:
                self._judge(now, give_up=True)   # every rank has ended: nothing more to learn
            if all_reaped:
                if self.all_done_at is None:
                    self.all_done_at = now
                    # leftovers of finished ranks may hold the pipes open: end them
                    self.terminate_all(signal.SIGKILL)
                if not forward.readable_fds() or now - self.all_done_at > 2.0:
                    break   # (pipes left unread for a slow reader: close_all reads them)
            # ---- wait ----
            waits = [d for d in (job_deadline, self.kill_at, self.startup_deadline(),
                                 self._suspect_until, heartbeat_due, held_due, spawn_due)
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
            self._sync_output(poller, polled)
            ready = self._poll(poller, timeout)
            self._wakeups_signals_and_coordinator(ready)
            # (the pipes polled, not every stream ever added: a closed pipe's number may
            # belong to a spawned process's pidfd now)
            for fd in [fd for fd in ready if isinstance(fd, int) and fd in polled]:
                if not forward.read(fd):
                    poller.unregister(fd)
                    polled.discard(fd)
            for fd in [fd for fd in ready if isinstance(fd, int) and fd in pidfds]:
                rp = pidfds.pop(fd)
                poller.unregister(fd)
                self._reap(rp)
            self.dynamic.on_ready(ready)
            if need_reap_poll:
                for rp in self.ranks:
                    if rp.pidfd is None and rp.alive:
                        self._reap(rp)
                self.dynamic.reap_without_pidfd()
        return self._finish()

    def _alive(self, rank) -> bool:
        """Whether the process whose output streams are keyed ``rank`` runs (a rank of this
        job, or a spawned process's label)."""
        return self.ranks[rank].alive if isinstance(rank, int) else self.dynamic.alive(rank)

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
        rc = rp.reap_exited()     # its pidfd is readable: it exited
        if rc is None:
            return
        how = describe_returncode(rc)
        self.coord.ranks[rp.rank].exit_status = how
        self.reap_order.append(rp.rank)
        if rc == 0 and self.forward is not None:
            self.forward.release(rp.rank)   # a traceback it caught and printed: show it now
        if self.failure is not None or rp.killed_by_launcher:
            return
        if self.spec.fault_tolerant and self.coord.table_sent:
            if rc != 0:
                self._tolerate(rp.rank, how)
            return
        self._judge(time.monotonic())
        if self.failure is None:
            self._check_vanished()

    def _tolerate(self, rank: int, how: str) -> None:
        """--fault-tolerant: ``rank`` failed; tell every rank still running, and go on."""
        self.tolerated.append(rank)
        report = self.coord.ranks[rank].failure or {}
        why = how + (f": {report['error']}" if report.get("error") else "")
        told = [rp.rank for rp in self.ranks if rp.alive and rp.rank != rank]
        for other in told:
            self.coord.send(other, {"t": "proc_failed", "rank": rank, "why": why})
        self.log(f"minimpi: rank {rank} {why}; --fault-tolerant: " + (
            f"rank(s) {_ranks(told)} were told (MPI.ERR_PROC_FAILED) and go on" if told
            else "no other rank is still running"))

    # -- who is to blame -------------------------------------------------------------------
    def _failed_alone(self, rank: int) -> bool:
        """Whether ``rank`` (reaped, non-zero) failed for a reason of its own rather than
        because a peer vanished: its own error, a signal, an exit code with no lost peer."""
        st, rc = self.coord.ranks[rank], self.ranks[rank].returncode
        if st.failure is not None:
            return not st.failure.get("consequence")
        return rc is not None and (rc < 0 or not st.lost)

    def _suspects(self, failed: list[int]) -> list[int]:
        """Ranks the consequence failures in ``failed`` point at: the peers they lost,
        followed through ranks that themselves only lost a peer, plus every rank that
        reported an error of its own (it is about to exit), earliest report first."""
        coord = self.coord
        seen, stack, roots = set(failed), list(failed), []
        while stack:
            for peer in coord.ranks[stack.pop()].lost:
                if peer in seen:
                    continue
                seen.add(peer)
                f = coord.ranks[peer].failure
                if f is not None and f.get("consequence"):
                    stack.append(peer)
                else:
                    roots.append(peer)
        errors = sorted((st for st in coord.ranks
                         if st.failure is not None and not st.failure.get("consequence")),
                        key=lambda st: st.state_time or 0.0)
        return [st.rank for st in errors if st.rank not in roots] + roots

    def _judge(self, now: float, give_up: bool = False) -> None:
        """Decide who ended the job, from the ranks reaped so far (see the module doc).

        Among the ranks the failures point at, in this order: one that reported an error of
        its own, one that ended abnormally, one that exited 0 (a peer that merely finished
        also shows up as "lost", so this one is only believed after a short wait in which
        no rank reported an error of its own), one still running.
        """
        if self.failure is not None:
            return
        failed = [r for r in self.reap_order
                  if self.ranks[r].returncode != 0 and not self.ranks[r].killed_by_launcher]
        if not failed:
            self._suspect_until = self._suspect_since = None
            return
        for r in failed:
            if self._failed_alone(r):
                return self._blame(r, failed)
        suspects = self._suspects(failed)
        if not suspects and self.dynamic.jobs and not give_up:
            # the peer these failures lost is a process of a spawned job (it is not one of
            # ours, so it is no suspect here): its own exit, reported by launcher/dynamic.py,
            # is the better lead - give it the settle time
            if self._suspect_since is None:
                self._suspect_since = now
            self._suspect_until = self._suspect_since + self.spec.settle
            if now < self._suspect_until:
                return
        coord = self.coord
        errors = [r for r in suspects if coord.ranks[r].failure is not None]
        reaped = [r for r in self.reap_order if r in suspects]
        clean = [r for r in reaped if self.ranks[r].returncode == 0]
        for r in reaped:
            if r in errors or self.ranks[r].returncode != 0:
                return self._blame(r, failed)
        if self._suspect_since is None:
            self._suspect_since = now
        wait = self.spec.settle if (errors or not clean) else min(1.0, self.spec.settle)
        self._suspect_until = self._suspect_since + wait
        if suspects and not give_up and now < self._suspect_until:
            return
        # the wait is over: the best lead there is (an error it reported beats a clean exit)
        lead = errors or clean or suspects or failed
        self._blame(lead[0], failed)

    def _blame(self, culprit: int, failed: list[int]) -> None:
        self._suspect_until = None
        rc = self.ranks[culprit].returncode
        first_rc = next((self.ranks[r].returncode for r in failed if r != culprit), 1)
        st = self.coord.ranks[culprit]
        waiting = [r for r in failed if r != culprit and culprit in self.coord.ranks[r].lost]
        if rc is None and st.failure is not None and st.failure.get("error"):
            # reported its error but has not ended yet (the teardown will end it)
            self.fail(Failure("exit", exit_code_for(first_rc),
                              f"minimpi: rank {culprit} failed: {st.failure['error']}",
                              rank=culprit))
            return
        if rc is None or rc == 0:
            # it ended its part cleanly (or closed its connections and runs on) while others
            # still needed it: the job failed, so its code cannot be 0
            how = "exited with code 0" if rc == 0 else "closed its connections and kept running"
            text = f"minimpi: rank {culprit} {how}"
            if waiting:
                text += (f" while rank(s) {_ranks(waiting)} still expected messages from it "
                         f"(every rank must take part until its peers are done with it)")
            self.fail(Failure("exit", exit_code_for(first_rc), text, rank=culprit))
            return
        text = f"minimpi: rank {culprit} {describe_returncode(rc)}"
        if st.failure is not None and st.failure.get("error"):
            text += f": {st.failure['error']}"
        self.fail(Failure("signal" if rc < 0 else "exit", exit_code_for(rc), text, rank=culprit))

    def _check_heartbeats(self, now: float) -> Optional[float]:
        """Fail the job if a running rank stopped sending heartbeats; returns when the next
        check is due (None: nothing to watch)."""
        limit = self.spec.heartbeat_timeout
        if limit <= 0 or self.failure is not None or not self.coord.table_sent:
            return None
        due = None
        for st in self.coord.ranks:
            if st.last_seen is None or st.finalized or not self.ranks[st.rank].alive:
                continue
            seen = max(st.last_seen, self._heartbeat_epoch)
            if now - seen <= limit:
                self._busy.pop(st.rank, None)
                when = seen + limit
            else:
                when = self._silent_rank(st.rank, now, now - st.last_seen)
                if when is None:
                    return None
            due = when if due is None else min(due, when)
        return due

    def _silent_rank(self, rank: int, now: float, silent: float) -> Optional[float]:
        """A rank sent no heartbeat for longer than --heartbeat-timeout. Stopped, or not
        running at all: end the job. Running (its CPU time grows: one long call that holds
        Python's GIL, e.g. sorting a huge list, keeps the heartbeat thread from sending):
        alive, looked at again later. Returns when to look again (None: the job ends)."""
        limit = self.spec.heartbeat_timeout
        state, cpu = _process_state(self.ranks[rank].pid)
        head = (f"minimpi: rank {rank} sent no heartbeat for {silent:.0f} s "
                f"(--heartbeat-timeout {limit:g})")
        if state == "stopped":
            self.fail(Failure("unresponsive", EXIT_UNRESPONSIVE,
                              f"{head} - its process is stopped (SIGSTOP, Ctrl-Z or a "
                              f"debugger); ending the job", rank=rank))
            return None
        window = max(BUSY_PROBE, limit / 4)
        if cpu is not None:
            last = self._busy.get(rank)
            if last is None or cpu > last[0]:   # first look, or it ran since the last one
                self._busy[rank] = (cpu, now)
                return now + window
            if now - last[1] < window:
                return last[1] + window
        how = (f" and its process used no CPU time for {now - self._busy[rank][1]:.0f} s "
               f"(state {state}: hung in a call that holds Python's GIL?)"
               if cpu is not None else " (its host may be unreachable, or it is stuck in a "
               "call that holds Python's GIL)")
        self.fail(Failure("unresponsive", EXIT_UNRESPONSIVE,
                          f"{head}{how}; ending the job (if it was working, raise "
                          f"--heartbeat-timeout, or 0 turns the check off)", rank=rank))
        return None

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
        if ev.data is not None:   # a request about other jobs (Spawn, ports, names)
            self.dynamic.on_request(self.coord, ev)
            return
        if ev.kind == "failed" and self.failure is None and self._suspect_until is not None:
            self._judge(time.monotonic())   # a suspect reported its own error: maybe decisive
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
        lines += self.dynamic.describe()
        self.fail(Failure("timeout", EXIT_TIMEOUT,
                          f"minimpi: job timed out after {self.spec.timeout:g} s (--timeout); "
                          "what each rank was doing:", details=lines))

    def _on_deadlock(self) -> None:
        summary, lines = build_report(self.coord, lambda r: self.ranks[r].alive,
                                      self.spec.deadlock_timeout)
        lines += self.dynamic.describe()
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

    def _on_stdout_closed(self) -> None:
        """Our stdout's reader went away (``minimpi run ... | head -1``): as a shell pipeline
        would, the job ends, with the code of death by SIGPIPE."""
        if self.failure is None:
            self.fail(Failure("stdout", EXIT_STDOUT_CLOSED,
                              "minimpi: stdout was closed by its reader (e.g. | head); "
                              "ending the job"))

    # -- the end ---------------------------------------------------------------------------
    def _finish(self) -> int:
        f = self.failure
        if f is None and self.tolerated:
            return self._finish_tolerated()
        if f is not None:
            self.log(f.summary)
            for line in f.details:
                self.log(line)
            if self.forward is not None and f.rank is not None and \
                    f.kind in ("exit", "signal", "abort", "unresponsive"):
                self._culprit_report(f.rank)
            elif self.forward is not None and f.kind == "host":
                self._others_report(set(f.lost_ranks))
        if self.forward is not None:
            self.forward.release()   # tracebacks the summary does not account for
        return 0 if f is None else f.exit_code

    def _finish_tolerated(self) -> int:
        """--fault-tolerant, and ranks failed: name each (its error, line and traceback),
        then what the survivors did; the job's code is theirs (0 when one finished with 0),
        else the first failed rank's."""
        finished = [rp.rank for rp in self.ranks if rp.returncode == 0]
        for rank in self.tolerated:
            self.log(f"minimpi: rank {rank} failed ({self.coord.ranks[rank].exit_status}); "
                     f"the job went on without it (--fault-tolerant)")
            if self.forward is not None:
                self._culprit_details(rank)
        if finished:
            code = 0
            self.log(f"minimpi: {len(finished)} rank(s) finished with exit code 0 "
                     f"({_ranks(finished)}) after rank(s) {_ranks(self.tolerated)} failed; the "
                     f"job's exit code is theirs: 0")
        else:
            code = exit_code_for(self.ranks[self.tolerated[0]].returncode)
            self.log(f"minimpi: no rank finished: every rank failed; exit code {code} (rank "
                     f"{self.tolerated[0]}'s, the first to fail)")
        if self.forward is not None:
            self.forward.release()
        return code

    def _culprit_report(self, culprit: int) -> None:
        """After the summary line: the culprit's own line and traceback, then one line for
        all the ranks that stopped because of it (their tracebacks are held back)."""
        self._culprit_details(culprit)
        self._others_report({culprit})

    def _culprit_details(self, culprit: int) -> None:
        """The line of the user's code where ``culprit`` failed, and its traceback (without
        minimpi's frames) or the last lines it wrote to stderr."""
        coord, forward = self.coord, self.forward
        report = coord.ranks[culprit].failure or {}
        if report.get("where"):
            at = f"minimpi:   at {report['where']}"
            if report.get("func") and report["func"] != "<module>":
                at += f" in {report['func']}()"
            self.log(at + (f": {report['code']}" if report.get("code") else ""))
        held = forward.held(culprit)
        if held:
            self.log(f"minimpi: rank {culprit}'s traceback (minimpi's own frames left out):")
            for line in user_traceback(held):
                self.log(f"  | {line}")
            forward.discard(culprit)
        else:
            tail = forward.stderr_tail(culprit)
            if tail:
                self.log(f"minimpi: last lines rank {culprit} wrote to stderr:")
                for line in tail:
                    self.log(f"  | {line}")

    def _others_report(self, culprits: set[int]) -> None:
        """One line for all the ranks that stopped because of ``culprits`` (a rank, or the
        ranks of a lost host); their tracebacks are held back, and where to find them said."""
        coord, forward = self.coord, self.forward
        lost, own, ended = [], [], []
        for st in coord.ranks:
            rp = self.ranks[st.rank]
            if st.rank in culprits or rp.returncode == 0:
                continue
            if st.failure is not None and not st.failure.get("consequence"):
                where = f" at {st.failure['where']}" if st.failure.get("where") else ""
                own.append(f"rank {st.rank} failed too ({st.failure.get('type') or 'error'}"
                           f"{where})")
            elif st.failure is not None or (not rp.killed_by_launcher and rp.returncode):
                lost.append(st.rank)
            else:
                ended.append(st.rank)
        total = len(own) + len(lost) + len(ended)
        parts = own
        if lost:
            parts.append(f"rank(s) {_ranks(lost)} lost a peer (PeerLostError)")
        if ended:
            parts.append(f"rank(s) {_ranks(ended)} were ended by the launcher")
        if not total:
            return
        self.log(f"minimpi: {total} other rank(s) stopped because of it: {'; '.join(parts)}")
        hidden = [r for r in range(len(self.ranks)) if r not in culprits and forward.discard(r)]
        if hidden:
            where = (f"they are in {self.spec.output_dir}/rank.N.stderr" if self.spec.output_dir
                     else "run with --output-dir DIR to keep every rank's output")
            self.log(f"minimpi: tracebacks of rank(s) {_ranks(hidden)} not shown; {where}")


def user_traceback(lines: list[str]) -> list[str]:
    """A traceback's lines without the entries of minimpi's own frames (the user's frames
    and the exception stay; if nothing of the user's is left, the whole traceback)."""
    out: list[str] = []
    skipping = dropped = kept = False
    for line in lines:
        if line.startswith('  File "'):
            path = line[len('  File "'):].split('"', 1)[0]
            skipping = os.path.abspath(path).startswith(_OWN_DIRS) or path.startswith("<frozen")
            dropped |= skipping
            kept |= not skipping
            if not skipping:
                out.append(line)
        elif skipping and line.startswith("    "):
            continue   # the source line and ^^^ markers of a frame left out
        else:
            skipping = False
            out.append(line)
    return out if kept or not dropped else lines


def heartbeat_interval(timeout: float) -> float:
    """How often ranks send a heartbeat for a given --heartbeat-timeout (0: never)."""
    return 0.0 if timeout <= 0 else max(0.2, min(2.0, timeout / 5))


def _ranks(ranks: list[int]) -> str:
    """``0, 2-57, 63``: runs of three or more as ranges, so 64 ranks fit on a line."""
    if not ranks:
        return "none"
    parts, ordered = [], sorted(ranks)
    start = prev = ordered[0]
    for r in ordered[1:] + [None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        parts.append(f"{start}-{prev}" if prev - start >= 2 else
                     ", ".join(str(x) for x in range(start, prev + 1)))
        if r is not None:
            start = prev = r
    return ", ".join(parts)


def run_job(spec: JobSpec, stdout: Optional[BinaryIO] = None,
            stderr: Optional[BinaryIO] = None) -> int:
    """Run one job to completion; returns the launcher's exit code."""
    return Job(spec, stdout, stderr).run()
