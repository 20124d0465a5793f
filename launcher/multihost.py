"""A job whose ranks run through agents: on other hosts (ssh), on Slurm nodes (srun), or on
this host (``--hosts localhost:N``, and ``minimpi.launch``).

    minimpi run -n 8 --hosts a:4,b:4 prog.py       # ssh a ..., ssh b ... (in parallel)
    minimpi run -n 8 --hostfile hosts prog.py      # MPI hostfile syntax (launcher/hosts.py)
    salloc -N 2 -n 8 minimpi run -n 8 prog.py      # agents placed with srun

:class:`MultiHostJob` is a :class:`~minimpi.launcher.job.Job` whose ranks are reports from
agents (``launcher/agent.py``): the same coordinator, failure policy, culprit naming,
timeouts, deadlock reports and exit codes as a local job, with one loop that polls the
coordinator, every agent's stdout (frames) and stderr, every agent process (a pidfd) and the
signal pipe. What differs:

* a rank "exits" when its agent says so; the job ends when every agent has said ``bye`` and
  its process (ssh, srun) has ended;
* an agent or ssh connection that ends without ``bye`` is a lost host: the job fails (exit
  255) naming the host, the ranks that ran there and the end of its stderr. A rank that only
  failed because its peer on the lost host vanished is not blamed: Job._judge waits for that
  peer, and the host's loss is what arrives;
* an agent that sends nothing, not even its keepalive ``ping``, for ``--heartbeat-timeout``
  seconds is a lost host too (its network went away): "lost host h2 (no heartbeat from its
  agent for 31 s): rank(s) 2, 3 ran there", exit 255; the launcher pings every agent too, and
  an agent that hears nothing ends its ranks by itself (``launcher/agent.py``);
* teardown is a ``signal`` frame to every agent (SIGTERM, then SIGKILL after the grace
  period); an agent that does not finish soon after gets EOF on its stdin (it then kills its
  ranks itself), and its local process (ssh, srun) is killed at last. Nothing is left
  running on any host.
* ``Spawn`` (``launcher/dynamic.py``): :class:`AgentSpawns` places the new processes on the
  hosts' free slots (or the ``host`` info key's host) and sends each host's agent a ``spawn``
  frame; a host that runs no rank yet gets its agent then. Agents stay until the launcher's
  ``end`` frame (sent once every rank and spawned process has ended), since a spawn may
  still come while their own ranks are done.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import BinaryIO, Mapping, Optional

import zmq

from minimpi.runtime.bootstrap import (
    ENV_HEARTBEAT_INTERVAL,
    ENV_JOBID,
    ENV_SIZE,
    ENV_STARTUP_TIMEOUT,
    ENV_UNIVERSE_SIZE,
)
from minimpi.runtime.netaddr import AddressError, interface_addresses, is_loopback, route_source
from minimpi.runtime.sources import in_slurm_step
from minimpi.runtime.states import ENV_DEADLOCK_TIMEOUT
from minimpi.transports.shm import cleanup_job

from .agent import MAGIC, RESULT, STDERR, STDOUT, FrameReader, ProtocolError, encode
from .coordinator import Coordinator
from .dynamic import AgentStarter, NoRoom, SpawnedJob, SpawnRefused
from .hosts import (
    HostListError,
    HostSlots,
    expand_tasks_per_node,
    group_by_host,
    hosts_from_slurm_env,
    parse_hostfile,
    parse_hosts,
    place,
    total_slots,
)
from .job import Failure, Job, JobSpec, _ranks, heartbeat_interval
from .output import OutputForwarder, _Stream
from .processes import _make_preexec, describe_returncode
from .spawners import LocalSpawner, RshSpawner, SrunSpawner, remote_python, rsh_from

EXIT_HOST_LOST = 255
ABANDON_S = 5.0             # after SIGKILL: how long agents get to say bye before EOF + kill
STDIN_WINDOW = 1 << 20      # forwarded stdin bytes in flight to rank 0's agent
LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}


# ---- the plan: which host runs which ranks, and how agents get there ------------------------
@dataclass
class HostPlan:
    placement: list[str]               # the host of each rank
    spawner: object                    # LocalSpawner | RshSpawner | SrunSpawner
    python: str = sys.executable       # the agents' (and so the ranks') Python
    iface: Optional[str] = None        # --iface, resolved on each host by its agent
    bind: Optional[str] = None         # --bind, for a job on one host only
    #: every host of the list with its slots (Spawn places processes on their free slots);
    #: None: the hosts of the placement, one slot per rank
    hosts: Optional[list[HostSlots]] = None

    @property
    def slots(self) -> dict[str, int]:
        """Slots per host, in the order of the host list (a host named twice: the sum)."""
        if self.hosts is None:
            return {h: len(r) for h, r in self.by_host.items()}
        out: dict[str, int] = {}
        for h in self.hosts:
            out[h.host] = out.get(h.host, 0) + h.slots
        return out

    @property
    def by_host(self) -> dict[str, list[int]]:
        return group_by_host(self.placement)

    @property
    def multihost(self) -> bool:
        return len(set(self.placement)) > 1


def is_local_name(host: str) -> bool:
    return host.lower() in LOOPBACK_NAMES or is_loopback(host)


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("several hosts (ssh, Slurm)")
    g.add_argument("--hosts", metavar="H:N,...",
                   help="run on these hosts, N ranks each (a:4,b:4; a host alone: 1 slot); "
                        "ranks fill the hosts in order. One agent per host is started over ssh "
                        "(see --rsh); localhost runs here without ssh")
    g.add_argument("--hostfile", metavar="FILE",
                   help="hosts from a file in MPI hostfile syntax: 'node1 slots=4', 'node2' "
                        "(1 slot), '# comments'")
    g.add_argument("--launcher", choices=["auto", "local", "ssh", "slurm"],
                   default=os.environ.get("MINIMPI_LAUNCHER", "auto"),
                   help="how ranks are started: local (this host), ssh (--hosts/--hostfile), "
                        "slurm (srun on the nodes of the allocation); auto (default): slurm "
                        "inside an salloc/sbatch allocation, ssh with a host list, else local")
    g.add_argument("--rsh", metavar="CMD",
                   help="the command that runs a command on another host (default: ssh; env "
                        "MINIMPI_RSH), e.g. 'ssh -p 2222 -i ~/.ssh/cluster'")
    g.add_argument("--remote-python", metavar="PATH",
                   help="absolute path of the Python on the other hosts (default: this one, "
                        f"{sys.executable}; env MINIMPI_REMOTE_PYTHON)")
    g.add_argument("--iface", metavar="NAME|CIDR",
                   help="network for the ranks' data plane: an interface name (ib0) or a "
                        "network (10.2.0.0/16); default: the interface that routes to the "
                        "coordinator")


def plan_from_args(args: argparse.Namespace, nprocs: int,
                   environ: Mapping[str, str] = os.environ) -> Optional[HostPlan]:
    """The multi-host plan the options ask for, or None for the plain local job.

    Raises HostListError (a ValueError) with a message for the user.
    """
    hosts_opt, hostfile = getattr(args, "hosts", None), getattr(args, "hostfile", None)
    launcher = getattr(args, "launcher", "auto") or "auto"
    if hosts_opt and hostfile:
        raise HostListError("give either --hosts or --hostfile, not both")
    hosts: Optional[list[HostSlots]] = None
    if hosts_opt:
        hosts = parse_hosts(hosts_opt)
    elif hostfile:
        try:
            with open(hostfile) as f:
                text = f.read()
        except OSError as exc:
            raise HostListError(f"--hostfile {hostfile}: {exc.strerror}") from None
        hosts = parse_hostfile(text, hostfile)
    in_allocation = bool(environ.get("SLURM_JOB_ID")) and not in_slurm_step(environ)
    if launcher == "local":
        if hosts is not None:
            raise HostListError("--launcher local runs every rank on this host; drop --hosts/"
                                "--hostfile or choose --launcher ssh/slurm")
        if getattr(args, "iface", None):
            raise HostListError("--iface applies to jobs on several hosts (--hosts, "
                                "--hostfile, Slurm); on this host use --bind")
        return None
    if launcher == "slurm" or (launcher == "auto" and hosts is None and in_allocation):
        if not environ.get("SLURM_JOB_ID"):
            raise HostListError("--launcher slurm: not inside a Slurm allocation (no "
                                "SLURM_JOB_ID); start minimpi run from salloc or sbatch")
        if hosts is None:
            hosts = hosts_from_slurm_env(environ)
        spawner: object = SrunSpawner(_slurm_cpus(environ))
    elif hosts is None:
        if launcher == "ssh":
            raise HostListError("--launcher ssh needs --hosts or --hostfile")
        if getattr(args, "iface", None):
            raise HostListError("--iface applies to jobs on several hosts (--hosts, "
                                "--hostfile, Slurm); on this host use --bind")
        return None
    else:
        local = [h.host for h in hosts if is_local_name(h.host)]
        if local and len(local) < len(hosts):
            raise HostListError(
                f"the host list mixes {local[0]} with other hosts: ranks elsewhere could not "
                f"reach ranks on {local[0]}; name this host by a name the others resolve")
        try:
            spawner = LocalSpawner() if local else RshSpawner(rsh_from(getattr(args, "rsh", None),
                                                                       environ))
        except ValueError as exc:
            raise HostListError(str(exc)) from None
    placement = place(nprocs, hosts, oversubscribe=getattr(args, "oversubscribe", False))
    try:
        python = remote_python(getattr(args, "remote_python", None), environ)
    except ValueError as exc:
        raise HostListError(str(exc)) from None
    if getattr(args, "bind", None) and len(set(placement)) > 1:
        raise HostListError("--bind names one address, but the ranks run on several hosts; "
                            "use --iface NAME|CIDR")
    return HostPlan(placement, spawner, python, getattr(args, "iface", None),
                    getattr(args, "bind", None), list(hosts))


def _slurm_cpus(environ: Mapping[str, str]) -> dict[str, int]:
    """CPUs of the allocation on each node (SLURM_JOB_CPUS_PER_NODE), for srun's agents."""
    try:
        nodes = [h.host for h in hosts_from_slurm_env(environ)]
        cpus = expand_tasks_per_node(environ.get("SLURM_JOB_CPUS_PER_NODE", ""))
    except HostListError:
        return {}
    return dict(zip(nodes, cpus)) if len(cpus) == len(nodes) else {}


