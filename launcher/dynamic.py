"""The launcher's side of dynamic processes: jobs started by ``Spawn``, ports and names.

A rank's request arrives as a coordinator event (``launcher/coordinator.py``,
``REQUEST_KINDS``); :class:`DynamicProcesses` answers it with ``{"t": "reply", "n": ID,
"ok": ...}``. The job's loop (``launcher/job.py``) calls it at a few points: a request
(:meth:`~DynamicProcesses.on_request`), what its poll found (:meth:`~DynamicProcesses.on_ready`),
its deadlines, teardown and the end.

**Spawn.** The processes of one ``Spawn``/``Spawn_multiple`` form a *spawned job*: job
number k (1, 2, ... in the order they are started), its own coordinator (the same class as
the main job's, on a port of its own, with the same job secret: the data plane authenticates
them exactly as the main job's ranks), its own ``COMM_WORLD``. Each process starts through
the path every rank starts through (``run.rank_start``, ``spawn.spawn_rank``: the start script,
its own session, death with the launcher, a lifeline pipe), with the environment of a rank of
the main job plus ``MINIMPI_JOBNO`` and ``MINIMPI_PARENT`` (the parents' addresses). The
launcher answers the spawning root once every new process has registered (joined its world),
or with an error naming the command when one cannot start, ends before it joins, or does not
join within ``--startup-timeout``; then the others of that spawn are killed, so a failed spawn
never hangs and leaves nothing behind. After the answer a spawned process is a rank like any
other: its output is forwarded with the prefix ``[job k:r]``, its failure ends the job
(``spawned job k, rank r ...`` in the summary), ``--timeout`` and the teardown end it.

**Universe.** ``--universe-size U`` (default: ``-n``) is what ``MPI.UNIVERSE_SIZE`` says.
Given explicitly, it is also a limit: a spawn that would make more than U processes run at
once is refused.

**On several hosts** (``--hosts``, ``--hostfile``, Slurm: ``launcher/multihost.py``) the job
hands this class an :class:`AgentStarter` (:meth:`DynamicProcesses.use_agents`): the universe
is then the hosts' slots (or ``--universe-size``), the processes are placed on the host of
the ``host`` info key, else on the hosts' free slots in order, and each host's agent starts
its share (a ``spawn`` frame, ``launcher/agent.py``) with the spawned job's coordinator bound
where the job's own is (the other hosts reach it); their output and exits come back in the
agent's frames, as the job's ranks' do.

**Liveness.** A spawned process that stops sending heartbeats for ``--heartbeat-timeout``
(stopped, or hung with no CPU time used, or on a host that no longer answers) ends the job,
named, as a rank of the job would (:meth:`DynamicProcesses.check`).

**Ports and names** (``Open_port``/``Accept``/``Connect``, ``Publish_name``/
``Lookup_name``): the launcher is the name service and the meeting point of a port's
``Accept`` and ``Connect`` (see :meth:`DynamicProcesses._on_port`).
"""
from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from minimpi.runtime.bootstrap import (
    ENV_JOBID,
    ENV_JOBNO,
    ENV_PARENT,
    ENV_RANK,
    ENV_SIZE,
    ENV_UNIVERSE_SIZE,
)
from minimpi.transports.shm import cleanup_job

from .coordinator import CoordEvent, Coordinator
from .deadlock import EXIT_DEADLOCK
from .forkserver import StartInterrupted
from .processes import (
    EXIT_UNRESPONSIVE,
    RankProcess,
    describe_returncode,
    exit_code_for,
    process_state,
    rank_command,
    spawn_rank,
)

#: interpreters accepted as a spawn's command (the processes run under the launcher's Python)
_PYTHON = re.compile(r"python[\d.]*")


#: a silent spawned process that is running (its CPU time grows) is looked at again this often
BUSY_PROBE = 1.0
#: a spawn that finds no room while spawned processes still run waits up to this long for
#: some of them to end (those a ``Disconnect`` just let go are on their way out) before it is
#: refused
ROOM_WAIT_S = 3.0
#: while a spawn's processes are being started, every this many a look at whether one of
#: them has already ended (then no more are started)
LOOK_EVERY = 16
#: how long the end of the job waits, in all, for the spawned processes to go once killed
REAP_WAIT = 5.0
#: descriptors the launcher holds for each process it starts on this host while it runs:
#: its stdout and stderr pipes, its pidfd and its coordinator connection (and its two
#: files with --output-dir)
FDS_PER_PROCESS = 4
#: ... for each spawned job (its coordinator: a zmq context and socket; its lifeline pipe)
FDS_PER_JOB = 16
#: ... kept free beyond those for what else the launcher opens while the job runs
FDS_RESERVE = 64


class SpawnRefused(Exception):
    """A spawn request that cannot be carried out; the text goes back to the rank."""


class NoRoom(SpawnRefused):
    """Not enough room now (universe, or the hosts' slots): maybe once others have ended."""


