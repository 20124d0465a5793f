"""Several "hosts" on one machine: network namespaces on a bridge, each with an sshd.

    hosts = NetnsHosts(n=2).up()      # h1 = NET.k.2, h2 = NET.k.3; bridge (the gateway) NET.k.1
    hosts.ssh("h1", "hostname")       # -> CompletedProcess, stdout "h1\\n"
    hosts.rsh                         # ["ssh", "-F", ".../ssh_config"]: `ssh -F CFG h2 cmd`
    hosts.shape("100mbit")            # tc tbf on every host link, both directions
    hosts.down()                      # kills everything in the namespaces, removes it all

Layout of set-up number k (k = 1..254 picked free under a lock, so concurrent runs differ):
bridge ``mmpi<k>br`` with the gateway address NET.k.1/24 in the root namespace; for host i
(1-based) namespace ``mmpi<k>-h<i>`` holding ``eth0`` = NET.k.(i+1)/24, peer of ``mmpi<k>v<i>``
on the bridge; /etc/netns/<ns>/hosts names every host, and the root namespace's short host
name as the gateway (like a login node every compute node can resolve).  Each sshd listens on
``port`` (2222) in its namespace, started through ``unshare --uts`` so that the processes it
starts see host name h<i> (a plain ``ip netns exec`` still sees the machine's name).  Keys,
ssh_config, known_hosts and sshd logs are in STATE_ROOT/net<k>/ (key auth only).

Command line (for trying things by hand; `up` keeps the set-up until `down`):
    python3 tests/multihost/netns_hosts.py up [-n 2] [--rate 100mbit]
    python3 tests/multihost/netns_hosts.py down K
    python3 tests/multihost/netns_hosts.py cleanup [--all]    # what killed runs left behind
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Optional, Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from infra_common import (  # noqa: E402
    SETUP_HINT,
    STATE_ROOT,
    FileLock,
    InfraError,
    die_with_parent,
    missing_programs,
    owner_gone,
    rmtree,
    run,
    tail,
    terminate,
    write_owner,
)

PROGRAMS = ["/usr/sbin/ip", "/usr/sbin/tc", "/usr/sbin/sshd", "/usr/bin/ssh",
            "/usr/bin/ssh-keygen", "/usr/bin/unshare"]
DEFAULT_NET = os.environ.get("MINIMPI_MH_NET", "10.77")   # first two octets of the subnets
PREFIX = "mmpi"
LOCK = os.path.join(STATE_ROOT, "net.lock")
SSHD_WAIT_S = 15.0


@dataclass
class Host:
    name: str        # h1, h2, ... (host name inside, resolvable in every namespace)
    ns: str          # network namespace
    addr: str        # its eth0 address
    veth: str        # root-namespace end of its link (on the bridge)
    sshd_pid: int = 0


def _names(k: int):
    return f"{PREFIX}{k}br", f"{PREFIX}{k}-h", f"{PREFIX}{k}v"


class NetnsHosts:
    def __init__(self, n: int = 2, *, port: int = 2222, net: str = DEFAULT_NET,
                 persistent: bool = False):
        if not 1 <= n <= 16:
            raise ValueError(f"n must be 1..16 hosts, got {n}")
        self.n, self.port, self.net, self.persistent = n, port, net, persistent
        self.k: Optional[int] = None
        self.hosts: list[Host] = []
        self.dir = ""
        self.timings: dict[str, float] = {}

    # ---- public helpers ------------------------------------------------------------------
    @property
    def gateway(self) -> str:
        """The bridge's address: the root namespace as seen from every host."""
        return f"{self.net}.{self.k}.1"

    @property
    def ssh_config(self) -> str:
        return os.path.join(self.dir, "ssh_config")

    @property
    def rsh(self) -> list[str]:
        """The ssh command that reaches every host by name (h1, h2, ...)."""
        return ["ssh", "-F", self.ssh_config]

    def host(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(f"no host {name!r}; hosts are {[h.name for h in self.hosts]}")

    def ssh_argv(self, host: str, command: str) -> list[str]:
        return [*self.rsh, host, command]

    def ssh(self, host: str, command: str, timeout: float = 20.0, check: bool = True,
            input: Optional[str] = None) -> subprocess.CompletedProcess:
        return run(self.ssh_argv(host, command), timeout=timeout, check=check, input=input)

    def netns_argv(self, host: str, argv: Sequence[str], uts: bool = True) -> list[str]:
        """argv run inside host's namespace (seeing its host name when uts is true)."""
        h = self.host(host)
        if not uts:
            return ["ip", "netns", "exec", h.ns, *argv]
        return ["ip", "netns", "exec", h.ns, "unshare", "--uts", "sh", "-c",
                'hostname "$0" && exec "$@"', h.name, *argv]

    def shape(self, rate: str, burst: str = "64kb", latency: str = "50ms",
              hosts: Optional[Sequence[str]] = None) -> None:
        """Rate-limit each host's link in both directions with tc tbf (replaces earlier)."""
        tbf = ["root", "tbf", "rate", rate, "burst", burst, "latency", latency]
        for h in self._select(hosts):
            run(["tc", "qdisc", "replace", "dev", h.veth, *tbf])                  # into h
            run(["tc", "-n", h.ns, "qdisc", "replace", "dev", "eth0", *tbf])      # out of h

    def unshape(self, hosts: Optional[Sequence[str]] = None) -> None:
        for h in self._select(hosts):
            run(["tc", "qdisc", "del", "dev", h.veth, "root"], check=False)
            run(["tc", "-n", h.ns, "qdisc", "del", "dev", "eth0", "root"], check=False)

    def hostfile(self, slots: int) -> str:
        return "".join(f"{h.name} slots={slots}\n" for h in self.hosts)

    # ---- up / down -----------------------------------------------------------------------
    def up(self) -> "NetnsHosts":
        t0 = time.monotonic()
        with FileLock(LOCK, "netns hosts").acquire(timeout=60):
            cleanup_stale()
            self.k = _free_k(self.net)
            bridge, ns_prefix, veth_prefix = _names(self.k)
            self.dir = os.path.join(STATE_ROOT, f"net{self.k}")
            os.makedirs(self.dir, mode=0o700)
            write_owner(self.dir, self.persistent)
            try:
                # claims the subnet: the next run sees this address and picks another k
                run(["ip", "link", "add", bridge, "type", "bridge"])
                run(["ip", "addr", "add", f"{self.gateway}/24", "dev", bridge])
                run(["ip", "link", "set", bridge, "up"])
                # under the lock: another run's teardown may rmdir an empty /etc/netns
                self._write_etc_hosts(ns_prefix, veth_prefix)
            except BaseException:
                self._down_quietly()
                raise
        try:
            self._build(bridge, ns_prefix, veth_prefix)
        except BaseException:
            self._down_quietly()
            raise
        self.timings["up_s"] = time.monotonic() - t0
        return self

    def down(self) -> None:
        """Remove everything; InfraError naming what is left if anything could not be."""
        if self.k is None:
            return
        t0 = time.monotonic()
        with FileLock(LOCK, "netns hosts teardown").acquire(timeout=60):
            problems = teardown(self.k, self.net)
        self.timings["down_s"] = time.monotonic() - t0
        self.k = None
        if problems:
            raise InfraError("netns hosts teardown left: " + "; ".join(problems))

    def _down_quietly(self) -> None:
        try:
            self.down()
        except InfraError:
            pass

    def _select(self, names):
        return self.hosts if names is None else [self.host(n) for n in names]

    def _build(self, bridge: str, ns_prefix: str, veth_prefix: str) -> None:
        d = self.dir
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)   # sshd's privilege-separation dir
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "minimpi-test-client",
             "-f", f"{d}/id_ed25519"])
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "minimpi-test-host",
             "-f", f"{d}/host_ed25519"])
        os.rename(f"{d}/id_ed25519.pub", f"{d}/authorized_keys")
        with open(f"{d}/host_ed25519.pub") as f:
            host_key = " ".join(f.read().split()[:2])
        with open(f"{d}/known_hosts", "w") as f:
            for h in self.hosts:
                f.write(f"[{h.name}]:{self.port},[{h.addr}]:{self.port} {host_key}\n")
        with open(self.ssh_config, "w") as f:
            for h in self.hosts:
                f.write(f"Host {h.name}\n  HostName {h.addr}\n")
            f.write(f"Host *\n  Port {self.port}\n  User root\n"
                    f"  IdentityFile {d}/id_ed25519\n  IdentitiesOnly yes\n"
                    f"  UserKnownHostsFile {d}/known_hosts\n  StrictHostKeyChecking yes\n"
                    "  CheckHostIP no\n  BatchMode yes\n  ConnectTimeout 5\n"
                    "  LogLevel ERROR\n  KexAlgorithms curve25519-sha256\n")
        with open(f"{d}/hosts.json", "w") as f:
            json.dump({"k": self.k, "net": self.net, "hosts": [h.__dict__ for h in self.hosts]},
                      f)
        for h in self.hosts:
            run(["ip", "netns", "add", h.ns])
            run(["ip", "link", "add", h.veth, "type", "veth", "peer", "name", "eth0",
                 "netns", h.ns])
            run(["ip", "link", "set", h.veth, "master", bridge, "up"])
            run(["ip", "-n", h.ns, "addr", "add", f"{h.addr}/24", "dev", "eth0"])
            run(["ip", "-n", h.ns, "link", "set", "eth0", "up"])
            run(["ip", "-n", h.ns, "link", "set", "lo", "up"])
            h.sshd_pid = self._start_sshd(h)
        deadline = time.monotonic() + SSHD_WAIT_S
        for h in self.hosts:
            self._wait_sshd(h, deadline)

    def _write_etc_hosts(self, ns_prefix: str, veth_prefix: str) -> None:
        self.hosts = [Host(f"h{i}", f"{ns_prefix}{i}", f"{self.net}.{self.k}.{i + 1}",
                           f"{veth_prefix}{i}") for i in range(1, self.n + 1)]
        etc_hosts = "127.0.0.1 localhost\n" + f"{self.gateway} {socket.gethostname()}\n" + \
            "".join(f"{h.addr} {h.name}\n" for h in self.hosts)
        for h in self.hosts:
            os.makedirs(f"/etc/netns/{h.ns}", exist_ok=True)  # bind-mounted over /etc/hosts
            with open(f"/etc/netns/{h.ns}/hosts", "w") as f:
                f.write(etc_hosts)

    def _start_sshd(self, h: Host) -> int:
        d = self.dir
        sshd = ["/usr/sbin/sshd", "-D", "-p", str(self.port), "-f", "/dev/null",
                "-h", f"{d}/host_ed25519", "-E", f"{d}/sshd_{h.name}.log",
                "-o", "PidFile=none", "-o", f"AuthorizedKeysFile={d}/authorized_keys",
                "-o", "PermitRootLogin=prohibit-password", "-o", "PasswordAuthentication=no",
                "-o", "KbdInteractiveAuthentication=no", "-o", "UsePAM=no",
                # key files live under /run, not in a home directory
                "-o", "StrictModes=no", "-o", "UseDNS=no", "-o", "AcceptEnv=LANG LC_*",
                # many agents connect at once in the tests: don't drop early connections
                "-o", "MaxStartups=100", "-o", "MaxSessions=100"]
        argv = self.netns_argv(h.name, sshd)
        with open(f"{d}/sshd_{h.name}.start.log", "w") as log:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                    start_new_session=True,
                                    preexec_fn=None if self.persistent else die_with_parent)
        return proc.pid   # ip netns exec, unshare and sh each exec: this is sshd's pid

    def _wait_sshd(self, h: Host, deadline: float) -> None:
        while True:
            try:
                socket.create_connection((h.addr, self.port), timeout=0.5).close()
                break
            except OSError as exc:
                if time.monotonic() >= deadline:
                    raise InfraError(
                        f"sshd of {h.name} ({h.addr}:{self.port}) did not accept connections "
                        f"within {SSHD_WAIT_S} s ({exc})\nsshd log:\n"
                        f"{tail(f'{self.dir}/sshd_{h.name}.log')}\nstart log:\n"
                        f"{tail(f'{self.dir}/sshd_{h.name}.start.log')}") from None
                time.sleep(0.05)
        cp = self.ssh(h.name, "true", check=False, timeout=15)
        if cp.returncode != 0:
            raise InfraError(f"ssh to {h.name} ({h.addr}) failed (exit {cp.returncode}): "
                             f"{cp.stderr.strip()}\nsshd log:\n"
                             f"{tail(f'{self.dir}/sshd_{h.name}.log')}")


