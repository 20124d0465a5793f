"""The agent path on one machine (`--hosts localhost:N`, and `minimpi.launch`): the same
agents, frames and teardown as over ssh, testable without root; the multi-host tests in
tests/multihost run them across network namespaces."""
from __future__ import annotations

import os
import signal
import sys
import time

import pytest
from jobhelpers import (
    OWNER_VAR,
    assert_no_leftovers,
    finish,
    marker_args,
    run_minimpi,
    start_minimpi,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

HOSTS = ["--hosts", "localhost:2,127.0.0.1:2"]      # two agents, both on this machine

PROGRAM = """
import sys
from minimpi import MPI
from minimpi.runtime import world
comm = MPI.COMM_WORLD
total = comm.allreduce(comm.rank)
assert total == comm.size * (comm.size - 1) // 2
print(f"rank {comm.rank} of {comm.size} total {total} bind {world.world_state().info.bind_host}")
print(f"to stderr {comm.rank}", file=sys.stderr)
sys.stdout.write(f"no newline {comm.rank}")
"""

READY_THEN_SLEEP = """
import os, sys, time, pathlib
from minimpi import MPI
MPI.COMM_WORLD.barrier()
pathlib.Path(sys.argv[1], "ready." + os.environ["MINIMPI_RANK"]).touch()
time.sleep(60)
"""


def wait_ready(directory, n: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(os.path.exists(os.path.join(directory, f"ready.{r}")) for r in range(n)):
            return
        time.sleep(0.05)
    pytest.fail(f"ranks did not all start within {timeout} s")


def agent_pids() -> dict[str, int]:
    """{--host value: pid} of the agents of this test's jobs running now (those of jobs that
    others run on this machine lack the test's MINIMPI_TEST_OWNER)."""
    owner = f"{OWNER_VAR}={os.environ[OWNER_VAR]}".encode()
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            if b"minimpi.launcher.agent" not in argv or b"--host" not in argv:
                continue
            with open(f"/proc/{name}/environ", "rb") as f:
                if owner not in f.read().split(b"\0"):
                    continue
        except OSError:
            continue
        out[argv[argv.index(b"--host") + 1].decode()] = int(name)
    return out


def test_output_exit_and_rendezvous_through_agents(write_script, job_marker, tmp_path):
    script = write_script("prog.py", PROGRAM)
    res = run_minimpi("-n", 4, *HOSTS, "--output-dir", tmp_path / "logs",
                      *marker_args(job_marker), script, timeout=60)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    for r in range(4):
        assert f"[{r}] rank {r} of 4 total 6 bind 127.0.0.1" in lines
        assert f"[{r}] no newline {r}" in lines
        assert f"[{r}] to stderr {r}" in res.stderr.splitlines()
        assert (tmp_path / "logs" / f"rank.{r}.stderr").read_text() == f"to stderr {r}\n"
    assert len(lines) == 8


def test_a_failing_rank_is_named_with_its_code(write_script, job_marker):
    script = write_script("fail.py", """
        import sys
        from minimpi import MPI
        comm = MPI.COMM_WORLD
        comm.barrier()
        if comm.rank == 3:
            print("rank three gives up", file=sys.stderr)
            sys.exit(7)
        comm.barrier()
    """)
    res = run_minimpi("-n", 4, *HOSTS, *marker_args(job_marker), script, timeout=60)
    assert res.returncode == 7, res.stderr
    assert "minimpi: rank 3 exited with code 7" in res.stderr
    assert "  | rank three gives up" in res.stderr


def test_stdin_reaches_rank_0_through_its_agent(write_script, job_marker):
    script = write_script("cat.py", """
        import os, sys
        data = sys.stdin.read()
        print(os.environ["MINIMPI_RANK"], len(data), data[:12])
    """)
    text = "hello rank 0\n" * 20000          # more than the launcher keeps in flight
    res = run_minimpi("-n", 2, "--hosts", "localhost:2", *marker_args(job_marker), script,
                      input=text, timeout=60)
    assert res.returncode == 0, res.stderr
    assert f"[0] 0 {len(text)} hello rank 0" in res.stdout.splitlines()
    assert "[1] 1 0 " in res.stdout.splitlines()


def test_a_killed_agent_is_a_lost_host_and_its_ranks_die_with_it(write_script, job_marker,
                                                                   tmp_path):
    script = write_script("sleep.py", READY_THEN_SLEEP)
    proc = start_minimpi("-n", 4, *HOSTS, *marker_args(job_marker), script, tmp_path)
    try:
        wait_ready(tmp_path, 4)
        os.kill(agent_pids()["127.0.0.1"], signal.SIGKILL)
        res = finish(proc, timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert res.returncode == 255, res.stderr
    assert "minimpi: lost host 127.0.0.1: the agent for 127.0.0.1 killed by signal 9" \
        in res.stderr
    assert "rank(s) 2, 3 ran there" in res.stderr
    assert_no_leftovers(job_marker, wait=5)


def test_killing_the_launcher_ends_every_agent_and_rank(write_script, job_marker, tmp_path):
    script = write_script("sleep.py", READY_THEN_SLEEP)
    proc = start_minimpi("-n", 4, *HOSTS, *marker_args(job_marker), script, tmp_path)
    try:
        wait_ready(tmp_path, 4)
        agents = agent_pids()
        assert set(agents) == {"localhost", "127.0.0.1"}
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert_no_leftovers(job_marker, wait=5)
    time.sleep(0.5)
    assert not set(agent_pids().values()) & set(agents.values())


def test_sigterm_to_the_launcher_ends_the_job_through_the_agents(write_script, job_marker,
                                                                 tmp_path):
    script = write_script("sleep.py", READY_THEN_SLEEP)
    proc = start_minimpi("-n", 4, *HOSTS, *marker_args(job_marker), script, tmp_path)
    wait_ready(tmp_path, 4)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    res = finish(proc, timeout=20)
    assert res.returncode == 143, res.stderr
    assert "received SIGTERM" in res.stderr
    assert time.monotonic() - t0 < 10


def test_start_up_failure_on_a_host_names_it(write_script, job_marker, tmp_path):
    script = write_script("prog.py", PROGRAM)
    res = run_minimpi("-n", 2, "--hosts", "localhost:2", "--iface", "nosuchif0",
                      *marker_args(job_marker), script, timeout=60)
    assert res.returncode == 255
    assert "could not start the ranks on localhost" in res.stderr
    assert "nosuchif0" in res.stderr


def test_without_hosts_no_agent_is_involved(write_script, job_marker):
    """Without --hosts no agent sits between the launcher and a rank: its parent is the
    launcher, or the job's fork server, whose parent is the launcher."""
    script = write_script("who.py", """
        import os
        launcher, parent = os.environ["MINIMPI_LAUNCHER_PID"], os.getppid()
        if str(parent) == launcher:
            print(True)
        else:
            with open(f"/proc/{parent}/stat") as f:
                grandparent = f.read().rsplit(")", 1)[1].split()[1]
            with open(f"/proc/{parent}/cmdline", "rb") as f:
                print(grandparent == launcher and b"forkserver" in f.read())
    """)
    res = run_minimpi("-n", 2, *marker_args(job_marker), script)
    assert res.returncode == 0, res.stderr
    assert sorted(res.stdout.splitlines()) == ["[0] True", "[1] True"]


def test_usage_errors_exit_2(write_script):
    script = write_script("prog.py", PROGRAM)
    res = run_minimpi("-n", 9, "--hosts", "a:4,b:4", script)
    assert res.returncode == 2
    assert "9 ranks do not fit in the 8 slots of a:4, b:4" in res.stderr


def test_ssh_that_cannot_connect_fails_the_job_at_once(write_script, job_marker, tmp_path):
    fake = tmp_path / "fake-ssh"
    fake.write_text("#!/bin/sh\necho \"ssh: connect to host $1 port 22: Connection refused\" >&2\n"
                    "exit 255\n")
    fake.chmod(0o755)
    script = write_script("prog.py", PROGRAM)
    t0 = time.monotonic()
    res = run_minimpi("-n", 2, "--hosts", "nodeA:1,nodeB:1", "--rsh", str(fake),
                      *marker_args(job_marker), script, timeout=30)
    assert res.returncode == 255
    assert "could not start the ranks on node" in res.stderr
    assert "Connection refused" in res.stderr
    assert time.monotonic() - t0 < 15


def test_any_remote_shell_and_a_chatty_login_script(write_script, job_marker, tmp_path):
    """--rsh takes any `CMD HOST COMMAND` program; what a login script prints on stdout before
    the agent starts is skipped (here the "remote shell" runs the command on this machine)."""
    from minimpi.runtime.netaddr import interface_addresses, is_loopback
    if not any(not is_loopback(a) for _, a in interface_addresses()):
        pytest.skip("needs a network interface besides loopback")
    fake = tmp_path / "fake-rsh"
    fake.write_text('#!/bin/sh\necho "Welcome to $1"\nexec sh -c "$2"\n')
    fake.chmod(0o755)
    script = write_script("prog.py", PROGRAM)
    res = run_minimpi("-n", 4, "--hosts", "nodeA:2,nodeB:2", "--rsh", str(fake),
                      *marker_args(job_marker), script, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "printed before the agent started (ignored): Welcome to nodeA" in res.stderr
    lines = res.stdout.splitlines()
    for r in range(4):   # two "hosts": no rank may listen on loopback
        [line] = [ln for ln in lines if ln.startswith(f"[{r}] rank {r} of 4 total 6 bind ")]
        assert not line.endswith("bind 127.0.0.1"), line


def test_a_rank_that_fails_while_every_host_finishes_still_fails_the_job(write_script,
                                                                        job_marker):
    """A failure held back (is a host being lost?) must be decided when every host is done."""
    script = write_script("quick.py", """
        import os, sys
        sys.exit(5 if os.environ["MINIMPI_RANK"] == "1" else 0)
    """)
    for _ in range(3):
        res = run_minimpi("-n", 4, *HOSTS, *marker_args(job_marker), script, timeout=60)
        assert res.returncode == 5, res.stderr
        assert "minimpi: rank 1 exited with code 5" in res.stderr
