"""A one-node Slurm cluster on this machine: munged, slurmctld and slurmd, all private.

    cluster = SlurmCluster(cpus=8).up()
    cluster.run(["srun", "-n", "4", "hostname"])     # SLURM_CONF set; bounded
    cluster.env                                     # {"SLURM_CONF": ...} for your own clients
    cluster.down()                                  # cancels jobs, kills tasks and daemons

Every daemon runs in the foreground as our child (munged as user munge) with files in
STATE_ROOT/slurm-<pid>/: slurm.conf, state, spool, logs, and munge's socket, so nothing
touches /etc/slurm or /run/munge.  The ports are picked free.  The node is this machine's
short host name with NodeAddr 127.0.0.1 (no DNS needed); CPUs=cpus with config_overrides,
so `srun -n 8` runs on a 2-core machine.

Clusters are per instance: each has its own directory, ports, munge socket, state and spool,
so several can run at once on one machine (two test runs, or a test run beside one kept up
by hand); a lock only serialises set-ups and the removal of clusters whose owner died.
Tearing one down touches nothing of another: its processes are found by SLURM_CONF=<its
conf> in their environment (job steps, tasks, clients) and by its own pid files.

Command line:
    python3 tests/multihost/slurm_cluster.py up [--cpus N]   # prints its name, slurm-<pid>
    python3 tests/multihost/slurm_cluster.py down NAME       # that cluster only
    python3 tests/multihost/slurm_cluster.py down            # clusters kept up by hand only
    python3 tests/multihost/slurm_cluster.py cleanup [--all] # clusters whose owner died
                                                             # (--all: and those kept by hand)
"""
from __future__ import annotations

import argparse
import glob
import os
import pwd
import socket
import subprocess
import sys
import time
from typing import Optional, Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from infra_common import (  # noqa: E402
    SETUP_HINT,
    STATE_ROOT,
    FileLock,
    InfraError,
    alive,
    die_with_parent,
    missing_programs,
    owner_gone,
    pids_with_env,
    rmtree,
    run,
    tail,
    terminate,
    write_owner,
)

PROGRAMS = ["/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/bin/srun",
            "/usr/bin/sinfo", "/usr/bin/salloc", "/usr/bin/sbatch", "/usr/bin/scancel",
            "/usr/bin/squeue"]
MUNGE_KEY = "/etc/munge/munge.key"
LOCK = os.path.join(STATE_ROOT, "slurm.lock")
LOCK_WAIT_S = 240.0
IDLE_WAIT_S = 30.0