# ---- allocation and teardown by number (also for set-ups of runs that died) -----------------
def _netns_list() -> list[str]:
    out = run(["ip", "netns", "list"]).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _free_k(net: str) -> int:
    used = set()
    addrs = run(["ip", "-o", "-4", "addr", "show"]).stdout
    for k in range(1, 255):
        bridge, ns_prefix, _ = _names(k)
        if (f" {net}.{k}." in addrs or os.path.exists(os.path.join(STATE_ROOT, f"net{k}"))
                or os.path.exists(f"/sys/class/net/{bridge}")):
            used.add(k)
    taken_ns = _netns_list()
    for k in range(1, 255):
        if k in used or any(ns.startswith(_names(k)[1]) for ns in taken_ns):
            continue
        return k
    raise InfraError(f"no free subnet {net}.1-254.0/24 for netns hosts "
                     f"(see `python3 {__file__} cleanup`)")


def teardown(k: int, net: str = DEFAULT_NET) -> list[str]:
    """Remove set-up k: kill every process in its namespaces (sshd, sessions, ranks), delete
    namespaces, links and files.  Returns what could not be removed (empty when clean)."""
    bridge, ns_prefix, veth_prefix = _names(k)
    d = os.path.join(STATE_ROOT, f"net{k}")
    problems = []
    namespaces = [ns for ns in _netns_list() if ns.startswith(ns_prefix)]
    pids = []
    for ns in namespaces:
        out = run(["ip", "netns", "pids", ns], check=False).stdout
        pids += [int(p) for p in out.split() if p.isdigit()]
    left = terminate(pids, grace=2.0)
    if left:
        problems.append(f"processes {left} in namespaces {namespaces} survived SIGKILL")
    for ns in namespaces:
        cp = run(["ip", "netns", "del", ns], check=False)
        if cp.returncode != 0:
            problems.append(f"ip netns del {ns}: {cp.stderr.strip()}")
    for link in [bridge] + [os.path.basename(p) for p in
                            glob.glob(f"/sys/class/net/{veth_prefix}*")]:
        if os.path.exists(f"/sys/class/net/{link}"):
            run(["ip", "link", "del", link], check=False)
    for path in glob.glob(f"/etc/netns/{ns_prefix}*"):
        rmtree(path)
    try:
        os.rmdir("/etc/netns")       # only when no other set-up (or anyone else) uses it
    except OSError:
        pass
    rmtree(d)
    # verify
    still = [ns for ns in _netns_list() if ns.startswith(ns_prefix)]
    if still:
        problems.append(f"namespaces {still}")
    links = glob.glob(f"/sys/class/net/{veth_prefix}*") + glob.glob(f"/sys/class/net/{bridge}")
    if links:
        problems.append(f"links {[os.path.basename(p) for p in links]}")
    if glob.glob(f"/etc/netns/{ns_prefix}*") or os.path.exists(d):
        problems.append(f"files /etc/netns/{ns_prefix}* or {d}")
    return problems


