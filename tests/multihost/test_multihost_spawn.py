"""`Spawn` in jobs that run on several hosts: `minimpi run --hosts` (agents over ssh into
network-namespace hosts) and `minimpi run` under a one-node Slurm (agents placed with srun).

The spawned processes are placed by the `host` info key or on the hosts' free slots, started
by that host's agent, reach their parents over TCP across hosts, and end with the job;
a spawn that does not fit, or whose program exits at once, is an error naming the command."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import netns_hosts as netns_mod
import pytest
import slurm_cluster as slurm_mod
from infra_common import pids_with_env, run

PY = sys.executable
MARKER = "MINIMPI_TEST_MARKER"
REQUIRED = os.environ.get("MINIMPI_MULTIHOST_REQUIRED", "") not in ("", "0")

MANAGER = r'''
import os, socket, sys
import numpy as np
from mpi4py import MPI

worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")
world = MPI.COMM_WORLD
assert world.Get_attr(MPI.UNIVERSE_SIZE) == int(sys.argv[1]), world.Get_attr(MPI.UNIVERSE_SIZE)
where = sys.argv[2]                       # the info key 'host' of the first spawn ("": none)
full = sys.argv[3] == "full"              # a third spawn then finds no free slot

def work(child, n):
    data = np.arange(16, dtype="d")
    child.Bcast(data, root=MPI.ROOT)
    total = np.zeros(16)
    child.Reduce(None, total, op=MPI.SUM, root=MPI.ROOT)
    assert np.array_equal(total, data * sum(range(1, n + 1))), total
    hosts = child.gather(None, root=MPI.ROOT)
    merged = child.Merge(high=False)
    assert (merged.Get_size(), merged.Get_rank()) == (n + 1, 0)
    assert merged.allreduce(merged.Get_rank()) == n * (n + 1) // 2
    merged.Free()
    return hosts

info = MPI.Info.Create()
if where:
    info.Set("host", where)
a = MPI.COMM_SELF.Spawn(sys.executable, [worker], maxprocs=2, info=info)
b = MPI.COMM_SELF.Spawn(sys.executable, [worker], maxprocs=1)     # the free slot left
if full:
    try:
        MPI.COMM_SELF.Spawn(sys.executable, [worker, "too-many"], maxprocs=1)
    except MPI.Exception as exc:
        assert exc.Get_error_class() == MPI.ERR_SPAWN, exc
        print("refused:", str(exc).split(": ", 1)[1], flush=True)
    else:
        raise AssertionError("a spawn beyond the slots was not refused")
print("a on", ",".join(sorted(h for _, h in work(a, 2))), flush=True)
print("b on", ",".join(h for _, h in work(b, 1)), flush=True)
a.Disconnect()
b.Disconnect()
print("manager on", socket.gethostname(), "done", flush=True)
'''

WORKER = r'''
import socket
import numpy as np
from mpi4py import MPI

parent = MPI.Comm.Get_parent()
world = MPI.COMM_WORLD
data = np.empty(16)
parent.Bcast(data, root=0)
parent.Reduce(data * (world.rank + 1), None, op=MPI.SUM, root=0)
parent.gather((world.rank, socket.gethostname()), root=0)
merged = parent.Merge(high=True)
merged.allreduce(merged.Get_rank())
merged.Free()
parent.Disconnect()
print(f"worker {world.rank} of {world.size} on {socket.gethostname()}", flush=True)
'''


def _unavailable(what: str, reason) -> None:
    if reason is None:
        return
    if REQUIRED:
        pytest.fail(f"{what} unavailable but MINIMPI_MULTIHOST_REQUIRED is set: {reason}")
    pytest.skip(f"{what}: {reason}")


@pytest.fixture(scope="module")
def hosts2():
    _unavailable("network-namespace hosts", netns_mod.unavailable_reason())
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
    assert not left, f"processes left behind: {left}"


def write(tmp_path, name: str, source: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return str(path)


def netns_extra(hosts) -> dict:
    """Processes in the hosts' namespaces besides their sshd."""
    out = {}
    for h in hosts.hosts:
        pids = {int(p) for p in run(["ip", "netns", "pids", h.ns]).stdout.split()}
        out[h.name] = pids - {h.sshd_pid}
    return out


