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

**Ports and names** (``Open_port``/``Accept``/``Connect``, ``Publish_name``/
``Lookup_name``): the launcher is the name service and the meeting point of a port's
``Accept`` and ``Connect`` (see :meth:`DynamicProcesses._on_port`).
"""
from __future__ import annotations

import json
import os
import re
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
from .spawn import RankProcess, describe_returncode, exit_code_for, rank_command, spawn_rank

#: interpreters accepted as a spawn's command (the processes run under the launcher's Python)
_PYTHON = re.compile(r"python[\d.]*")


class SpawnRefused(Exception):
    """A spawn request that cannot be carried out; the text goes back to the rank."""


@dataclass
class SpawnedJob:
    """The processes of one Spawn / Spawn_multiple."""

    number: int
    job_id: str
    command: str                       # for messages: the first app's command line
    coord: Coordinator
    requester: tuple                   # (coordinator, rank, request id) to answer
    deadline: float                    # when the processes must all have registered
    lifeline_w: int                    # closed when the launcher ends: the processes end too
    processes: list = field(default_factory=list)   # RankProcess, index = its world rank
    answered: bool = False

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

    def check(self, now: float) -> Optional[float]:
        """Spawns whose processes did not all join in time fail; returns the next deadline."""
        due = None
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
        return due

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

    def all_blocked(self) -> bool:
        """Whether every running spawned process reports being blocked in minimpi (the
        deadlock check then also needs the main job's ranks blocked)."""
        for sj in self.jobs.values():
            for st in sj.coord.ranks:
                if sj.processes[st.rank].alive and not st.finalized and \
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

    def signal_all(self, sig: int) -> None:
        for sj in self.jobs.values():
            for rp in sj.processes:
                if rp.alive:
                    rp.killed_by_launcher = True
                rp.signal_group(sig)

    def close(self) -> None:
        """The job is over: nothing spawned survives it."""
        self.signal_all(signal.SIGKILL)
        for sj in self.jobs.values():
            for rp in sj.processes:
                if rp.alive:
                    try:
                        rp.popen.wait(timeout=5)
                    except Exception:
                        pass
                rp.close_pidfd()
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
    def _spawn(self, coord: Coordinator, rank: int, number: Any, msg: dict) -> None:
        if self.poller is None:
            return self.reply(coord, rank, number, ok=False, kind="unsupported",
                              error="Spawn is not implemented for jobs on several hosts "
                                    "(--hosts, --hostfile, Slurm) yet: it works in a job on "
                                    "this host")
        apps, parents = msg.get("apps"), msg.get("parents")
        if not isinstance(apps, list) or not apps or not isinstance(parents, list) or \
                not all(isinstance(a, dict) for a in apps):
            raise SpawnRefused("a malformed spawn request")
        starts = [self._resolve(app) for app in apps]
        total = sum(int(app.get("maxprocs", 1)) for app in apps)
        shown = " ".join([apps[0].get("cmd", "?"), *map(str, apps[0].get("args") or [])])
        running = len([rp for rp in self.job.ranks if rp.alive]) + self.live_count()
        if self.universe_limited and running + total > self.universe_size:
            raise SpawnRefused(f"cannot start {total} process(es) of `{shown}`: {running} of "
                               f"the universe's {self.universe_size} (--universe-size) are "
                               f"running")
        k = max(self.jobs, default=0) + 1
        spec = self.job.spec
        job_id = f"{self.job.job_id}s{k}"
        child = Coordinator(total, self.job.secret, job_id, host=spec.coord_host,
                            log=self.job.log)
        lifeline_r, lifeline_w = os.pipe()
        sj = SpawnedJob(k, job_id, shown, child, (coord, rank, number),
                        time.monotonic() + spec.startup_timeout, lifeline_w)
        self.jobs[k] = sj
        self._sockets[child.socket] = sj
        self.poller.register(child.socket, 1)   # zmq.POLLIN
        parent = {"peers": parents, "leader": int(msg.get("leader", 0))}
        server = self.job.fork_server
        started: list = []
        try:
            r = 0
            for appnum, ((argv, cwd), app) in enumerate(zip(starts, apps)):
                # a Python program forks from the job's template, as the job's ranks did
                via = server if server is not None and server.can_start(argv) else None
                for _ in range(int(app.get("maxprocs", 1))):
                    env = self.job.rank_env(r, child.address, lifeline_r)
                    env.update({ENV_RANK: str(r), ENV_SIZE: str(total), ENV_JOBID: job_id,
                                ENV_JOBNO: str(k), ENV_UNIVERSE_SIZE: str(self.universe_size),
                                ENV_PARENT: json.dumps({**parent, "appnum": appnum})})
                    started.append(spawn_rank(r, argv, env, stdin_inherit=False,
                                              pass_fds=(lifeline_r,), cwd=cwd, fork_server=via,
                                              request_id=f"{job_id}:{r}"))
                    r += 1
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
        if failure is not None:
            self._refuse_started(sj, f"could not start process {len(sj.processes)}: {failure}")

    def _watch(self, sj: SpawnedJob, rp: RankProcess) -> None:
        rank = len(sj.processes)
        sj.processes.append(rp)
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
        if info.get("host") not in (None, "", "localhost") and \
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
                          text + (f": {ev.message}" if ev.message else ""))
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
            self.job.fail_with("signal" if rc < 0 else "exit", exit_code_for(rc), text, details)

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