# ---- output that arrives in frames -------------------------------------------------------------
class FrameOutput(OutputForwarder):
    """The OutputForwarder fed with chunks from agents instead of pipes it reads itself."""

    def add_remote(self, rank: int, name: str, job: int = 0, label: object = None) -> int:
        """A stream of rank ``rank`` (of spawned job ``job``, shown as ``label``)."""
        label = rank if label is None else label
        key = self.key(rank, STDERR if name == "stderr" else STDOUT, job)   # never a real fd
        prefix = f"[{label}] ".encode() if self.use_prefix else b""
        copy = None
        if self.output_dir:
            copy = open(os.path.join(self.output_dir, f"rank.{label}.{name}"), "wb")
        sink = self.stdout if name == "stdout" else self.stderr
        self.streams[key] = _Stream(label, name, key, sink, prefix, copy)
        return key

    @staticmethod
    def key(rank: int, stream: int, job: int = 0) -> int:
        return -1 - ((job << 24 | rank) * 2 + (stream == STDERR))

    def feed(self, key: int, data: bytes) -> None:
        s = self.streams.get(key)
        if s is not None and s.open:
            self._take(s, data)

    def finish(self, key: int) -> None:
        s = self.streams.get(key)
        if s is not None and s.open:
            self._finish(s)