def minimpi(hosts, marker: str, *args, timeout: float = 90.0) -> subprocess.CompletedProcess:
    argv = [PY, "-m", "minimpi", "run", "--rsh", " ".join(hosts.rsh), "-x",
            f"{MARKER}={marker}", *map(str, args)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"minimpi did not finish within {timeout} s\n{out}\n{err}")
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def wait_no_extra(hosts, timeout: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout
    extra = netns_extra(hosts)
    while any(extra.values()) and time.monotonic() < deadline:
        time.sleep(0.1)
        extra = netns_extra(hosts)
    return extra


def test_spawn_on_a_named_host_and_on_free_slots(hosts2, marker, tmp_path):
    manager = write(tmp_path, "manager.py", MANAGER)
    write(tmp_path, "worker.py", WORKER)
    t0 = time.monotonic()
    # the manager on h1 (one of its 2 slots); 2 workers on h2 (info host), 1 on h1's free slot
    res = minimpi(hosts2, marker, "-n", 1, "--hosts", "h1:2,h2:2", "--timeout", 80,
                  manager, 4, "h2", "full")
    took = time.monotonic() - t0
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert "[0] a on h2,h2" in lines, res.stdout
    assert "[0] b on h1" in lines, res.stdout
    assert "[0] manager on h1 done" in lines, res.stdout
    assert "[job1:0] worker 0 of 2 on h2" in lines and "[job1:1] worker 1 of 2 on h2" in lines
    assert "[job2:0] worker 0 of 1 on h1" in lines, res.stdout
    [refused] = [ln for ln in lines if ln.startswith("[0] refused:")]
    assert "worker.py too-many`: 4 of the universe's 4 (the hosts' slots) are running" \
        in refused, refused
    # nothing left on either host: no rank, no spawned process, no agent
    assert not any(wait_no_extra(hosts2).values()), netns_extra(hosts2)
    print(f"manager + 3 spawned workers on 2 hosts: {took:.2f} s")


def test_universe_size_beyond_the_slots_places_in_turn(hosts2, marker, tmp_path):
    manager = write(tmp_path, "manager.py", MANAGER)
    write(tmp_path, "worker.py", WORKER)
    # 1 slot each: the manager fills h1's; with --universe-size 4 the 3 workers go beyond
    res = minimpi(hosts2, marker, "-n", 1, "--hosts", "h1:1,h2:1", "--universe-size", 4,
                  "--timeout", 80, manager, 4, "", "room")
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert "[0] a on h2,h1" not in lines    # sorted: h1 before h2
    assert "[0] a on h1,h2" in lines, res.stdout
    assert "[0] b on h2" in lines, res.stdout


def test_a_spawned_program_that_exits_at_once_is_an_error(hosts2, marker, tmp_path):
    quits = write(tmp_path, "quits.py", """
        import sys
        print("no work today", file=sys.stderr, flush=True)
        sys.exit(5)
    """)
    prog = write(tmp_path, "spawner.py", f"""
        import sys
        from mpi4py import MPI

        def attempt(args, host=None, n=2):
            info = MPI.Info.Create()
            if host:
                info.Set("host", host)
            try:
                MPI.COMM_SELF.Spawn(sys.executable, args, maxprocs=n, info=info)
            except MPI.Exception as exc:
                assert exc.Get_error_class() == MPI.ERR_SPAWN, exc
                print("error:", exc, flush=True)
            else:
                print("spawned", args, flush=True)

        attempt([{quits!r}, "many"], "h2", 3)
        attempt([{quits!r}], "h2")
        attempt(["/no/such/file.py"])
        attempt([{quits!r}], "h9", 1)
    """)
    t0 = time.monotonic()
    res = minimpi(hosts2, marker, "-n", 1, "--hosts", "h1:2,h2:2", "--timeout", 60, prog)
    assert res.returncode == 0, res.stdout + res.stderr
    errors = [ln for ln in res.stdout.splitlines() if ln.startswith("[0] error:")]
    assert len(errors) == 4, res.stdout
    assert "quits.py many` on host h2 (info 'host'): 2 of its 2 slot(s) free" in errors[0], \
        errors[0]
    assert "quits.py" in errors[1] and "exited with code 5 before it initialized MPI" in errors[1]
    assert "no work today" in res.stdout, res.stdout    # its stderr comes along
    assert "/no/such/file.py" in errors[2] and "not found" in errors[2], errors[2]
    assert "quits.py" in errors[3] and "'h9'" in errors[3] and "not one of this job's hosts" \
        in errors[3], errors[3]
    assert time.monotonic() - t0 < 50
    assert not any(wait_no_extra(hosts2).values()), netns_extra(hosts2)


def test_a_failing_spawned_process_on_another_host_ends_the_job(hosts2, marker, tmp_path):
    write(tmp_path, "bad.py", """
        import sys
        from mpi4py import MPI
        MPI.Comm.Get_parent()
        if MPI.COMM_WORLD.rank == 1:
            raise RuntimeError("worker gives up")
        MPI.COMM_WORLD.Barrier()
    """)
    prog = write(tmp_path, "parent.py", """
        import os, sys
        from mpi4py import MPI
        info = MPI.Info.Create()
        info.Set("host", "h2")
        child = MPI.COMM_SELF.Spawn(sys.executable, [os.path.join(os.path.dirname(
            os.path.abspath(__file__)), "bad.py")], maxprocs=2, info=info)
        child.recv(source=0)      # never comes
    """)
    t0 = time.monotonic()
    res = minimpi(hosts2, marker, "-n", 1, "--hosts", "h1:1,h2:2", "--timeout", 60, prog)
    assert res.returncode != 0
    assert "spawned job 1, rank 1" in res.stderr, res.stderr
    assert "worker gives up" in res.stderr, res.stderr
    assert time.monotonic() - t0 < 40
    assert not any(wait_no_extra(hosts2).values()), netns_extra(hosts2)


@pytest.fixture(scope="module")
def cluster():
    _unavailable("Slurm", slurm_mod.unavailable_reason())
    c = slurm_mod.SlurmCluster(cpus=4).up()
    try:
        yield c
    finally:
        c.down()


def test_spawn_under_slurm(cluster, marker, tmp_path):
    manager = write(tmp_path, "manager.py", MANAGER)
    write(tmp_path, "worker.py", WORKER)
    argv = ["salloc", "-n", "4", PY, "-m", "minimpi", "run", "-n", "1", "--timeout", "80",
            "-x", f"{MARKER}={marker}", manager, "4", "", "full"]
    try:
        res = subprocess.run(argv, env=cluster.client_env({MARKER: marker}), capture_output=True,
                             text=True, timeout=100, cwd=tmp_path, stdin=subprocess.DEVNULL,
                             start_new_session=True)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"salloc minimpi run did not finish\n{exc.stdout}\n{exc.stderr}\n"
                    f"{cluster.logs()}")
    assert res.returncode == 0, res.stdout + res.stderr + cluster.logs()
    lines = res.stdout.splitlines()
    node = [ln.split()[-2] for ln in lines if ln.startswith("[0] manager on")]
    assert node, res.stdout
    assert f"[0] a on {node[0]},{node[0]}" in lines, res.stdout
    assert f"[0] b on {node[0]}" in lines, res.stdout
    [refused] = [ln for ln in lines if ln.startswith("[0] refused:")]
    assert "worker.py too-many" in refused, refused
    assert {f"[job1:{r}] worker {r} of 2 on {node[0]}" for r in range(2)} <= set(lines)


