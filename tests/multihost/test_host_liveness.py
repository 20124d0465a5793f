"""A host that goes silent, or dies, across real network namespaces and ssh.

* ``ip link set <veth> down``: nothing reaches either end, no EOF anywhere. Before, the job
  ended after the ranks' heartbeat timeout with "rank 2 sent no heartbeat" (the host not
  named), and the agent and its ranks stayed alive for minutes, also after the link came
  back. Now the launcher names the host ("no heartbeat from its agent") and exits 255, and
  the agent, hearing nothing from the launcher, ends its ranks and exits by itself.
* a whole host killed: the ranks of the other host that lost a peer there are summed up in
  one line; rank 0's PeerLostError traceback (minimpi's frames included) is not printed.
"""
from __future__ import annotations

import os
import signal
import time

import pytest
import test_multihost_launch as launch_tests
from infra_common import pids_with_env, run
from test_multihost_launch import finish, netns_pids, start, write

marker = launch_tests.marker       # the fixture: nothing carrying the test's marker is left

#: ranks on h1 wait for a message from h2 that never comes; every rank says it is ready first
WAIT_FOR_H2 = r'''
import os, pathlib, sys, time
from minimpi import MPI
c = MPI.COMM_WORLD
c.Barrier()
pathlib.Path(sys.argv[1], "ready." + os.environ["MINIMPI_RANK"]).touch()
if c.rank < c.size // 2:
    c.recv(source=c.rank + c.size // 2)
else:
    time.sleep(120)
'''


def wait_ready(proc, directory, n: int, timeout: float = 40.0) -> None:
    deadline = time.monotonic() + timeout
    while not all(os.path.exists(os.path.join(directory, f"ready.{r}")) for r in range(n)):
        if proc.poll() is not None or time.monotonic() > deadline:
            res = finish(proc, timeout=10) if proc.poll() is not None else None
            pytest.fail(f"the ranks did not all start within {timeout} s: "
                        f"{res.stderr if res else ''}")
        time.sleep(0.05)


#: as WAIT_FOR_H2, and the ranks on h1 outlive the launcher's SIGTERM (until its SIGKILL), so
#: that they surely meet their PeerLostError and print its traceback
WAIT_FOR_H2_STUBBORN = WAIT_FOR_H2.replace(
    "if c.rank < c.size // 2:\n",
    "if c.rank < c.size // 2:\n    import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN)\n")


def agent_pids(hosts, name: str) -> list[int]:
    """The minimpi agents running in host ``name``'s namespace."""
    found = []
    for pid in netns_pids(hosts, name):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"minimpi.launcher.agent" in f.read():
                    found.append(pid)
        except OSError:
            pass
    return found


@pytest.mark.netns_hosts(n=2)
def test_a_host_whose_link_goes_down_is_named_and_its_ranks_end(netns_hosts, marker, tmp_path):
    prog = write(tmp_path, "wait.py", WAIT_FOR_H2)
    h2 = netns_hosts.host("h2")
    proc = start(netns_hosts, marker, "-n", 4, "--hosts", "h1:2,h2:2",
                 "--heartbeat-timeout", "3", prog, tmp_path)
    try:
        wait_ready(proc, tmp_path, 4)
        assert agent_pids(netns_hosts, "h2")
        run(["ip", "link", "set", h2.veth, "down"])
        t0 = time.monotonic()
        res = finish(proc, timeout=40)
        took = time.monotonic() - t0
        assert res.returncode == 255, res.stderr
        assert "minimpi: lost host h2 (no heartbeat from its agent for" in res.stderr, res.stderr
        assert "): rank(s) 2, 3 ran there" in res.stderr, res.stderr
        assert "sent no heartbeat" not in res.stderr, res.stderr
        assert took < 15, (took, res.stderr)
        # h2 hears nothing from the launcher either: its agent ends the ranks and exits,
        # while the link is still down (twice the heartbeat timeout, then the grace period)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if not agent_pids(netns_hosts, "h2") and not pids_with_env("MINIMPI_TEST_MARKER",
                                                                       marker):
                break
            time.sleep(0.2)
        assert not agent_pids(netns_hosts, "h2"), "the agent on h2 outlived its launcher"
        assert not pids_with_env("MINIMPI_TEST_MARKER", marker), "ranks left on h2"
    finally:
        run(["ip", "link", "set", h2.veth, "up"], check=False)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.netns_hosts(n=2)
def test_a_lost_host_is_summed_up_without_the_other_ranks_tracebacks(netns_hosts, marker,
                                                                      tmp_path):
    prog = write(tmp_path, "wait.py", WAIT_FOR_H2_STUBBORN)
    proc = start(netns_hosts, marker, "-n", 4, "--hosts", "h1:2,h2:2", prog,
                 tmp_path)
    try:
        wait_ready(proc, tmp_path, 4)
        for pid in netns_pids(netns_hosts, "h2"):      # the whole host, all at once
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        res = finish(proc, timeout=40)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert res.returncode == 255, res.stderr
    assert "minimpi: lost host h2: ssh to h2 exited with code 255" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    assert "minimpi/" not in res.stderr, res.stderr     # none of minimpi's frames
    # ranks 0 and 1 lost their peers there, or were ended first: one line either way
    others = [ln for ln in res.stderr.splitlines() if "stopped because of it" in ln]
    assert len(others) <= 1 and all("2 other rank(s)" in ln for ln in others), res.stderr
