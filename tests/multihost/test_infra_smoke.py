"""The multi-host test infrastructure works for real: ssh into namespace hosts, TCP between
them, tc rate limits, a one-node Slurm, and tear-downs that leave nothing behind."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import netns_hosts as netns_mod
import pytest
import slurm_cluster as slurm_mod
from infra_common import alive, run

PY = sys.executable   # the project's venv python: the same file system is seen everywhere
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

WHOAMI = """
import json, os, socket, sys
import minimpi
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.connect((sys.argv[1], 9))            # no packet is sent: just asks which address routes there
print(json.dumps({"hostname": socket.gethostname(), "addr": s.getsockname()[0],
                  "prefix": sys.prefix, "minimpi": minimpi.__file__, "cwd": os.getcwd()}))
"""


def _py_c(source: str, *args: str) -> str:
    """A shell command running `PY -c source args` (for ssh, which takes one command line)."""
    import shlex
    return " ".join(shlex.quote(a) for a in (PY, "-c", source, *args))


# ---- network-namespace hosts ---------------------------------------------------------------
def test_ssh_into_each_host_runs_the_project_python(netns_hosts):
    assert [h.name for h in netns_hosts.hosts] == ["h1", "h2"]
    for h in netns_hosts.hosts:
        t0 = time.monotonic()
        cp = netns_hosts.ssh(h.name, _py_c(WHOAMI, netns_hosts.gateway))
        elapsed = time.monotonic() - t0
        info = json.loads(cp.stdout)
        assert info["hostname"] == h.name
        assert info["addr"] == h.addr              # the interface that routes to the launcher
        assert info["prefix"] == sys.prefix
        assert info["minimpi"].startswith(REPO)
        assert elapsed < 10, f"ssh + python took {elapsed:.1f} s"


def test_ssh_between_hosts_and_stdin_reaches_the_remote_command(netns_hosts):
    # an agent on h1 can reach h2 by name with the same ssh command
    cp = netns_hosts.ssh("h1", " ".join(netns_hosts.ssh_argv("h2", "hostname")))
    assert cp.stdout.strip() == "h2"
    # a secret can travel on ssh's stdin (never argv)
    cp = netns_hosts.ssh("h2", _py_c("import sys; print(sys.stdin.readline().strip()[::-1])"),
                         input="s3cret-token\n")
    assert cp.stdout.strip() == "nekot-terc3s"


SERVER = """
import socket, sys
srv = socket.create_server(("0.0.0.0", 0))
srv.settimeout(20)
print(srv.getsockname()[1], flush=True)
conn, peer = srv.accept()
conn.settimeout(20)
data = b""
while not data.endswith(b"\\n"):
    chunk = conn.recv(4096)
    if not chunk:
        break
    data += chunk