def test_a_silent_spawned_process_on_another_host_is_reported(hosts2, marker, tmp_path):
    write(tmp_path, "stops.py", """
        import os, signal
        from mpi4py import MPI
        MPI.Comm.Get_parent()
        os.kill(os.getpid(), signal.SIGSTOP)
    """)
    prog = write(tmp_path, "parent.py", """
        import os, sys
        from mpi4py import MPI
        info = MPI.Info.Create()
        info.Set("host", "h2")
        child = MPI.COMM_SELF.Spawn(sys.executable, [os.path.join(os.path.dirname(
            os.path.abspath(__file__)), "stops.py")], info=info)
        child.recv(source=0)      # never comes
    """)
    t0 = time.monotonic()
    res = minimpi(hosts2, marker, "-n", 1, "--hosts", "h1:1,h2:1", "--heartbeat-timeout", 2,
                  "--timeout", 60, prog)
    assert res.returncode == 124, res.stderr
    assert "minimpi: spawned job 1, rank 0 (`" in res.stderr, res.stderr
    assert "stops.py`) sent no heartbeat for" in res.stderr, res.stderr
    assert time.monotonic() - t0 < 30
    assert not any(wait_no_extra(hosts2).values()), netns_extra(hosts2)


def test_deadlock_and_timeout_reports_cover_spawned_processes(hosts2, marker, tmp_path):
    write(tmp_path, "waits.py", """
        from mpi4py import MPI
        parent = MPI.Comm.Get_parent()
        parent.recv(source=0)          # the parent waits for us too: a cycle across hosts
    """)
    prog = write(tmp_path, "parent.py", """
        import os, sys
        from mpi4py import MPI
        info = MPI.Info.Create()
        info.Set("host", "h2")
        child = MPI.COMM_SELF.Spawn(sys.executable, [os.path.join(os.path.dirname(
            os.path.abspath(__file__)), "waits.py")], info=info)
        child.recv(source=0)
    """)
    res = minimpi(hosts2, marker, "-n", 1, "--hosts", "h1:1,h2:1", "--deadlock-timeout", 2,
                  "--timeout", 60, prog)
    assert res.returncode == 3, res.stderr
    assert "minimpi: deadlock:" in res.stderr, res.stderr
    assert "  rank 0: blocked in recv(source=0" in res.stderr, res.stderr
    assert "  spawned job 1, rank 0: blocked in recv(source=0, tag=ANY_TAG) on parent at " \
        "waits.py:4" in res.stderr, res.stderr
    res = minimpi(hosts2, marker, "-n", 1, "--hosts", "h1:1,h2:1", "--deadlock-timeout", 0,
                  "--timeout", 12, prog)
    assert res.returncode == 124, res.stderr
    assert "job timed out after 12 s" in res.stderr, res.stderr
    assert "  spawned job 1, rank 0: " in res.stderr and "recv" in res.stderr, res.stderr
    assert not any(wait_no_extra(hosts2).values()), netns_extra(hosts2)


