"""`minimpi run --hosts` across real network namespaces, through real ssh: p2p and every
collective algorithm between hosts, output forwarding, rank/host identity, failures of a rank,
of the launcher, of ssh and of a whole host, and nothing left running on any host."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import netns_hosts as netns_mod
import pytest
from infra_common import pids_with_env, run

PY = sys.executable
MARKER = "MINIMPI_TEST_MARKER"
REQUIRED = os.environ.get("MINIMPI_MULTIHOST_REQUIRED", "") not in ("", "0")

EVERYTHING = r'''
import socket, sys, time
import numpy as np
from minimpi import MPI
from minimpi.coll import registry
from minimpi.runtime import world

comm = MPI.COMM_WORLD
rank, p = comm.rank, comm.size
state = world.world_state()
n = 1000
checked = 0

def algs(coll, objects=False, op=MPI.SUM):
    return [a.name for a in registry.algorithms(coll).values()
            if a.refusal(p, 8 * n, op, objects) is None]

def mine(r=None):
    return np.arange(n, dtype=np.float64) + 1000.0 * (rank if r is None else r)

# point to point across hosts: small (eager) and 4 MiB (rendezvous) both ways
peer = (rank + p // 2) % p
for size in (8, 1 << 22):
    out = np.full(size // 8, float(rank))
    got = np.empty(size // 8)
    comm.Sendrecv(out, dest=peer, recvbuf=got, source=peer)
    assert np.all(got == peer), ("Sendrecv", size)
    checked += 1
assert comm.sendrecv({"from": rank}, dest=peer, source=peer) == {"from": peer}

for root in sorted({0, p - 1}):
    for alg in algs("bcast"):
        buf = mine() if rank == root else np.zeros(n)
        comm.Bcast(buf, root=root, algorithm=alg)
        assert np.array_equal(buf, mine(root)), ("Bcast", alg); checked += 1
    for alg in algs("bcast", objects=True):
        assert comm.bcast({"r": root} if rank == root else None, root=root, algorithm=alg) == {"r": root}
    for alg in algs("scatter"):
        send = np.concatenate([mine(r) for r in range(p)]) if rank == root else None
        recv = np.empty(n)
        comm.Scatter(send, recv, root=root, algorithm=alg)
        assert np.array_equal(recv, mine()), ("Scatter", alg); checked += 1
    for alg in algs("gather"):
        recv = np.empty(n * p) if rank == root else None
        comm.Gather(mine(), recv, root=root, algorithm=alg)
        if rank == root:
            assert np.array_equal(recv, np.concatenate([mine(r) for r in range(p)])), ("Gather", alg)
        assert comm.gather(rank, root=root, algorithm=alg) == (list(range(p)) if rank == root else None)
        checked += 1
    for alg in algs("reduce"):
        recv = np.empty(n) if rank == root else None
        comm.Reduce(mine(), recv, op=MPI.SUM, root=root, algorithm=alg)
        if rank == root:
            assert np.allclose(recv, sum(mine(r) for r in range(p))), ("Reduce", alg)
        checked += 1
total = sum(mine(r) for r in range(p))
for alg in algs("allreduce"):
    out = np.empty(n)
    comm.Allreduce(mine(), out, op=MPI.SUM, algorithm=alg)
    assert np.allclose(out, total), ("Allreduce", alg); checked += 1
for alg in algs("allreduce", objects=True):
    assert comm.allreduce(rank, algorithm=alg) == p * (p - 1) // 2
for alg in algs("allgather"):
    out = np.empty(n * p)
    comm.Allgather(mine(), out, algorithm=alg)
    assert np.array_equal(out, np.concatenate([mine(r) for r in range(p)])), ("Allgather", alg)
    checked += 1
for alg in algs("reduce_scatter"):
    out = np.empty(n)
    comm.Reduce_scatter_block(np.concatenate([mine()] * p), out, op=MPI.SUM, algorithm=alg)
    assert np.allclose(out, total), ("Reduce_scatter_block", alg); checked += 1
for alg in algs("alltoall"):
    send = np.concatenate([mine() + 0.5 * d for d in range(p)])
    out = np.empty(n * p)
    comm.Alltoall(send, out, algorithm=alg)
    assert np.array_equal(out, np.concatenate([mine(s) + 0.5 * rank for s in range(p)])), ("Alltoall", alg)
    assert comm.alltoall([(rank, d) for d in range(p)], algorithm=alg) == [(s, rank) for s in range(p)]
    checked += 1
for alg in algs("alltoallv"):
    counts = [d + 1 for d in range(p)]                 # rank r sends d+1 values to rank d
    send = np.concatenate([np.full(d + 1, rank * 100.0 + d) for d in range(p)])
    recv = np.empty((rank + 1) * p)
    comm.Alltoallv([send, counts], [recv, [rank + 1] * p], algorithm=alg)
    assert np.array_equal(recv, np.concatenate([np.full(rank + 1, s * 100.0 + rank) for s in range(p)])), ("Alltoallv", alg)
    checked += 1
for coll, call in (("scan", comm.Scan), ("exscan", comm.Exscan)):
    for alg in algs(coll):
        out = np.zeros(n)
        call(mine(), out, op=MPI.SUM, algorithm=alg)
        upto = range(rank + 1) if coll == "scan" else range(rank)
        if upto:
            assert np.allclose(out, sum(mine(r) for r in upto)), (coll, alg)
        checked += 1
for alg in algs("barrier"):
    comm.Barrier(algorithm=alg); checked += 1

hosts = state.engine.hosts
print(f"rank {rank} on {socket.gethostname()} bind {state.info.bind_host} "
      f"hosts {','.join(map(str, hosts))} checked {checked}", flush=True)
print(f"err {rank}", file=sys.stderr, flush=True)
sys.stdout.write(f"unterminated {rank}")
'''

READY_THEN_SLEEP = r'''
import os, pathlib, sys, time
from minimpi import MPI
MPI.COMM_WORLD.barrier()
pathlib.Path(sys.argv[1], "ready." + os.environ["MINIMPI_RANK"]).touch()
while True:
    MPI.COMM_WORLD.barrier()
    time.sleep(0.1)
'''


def _unavailable() -> None:
    reason = netns_mod.unavailable_reason()
    if reason is None:
        return
    if REQUIRED:
        pytest.fail(f"network-namespace hosts unavailable but MINIMPI_MULTIHOST_REQUIRED is "
                    f"set: {reason}")
    pytest.skip(f"network-namespace hosts: {reason}")


@pytest.fixture(scope="module")
def hosts2():
    """Two hosts for every test that leaves them intact (a killed host gets its own set-up)."""
    _unavailable()
    hosts = netns_mod.NetnsHosts(n=2).up()
    try:
        yield hosts
    finally:
        hosts.down()


@pytest.fixture
def marker():
    value = uuid.uuid4().hex
    yield value
    left = pids_with_env(MARKER, value)
    deadline = time.monotonic() + 5
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = pids_with_env(MARKER, value)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not left, f"processes left behind on the hosts: {left}"


def write(tmp_path, name: str, source: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return str(path)


def start(hosts, marker: str, *args, cwd=None) -> subprocess.Popen:
    argv = [PY, "-m", "minimpi", "run", "--rsh", " ".join(hosts.rsh), "-x",
            f"{MARKER}={marker}", *map(str, args)]
    return subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True)


def finish(proc: subprocess.Popen, timeout: float = 60.0) -> subprocess.CompletedProcess:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"minimpi did not finish within {timeout} s\n{out}\n{err}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def minimpi(hosts, marker: str, *args, timeout: float = 60.0) -> subprocess.CompletedProcess:
    return finish(start(hosts, marker, *args), timeout)


def wait_ready(directory, n: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not all(os.path.exists(os.path.join(directory, f"ready.{r}")) for r in range(n)):
        if time.monotonic() > deadline:
            pytest.fail(f"the ranks did not all start within {timeout} s")
        time.sleep(0.05)


def netns_pids(hosts, name: str) -> list[int]:
    out = run(["ip", "netns", "pids", hosts.host(name).ns]).stdout
    return [int(p) for p in out.split()]


def test_two_hosts_p2p_every_collective_and_output(hosts2, marker, tmp_path):
    prog = write(tmp_path, "everything.py", EVERYTHING)
    t0 = time.monotonic()
    res = minimpi(hosts2, marker, "-n", 8, "--hosts", "h1:4,h2:4", prog, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    addr = {h.name: h.addr for h in hosts2.hosts}
    for r in range(8):
        host = "h1" if r < 4 else "h2"
        [line] = [ln for ln in lines if ln.startswith(f"[{r}] rank {r} on ")]
        words = line.split()
        assert words[4] == host and words[6] == addr[host], line
        # Engine.hosts: ranks 0-3 share one machine, 4-7 another
        assert words[8] == "0,0,0,0,1,1,1,1", line
        assert int(words[10]) > 40, line
        assert f"[{r}] unterminated {r}" in lines
        assert f"[{r}] err {r}" in res.stderr.splitlines()
    assert len(lines) == 16, res.stdout
    print(f"2 hosts x 4 ranks, every collective: {time.monotonic() - t0:.2f} s")


def test_startup_of_two_hosts_by_four_ranks(hosts2, marker, tmp_path):
    prog = write(tmp_path, "init.py", "from minimpi import MPI\nMPI.COMM_WORLD.Barrier()\n")
    times = []
    for _ in range(3):
        t0 = time.monotonic()
        res = minimpi(hosts2, marker, "-n", 8, "--hosts", "h1:4,h2:4", prog)
        times.append(time.monotonic() - t0)
        assert res.returncode == 0, res.stderr
    print(f"start-up + Barrier + teardown, 2 hosts x 4 ranks: best {min(times):.2f} s "
          f"of {', '.join(f'{t:.2f}' for t in times)}")
    assert min(times) < 20, times   # generous: the machine is shared


def test_hostfile_and_cidr_iface(hosts2, marker, tmp_path):
    prog = write(tmp_path, "where.py", """
        import socket
        from minimpi import MPI
        from minimpi.runtime import world
        c = MPI.COMM_WORLD
        c.Barrier()
        print(c.rank, socket.gethostname(), world.world_state().info.bind_host)
    """)
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# a hostfile\nh1 slots=1\nh2 slots=2   # two here\n")
    net = hosts2.gateway.rsplit(".", 1)[0] + ".0/24"
    res = minimpi(hosts2, marker, "-n", 3, "--hostfile", hostfile, "--iface", net, prog)
    assert res.returncode == 0, res.stderr
    got = sorted(res.stdout.splitlines())
    assert got == [f"[0] 0 h1 {hosts2.host('h1').addr}", f"[1] 1 h2 {hosts2.host('h2').addr}",
                   f"[2] 2 h2 {hosts2.host('h2').addr}"]


def test_a_failing_remote_rank_ends_the_job_everywhere(hosts2, marker, tmp_path):
    prog = write(tmp_path, "fail.py", """
        import sys, time
        from minimpi import MPI
        c = MPI.COMM_WORLD
        c.Barrier()
        if c.rank == 6:
            print("rank 6 cannot go on", file=sys.stderr, flush=True)
            sys.exit(3)
        time.sleep(60)        # the others are busy elsewhere: the launcher must end them
    """)
    t0 = time.monotonic()
    res = minimpi(hosts2, marker, "-n", 8, "--hosts", "h1:4,h2:4", prog)
    assert res.returncode == 3, res.stderr
    assert "minimpi: rank 6 exited with code 3" in res.stderr
    assert "  | rank 6 cannot go on" in res.stderr
    assert time.monotonic() - t0 < 30


def test_killing_the_launcher_leaves_nothing_on_any_host(hosts2, marker, tmp_path):
    prog = write(tmp_path, "sleep.py", READY_THEN_SLEEP)
    before = {h.name: set(netns_pids(hosts2, h.name)) for h in hosts2.hosts}
    proc = start(hosts2, marker, "-n", 8, "--hosts", "h1:4,h2:4", prog, tmp_path)
    try:
        wait_ready(tmp_path, 8)
        assert len(pids_with_env(MARKER, marker)) == 8
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        extra = {h.name: set(netns_pids(hosts2, h.name)) - before[h.name] for h in hosts2.hosts}
        if not any(extra.values()) and not pids_with_env(MARKER, marker):
            break
        time.sleep(0.1)
    # no rank, no agent, no sshd session left in either namespace
    assert not any(extra.values()), extra


def test_an_unreachable_peer_fails_startup_naming_both_addresses(hosts2, marker, tmp_path):
    prog = write(tmp_path, "init.py", "from minimpi import MPI\nMPI.COMM_WORLD.Barrier()\n")
    # every rank listens on its own host's loopback: the other host cannot reach it
    res = minimpi(hosts2, marker, "-n", 4, "--hosts", "h1:2,h2:2", "--iface", "lo", prog)
    assert res.returncode != 0
    m = re.search(r"rank (\d) at 127\.0\.0\.1:\d+ cannot reach rank (\d) at 127\.0\.0\.1:\d+ "
                  r"\(connect failed", res.stderr)
    assert m, res.stderr
    assert (int(m.group(1)) < 2) != (int(m.group(2)) < 2)    # the two ends on different hosts


def test_a_host_ssh_cannot_reach_fails_the_job_at_once(hosts2, marker, tmp_path):
    prog = write(tmp_path, "init.py", "from minimpi import MPI\nMPI.COMM_WORLD.Barrier()\n")
    t0 = time.monotonic()
    res = minimpi(hosts2, marker, "-n", 2, "--hosts", "h1:1,nosuchhost:1", prog)
    assert res.returncode == 255, res.stderr
    assert "minimpi: could not start the ranks on nosuchhost: ssh to nosuchhost exited with " \
        "code 255" in res.stderr
    assert time.monotonic() - t0 < 30


def test_a_deadlock_across_hosts_is_reported(hosts2, marker, tmp_path):
    prog = write(tmp_path, "dl.py", """
        from minimpi import MPI
        c = MPI.COMM_WORLD
        c.recv(source=(c.rank + 2) % c.size)       # rank 0 (h1) and rank 2 (h2) wait for each other
    """)
    res = minimpi(hosts2, marker, "-n", 4, "--hosts", "h1:2,h2:2", "--deadlock-timeout", "2",
                  prog)
    assert res.returncode == 3, res.stderr
    assert "wait-for cycle: rank 0 waits for rank 2 in recv" in res.stderr


def test_launch_api_across_hosts(hosts2, marker, tmp_path):
    app = write(tmp_path, "app.py", f"""
        import socket
        import minimpi

        def where(tag):
            from minimpi import MPI
            c = MPI.COMM_WORLD
            return tag, c.rank, socket.gethostname(), c.allreduce(c.rank)

        if __name__ == "__main__":
            res = minimpi.launch(where, n=4, args=("t",), hosts=["h1:2", "h2:2"],
                                 rsh={' '.join(hosts2.rsh)!r}, env={{"{MARKER}": "{marker}"}})
            print(res)
    """)
    res = subprocess.run([PY, app], capture_output=True, text=True, timeout=90, cwd=tmp_path,
                         stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == str([("t", 0, "h1", 6), ("t", 1, "h1", 6), ("t", 2, "h2", 6),
                                      ("t", 3, "h2", 6)])


@pytest.mark.netns_hosts(n=2)
def test_a_whole_host_killed_mid_job(netns_hosts, marker, tmp_path):
    prog = write(tmp_path, "sleep.py", READY_THEN_SLEEP)
    proc = start(netns_hosts, marker, "-n", 8, "--hosts", "h1:4,h2:4", prog, tmp_path)
    before_h1 = None
    try:
        wait_ready(tmp_path, 8)
        before_h1 = set(netns_pids(netns_hosts, "h1"))
        # the host dies: its sshd, the agent and the ranks, all at once
        for pid in netns_pids(netns_hosts, "h2"):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:   # a short-lived process (an sshd session ending)
                pass
        t0 = time.monotonic()
        res = finish(proc, timeout=40)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert res.returncode == 255, res.stderr
    assert "minimpi: lost host h2: ssh to h2 exited with code 255" in res.stderr
    assert "rank(s) 4-7 ran there" in res.stderr
    assert time.monotonic() - t0 < 20
    # h1's ranks and agent are gone too; only its sshd is left there
    deadline = time.monotonic() + 10
    left = set()
    while time.monotonic() < deadline:
        left = set(netns_pids(netns_hosts, "h1"))
        if left == {netns_hosts.host("h1").sshd_pid}:
            break
        time.sleep(0.1)
    assert left == {netns_hosts.host("h1").sshd_pid}, (left, before_h1)

