"""Whole jobs in a small /dev/shm (Docker's default is 64 MiB), through `minimpi run`.

Each test runs the launcher in a private mount namespace (``unshare -m``) whose /dev/shm is a
tmpfs of a given size, so the machine's own /dev/shm is never filled.

* Ranks whose inbox does not fit: with ``auto`` each such rank says so in one line and talks
  to every peer over TCP; the others keep shared memory among themselves. Before, the rings
  were reserved only after the ranks had exchanged addresses, too late to route around, and
  the job failed (or died of SIGBUS).
* 20 and 32 ranks in 64 MiB run (the launcher shrinks the rings to fit).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from jobhelpers import MINIMPI

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

CHECK = """
import sys
import numpy as np
from mpi4py import MPI
from minimpi.runtime import world
c = MPI.COMM_WORLD
r, p = c.rank, c.size
total = c.allreduce(r)
assert total == p * (p - 1) // 2, total
out = np.full(1 << 17, float(r))        # 1 MiB: through the ring in pieces, or by reference
got = np.empty_like(out)
c.Sendrecv(out, dest=(r + 1) % p, recvbuf=got, source=(r - 1) % p)
assert np.all(got == (r - 1) % p)
routes = world.world_state().engine.transport.routes()
print("rank", r, "routes", ",".join(x or "-" for x in routes), flush=True)
"""


def run_in_small_shm(size: str, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a private /dev/shm needs root and unshare")
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"unshare -m does not work here: {probe.stderr.decode().strip()}")
    mount = f"mount -t tmpfs -o size={size},mode=1777 tmpfs /dev/shm"
    command = " ".join(["exec", *map(_quote, MINIMPI), "run", *map(_quote, args)])
    try:
        return subprocess.run(["unshare", "-m", "sh", "-c", f"{mount} && {command}"],
                              capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"minimpi run did not finish within {timeout} s: {exc.stderr}")


def _quote(word: str) -> str:
    import shlex
    return shlex.quote(str(word))


def routes_by_rank(stdout: str) -> dict[int, list[str]]:
    out = {}
    for line in stdout.splitlines():
        words = line.split()
        if len(words) >= 5 and words[1] == "rank" and words[3] == "routes":
            out[int(words[2])] = words[4].split(",")
    return out


def test_ranks_that_do_not_fit_fall_back_to_tcp_with_one_line_each(write_script):
    prog = write_script("check.py", CHECK)
    # 5 ranks with 256 KiB rings need about 5 MiB; 3 MiB hold two or three inboxes
    res = run_in_small_shm("3m", "-n", "5", "-x", "MINIMPI_SHM_RING=256KiB", prog)
    assert res.returncode == 0, res.stdout + res.stderr
    routes = routes_by_rank(res.stdout)
    assert sorted(routes) == [0, 1, 2, 3, 4], res.stdout
    said = [ln for ln in res.stderr.splitlines() if "not using shm (tcp instead)" in ln]
    fell_back = sorted(r for r, rs in routes.items() if "shm" not in rs)
    kept = [r for r in routes if r not in fell_back]
    assert fell_back and len(kept) >= 2, res.stdout + res.stderr
    assert len(said) == len(fell_back), res.stderr          # one line per rank that fell back
    for line in said:
        assert "/dev/shm has" in line and "MiB free" in line, line
    for r in kept:       # the ranks that fit still use shared memory among themselves
        assert all(routes[r][q] == "shm" for q in kept if q != r), (r, routes)
        assert all(routes[r][q] == "tcp" for q in fell_back), (r, routes)


def test_transport_shm_that_does_not_fit_names_dev_shm_and_its_free_space(write_script):
    prog = write_script("check.py", CHECK)
    res = run_in_small_shm("3m", "-n", "5", "--transport", "shm",
                           "-x", "MINIMPI_SHM_RING=256KiB", prog, timeout=90)
    assert res.returncode != 0, res.stdout + res.stderr
    assert "/dev/shm has" in res.stderr and "MiB free" in res.stderr, res.stderr
    assert "--transport tcp" in res.stderr, res.stderr


@pytest.mark.parametrize("n", [20, 32])
def test_many_ranks_fit_in_docker_sized_dev_shm(write_script, n):
    prog = write_script("check.py", CHECK)
    res = run_in_small_shm("64m", "-n", str(n), "--startup-timeout", "120", prog, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    routes = routes_by_rank(res.stdout)
    assert len(routes) == n
    assert all(x in ("shm", "-") for rs in routes.values() for x in rs), res.stdout[-2000:]
    assert "not using shm" not in res.stderr