def test_spawn_multiple_and_a_futures_pool_across_hosts(hosts2, marker, tmp_path):
    write(tmp_path, "who.py", """
        import socket, sys
        from mpi4py import MPI
        parent = MPI.Comm.Get_parent()
        parent.gather((sys.argv[1], MPI.COMM_WORLD.rank, socket.gethostname()), root=0)
        parent.Disconnect()
    """)
    prog = write(tmp_path, "app.py", """
        import os, socket, sys, time
        from mpi4py import MPI
        from mpi4py.futures import MPIPoolExecutor

        def where(x):
            time.sleep(0.05)          # every worker gets some of the tasks
            return x * x, socket.gethostname()

        if __name__ == "__main__":
            # the pool's 2 workers: the free slots, one on each host
            with MPIPoolExecutor(max_workers=2) as pool:
                got = list(pool.map(where, range(6)))
            print("squares", [v for v, _ in got], flush=True)
            print("pool on", sorted({h for _, h in got}), flush=True)
            # (waits for the workers to end: their slots are needed)
            who = os.path.join(os.path.dirname(os.path.abspath(__file__)), "who.py")
            on_h1 = MPI.Info.Create()
            on_h1.Set("host", "h1")
            child = MPI.COMM_SELF.Spawn_multiple([sys.executable] * 2, [[who, "x"], [who, "y"]],
                                                 [1, 2], [on_h1, MPI.INFO_NULL])
            print("multiple", sorted(child.gather(None, root=MPI.ROOT)), flush=True)
            child.Disconnect()
    """)
    res = minimpi(hosts2, marker, "-n", 1, "--hosts", "h1:2,h2:2", "--timeout", 80, prog)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    # x (info host h1) on h1's free slot; both of y on h2's free slots (job 2: the pool's
    # workers were job 1)
    assert "[0] multiple [('x', 0, 'h1'), ('y', 1, 'h2'), ('y', 2, 'h2')]" in lines, res.stdout
    assert "[0] squares [0, 1, 4, 9, 16, 25]" in lines, res.stdout
    assert "[0] pool on ['h1', 'h2']" in lines, res.stdout
    assert not any(wait_no_extra(hosts2).values()), netns_extra(hosts2)


def test_killing_the_launcher_ends_spawned_processes_on_every_host(hosts2, marker, tmp_path):
    write(tmp_path, "sleeps.py", """
        import os, pathlib, sys, time
        from mpi4py import MPI
        MPI.Comm.Get_parent()
        pathlib.Path(sys.argv[1], "ready." + os.environ["MINIMPI_RANK"]).touch()
        time.sleep(120)
    """)
    prog = write(tmp_path, "parent.py", """
        import os, sys
        from mpi4py import MPI
        here = os.path.dirname(os.path.abspath(__file__))
        MPI.COMM_SELF.Spawn(sys.executable, [os.path.join(here, "sleeps.py"), here], maxprocs=3)
        import time; time.sleep(120)
    """)
    argv = [PY, "-m", "minimpi", "run", "--rsh", " ".join(hosts2.rsh), "-x",
            f"{MARKER}={marker}", "-n", "1", "--hosts", "h1:2,h2:2", prog]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 40
        while not all((tmp_path / f"ready.{r}").exists() for r in range(3)):
            assert time.monotonic() < deadline, "the spawned processes did not start"
            time.sleep(0.1)
        assert all(netns_extra(hosts2).values())     # something runs on both hosts
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert not any(wait_no_extra(hosts2, timeout=15).values()), netns_extra(hosts2)