class AgentStarter:
    """How a job whose processes run through agents places and starts spawned processes
    (``launcher/multihost.py`` implements it)."""

    def coordinator_host(self) -> str:
        """The address a spawned job's coordinator binds to (reachable from every host)."""
        raise NotImplementedError

    def place(self, apps: list[dict], shown: str) -> list[str]:
        """The host of each new process, in rank order (``apps``: the request's
        applications, with ``maxprocs`` and ``info``); raises :class:`SpawnRefused` when they
        do not fit."""
        raise NotImplementedError

    def start(self, sj: "SpawnedJob", procs: list[dict]) -> list[Any]:
        """Ask the agents to start ``procs`` (``{"r", "host", "argv", "python", "cwd",
        "env"}``, in rank order) as spawned job ``sj``; returns one process handle each
        (``alive``, ``returncode``, ``killed_by_launcher``, ``signal_group``...)."""
        raise NotImplementedError

    def add_output(self, job: int, rank: int, label: str) -> None:
        """Forward the output that the agent will send for process ``rank`` of ``job``."""
        raise NotImplementedError

    def host_silent(self, process: Any, now: float) -> Optional[float]:
        """For a silent spawned process: when to look again if its host's agent is silent
        too (the host's loss is then what the job reports), else None."""
        raise NotImplementedError


@dataclass
class SpawnedJob:
    """The processes of one Spawn / Spawn_multiple."""

    number: int
    job_id: str
    command: str                       # for messages: the first app's command line
    coord: Coordinator
    requester: tuple                   # (coordinator, rank, request id) to answer
    deadline: float                    # when the processes must all have registered
    lifeline_w: Optional[int]          # closed when the launcher ends: the processes end too
    processes: list = field(default_factory=list)   # RankProcess, index = its world rank
    answered: bool = False
    #: silent process -> (CPU seconds, when seen) while it is judged (heartbeats)
    busy: dict = field(default_factory=dict)

    def label(self, rank: int) -> str:
        return f"job{self.number}:{rank}"

    def name(self, rank: int) -> str:
        return f"spawned job {self.number}, rank {rank}"