# ---- the ranks and agents as the job sees them ------------------------------------------------
class RemoteRank:
    """A rank run by an agent; it quacks like spawn.RankProcess where Job needs it to."""

    def __init__(self, rank: int, agent: "AgentProc") -> None:
        self.rank = rank
        self.agent = agent
        self.returncode: Optional[int] = None
        self.killed_by_launcher = False
        self.popen = None
        self.pid = None      # on another host: nothing for this host's /proc to say

    @property
    def alive(self) -> bool:
        return self.returncode is None

    def reap(self) -> Optional[int]:
        return self.returncode

    def reap_exited(self, timeout: float = 1.0) -> Optional[int]:
        return self.returncode   # its agent reported the exit: nothing to wait for here

    def close_pidfd(self) -> None:
        pass

    def signal_group(self, sig: int) -> None:
        pass   # the agent signals its ranks (MultiHostJob.terminate_all)


class RemoteSpawned(RemoteRank):
    """A process of a spawned job run by an agent (launcher/dynamic.py's handle on it)."""

    def __init__(self, rank: int, job: int, agent: "AgentProc", owner: "MultiHostJob") -> None:
        super().__init__(rank, agent)
        self.job = job
        self.owner = owner
        self.pidfd = None

    def signal_group(self, sig: int) -> None:
        """Its agent signals its process group (also what it left behind)."""
        self.owner.send(self.agent, {"t": "signal", "sig": int(sig), "j": self.job,
                                     "r": self.rank})


class AgentSpawns(AgentStarter):
    """``Spawn`` in a job run through agents: placement on the hosts' slots, a ``spawn``
    frame to each host's agent (started now where the host runs no rank yet)."""

    def __init__(self, job: "MultiHostJob") -> None:
        self.job = job

    def coordinator_host(self) -> str:
        return self.job.coord_bind

    def _host_named(self, name: str, slots: dict[str, int], shown: str) -> str:
        if name in slots:
            return name
        short = [h for h in slots if h.split(".")[0] == name.split(".")[0]]
        if len(short) == 1:
            return short[0]
        raise SpawnRefused(f"cannot start `{shown}` on host {name!r} (info 'host'): not one of "
                           f"this job's hosts ({', '.join(slots)})")

    def place(self, apps: list[dict], shown: str) -> list[str]:
        """Hosts in rank order: an application with the ``host`` info key goes there, the
        others fill the free slots in the order of the host list. More than the free slots
        only where --universe-size is larger than the slots (then each on the host with the
        fewest processes per slot). Cost: O(processes x hosts)."""
        job, dyn = self.job, self.job.dynamic
        slots = job.plan.slots
        used = dict.fromkeys(slots, 0)
        for rr in job.ranks:
            if rr is not None and rr.alive:
                used[rr.agent.host] = used.get(rr.agent.host, 0) + 1
        for sj in dyn.jobs.values():
            for rp in sj.processes:
                if rp.alive:
                    used[rp.agent.host] = used.get(rp.agent.host, 0) + 1
        free = {h: slots[h] - used.get(h, 0) for h in slots}
        before = dict(free)
        beyond = dyn.universe_size > sum(slots.values())    # --universe-size above the slots
        chosen: list[list[str]] = [[] for _ in apps]
        for i, app in enumerate(apps):
            host = (app.get("info") or {}).get("host")
            if not host:
                continue
            n = int(app.get("maxprocs", 1))
            cmd = " ".join([str(app.get("cmd", "?")), *map(str, app.get("args") or [])])
            h = self._host_named(str(host), slots, cmd)
            if free[h] < n and not beyond:
                raise NoRoom(f"cannot start {n} process(es) of `{cmd}` on host {h} (info "
                             f"'host'): {max(free[h], 0)} of its {slots[h]} slot(s) free "
                             f"(--universe-size allows more)")
            free[h] -= n
            chosen[i] = [h] * n
        for i, app in enumerate(apps):
            if (app.get("info") or {}).get("host"):
                continue
            for _ in range(int(app.get("maxprocs", 1))):
                h = next((h for h in slots if free[h] > 0), None)
                if h is None and beyond:
                    h = min(slots, key=lambda x: (slots[x] - free[x]) / slots[x])
                if h is None:
                    n = int(app.get("maxprocs", 1))
                    cmd = " ".join([str(app.get("cmd", "?")),
                                    *map(str, app.get("args") or [])])
                    state = ", ".join(f"{x}: {max(before[x], 0)} of {slots[x]}"
                                      for x in slots)
                    raise NoRoom(f"cannot start {n} process(es) of `{cmd}`: not enough "
                                 f"free slots on the job's hosts ({state} free; "
                                 f"--universe-size allows more)")
                free[h] -= 1
                chosen[i].append(h)
        hosts = [h for each in chosen for h in each]
        for h in dict.fromkeys(hosts):
            try:
                job.agent_for(h)
            except HostListError as exc:
                raise SpawnRefused(f"cannot start `{shown}` on {h}: {exc}") from None
        return hosts

    def start(self, sj: SpawnedJob, procs: list[dict]) -> list[RemoteSpawned]:
        job = self.job
        port = int(sj.coord.address.rsplit(":", 1)[1])
        handles: list[RemoteSpawned] = []
        for host in dict.fromkeys(p["host"] for p in procs):
            agent = job.agent_for(host)
            mine = [p for p in procs if p["host"] == host]
            job.send(agent, {"t": "spawn", "j": sj.number, "job": sj.job_id,
                             "coord_port": port, "local": [p["r"] for p in mine],
                             "procs": [{k: p[k] for k in ("r", "argv", "python", "cwd", "env")}
                                       for p in mine]})
            for p in mine:
                handles.append(RemoteSpawned(p["r"], sj.number, agent, job))
                agent.spawned.append((sj.number, p["r"]))
        handles.sort(key=lambda h: h.rank)
        return handles

    def add_output(self, job: int, rank: int, label: str) -> None:
        self.job.forward.add_remote(rank, "stdout", job, label)
        self.job.forward.add_remote(rank, "stderr", job, label)

    def host_silent(self, process: RemoteSpawned, now: float) -> Optional[float]:
        job = self.job
        if job.keepalive <= 0:
            return None
        quiet = job._agent_silence(process.agent, now)
        if quiet > job.keepalive + 0.2:      # its keepalive is late too: the host's check
            return now + max(0.1, 2 * job.keepalive + 0.5 - quiet) + 0.01
        return None