conn.sendall(socket.gethostname().encode() + b" got " + data)
conn.close()
print(peer[0], flush=True)
"""

CLIENT = """
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=20)
c.sendall(b"hello from " + socket.gethostname().encode() + b"\\n")
print(c.recv(4096).decode().strip())
"""


def test_tcp_server_in_one_host_is_reachable_from_another(netns_hosts):
    server = subprocess.Popen(netns_hosts.netns_argv("h2", [PY, "-c", SERVER]),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        port = server.stdout.readline().strip()
        assert port.isdigit(), server.stderr.read()
        # by name, from a process started by h1's sshd
        cp = netns_hosts.ssh("h1", _py_c(CLIENT, "h2", port))
        assert cp.stdout.strip() == "h2 got hello from h1"
        out, err = server.communicate(timeout=20)
        assert out.strip() == netns_hosts.host("h1").addr, err
    finally:
        server.kill()
        server.wait()


def _throughput_mbit(hosts, nbytes: int) -> float:
    """Send nbytes from h1 to h2 over TCP; Mbit/s as measured by the receiver."""
    recv = ("import socket, time\n"
            "srv = socket.create_server(('0.0.0.0', 0)); srv.settimeout(30)\n"
            "print(srv.getsockname()[1], flush=True)\n"
            "c, _ = srv.accept(); c.settimeout(30); n = 0; t0 = None\n"
            "while True:\n"
            "    b = c.recv(1 << 16)\n"
            "    if t0 is None: t0 = time.monotonic()\n"
            "    if not b: break\n"
            "    n += len(b)\n"
            "print(n, time.monotonic() - t0, flush=True)\n")
    send = ("import socket, sys\n"
            "c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)\n"
            f"c.sendall(bytes({nbytes})); c.close()\n")
    server = subprocess.Popen(hosts.netns_argv("h2", [PY, "-c", recv], uts=False),
                              stdout=subprocess.PIPE, text=True)
    try:
        port = server.stdout.readline().strip()
        run(hosts.netns_argv("h1", [PY, "-c", send, hosts.host("h2").addr, port], uts=False),
            timeout=60)
        n, seconds = server.communicate(timeout=30)[0].split()
        assert int(n) == nbytes
        return nbytes * 8 / float(seconds) / 1e6
    finally:
        server.kill()
        server.wait()


@pytest.mark.netns_hosts(rate="40mbit")
def test_tbf_rate_limit_applies_between_hosts(netns_hosts):
    shaped = _throughput_mbit(netns_hosts, 3_000_000)
    assert 20 < shaped < 48, f"{shaped:.1f} Mbit/s through a 40mbit tbf"
    netns_hosts.unshape()
    free = _throughput_mbit(netns_hosts, 30_000_000)
    assert free > 4 * shaped, f"unshaped {free:.0f} Mbit/s vs shaped {shaped:.0f} Mbit/s"


def test_teardown_kills_everything_started_in_the_hosts():
    reason = netns_mod.unavailable_reason()
    if reason:
        pytest.skip(f"network-namespace hosts: {reason}")
    hosts = netns_mod.NetnsHosts(n=2).up()
    try:
        # a detached process that outlives its ssh session, like a stray rank
        cp = hosts.ssh("h2", "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!")
        stray = int(cp.stdout.strip())
        sshd = [h.sshd_pid for h in hosts.hosts]
        assert alive(stray) and all(alive(p) for p in sshd)
        names = [h.ns for h in hosts.hosts]
        k = hosts.k
    finally:
        hosts.down()
    assert not alive(stray) and not any(alive(p) for p in sshd)
    listed = run(["ip", "netns", "list"]).stdout
    assert not any(ns in listed for ns in names)
    assert not os.path.exists(f"/sys/class/net/mmpi{k}br")
    assert not any(os.path.exists(f"/etc/netns/{ns}") for ns in names)
    assert not os.path.exists(f"/run/minimpi-multihost/net{k}")


def test_skip_reason_names_root(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "needs root" in netns_mod._probe()
    assert "needs root" in slurm_mod._probe()


def test_skip_reason_names_missing_programs_and_the_setup_script(monkeypatch):
    # the programs this machine has (whatever is installed) and one it lacks: the reason
    # names exactly the missing one (the root check comes first, so pretend to be root)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(netns_mod, "PROGRAMS", [sys.executable, "/nonexistent/sshd"])
    monkeypatch.setattr(slurm_mod, "PROGRAMS", ["/nonexistent/slurmd", sys.executable])
    reason = netns_mod._probe()
    assert reason.startswith("missing /nonexistent/sshd ("), reason
    assert "tests/multihost/setup.sh" in reason
    assert slurm_mod._probe().startswith("missing /nonexistent/slurmd ("), slurm_mod._probe()


# ---- Slurm ---------------------------------------------------------------------------------
PROCID = ("import json, os, sys; import minimpi; "
          "print(json.dumps({k: v for k, v in os.environ.items() if k.startswith('SLURM_')}))")


def test_srun_starts_four_tasks_with_procids(slurm_cluster, tmp_path):
    # one output file per task: srun interleaves long lines of several tasks on its stdout
    slurm_cluster.run(["srun", "-n", "4", f"--output={tmp_path}/task.%t", PY, "-c", PROCID],
                      timeout=60)
    envs = [json.loads((tmp_path / f"task.{i}").read_text()) for i in range(4)]
    assert sorted(int(e["SLURM_PROCID"]) for e in envs) == [0, 1, 2, 3]
    for e in envs:
        assert e["SLURM_NTASKS"] == "4"
        assert e["SLURM_STEP_NODELIST"] == slurm_cluster.node
        assert e["SLURM_STEP_TASKS_PER_NODE"] == "4"
        assert e["SLURM_LOCALID"] == e["SLURM_PROCID"] and e["SLURM_NODEID"] == "0"


def test_salloc_then_srun_inside_the_allocation(slurm_cluster):
    cp = slurm_cluster.run(["salloc", "-n", "4", "srun", PY, "-c",
                            "import os; print(os.environ['SLURM_PROCID'])"], timeout=60)
    assert sorted(int(x) for x in cp.stdout.split()) == [0, 1, 2, 3]


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def test_slurm_teardown_kills_running_jobs():
    reason = slurm_mod.unavailable_reason()
    if reason:
        pytest.skip(f"Slurm: {reason}")
    cluster = slurm_mod.SlurmCluster().up()
    srun = None
    try:
        srun = subprocess.Popen(["srun", "-n", "2", "sleep", "300"], env=cluster.client_env(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        tasks = []
        while len(tasks) < 2:
            assert time.monotonic() < deadline, "srun -n 2 sleep did not start within 20 s"
            time.sleep(0.1)
            tasks = [p for p in slurm_mod.pids_with_env("SLURM_CONF", cluster.conf)
                     if _comm(p) == "sleep"]
        daemons = [p.pid for p in cluster.procs.values()]
    finally:
        cluster.down()
        if srun:
            srun.wait(timeout=10)
    assert not any(alive(p) for p in tasks + daemons)


# ---- what a killed test run leaves is removed by the next one ------------------------------
KILLED_OWNER = """
import sys, time
sys.path.insert(0, {here!r})
from {module} import {cls}
obj = {cls}({args}).up()
print({attr}, flush=True)
time.sleep(300)
"""


def _up_in_a_process_then_kill_it(module: str, cls: str, args: str, attr: str) -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    src = KILLED_OWNER.format(here=here, module=module, cls=cls, args=args, attr=attr)
    proc = subprocess.Popen([PY, "-c", src], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        line = proc.stdout.readline().strip()
        assert line, proc.stderr.read()
    finally:
        proc.kill()
        proc.wait(timeout=10)
    return line


def test_hosts_left_by_a_killed_run_are_removed_by_the_next():
    reason = netns_mod.unavailable_reason()
    if reason:
        pytest.skip(f"network-namespace hosts: {reason}")
    k = int(_up_in_a_process_then_kill_it("netns_hosts", "NetnsHosts", "n=1", "obj.k"))
    assert os.path.exists(f"/sys/class/net/mmpi{k}br")        # left behind
    hosts = netns_mod.NetnsHosts(n=1).up()                   # cleans up stale set-ups first
    try:
        assert not os.path.exists(f"/sys/class/net/mmpi{k}br") or hosts.k == k
        assert f"mmpi{k}-h1" not in run(["ip", "netns", "list"]).stdout or hosts.k == k
        assert hosts.ssh("h1", "hostname").stdout.strip() == "h1"
    finally:
        hosts.down()


def test_slurm_left_by_a_killed_run_is_removed_by_the_next():
    reason = slurm_mod.unavailable_reason()
    if reason:
        pytest.skip(f"Slurm: {reason}")
    conf = _up_in_a_process_then_kill_it("slurm_cluster", "SlurmCluster", "", "obj.conf")
    cluster = slurm_mod.SlurmCluster().up()
    try:
        assert not os.path.exists(conf)
        assert not slurm_mod.pids_with_env("SLURM_CONF", conf)
        cp = cluster.run(["srun", "-n", "1", "hostname"])
        assert cp.stdout.strip() == cluster.node
    finally:
        cluster.down()