class DynamicProcesses:
    """Spawned jobs, ports and published names of one launcher job."""

    def __init__(self, job: Any) -> None:
        self.job = job
        spec = job.spec
        self.universe_size: int = getattr(spec, "universe_size", None) or spec.nprocs
        self.universe_limited = getattr(spec, "universe_size", None) is not None
        self.jobs: dict[int, SpawnedJob] = {}
        self.poller = None                  # the job loop's poller, once it runs
        self._pidfds: dict[int, tuple] = {}    # pidfd -> (spawned job, rank)
        self._sockets: dict[Any, SpawnedJob] = {}   # coordinator socket -> spawned job
        self.names: dict[str, str] = {}     # published service name -> port name
        self.ports: dict[str, dict] = {}    # open port -> its pending accept/connect
        self._next_port = 0
        self._fingerprint: tuple = ()         # the spawned processes' states (quiet)
        self._moved_at = time.monotonic()    # when they last changed
        #: spawns that wait for room: [deadline, coordinator, rank, request id, request]
        self._waiting: list = []
        self._running = 0                    # processes running at the last look (_retry)
        #: set by use_agents: spawned processes are placed on hosts and started by agents
        self.agents: Optional[AgentStarter] = None
        self.slots = 0                      # the hosts' slots (0: one host, no slot count)

    def use_agents(self, starter: AgentStarter, slots: int) -> None:
        """A job whose processes agents start (several hosts, Slurm): spawned processes go
        through ``starter``; the universe is ``slots`` unless --universe-size said, and it
        limits the processes that run at once either way."""
        self.agents = starter
        self.slots = slots
        if not self.universe_limited:
            self.universe_size = slots
        self.universe_limited = True

    # -- the loop's hooks ----------------------------------------------------------------
    def attach(self, poller: Any) -> None:
        """The job's loop runs (locally): spawning is possible from now on."""
        self.poller = poller

    def on_request(self, coord: Coordinator, ev: CoordEvent) -> None:
        """A rank's request (spawn, port, name): answer it, now or when it is decided."""
        msg = ev.data or {}
        number = msg.get("n")
        try:
            if ev.kind == "spawn":
                self._spawn(coord, ev.rank, number, msg)
            elif ev.kind == "port":
                self._on_port(coord, ev.rank, number, msg)
            else:
                self._on_name(coord, ev.rank, number, ev.kind, msg)
        except SpawnRefused as exc:
            self.reply(coord, ev.rank, number, ok=False, error=str(exc))

    def on_ready(self, ready: dict) -> None:
        """What the loop's poll found for spawned jobs: coordinator messages, exits."""
        for sock, sj in list(self._sockets.items()):
            if sock in ready:
                for ev in sj.coord.receive():
                    self._on_child_event(sj, ev)
        for fd in [fd for fd in ready if isinstance(fd, int) and fd in self._pidfds]:
            sj, rank = self._pidfds[fd]
            if sj.processes[rank].popen.poll() is None:
                continue   # a number reused this turn (a pidfd made after the poll)
            del self._pidfds[fd]
            self.poller.unregister(fd)
            self._reap(sj, rank)

    def _retry(self, now: float) -> Optional[float]:
        """Spawns that wait for room: tried again when a process has ended since the last
        look, refused at their deadline; returns the next deadline."""
        running = self.running()
        freed, self._running = running < self._running, running
        waiting, self._waiting = self._waiting, []
        for item in waiting:
            deadline, coord, rank, number, msg = item
            if not freed and now < deadline:
                self._waiting.append(item)
                continue
            try:
                self._spawn(coord, rank, number, msg, room_until=deadline)
            except SpawnRefused as exc:
                self.reply(coord, rank, number, ok=False, error=str(exc))
        return min((item[0] for item in self._waiting), default=None)

    def running(self) -> int:
        """Processes of the job and of its spawned jobs that run now."""
        return len([rp for rp in self.job.ranks if rp is not None and rp.alive]) + \
            self.live_count()

    def check(self, now: float) -> Optional[float]:
        """Spawns whose processes did not all join in time fail; returns the next deadline."""
        due = self._retry(now) if self._waiting else None
        for sj in self.jobs.values():
            if sj.answered:
                continue
            if now >= sj.deadline:
                missing = sj.coord.missing_ranks()
                self._refuse_started(sj, f"rank(s) {', '.join(map(str, missing))} did not "
                                         f"initialize MPI within {self.job.spec.startup_timeout:g} "
                                         f"s (--startup-timeout)")
            else:
                due = sj.deadline if due is None else min(due, sj.deadline)
        for when in (self._check_heartbeats(now), self._check_deadlock(now)):
            if when is not None:
                due = when if due is None else min(due, when)
        return due

    def _check_deadlock(self, now: float) -> Optional[float]:
        """Spawned processes that deadlock among themselves once every rank of the job has
        ended (the job's own deadlock check needs a running rank): every running spawned
        process blocked and nothing moved for --deadlock-timeout ends the job, with what each
        one waits for. Returns when to look again."""
        job, timeout = self.job, self.job.spec.deadlock_timeout
        if timeout <= 0 or job.failure is not None or not self.live_count() or \
                any(rp is not None and rp.alive for rp in job.ranks):
            return None
        if not self.all_blocked():
            return None
        if now - self._moved_at < timeout:
            return self._moved_at + timeout
        job.fail_with("deadlock", EXIT_DEADLOCK,
                      f"minimpi: deadlock: every spawned process still running is blocked in "
                      f"minimpi and nothing has moved for {timeout:g} s (--deadlock-timeout; "
                      f"the job's ranks have ended); what each one is doing:",
                      [line for line in self.describe() if "blocked" in line])
        return None

    def _check_heartbeats(self, now: float) -> Optional[float]:
        """Fail the job when a running spawned process sent no heartbeat for
        --heartbeat-timeout (as ``Job._check_heartbeats`` does for the job's ranks); returns
        when to look again. Cost: one pass over the spawned processes."""
        job = self.job
        limit = job.spec.heartbeat_timeout
        if limit <= 0 or job.failure is not None:
            return None
        epoch = getattr(job, "_heartbeat_epoch", float("-inf"))   # the launcher was stopped
        due = None
        for sj in self.jobs.values():
            if not sj.answered:
                continue
            for st in sj.coord.ranks:
                rp = sj.processes[st.rank] if st.rank < len(sj.processes) else None
                if rp is None or st.last_seen is None or st.finalized or not rp.alive:
                    continue
                seen = max(st.last_seen, epoch)
                if now - seen <= limit:
                    sj.busy.pop(st.rank, None)
                    when = seen + limit
                else:
                    when = self._silent(sj, st.rank, now, now - st.last_seen)
                    if when is None:
                        return None
                due = when if due is None else min(due, when)
        return due

    def _silent(self, sj: SpawnedJob, rank: int, now: float, silent: float) -> Optional[float]:
        """A spawned process is silent: stopped, or using no CPU time, or on another host
        (nothing to look at here): the job ends, naming it; running: look again later."""
        limit = self.job.spec.heartbeat_timeout
        rp = sj.processes[rank]
        if rp.popen is None and self.agents is not None:
            later = self.agents.host_silent(rp, now)
            if later is not None:
                return later
        state, cpu = process_state(getattr(rp, "pid", None))
        head = (f"minimpi: {sj.name(rank)} (`{sj.command}`) sent no heartbeat for "
                f"{silent:.0f} s (--heartbeat-timeout {limit:g})")
        if state == "stopped":
            self.job.fail_with("unresponsive", EXIT_UNRESPONSIVE,
                               f"{head} - its process is stopped (SIGSTOP, Ctrl-Z or a "
                               f"debugger); ending the job", spawned=(sj.number, rank))
            return None
        window = max(BUSY_PROBE, limit / 4)
        if cpu is not None:
            last = sj.busy.get(rank)
            if last is None or cpu > last[0]:
                sj.busy[rank] = (cpu, now)
                return now + window
            if now - last[1] < window:
                return last[1] + window
        how = (f" and its process used no CPU time for {now - sj.busy[rank][1]:.0f} s"
               if cpu is not None else " (its host may be unreachable, or it is stuck in a "
               "call that holds Python's GIL)")
        self.job.fail_with("unresponsive", EXIT_UNRESPONSIVE,
                           f"{head}{how}; ending the job (if it was working, raise "
                           f"--heartbeat-timeout, or 0 turns the check off)",
                           spawned=(sj.number, rank))
        return None

    def on_agent_exit(self, number: int, rank: int, rc: int) -> None:
        """An agent says process ``rank`` of spawned job ``number`` ended with ``rc``."""
        sj = self.jobs.get(number)
        if sj is None or not 0 <= rank < len(sj.processes) or not sj.processes[rank].alive:
            return
        sj.processes[rank].returncode = rc
        self._reap(sj, rank)

    def on_agent_start_failed(self, number: int, rank: int, why: str) -> None:
        """An agent could not start process ``rank`` of spawned job ``number``."""
        sj = self.jobs.get(number)
        if sj is None or not 0 <= rank < len(sj.processes):
            return
        rp = sj.processes[rank]
        if rp.alive:
            rp.killed_by_launcher = True
            rp.returncode = 127
            sj.coord.ranks[rank].exit_status = "could not start"
        if not sj.answered:
            self._refuse_started(sj, f"could not start process {rank} {why}")

    def on_agent_lost(self, is_on: Any, why: str) -> list[str]:
        """The agent of a host is gone: its spawned processes are too (``is_on(process)``
        says which). A spawn still waiting for them fails with ``why``; returns the names of
        those that ran there after their spawn completed (the host's loss then ends the job)."""
        lost = []
        for sj in self.jobs.values():
            here = [r for r, rp in enumerate(sj.processes) if rp.alive and is_on(rp)]
            for r in here:
                sj.processes[r].returncode = -signal.SIGKILL
                sj.processes[r].killed_by_launcher = True
                sj.coord.ranks[r].exit_status = "lost with its host"
            if here and not sj.answered:
                self._refuse_started(sj, why)
            elif here:
                lost += [sj.name(r) for r in here]
        return lost

    def alive(self, label: str) -> bool:
        for sj in self.jobs.values():
            for rank, rp in enumerate(sj.processes):
                if sj.label(rank) == label:
                    return rp.alive
        return False

    def all_reaped(self) -> bool:
        return all(not rp.alive for sj in self.jobs.values() for rp in sj.processes)

    def live_count(self) -> int:
        return sum(rp.alive for sj in self.jobs.values() for rp in sj.processes)

    def quiet(self, now: float) -> bool:
        """For the deadlock check: whether every running spawned process reports being
        blocked, with nothing moved among them since the last look; when something moved (a
        state report, an exit), the job's deadlock clock starts again from ``now``, so work
        that only spawned processes do is never taken for a deadlock of the job's ranks."""
        fp = tuple((st.state_time, st.finalized, sj.processes[st.rank].alive)
                   for sj in self.jobs.values() for st in sj.coord.ranks
                   if st.rank < len(sj.processes))
        if fp != self._fingerprint:
            self._fingerprint = fp
            self._moved_at = now
            if self.job.deadlock is not None:
                self.job.deadlock.restart(now)
        return self.all_blocked()

    def all_blocked(self) -> bool:
        """Whether every running spawned process reports being blocked in minimpi (the
        deadlock check then also needs the main job's ranks blocked)."""
        for sj in self.jobs.values():
            for st in sj.coord.ranks:
                if st.rank < len(sj.processes) and sj.processes[st.rank].alive and \
                        not st.finalized and \
                        not (isinstance(st.state, dict) and st.state.get("blocked")):
                    return False
        return True

    def describe(self) -> list[str]:
        """One line per spawned process, for the --timeout report."""
        lines = []
        for sj in self.jobs.values():
            for st in sj.coord.ranks:
                lines.append(f"  {sj.name(st.rank)}: {st.describe()}")
        return lines

    def processes(self) -> list:
        """Every process spawned in this job (each a ``RankProcess``)."""
        return [rp for sj in self.jobs.values() for rp in sj.processes]

    def signal_all(self, sig: int) -> None:
        for rp in self.processes():
            if rp.alive:
                rp.killed_by_launcher = True
            rp.signal_group(sig)

    def close(self, deadline: Optional[float] = None) -> None:
        """The job is over: nothing spawned survives it. Waits for the processes to go
        until ``deadline`` (default: :data:`REAP_WAIT` s from now), for all of them
        together: a thousand spawned processes never keep the launcher 5 s each."""
        self.signal_all(signal.SIGKILL)
        if deadline is None:
            deadline = time.monotonic() + REAP_WAIT
        for sj in self.jobs.values():
            for rp in sj.processes:
                if rp.alive and rp.popen is not None:
                    try:
                        rp.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
                    except Exception:
                        pass
                rp.close_pidfd()
            if sj.lifeline_w is not None:
                try:
                    os.close(sj.lifeline_w)
                except OSError:
                    pass
            sj.coord.close()
            cleanup_job(sj.job_id)

    # -- answers -------------------------------------------------------------------------
    @staticmethod
    def reply(coord: Coordinator, rank: int, number: Any, ok: bool, **fields: Any) -> None:
        coord.send(rank, {"t": "reply", "n": number, "ok": ok, **fields})

    # -- spawn ---------------------------------------------------------------------------
    def _spawn(self, coord: Coordinator, rank: int, number: Any, msg: dict,
               room_until: Optional[float] = None) -> None:
        """Start the processes a spawn request asks for (``room_until``: a request that
        waited for room, until then)."""
        if self.poller is None:
            return self.reply(coord, rank, number, ok=False, kind="unsupported",
                              error="this launcher starts no processes for Spawn (its job "
                                    "loop does not run)")
        apps, parents = msg.get("apps"), msg.get("parents")
        if not isinstance(apps, list) or not apps or not isinstance(parents, list) or \
                not all(isinstance(a, dict) for a in apps):
            raise SpawnRefused("a malformed spawn request")
        sig = self.job.interrupted()
        if sig is not None:
            raise SpawnRefused(f"the launcher received {sig}: the job is ending")
        starts = [self._resolve(app) for app in apps]
        total = sum(int(app.get("maxprocs", 1)) for app in apps)
        shown = " ".join([apps[0].get("cmd", "?"), *map(str, apps[0].get("args") or [])])
        if self.agents is None:
            self._check_descriptors(total, shown)
        running = self.running()
        try:
            if self.universe_limited and running + total > self.universe_size:
                where = ("the hosts' slots" if self.agents is not None and
                         self.universe_size == self.slots else "--universe-size")
                raise NoRoom(f"cannot start {total} process(es) of `{shown}`: {running} of "
                             f"the universe's {self.universe_size} ({where}) are running")
            hosts = self.agents.place(apps, shown) if self.agents is not None else None
        except NoRoom:
            now = time.monotonic()
            until = now + ROOM_WAIT_S if room_until is None else room_until
            if self.live_count() == 0 or now >= until:
                raise
            self._running = running
            self._waiting.append([until, coord, rank, number, msg])
            return
        k = max(self.jobs, default=0) + 1
        spec = self.job.spec
        job_id = f"{self.job.job_id}s{k}"
        bind = self.agents.coordinator_host() if self.agents is not None else spec.coord_host
        child = Coordinator(total, self.job.secret, job_id, host=bind, log=self.job.log)
        parent = {"peers": parents, "leader": int(msg.get("leader", 0))}
        if hosts is not None:
            return self._spawn_through_agents(k, coord, rank, number, starts, apps, hosts,
                                              child, parent, shown)
        lifeline_r, lifeline_w = os.pipe()
        sj = SpawnedJob(k, job_id, shown, child, (coord, rank, number),
                        time.monotonic() + spec.startup_timeout, lifeline_w)
        self.jobs[k] = sj
        self._sockets[child.socket] = sj
        self.poller.register(child.socket, 1)   # zmq.POLLIN
        server = self.job.fork_server
        started: list = []
        cut: Optional[str] = None     # why the rest were not started (refused at once)
        try:
            r = 0
            for appnum, ((argv, cwd), app) in enumerate(zip(starts, apps)):
                # a Python program forks from the job's template, as the job's ranks did
                via = server if server is not None and server.can_start(argv) else None
                for _ in range(int(app.get("maxprocs", 1))):
                    cut = self._stop_starting(sj, r, total, started, server)
                    if cut is not None:
                        break
                    env = self.job.rank_env(r, child.address, lifeline_r)
                    env.update(self._env(sj, r, total, parent, appnum))
                    started.append(spawn_rank(r, argv, env, stdin_inherit=False,
                                              pass_fds=(lifeline_r,), cwd=cwd, fork_server=via,
                                              request_id=f"{job_id}:{r}"))
                    r += 1
                if cut is not None:
                    break
            if server is not None:
                server.wait_started()     # the forked ones get their pids and pidfds
        except OSError as exc:
            failure = exc
        else:
            failure = None
        finally:
            os.close(lifeline_r)
        for rp in started:
            self._watch(sj, rp)
        if isinstance(failure, StartInterrupted):
            self._refuse_started(sj, f"{failure} while it started {total} process(es): the "
                                     f"job is ending")
        elif failure is not None:
            self._refuse_started(sj, f"could not start process {len(sj.processes)}: {failure}")
        elif cut:
            self._refuse_started(sj, cut)

    def _stop_starting(self, sj: SpawnedJob, r: int, total: int, started: list,
                       server: Any) -> Optional[str]:
        """Before process ``r`` of a spawn is started: whether to start no more. Raises
        :class:`StartInterrupted` at a signal that ends the job; returns why the spawn is
        refused now when --startup-timeout passed while they were still being started (the
        rank that asked then hears it before it gives up waiting), or "" when one of them
        has already ended before it could join (the job's loop reaps it next and refuses
        the spawn, naming it): a spawn that cannot be served is not carried on to its
        last process. Cost: a look at the ended processes every :data:`LOOK_EVERY`."""
        sig = self.job.interrupted()
        if sig is not None:
            raise StartInterrupted(f"the launcher received {sig}")
        if r == 0:
            return None
        if time.monotonic() >= sj.deadline:
            return (f"only {r} of its {total} processes could be started within "
                    f"--startup-timeout {self.job.spec.startup_timeout:g} s")
        if r % LOOK_EVERY == 0:
            if server is not None:
                server.collect(0.0)
                if server.pending_ended():
                    return ""
            if any(rp.popen.poll() is not None for rp in started):
                return ""
        return None

    def _check_descriptors(self, total: int, shown: str) -> None:
        """Refuse a spawn of ``total`` processes on this host that the launcher could not
        hold the descriptors of (:data:`FDS_PER_PROCESS` each, RLIMIT_NOFILE): raising its
        soft limit up to the hard one first, if that is enough. A spawn it cannot serve is
        refused at once, naming the command, the count and the limit, instead of failing
        half-way (or, before, hanging). The raised limit is the launcher's: the processes
        forked from the job's template keep the limit the job started with; a command
        started directly (not Python, or --no-fork-server) inherits the raised one. Cost:
        one listing of /proc/self/fd per spawn."""
        per = FDS_PER_PROCESS + (2 if self.job.spec.output_dir else 0)
        needed = total * per + FDS_PER_JOB + FDS_RESERVE
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        in_use = _open_descriptors()
        if soft == resource.RLIM_INFINITY or in_use + needed <= soft:
            return
        if hard == resource.RLIM_INFINITY or in_use + needed <= hard:
            want = in_use + needed if hard == resource.RLIM_INFINITY else hard
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
                return
            except (ValueError, OSError):
                pass      # (above the system's nr_open): refused below
        top = soft if hard == resource.RLIM_INFINITY else max(soft, hard)
        room = max(0, (top - in_use - FDS_PER_JOB - FDS_RESERVE) // per)
        raise SpawnRefused(
            f"cannot start {total} process(es) of `{shown}`: the launcher would need {needed} "
            f"more file descriptors ({per} for each process it starts: output pipes, pidfd, "
            f"coordinator connection), and its limit leaves room for {room} such process(es) "
            f"(RLIMIT_NOFILE: soft {soft}, hard "
            f"{'unlimited' if hard == resource.RLIM_INFINITY else hard}; {in_use} open); "
            f"raise the limit (`ulimit -n`, at most the hard limit) before starting the job, "
            f"or spawn fewer")

    def _env(self, sj: SpawnedJob, r: int, total: int, parent: dict, appnum: int) -> dict:
        """What a spawned process's environment says of its job and its parents."""
        return {ENV_RANK: str(r), ENV_SIZE: str(total), ENV_JOBID: sj.job_id,
                ENV_JOBNO: str(sj.number), ENV_UNIVERSE_SIZE: str(self.universe_size),
                ENV_PARENT: json.dumps({**parent, "appnum": appnum})}

    def _spawn_through_agents(self, k: int, coord: Coordinator, rank: int, number: Any,
                              starts: list, apps: list, hosts: list[str], child: Coordinator,
                              parent: dict, shown: str) -> None:
        """The processes of spawned job ``k``, placed on ``hosts``, started by those hosts'
        agents."""
        spec = self.job.spec
        sj = SpawnedJob(k, child.job_id, shown, child, (coord, rank, number),
                        time.monotonic() + spec.startup_timeout, None)
        self.jobs[k] = sj
        self._sockets[child.socket] = sj
        self.poller.register(child.socket, 1)   # zmq.POLLIN
        total = len(hosts)
        procs, r = [], 0
        for appnum, ((argv, cwd), app) in enumerate(zip(starts, apps)):
            python = argv[0] == sys.executable
            for _ in range(int(app.get("maxprocs", 1))):
                procs.append({"r": r, "host": hosts[r], "argv": argv[1:] if python else argv,
                              "python": python, "cwd": cwd or spec.cwd or os.getcwd(),
                              "env": self._env(sj, r, total, parent, appnum)})
                r += 1
        for rp in self.agents.start(sj, procs):
            self._watch(sj, rp)

    def _watch(self, sj: SpawnedJob, rp: RankProcess) -> None:
        rank = len(sj.processes)
        sj.processes.append(rp)
        if rp.popen is None:     # on another host: its agent forwards its output
            self.agents.add_output(sj.number, rank, sj.label(rank))
            return
        forward = self.job.forward
        forward.add(sj.label(rank), "stdout", rp.popen.stdout)
        forward.add(sj.label(rank), "stderr", rp.popen.stderr)
        if rp.pidfd is not None:
            self._pidfds[rp.pidfd] = (sj, rank)
            self.poller.register(rp.pidfd, 1)

    def reap_without_pidfd(self) -> None:
        """Where there are no pidfds: look at every spawned process (the loop polls often)."""
        for sj in self.jobs.values():
            for rank, rp in enumerate(sj.processes):
                if rp.pidfd is None and rp.alive and rp.reap() is not None:
                    self._reap(sj, rank)

    def _resolve(self, app: dict) -> tuple[list[str], Optional[str]]:
        """(argv, working directory) of one application: a Python program starts through
        the rank start script as the main job's ranks do; another command runs as it is."""
        cmd, args = str(app.get("cmd", "")), [str(a) for a in app.get("args") or []]
        info = app.get("info") or {}
        shown = " ".join([cmd, *args])
        wdir = info.get("wdir") or self.job.spec.cwd
        if wdir is not None and not os.path.isdir(wdir):
            raise SpawnRefused(f"cannot start `{shown}`: its working directory (info 'wdir') "
                               f"{wdir!r} is not a directory")
        if self.agents is None and info.get("host") not in (None, "", "localhost") and \
                info["host"].split(".")[0] != os.uname().nodename.split(".")[0]:
            raise SpawnRefused(f"cannot start `{shown}` on host {info['host']!r} (info "
                               f"'host'): this job runs on this host only")

        def where(path: str) -> str:
            return path if os.path.isabs(path) or wdir is None else os.path.join(wdir, path)

        if _PYTHON.fullmatch(os.path.basename(cmd)) or \
                os.path.realpath(shutil.which(cmd) or cmd) == os.path.realpath(sys.executable):
            module, rest = _interpreter_args(args)
            if module is None and not rest:
                raise SpawnRefused(f"cannot start `{shown}`: no program for the interpreter")
            if module is None and not os.path.exists(where(rest[0])):
                raise SpawnRefused(f"cannot start `{shown}`: program {rest[0]!r} not found")
            program, rest = (None, rest) if module is not None else (rest[0], rest[1:])
        else:
            found = shutil.which(cmd, path=info.get("path")) if os.sep not in cmd else \
                (where(cmd) if os.path.isfile(where(cmd)) else None)
            if found is None:
                raise SpawnRefused(f"cannot start `{shown}`: command {cmd!r} not found"
                                   + (f" in {info['path']!r} (info 'path')" if info.get("path")
                                      else " (not a file, nor on PATH)"))
            if not _is_python_program(found):
                if not os.access(found, os.X_OK):
                    raise SpawnRefused(f"cannot start `{shown}`: {found!r} is not executable")
                return [found, *args], wdir
            module, program, rest = None, found, args
        rank_start = self.job.spec.rank_start
        if rank_start is None:
            raise SpawnRefused(f"cannot start `{shown}`: this launcher was not told how its "
                               f"Python ranks start")
        start_program, start_module, start_args = rank_start(program, module, rest)
        return rank_command(start_program, start_module, start_args), wdir

    def _refuse_started(self, sj: SpawnedJob, why: str) -> None:
        """A spawn that cannot complete: end what it started, tell the rank that asked."""
        coord, rank, number = sj.requester
        sj.answered = True
        for rp in sj.processes:
            if rp.alive:
                rp.killed_by_launcher = True
            rp.signal_group(signal.SIGKILL)
        tail = []
        for r in range(len(sj.processes)):
            tail += [f"    | {line}" for line in self.job.forward.stderr_tail(sj.label(r))[-5:]]
        text = f"spawned job {sj.number} (`{sj.command}`): {why}"
        if tail:
            text += "; last lines it wrote to stderr:\n" + "\n".join(tail)
        self.reply(coord, rank, number, ok=False, error=text)

    def _on_child_event(self, sj: SpawnedJob, ev: CoordEvent) -> None:
        job = self.job
        if ev.kind == "all_registered" and not sj.answered:
            sj.answered = True
            coord, rank, number = sj.requester
            self.reply(coord, rank, number, ok=True, job=sj.number)
        elif ev.kind == "abort" and job.failure is None:
            text = f"minimpi: {sj.name(ev.rank)} called Abort({ev.code})"
            job.fail_with("abort", ev.code & 0xFF if ev.code >= 0 else 1,
                          text + (f": {ev.message}" if ev.message else ""),
                          spawned=(sj.number, ev.rank))
        elif ev.kind in ("spawn", "port", "publish", "unpublish", "lookup"):
            self.on_request(sj.coord, ev)

    def _reap(self, sj: SpawnedJob, rank: int) -> None:
        rp = sj.processes[rank]
        rc = rp.reap_exited()
        if rc is None:
            return
        st = sj.coord.ranks[rank]
        st.exit_status = describe_returncode(rc)
        if rp.killed_by_launcher:
            return
        if not sj.answered:
            self._refuse_started(sj, f"rank {rank} {describe_returncode(rc)} before it "
                                     f"initialized MPI")
            return
        if rc != 0 and self.job.failure is None:
            if st.failure is not None and st.failure.get("consequence"):
                # it only lost a peer: name the process of its job that failed on its own
                # (it reported that before it ended), if one did
                own = [s for s in sj.coord.ranks if s.failure is not None
                       and not s.failure.get("consequence")]
                if own:
                    rank, st = own[0].rank, own[0]
                    rc = sj.processes[rank].returncode or rc
            text = f"minimpi: {sj.name(rank)} (`{sj.command}`) {describe_returncode(rc)}"
            if st.failure is not None and st.failure.get("error"):
                text += f": {st.failure['error']}"
            details = [f"  | {line}" for line in self.job.forward.stderr_tail(sj.label(rank))]
            self.job.fail_with("signal" if rc < 0 else "exit", exit_code_for(rc), text, details,
                               spawned=(sj.number, rank))

    # -- ports and names -------------------------------------------------------------------
    def _on_port(self, coord: Coordinator, rank: int, number: Any, msg: dict) -> None:
        """``open`` -> a new port name; ``close``; ``accept`` (with the accepting root's
        entry) and ``connect`` wait until the other comes, then both are answered with a
        tag for their leaders' exchange, and the connecting side with the accepter's entry."""
        op, port = msg.get("op"), msg.get("port")
        who = (coord, rank, number)
        if op == "open":
            self._next_port += 1
            name = f"minimpi-port:{self.job.job_id}:{self._next_port}"
            self.ports[name] = {"accept": None, "connects": []}
            return self.reply(coord, rank, number, ok=True, port=name)
        state = self.ports.get(port) if isinstance(port, str) else None
        if state is None:
            return self.reply(coord, rank, number, ok=False, kind="port",
                              error=f"port {port!r} is not open (MPI.Open_port gives one; "
                                    f"it is gone after MPI.Close_port)")
        if op == "close":
            del self.ports[port]
            waiting = ([state["accept"][:3]] if state["accept"] else []) + state["connects"]
            for c, r, n in waiting:
                self.reply(c, r, n, ok=False, kind="port", error=f"port {port!r} was closed")
            return self.reply(coord, rank, number, ok=True)
        if op == "accept":
            if state["accept"] is not None:
                return self.reply(coord, rank, number, ok=False, kind="port",
                                  error=f"another Accept already waits on port {port!r}")
            state["accept"] = (*who, msg.get("entry"))
        elif op == "connect":
            state["connects"].append(who)
        else:
            raise SpawnRefused(f"unknown port operation {op!r}")
        while state["accept"] is not None and state["connects"]:
            c, r, n, entry = state["accept"]
            state["accept"] = None
            self._next_port += 1
            tag = 0x40000000 + self._next_port   # never a spawned job's number
            self.reply(c, r, n, ok=True, tag=tag)
            c, r, n = state["connects"].pop(0)
            self.reply(c, r, n, ok=True, tag=tag, accepter=entry)

    def _on_name(self, coord: Coordinator, rank: int, number: Any, kind: str, msg: dict) -> None:
        """The name service: ``publish``, ``unpublish``, ``lookup`` of service names."""
        service, port = msg.get("service"), msg.get("port")
        if kind == "publish":
            if service in self.names:
                return self.reply(coord, rank, number, ok=False, kind="name",
                                  error=f"service {service!r} is already published")
            self.names[str(service)] = str(port)
            return self.reply(coord, rank, number, ok=True)
        if service not in self.names or (kind == "unpublish" and self.names[service] != port):
            return self.reply(coord, rank, number, ok=False, kind="name",
                              error=f"no service {service!r} is published"
                                    + (f" with port {port!r}" if kind == "unpublish" else ""))
        if kind == "unpublish":
            del self.names[service]
            return self.reply(coord, rank, number, ok=True)
        return self.reply(coord, rank, number, ok=True, port=self.names[service])


#: interpreter options without a value, skipped before the program (as ``minimpi run`` does)
_PYTHON_FLAGS = {"-u", "-B", "-E", "-I", "-O", "-OO", "-q", "-s", "-S"}


def _open_descriptors() -> int:
    """How many file descriptors this process has open."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def _interpreter_args(args: list[str]) -> tuple[Optional[str], list[str]]:
    """``python`` ARGS -> (module or None, the program and its arguments or the module's)."""
    while args and args[0] in _PYTHON_FLAGS:
        args = args[1:]
    if len(args) >= 2 and args[0] == "-m":
        return args[1], args[2:]
    return None, args


def _is_python_program(path: str) -> bool:
    """A ``.py`` file, or a script whose ``#!`` line names a Python interpreter."""
    if path.endswith(".py"):
        return True
    try:
        with open(path, "rb") as f:
            first = f.readline(256)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first