@dataclass
class AgentProc:
    host: str
    ranks: list[int]
    popen: subprocess.Popen
    describe: str
    pidfd: Optional[int] = None
    reader: FrameReader = field(default_factory=FrameReader)
    outbuf: bytearray = field(default_factory=bytearray)
    hello: Optional[dict] = None
    bye: bool = False
    returncode: Optional[int] = None      # of the local process (ssh, srun, python)
    stdout_open: bool = True
    stderr_partial: bytes = b""
    stderr_tail: deque = field(default_factory=lambda: deque(maxlen=8))
    error: Optional[str] = None
    stdin_closed: bool = False
    started_at: float = 0.0
    judged: bool = False
    synced: bool = False                  # the agent's MAGIC seen: frames from here on
    spawned: list = field(default_factory=list)   # (job, rank) of spawned processes here
    failed: bool = False                  # lost or could not start: never used again
    last_heard: float = 0.0               # when its stdout last brought anything
    preamble: bytes = b""                 # what came before it (a chatty login script)

    @property
    def finished(self) -> bool:
        return self.returncode is not None and not self.stdout_open


class MultiHostJob(Job):
    def __init__(self, spec: JobSpec, plan: HostPlan, stdout: Optional[BinaryIO] = None,
                 stderr: Optional[BinaryIO] = None, *, forward_stdin: bool = True,
                 rank_stdin: Optional[bytes] = None, collect_results: bool = False):
        super().__init__(spec, stdout, stderr)
        self.plan = plan
        self.agents: list[AgentProc] = []
        self.forward_stdin = forward_stdin and rank_stdin is None
        self.rank_stdin = rank_stdin
        self.collect_results = collect_results
        self.results: dict[int, bytearray] = {}
        self.abandon_at: Optional[float] = None
        self._stdin_r: Optional[int] = None
        self._stdin_credit = STDIN_WINDOW
        self._stdin_polled = False
        self._output_on = True     # what the agents were last told (_output_flow)
        #: keepalives both ways (see launcher/agent.py); 0 with --heartbeat-timeout 0
        self.keepalive = heartbeat_interval(spec.heartbeat_timeout)
        self._next_ping = 0.0
        #: Spawn: placed on the hosts' slots, started by their agents (launcher/dynamic.py)
        self.dynamic.use_agents(AgentSpawns(self), total_slots(
            [HostSlots(h, n) for h, n in plan.slots.items()]))
        self.coord_bind = "127.0.0.1"     # where the coordinators listen (set by run)
        self._argv: list[str] = []        # the ranks' command (agents started later need it)
        self._poller: Optional[zmq.Poller] = None
        self._by_fd: dict[int, tuple[AgentProc, str]] = {}
        self._ended = False               # "end" sent to the agents

    # -- start ----------------------------------------------------------------------------
    def coordinator_candidates(self, host: str) -> list[str]:
        """Addresses of this host the agent on ``host`` may reach the coordinator at, best
        first: the local end of the route to it (when its name resolves here), then every
        other address of this host."""
        if isinstance(self.plan.spawner, LocalSpawner):
            return ["127.0.0.1"]
        out = []
        try:
            out.append(route_source(host))
        except AddressError:
            pass
        try:
            out += [a for _, a in interface_addresses() if a not in out and not is_loopback(a)]
        except OSError:
            pass
        return out

    def common_env(self) -> dict[str, str]:
        """What every rank gets besides the agent's own environment: the options' variables
        and the launcher's MINIMPI_* settings (as a local rank would inherit them)."""
        private = {"MINIMPI_SECRET", "MINIMPI_COORD", "MINIMPI_RANK", "MINIMPI_LIFELINE_FD",
                   "MINIMPI_LAUNCHER_PID", "MINIMPI_BIND", "MINIMPI_COORDINATOR"}
        env = {k: v for k, v in os.environ.items()
               if k.startswith("MINIMPI_") and k not in private}
        env.update(self.spec.env)
        env.update({
            ENV_SIZE: str(self.spec.nprocs),
            ENV_JOBID: self.job_id,
            ENV_STARTUP_TIMEOUT: str(self.spec.startup_timeout),
            ENV_DEADLOCK_TIMEOUT: str(self.spec.deadlock_timeout),
            ENV_HEARTBEAT_INTERVAL: str(heartbeat_interval(self.spec.heartbeat_timeout)),
            ENV_UNIVERSE_SIZE: str(self.dynamic.universe_size),
            "PYTHONUNBUFFERED": "1",
        })
        return env

    def start_agents(self, argv: list[str]) -> None:
        self._argv = argv
        for host, ranks in self.plan.by_host.items():
            self.start_agent(host, ranks)

    def agent_for(self, host: str) -> AgentProc:
        """The agent of ``host``, started now (with no ranks) if it has none that works;
        raises HostListError when it cannot be started."""
        for agent in self.agents:
            if agent.host == host and not agent.failed and not agent.finished \
                    and not agent.stdin_closed:
                return agent
        agent = self.start_agent(host, [])
        if self._poller is not None:
            self._watch_agent(agent)
        return agent

    def start_agent(self, host: str, ranks: list[int]) -> AgentProc:
        """Start the agent of ``host`` for ``ranks`` (none: for spawned processes only); its
        start frame waits in its queue. Raises HostListError when it cannot be started."""
        from minimpi import _shim
        shim_dir = os.path.dirname(os.path.abspath(_shim.__file__))   # as run.SHIM_DIR
        plan, spec = self.plan, self.spec
        port = int(self.coord.address.rsplit(":", 1)[1])
        env = self.common_env()
        cwd = spec.cwd or os.getcwd()
        argv = self._argv
        cmd = plan.spawner.argv(host, plan.python)
        start = {
            "t": "start", "secret": self.secret.hex(), "job": self.job_id, "ranks": ranks,
            "size": spec.nprocs, "argv": argv, "cwd": cwd, "env": env,
            "coord_port": port, "coord_hosts": self.coordinator_candidates(host),
            "ssh_client_first": getattr(plan.spawner, "ssh_client_first", False),
            # ranks of other hosts (or processes they spawn) must reach this host's
            "multihost": len(plan.slots) > 1 and not isinstance(plan.spawner, LocalSpawner),
            "iface": plan.iface,
            "bind": plan.bind,
            "stdin_rank": 0 if self.forward_stdin and 0 in ranks else None,
            "rank_stdin": self.rank_stdin, "result_fd": self.collect_results,
            "grace": spec.grace, "shim_dir": shim_dir,
            "keepalive": self.keepalive, "silence": 2 * max(0.0, spec.heartbeat_timeout),
            "spawns": True,
        }
        try:
            popen = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, start_new_session=True,
                                     preexec_fn=_make_preexec(os.getpid(), signal.SIGTERM),
                                     close_fds=True)
        except OSError as exc:
            raise HostListError(f"cannot start {plan.spawner.describe(host)} "
                                f"({cmd[0]}): {exc.strerror}") from None
        agent = AgentProc(host, ranks, popen, plan.spawner.describe(host),
                          started_at=time.monotonic(), last_heard=time.monotonic())
        for fd in (popen.stdin.fileno(), popen.stdout.fileno(), popen.stderr.fileno()):
            os.set_blocking(fd, False)
        if hasattr(os, "pidfd_open"):
            try:
                agent.pidfd = os.pidfd_open(popen.pid)
            except OSError:
                agent.pidfd = None
        agent.outbuf += encode(start)
        self.agents.append(agent)
        for r in ranks:
            self.ranks[r] = RemoteRank(r, agent)
        self.flush_agent(agent)
        return agent

    def _watch_agent(self, agent: AgentProc) -> None:
        """Poll an agent's pipes and exit in the job's loop."""
        for name, pipe in (("stdout", agent.popen.stdout), ("stderr", agent.popen.stderr)):
            self._by_fd[pipe.fileno()] = (agent, name)
            self._poller.register(pipe.fileno(), zmq.POLLIN)
        if agent.pidfd is not None:
            self._by_fd[agent.pidfd] = (agent, "exit")
            self._poller.register(agent.pidfd, zmq.POLLIN)

    def terminate_all(self, sig: int) -> None:
        for rr in self.ranks:
            if rr is not None and rr.alive:
                rr.killed_by_launcher = True
        for sj in self.dynamic.jobs.values():
            for rp in sj.processes:
                if rp.alive:
                    rp.killed_by_launcher = True
        for agent in self.agents:
            self.send(agent, {"t": "signal", "sig": int(sig)})
        if sig == signal.SIGKILL and self.abandon_at is None:
            self.abandon_at = time.monotonic() + ABANDON_S

    def flush_agent(self, agent: AgentProc) -> None:
        if not agent.outbuf or agent.stdin_closed:
            return
        try:
            n = os.write(agent.popen.stdin.fileno(), agent.outbuf)
            del agent.outbuf[:n]
        except BlockingIOError:
            pass
        except OSError:        # the agent's process is gone; its exit tells the rest
            agent.outbuf.clear()
            self.close_agent_stdin(agent)

    def send(self, agent: AgentProc, message: dict) -> None:
        if agent.finished or agent.stdin_closed:
            return
        agent.outbuf += encode(message)
        self.flush_agent(agent)

    def close_agent_stdin(self, agent: AgentProc) -> None:
        if not agent.stdin_closed:
            agent.stdin_closed = True
            try:
                agent.popen.stdin.close()
            except OSError:
                pass

    # -- teardown -------------------------------------------------------------------------

    def abandon(self) -> None:
        """Agents that did not finish after SIGKILL: EOF on their stdin (they kill their ranks
        and exit), and their local processes killed a moment later."""
        now = time.monotonic()
        for agent in self.agents:
            if agent.finished:
                continue
            if not agent.stdin_closed:
                self.close_agent_stdin(agent)
                self.abandon_at = now + 2.0
            else:
                try:
                    os.killpg(agent.popen.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                self.abandon_at = now + 2.0

    # -- stdin of rank 0 ------------------------------------------------------------------
    def _start_stdin_thread(self) -> None:
        """Copy our stdin into a pipe the loop polls; blocking reads stay off the loop's
        thread, and the pipe's capacity bounds what waits for the agent."""
        r, w = os.pipe()
        self._stdin_r = r
        os.set_blocking(r, False)

        def pump() -> None:
            try:
                while True:
                    try:
                        data = os.read(0, 65536)
                    except OSError:
                        data = b""
                    if not data:
                        break
                    os.write(w, data)
            except OSError:
                pass
            finally:
                os.close(w)

        threading.Thread(target=pump, name="minimpi-stdin", daemon=True).start()

    def _pump_stdin(self, poller: zmq.Poller) -> None:
        agent = self.ranks[0].agent
        while self._stdin_credit > 0:
            try:
                data = os.read(self._stdin_r, min(65536, self._stdin_credit))
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                poller.unregister(self._stdin_r)
                os.close(self._stdin_r)
                self._stdin_r = None
                self._stdin_polled = False
                self.send(agent, {"t": "stdin_eof"})
                return
            self._stdin_credit -= len(data)
            self.send(agent, {"t": "stdin", "d": data})
        poller.unregister(self._stdin_r)    # back when the agent acknowledges (see _loop)
        self._stdin_polled = False

    # -- the loop -------------------------------------------------------------------------
    def run(self) -> int:
        spec, plan = self.spec, self.plan
        host = "127.0.0.1" if isinstance(plan.spawner, LocalSpawner) else "0.0.0.0"
        self.coord_bind = host
        coord = Coordinator(spec.nprocs, self.secret, self.job_id, host=host, log=self.log)
        self.coord = coord
        forward = FrameOutput(self.stdout, self.stderr, prefix=spec.prefix,
                              output_dir=spec.output_dir)
        self.forward = forward
        for r in range(spec.nprocs):
            forward.add_remote(r, "stdout")
            forward.add_remote(r, "stderr")
        self.ranks = [None] * spec.nprocs
        if spec.dashboard is not None:
            spec.dashboard.attach(self)
        self._install_signals()
        start = time.monotonic()
        try:
            from .processes import rank_command
            argv = rank_command(spec.program, spec.module, spec.args)[1:]
            try:
                self.start_agents(argv)
            except HostListError as exc:
                self.log(f"minimpi: {exc}")
                return 2
            if self.forward_stdin and self.ranks[0] is not None and _stdin_readable():
                self._start_stdin_thread()
            elif self.forward_stdin and self.ranks[0] is not None:
                self.send(self.ranks[0].agent, {"t": "stdin_eof"})
            return self._loop(start)
        finally:
            self._teardown()
            self.dynamic.close()    # the spawned jobs' coordinators (their agents are gone)
            forward.close_all(give_up=lambda: self._signal_received is not None)
            coord.close()
            # segments on this host that its agent could not remove (an agent killed here)
            cleanup_job(self.job_id)
            self._restore_signals()

    def _teardown(self) -> None:
        """Whatever happened: no agent (and so no rank) is left running anywhere."""
        pending = [a for a in self.agents if a.returncode is None]
        for agent in pending:
            self.send(agent, {"t": "signal", "sig": int(signal.SIGKILL)})
            self.close_agent_stdin(agent)
        deadline = time.monotonic() + 5.0
        for agent in pending:
            try:
                agent.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(agent.popen.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                try:
                    agent.popen.wait(timeout=2.0)
                except subprocess.TimeoutExpired:
                    self.log(f"minimpi: {agent.describe} (pid {agent.popen.pid}) did not end")
        for agent in self.agents:
            if agent.pidfd is not None:
                os.close(agent.pidfd)
                agent.pidfd = None
            for pipe in (agent.popen.stdin, agent.popen.stdout, agent.popen.stderr):
                try:
                    pipe.close()
                except OSError:
                    pass
        if self._stdin_r is not None:
            os.close(self._stdin_r)
            self._stdin_r = None

    def _loop(self, start: float) -> int:
        from .deadlock import DeadlockDetector
        spec, coord = self.spec, self.coord
        poller = self._poller = zmq.Poller()
        poller.register(coord.socket, zmq.POLLIN)
        by_fd = self._by_fd
        for agent in self.agents:
            self._watch_agent(agent)
        if self._wake_r is not None:
            poller.register(self._wake_r, zmq.POLLIN)
        poller.register(self.forward.writers.wake_fd, zmq.POLLIN)
        need_reap_poll = any(a.pidfd is None for a in self.agents)
        job_deadline = start + spec.timeout if spec.timeout else None
        deadlock = DeadlockDetector(coord, lambda r: self.ranks[r].alive, spec.deadlock_timeout)
        self.deadlock = deadlock
        self.dynamic.attach(poller)
        writing: set[int] = set()

        while True:
            now = self._turn(poller)
            # ---- deadlines ----
            if job_deadline is not None and now >= job_deadline and self.failure is None:
                self._on_job_timeout()
            startup_deadline = self.startup_deadline()
            if startup_deadline is not None and now >= startup_deadline:
                self._on_startup_timeout()
            self._check_agent_start(now)
            if self.failure is None and self.dynamic.quiet(now) and deadlock.check(now):
                self._on_deadlock()
            spawn_due = self.dynamic.check(now)
            if self._suspect_until is not None and now >= self._suspect_until:
                self._judge(now, give_up=True)
            heartbeat_due = self._check_heartbeats(now)
            agents_due = self._check_agents(now)
            held_due = self.forward.release_stale(now, self._alive)
            if self.kill_at is not None and now >= self.kill_at:
                self.terminate_all(signal.SIGKILL)
                self.kill_at = None
            if self.abandon_at is not None and now >= self.abandon_at:
                self.abandon()
            if all(rr.alive is False for rr in self.ranks) and self.dynamic.all_reaped():
                if not self._ended:
                    # nothing runs and nothing more will be spawned: the agents may go
                    self._ended = True
                    for agent in self.agents:
                        self.send(agent, {"t": "end"})
                if self.abandon_at is None:
                    # every rank reported: the agents are draining; bound how long that takes
                    self.abandon_at = now + ABANDON_S
            # ---- done? ----
            if all(a.finished for a in self.agents):
                # every host has been judged: nothing more to learn about the ranks
                self._mark_lost_ranks()
                if self._suspect_until is not None:
                    self._judge(now, give_up=True)
                break
            # ---- wait ----
            waits = [d for d in (job_deadline, self.kill_at, self.startup_deadline(),
                                 self.abandon_at, self._suspect_until, heartbeat_due, held_due,
                                 agents_due, spawn_due)
                     if d is not None]
            waits += [a.started_at + spec.startup_timeout for a in self.agents if a.hello is None
                      and not a.finished]
            if self.failure is None and deadlock.enabled:
                when = deadlock.next_deadline()
                if when is not None:
                    waits.append(when)
            timeout = max(0.0, min(waits) - now) if waits else 3600.0
            if need_reap_poll:
                timeout = min(timeout, 0.1)
            if self._stdin_r is not None and not self._stdin_polled and self._stdin_credit > 0:
                poller.register(self._stdin_r, zmq.POLLIN)
                self._stdin_polled = True
            for agent in self.agents:
                fd = agent.popen.stdin.fileno() if not agent.stdin_closed else -1
                if agent.outbuf and fd >= 0 and fd not in writing:
                    poller.register(fd, zmq.POLLOUT)
                    writing.add(fd)
            self._output_flow()
            ready = self._poll(poller, timeout)
            self._wakeups_signals_and_coordinator(ready)
            self.dynamic.on_ready(ready)
            if self._stdin_r is not None and self._stdin_r in ready:
                self._pump_stdin(poller)
            for fd in list(ready):
                if fd in writing:
                    poller.unregister(fd)
                    writing.discard(fd)
                    for agent in self.agents:
                        if not agent.stdin_closed and agent.popen.stdin.fileno() == fd:
                            self.flush_agent(agent)
                    continue
                if not isinstance(fd, int) or fd not in by_fd:
                    continue
                agent, what = by_fd[fd]
                if what == "stdout":
                    if not self._read_agent(agent):
                        poller.unregister(fd)
                        del by_fd[fd]
                elif what == "stderr":
                    if not self._read_agent_stderr(agent):
                        poller.unregister(fd)
                        del by_fd[fd]
                elif what == "exit":
                    poller.unregister(fd)
                    del by_fd[fd]
                    self._agent_exited(agent)
            if need_reap_poll:
                for agent in self.agents:
                    if agent.pidfd is None and agent.returncode is None \
                            and agent.popen.poll() is not None:
                        self._agent_exited(agent)
        return self._finish()

    def _output_flow(self) -> None:
        """While our stdout or stderr holds all it may, tell the agents to stop reading their
        ranks' output (the ranks then wait on it); their frames are always read, as they
        carry the ranks' exits. Once the job is ending, output flows again (what is beyond
        the writers' bound is then dropped and counted)."""
        on = self.failure is not None or not self.forward.full()
        if on != self._output_on:
            self._output_on = on
            for agent in self.agents:
                self.send(agent, {"t": "output", "on": on})

    # -- agents' messages -----------------------------------------------------------------
    def _read_agent(self, agent: AgentProc) -> bool:
        try:
            data = os.read(agent.popen.stdout.fileno(), 1 << 18)
        except BlockingIOError:
            return True
        except OSError:
            data = b""
        if not data:
            agent.stdout_open = False
            self._streams_done(agent)
            if agent.returncode is not None:
                self._judge_agent(agent)
            return False
        agent.last_heard = time.monotonic()
        if not agent.synced:
            # a login script may print to stdout before the agent starts: skip up to MAGIC
            buf = agent.preamble + data
            at = buf.find(MAGIC)
            if at < 0:
                agent.preamble = buf[-(len(MAGIC) + 4096):]
                return True
            if buf[:at].strip():
                text = buf[:at].decode("utf-8", "replace").strip().splitlines()
                self.log(f"minimpi: {agent.describe} printed before the agent started "
                         f"(ignored): {' | '.join(text)[:300]}")
            agent.synced, agent.preamble = True, b""
            data = buf[at + len(MAGIC):]
        try:
            messages = agent.reader.feed(data)
        except ProtocolError as exc:
            agent.error = f"garbled output from {agent.describe}: {exc}"
            agent.stdout_open = False
            self._streams_done(agent)
            self._host_lost(agent, agent.error)
            return False
        for msg in messages:
            self._on_agent_message(agent, msg)
        return True

    def _on_agent_message(self, agent: AgentProc, msg: dict) -> None:
        kind = msg.get("t")
        if msg.get("j") and kind in ("out", "exit", "spawn_failed"):
            return self._on_spawned_message(agent, msg)
        if kind == "out":
            rank, stream, data = msg.get("r"), msg.get("s"), msg.get("d", b"")
            if rank not in agent.ranks:
                return
            if stream == RESULT:
                self.results.setdefault(rank, bytearray()).extend(data)
            elif stream in (STDOUT, STDERR):
                self.forward.feed(FrameOutput.key(rank, stream), data)
        elif kind == "exit":
            rank, rc = msg.get("r"), msg.get("rc")
            if rank in agent.ranks and isinstance(rc, int) and self.ranks[rank].alive:
                self._remote_exit(self.ranks[rank], rc)
        elif kind == "hello":
            agent.hello = msg
        elif kind == "stdin_ack":
            self._stdin_credit += int(msg.get("n", 0))
        elif kind == "error":
            agent.error = str(msg.get("msg", "unknown error"))
        elif kind == "bye":
            agent.bye = True

    def _on_spawned_message(self, agent: AgentProc, msg: dict) -> None:
        """A frame about a process of a spawned job (launcher/dynamic.py)."""
        kind, key = msg.get("t"), (msg.get("j"), msg.get("r"))
        if key not in agent.spawned:
            return
        job, rank = key
        if kind == "out":
            if msg.get("s") in (STDOUT, STDERR):
                self.forward.feed(FrameOutput.key(rank, msg["s"], job), msg.get("d", b""))
        elif kind == "exit" and isinstance(msg.get("rc"), int):
            self.dynamic.on_agent_exit(job, rank, msg["rc"])
        elif kind == "spawn_failed":
            self.dynamic.on_agent_start_failed(job, rank, str(msg.get("msg", "")))

    def _read_agent_stderr(self, agent: AgentProc) -> bool:
        try:
            data = os.read(agent.popen.stderr.fileno(), 65536)
        except BlockingIOError:
            return True
        except OSError:
            data = b""
        buf = agent.stderr_partial + data
        if data:
            lines, agent.stderr_partial = buf.split(b"\n")[:-1], buf.split(b"\n")[-1]
        else:
            lines, agent.stderr_partial = ([buf] if buf else []), b""
        for raw in lines:
            line = raw.decode("utf-8", "replace").rstrip()
            if line:
                agent.stderr_tail.append(line)
                self.log(f"minimpi: {agent.describe}: {line}")
        return bool(data)

    def _streams_done(self, agent: AgentProc) -> None:
        for job, r in [(0, r) for r in agent.ranks] + agent.spawned:
            self.forward.finish(FrameOutput.key(r, STDOUT, job))
            self.forward.finish(FrameOutput.key(r, STDERR, job))

    def _agent_exited(self, agent: AgentProc) -> None:
        try:
            rc = agent.popen.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            return
        agent.returncode = rc
        if agent.pidfd is not None:
            os.close(agent.pidfd)
            agent.pidfd = None
        # what it wrote before it ended may still be in the pipe: read that before judging
        # (EOF may also come later, when a child of srun or ssh lets go of the pipe)
        fd = agent.popen.stdout.fileno()
        while agent.stdout_open and _readable(fd) and self._read_agent(agent):
            pass
        if not agent.stdout_open:
            self._judge_agent(agent)

    def _judge_agent(self, agent: AgentProc) -> None:
        """The agent's process ended and its stdout is drained: a clean end, or a lost host."""
        if agent.judged:
            return
        agent.judged = True
        self._read_agent_stderr(agent)
        if agent.error is not None:
            self._host_lost(agent, agent.error, failed_agent=True)
        elif not agent.bye:
            how = describe_returncode(agent.returncode) if agent.returncode is not None else "ended"
            tail = agent.stderr_tail[-1] if agent.stderr_tail else ""
            self._host_lost(agent, f"{agent.describe} {how}" + (f": {tail}" if tail else ""))
        self._mark_lost_ranks(agent)

    def _host_lost(self, agent: AgentProc, why: str, failed_agent: bool = False,
                   silent: bool = False) -> None:
        alive = [r for r in agent.ranks if self.ranks[r].alive]
        agent.failed = True
        spawned = self.dynamic.on_agent_lost(lambda rp: getattr(rp, "agent", None) is agent,
                                             f"on {agent.host}: {why}")
        if not agent.ranks and (agent.hello is None or not spawned):
            # an agent started for a spawn only: that spawn failed (it was told); the job
            # goes on without this host
            self.log(f"minimpi: the agent for spawned processes on {agent.host}: {why}")
            self.close_agent_stdin(agent)
            try:
                os.killpg(agent.popen.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            return
        if self.failure is not None:
            return
        if agent.hello is None:   # never got as far as starting ranks
            summary = f"minimpi: could not start the ranks on {agent.host}: {why}"
        elif silent:
            summary = f"minimpi: lost host {agent.host} ({why})"
            if alive:
                summary += f": rank(s) {_ranks(alive)} ran there"
        else:
            summary = f"minimpi: lost host {agent.host}: {why}"
            if alive:
                summary += f" (rank(s) {_ranks(alive)} ran there)"
        if spawned:
            summary += f"; {', '.join(spawned)} ran there too"
        # the agent's stderr was shown as it came; the summary repeats only its last line.
        # The ranks of other hosts that lost a peer there are summed up after it (Job._finish)
        self.fail(Failure("host", EXIT_HOST_LOST, summary, lost_ranks=list(agent.ranks)))
        if silent:
            # nothing reaches that host: no point waiting for its agent to say bye; it ends
            # its ranks itself when it hears nothing more from us
            self.close_agent_stdin(agent)
            try:
                os.killpg(agent.popen.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    # -- keepalives -----------------------------------------------------------------------
    def _agent_silence(self, agent: AgentProc, now: float) -> float:
        """How long a running agent has sent nothing (a stop of the launcher itself is not
        counted, as for the ranks' heartbeats)."""
        return now - max(agent.last_heard, self._heartbeat_epoch)

    def _check_agents(self, now: float) -> Optional[float]:
        """Ping every agent that is running ranks, and fail the job when one has been silent
        for --heartbeat-timeout (its host or the network to it is gone); returns when to look
        again (None: nothing to watch)."""
        limit = self.spec.heartbeat_timeout
        if self.keepalive <= 0:
            return None
        running = [a for a in self.agents if a.hello is not None and a.returncode is None
                   and a.stdout_open]
        if now >= self._next_ping:
            self._next_ping = now + self.keepalive
            for agent in running:
                self.send(agent, {"t": "ping"})
        due = self._next_ping
        if self.failure is not None:
            return due
        for agent in running:
            quiet = self._agent_silence(agent, now)
            if quiet > limit:
                self._host_lost(agent, f"no heartbeat from its agent for {quiet:.0f} s",
                                silent=True)
                return due
            due = min(due, now - quiet + limit + 0.01)
        return due

    def _silent_rank(self, rank: int, now: float, silent: float) -> Optional[float]:
        """A rank on another host is silent: when its agent is silent too (beyond a few of
        its keepalives), the host is what was lost, and it is named (Job._silent_rank else)."""
        agent = self.ranks[rank].agent
        quiet = self._agent_silence(agent, now)
        if self.keepalive > 0:
            missed = 2 * self.keepalive + 0.5      # two keepalives missed: the host is gone
            if quiet > missed:
                self._host_lost(agent, f"no heartbeat from its agent for {quiet:.0f} s",
                                silent=True)
                return None
            if quiet > self.keepalive + 0.2:       # its keepalive is late: look again soon
                return now + missed - quiet + 0.01
        return super()._silent_rank(rank, now, silent)

    def _mark_lost_ranks(self, agent: Optional[AgentProc] = None) -> None:
        for a in [agent] if agent is not None else self.agents:
            for r in a.ranks:
                rr = self.ranks[r]
                if rr.alive:
                    rr.returncode = -signal.SIGKILL
                    rr.killed_by_launcher = True
                    self.coord.ranks[r].exit_status = f"lost with host {a.host}"

    def _check_agent_start(self, now: float) -> None:
        if self.failure is not None:
            return
        for agent in self.agents:
            if agent.hello is None and not agent.finished and not agent.failed and \
                    now >= agent.started_at + self.spec.startup_timeout:
                if not agent.ranks:    # started for a spawn: that spawn fails, not the job
                    self._host_lost(agent, f"{agent.describe} did not start the agent within "
                                           f"{self.spec.startup_timeout:g} s")
                    continue
                tail = "; ".join(agent.stderr_tail)
                self.fail(Failure("host", EXIT_HOST_LOST,
                                  f"minimpi: {agent.describe} did not start the agent within "
                                  f"{self.spec.startup_timeout:g} s (--startup-timeout)"
                                  + (f": {tail}" if tail else "")))
                return

    def _remote_exit(self, rr: RemoteRank, rc: int) -> None:
        rr.returncode = rc
        # Job._judge blames a rank that only lost a peer after waiting (``settle``) for that
        # peer to be reaped: a host being lost meanwhile is named instead (_host_lost)
        self._reap(rr)


def _stdin_readable() -> bool:
    """Whether reading our stdin is safe: a terminal stops a background job that reads it
    (SIGTTIN), so a launcher started with & leaves rank 0's stdin empty instead."""
    try:
        if os.isatty(0):
            return os.tcgetpgrp(0) == os.getpgrp()
        os.fstat(0)
        return True
    except OSError:
        return False


def _readable(fd: int) -> bool:
    import select
    return bool(select.select([fd], [], [], 0)[0])


def run_multihost(spec: JobSpec, plan: HostPlan, stdout: Optional[BinaryIO] = None,
                  stderr: Optional[BinaryIO] = None) -> int:
    """Run one job through agents; returns the launcher's exit code."""
    return MultiHostJob(spec, plan, stdout, stderr).run()