def cleanup_stale(include_manual: bool = False) -> list[int]:
    """Tear down set-ups whose owning process has exited; returns their numbers."""
    done = []
    for d in glob.glob(os.path.join(STATE_ROOT, "net*")):
        name = os.path.basename(d)
        if not name[3:].isdigit():
            continue
        if owner_gone(d) or include_manual:
            teardown(int(name[3:]))
            done.append(int(name[3:]))
    return done


# ---- availability ------------------------------------------------------------------------
_reason_cache: dict[str, Optional[str]] = {}


def unavailable_reason() -> Optional[str]:
    """None when netns hosts can be made here, else why not (for pytest.skip)."""
    if "r" not in _reason_cache:
        _reason_cache["r"] = _probe()
    return _reason_cache["r"]


def _probe() -> Optional[str]:
    if os.geteuid() != 0:
        return f"needs root to create network namespaces (running as uid {os.geteuid()})"
    missing = missing_programs(PROGRAMS)
    if missing:
        return f"missing {', '.join(missing)} ({SETUP_HINT})"
    tag = f"{PREFIX}p{os.getpid() % 100000}"
    try:
        cp = run(["ip", "netns", "add", tag], check=False)
        if cp.returncode != 0:
            return f"`ip netns add` does not work here: {cp.stderr.strip()}"
        run(["ip", "netns", "del", tag], check=False)
        cp = run(["ip", "link", "add", tag, "type", "bridge"], check=False)
        if cp.returncode != 0:
            return f"cannot create a bridge: {cp.stderr.strip()}"
        run(["ip", "link", "del", tag], check=False)
        cp = run(["unshare", "--uts", "true"], check=False)
        if cp.returncode != 0:
            return f"`unshare --uts` does not work here: {cp.stderr.strip()}"
    except InfraError as exc:
        return str(exc)
    return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="network-namespace hosts with sshd, for tests")
    sub = p.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("up")
    u.add_argument("-n", type=int, default=2)
    u.add_argument("--rate", help="tc tbf rate on every host link, e.g. 100mbit")
    d = sub.add_parser("down")
    d.add_argument("k", type=int)
    c = sub.add_parser("cleanup")
    c.add_argument("--all", action="store_true", help="also set-ups made with `up`")
    a = p.parse_args(argv)
    if a.cmd == "up":
        reason = unavailable_reason()
        if reason:
            print(f"cannot make netns hosts: {reason}", file=sys.stderr)
            return 1
        h = NetnsHosts(a.n, persistent=True).up()
        if a.rate:
            h.shape(a.rate)
        print(f"set-up {h.k}: gateway {h.gateway}; "
              + ", ".join(f"{x.name}={x.addr} (netns {x.ns})" for x in h.hosts))
        print(f"ssh: {' '.join(h.rsh)} h1 hostname     up in {h.timings['up_s']:.2f} s")
        print(f"down: python3 {__file__} down {h.k}")
    elif a.cmd == "down":
        with FileLock(LOCK, "netns hosts teardown").acquire(timeout=60):
            problems = teardown(a.k)
        if problems:
            print("left: " + "; ".join(problems), file=sys.stderr)
            return 1
    else:
        with FileLock(LOCK, "netns hosts cleanup").acquire(timeout=60):
            print("removed:", cleanup_stale(include_manual=a.all))
    return 0


if __name__ == "__main__":
    sys.exit(main())