CONF = """\
ClusterName=minimpi-test
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={dir}/munge/munge.socket
MailProg=/bin/true
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
# a cancelled job's tasks get SIGKILL 2 s after SIGTERM (default 30 s)
KillWait=2
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class SlurmCluster:
    def __init__(self, cpus: int = 8, persistent: bool = False):
        self.cpus, self.persistent = cpus, persistent
        self.dir = ""
        self.node = socket.gethostname().split(".")[0]
        self.procs: dict[str, subprocess.Popen] = {}
        self.timings: dict[str, float] = {}

    @property
    def conf(self) -> str:
        return os.path.join(self.dir, "slurm.conf")

    @property
    def env(self) -> dict:
        """Variables a Slurm client (srun, salloc, sbatch, sinfo) needs to reach this cluster."""
        return {"SLURM_CONF": self.conf}

    def client_env(self, extra: Optional[dict] = None) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env.update(self.env)
        env.update(extra or {})
        return env

    def run(self, argv: Sequence[str], timeout: float = 30.0, check: bool = True,
            env: Optional[dict] = None, input: Optional[str] = None
            ) -> subprocess.CompletedProcess:
        return run(argv, timeout=timeout, check=check, env=self.client_env(env), input=input)

    def logs(self) -> str:
        return "".join(f"--- {name} log:\n{tail(os.path.join(self.dir, name))}\n"
                       for name in ("munge/munged.log", "slurmctld.log", "slurmd.log"))

    # ---- up / down -----------------------------------------------------------------------
    @property
    def name(self) -> str:
        """This cluster's name (its directory's): what `down NAME` takes."""
        return os.path.basename(self.dir)

    def up(self) -> "SlurmCluster":
        t0 = time.monotonic()
        # the lock covers the set-up only: removing dead owners' clusters while another
        # set-up picks its ports; the running clusters never need it
        with FileLock(LOCK, "slurm cluster set-up").acquire(timeout=LOCK_WAIT_S):
            try:
                cleanup_stale()
                self._start()
            except BaseException:
                self._down_quietly()
                raise
        self.timings["up_s"] = time.monotonic() - t0
        return self

    def _start(self) -> None:
        self.dir = _new_dir()
        os.makedirs(self.dir, mode=0o755)
        write_owner(self.dir, self.persistent)
        for sub in ("state", "spool"):
            os.makedirs(os.path.join(self.dir, sub), mode=0o700)
        munge = pwd.getpwnam("munge")
        mdir = os.path.join(self.dir, "munge")
        os.makedirs(mdir, mode=0o755)          # munged wants its socket dir open to all
        os.chmod(mdir, 0o755)
        os.chown(mdir, munge.pw_uid, munge.pw_gid)
        ctld_port, slurmd_port = _free_ports(2)
        with open(self.conf, "w") as f:
            f.write(CONF.format(host=self.node, dir=self.dir, cpus=self.cpus,
                                ctld_port=ctld_port, slurmd_port=slurmd_port))
        env = self.client_env()
        self._spawn("munged", ["/usr/sbin/munged", "-F", f"--socket={mdir}/munge.socket",
                               f"--pid-file={mdir}/munged.pid", f"--log-file={mdir}/munged.log",
                               f"--seed-file={mdir}/munged.seed", f"--key-file={MUNGE_KEY}"],
                    env, user=munge.pw_uid, group=munge.pw_gid)
        self._wait(lambda: os.path.exists(f"{mdir}/munge.socket"), 10, "munged's socket")
        self._spawn("slurmctld", ["/usr/sbin/slurmctld", "-D", "-c"], env)
        self._spawn("slurmd", ["/usr/sbin/slurmd", "-D"], env)
        self._wait(self._idle, IDLE_WAIT_S, f"node {self.node} to be idle in sinfo")

    def _spawn(self, name, argv, env, user=None, group=None):
        log = open(os.path.join(self.dir, f"{name}.out"), "w")
        kw = {} if user is None else {"user": user, "group": group, "extra_groups": []}
        with log:
            self.procs[name] = subprocess.Popen(
                argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True,
                preexec_fn=None if self.persistent else die_with_parent, **kw)

    def _idle(self) -> bool:
        cp = self.run(["sinfo", "-h", "-o", "%t"], timeout=10, check=False)
        return cp.returncode == 0 and cp.stdout.strip().startswith("idle")

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            dead = [n for n, p in self.procs.items() if p.poll() is not None]
            if dead or time.monotonic() >= deadline:
                why = (f"{', '.join(dead)} exited" if dead else f"not within {timeout} s")
                outs = "".join(f"--- {n} output:\n{tail(os.path.join(self.dir, n + '.out'))}\n"
                               for n in self.procs)
                raise InfraError(f"waiting for {what}: {why}\n{outs}{self.logs()}")
            time.sleep(0.1)

    def down(self) -> None:
        """Stop everything; InfraError naming what is left if anything survived."""
        if not self.dir:
            return
        t0 = time.monotonic()
        problems = teardown(self.dir, self.procs)
        self.procs, self.dir = {}, ""
        self.timings["down_s"] = time.monotonic() - t0
        if problems:
            raise InfraError("slurm teardown left: " + "; ".join(problems))

    def _down_quietly(self) -> None:
        try:
            self.down()
        except InfraError:
            pass


def _new_dir() -> str:
    """A directory name no other cluster has: slurm-<pid>, or slurm-<pid>.<n> for the
    second and later clusters of one process."""
    base = os.path.join(STATE_ROOT, f"slurm-{os.getpid()}")
    d, n = base, 1
    while os.path.exists(d):
        d, n = f"{base}.{n}", n + 1
    return d


def clusters() -> list[str]:
    """The directories of every cluster set up on this machine."""
    return sorted(d for d in glob.glob(os.path.join(STATE_ROOT, "slurm-*")) if os.path.isdir(d))


def is_manual(d: str) -> bool:
    try:
        with open(os.path.join(d, "owner")) as f:
            return f.read().split()[:1] == ["manual"]
    except OSError:
        return False


def teardown(d: str, procs: Optional[dict] = None, cancel: bool = True) -> list[str]:
    """Cancel jobs (unless not cancel: when the owner died, its daemons are dying too), kill
    job processes and the daemons of the cluster in d, remove d.  Returns what is left."""
    conf = os.path.join(d, "slurm.conf")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["SLURM_CONF"] = conf
    problems = []
    daemons = {n: p.pid for n, p in (procs or {}).items()}
    for name, pidfile in (("slurmd", "slurmd.pid"), ("slurmctld", "slurmctld.pid"),
                          ("munged", "munge/munged.pid")):
        try:
            with open(os.path.join(d, pidfile)) as f:
                daemons.setdefault(name, int(f.read().split()[0]))
        except (OSError, ValueError, IndexError):
            pass
    alive_daemons = [p for p in daemons.values() if alive(p)]
    if cancel and os.path.exists(conf) and alive_daemons:
        # tell the controller first, so that it does not try to requeue or relaunch
        try:
            run(["scancel", "--full", "--user=root"], env=env, check=False, timeout=5)
        except InfraError:     # an unresponsive controller: its jobs are killed below anyway
            pass
    # Job steps, tasks and clients carry our SLURM_CONF.  The daemons' own helpers
    # (slurmctld's slurmscriptd) do too, but they go with their parent.
    stray = [p for p in pids_with_env("SLURM_CONF", conf)
             if p not in daemons.values() and _ppid(p) not in daemons.values()]
    left = terminate(stray, grace=2.0)
    if left:
        problems.append(f"job processes {left} survived SIGKILL")
    for name in ("slurmd", "slurmctld", "munged"):
        if name in daemons:
            left = terminate([daemons[name]], grace=5.0)
            if left:
                problems.append(f"{name} (pid {daemons[name]}) survived SIGKILL")
    for p in (procs or {}).values():
        try:
            p.wait(timeout=1)
        except subprocess.TimeoutExpired:
            pass
    leftover = pids_with_env("SLURM_CONF", conf)
    if leftover:
        problems.append(f"processes with SLURM_CONF={conf}: {leftover}")
    rmtree(d)
    if os.path.exists(d):
        problems.append(f"directory {d}")
    return problems


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def cleanup_stale(include_manual: bool = False) -> list[str]:
    """Remove the clusters whose owner died (and, with include_manual, those kept by hand);
    never one whose owner still runs."""
    done = []
    for d in clusters():
        if owner_gone(d) or (include_manual and is_manual(d)):
            teardown(d, cancel=is_manual(d))
            done.append(d)
    return done


_reason_cache: dict[str, Optional[str]] = {}


def unavailable_reason() -> Optional[str]:
    """None when a Slurm cluster can be started here, else why not (for pytest.skip)."""
    if "r" not in _reason_cache:
        _reason_cache["r"] = _probe()
    return _reason_cache["r"]


def _probe() -> Optional[str]:
    if os.geteuid() != 0:
        return f"needs root to run slurmd/slurmctld/munged (running as uid {os.geteuid()})"
    missing = missing_programs(PROGRAMS)
    if missing:
        return f"missing {', '.join(missing)} ({SETUP_HINT})"
    if not os.path.exists(MUNGE_KEY):
        return f"no {MUNGE_KEY} (the munge package makes it; {SETUP_HINT})"
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return f"no user munge ({SETUP_HINT})"
    return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="a one-node Slurm cluster, for tests")
    sub = p.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("up")
    u.add_argument("--cpus", type=int, default=8)
    d = sub.add_parser("down")
    d.add_argument("name", nargs="?", help="the cluster `up` printed (default: every "
                                           "cluster kept up by hand, never a test's)")
    c = sub.add_parser("cleanup")
    c.add_argument("--all", action="store_true")
    a = p.parse_args(argv)
    if a.cmd == "up":
        reason = unavailable_reason()
        if reason:
            print(f"cannot start slurm: {reason}", file=sys.stderr)
            return 1
        c = SlurmCluster(a.cpus, persistent=True).up()
        print(f"up {c.name} in {c.timings['up_s']:.2f} s; export SLURM_CONF={c.conf}")
        print(f"down: python3 {__file__} down {c.name}")
        return 0
    if a.cmd == "down" and a.name:
        target = os.path.join(STATE_ROOT, os.path.basename(a.name))
        if target not in clusters():
            print(f"no cluster {a.name} (there are: "
                  f"{', '.join(map(os.path.basename, clusters())) or 'none'})", file=sys.stderr)
            return 1
        problems = teardown(target)
        print("removed:", [target])
        for problem in problems:
            print(f"left: {problem}", file=sys.stderr)
        return 1 if problems else 0
    with FileLock(LOCK, "slurm cluster set-up").acquire(timeout=LOCK_WAIT_S):
        if a.cmd == "down":      # the clusters kept by hand; a test's own are left alone
            done = [d for d in clusters() if is_manual(d)]
            for d in done:
                teardown(d)
        else:
            done = cleanup_stale(include_manual=a.all)
    print("removed:", done)
    return 0


if __name__ == "__main__":
    sys.exit(main())
