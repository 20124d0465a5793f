"""Jobs started without `minimpi run`: plain processes that meet through rank 0's coordinator
(environment rendezvous), for every family of rank variables; authentication is mandatory."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from jobhelpers import MARKER_VAR, assert_no_leftovers

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

SECRET = "0123456789abcdef-test-secret"

PROGRAM = """
import numpy as np
from minimpi import MPI
from minimpi.runtime import world
comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
x = np.full(10, rank + 1.0)
y = np.empty_like(x)
comm.Allreduce(x, y, op=MPI.SUM)
assert y[0] == size * (size + 1) / 2, y
got = comm.sendrecv(rank, dest=(rank + 1) % size, source=(rank - 1) % size)
assert got == (rank - 1) % size
info = world.world_state().info
print(f"rank {rank} of {size} ok via {info.source} bind {info.bind_host}", flush=True)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_ranks(script: str, envs: list[dict], marker: str) -> list[subprocess.Popen]:
    procs = []
    for env in envs:
        full = {k: v for k, v in os.environ.items()
                if not k.startswith(("MINIMPI_", "SLURM_", "OMPI_", "PMI_"))
                and k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
        full.update(env)
        full[MARKER_VAR] = marker
        procs.append(subprocess.Popen([sys.executable, script], env=full, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      stdin=subprocess.DEVNULL, start_new_session=True))
    return procs


def finish_all(procs: list[subprocess.Popen], timeout: float = 40.0) -> list[tuple]:
    deadline = time.monotonic() + timeout
    out = []
    try:
        for p in procs:
            o, e = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
            out.append((p.returncode, o, e))
    except subprocess.TimeoutExpired:
        pytest.fail(f"the ranks did not finish within {timeout} s")
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    return out


FAMILIES = {
    "minimpi": lambda r, n, port: {"MINIMPI_COORDINATOR": f"127.0.0.1:{port}",
                                   "MINIMPI_RANK": str(r), "MINIMPI_SIZE": str(n)},
    "torchrun": lambda r, n, port: {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                                    "RANK": str(r), "WORLD_SIZE": str(n)},
    "openmpi": lambda r, n, port: {"MINIMPI_COORDINATOR": f"localhost:{port}",
                                   "OMPI_COMM_WORLD_RANK": str(r),
                                   "OMPI_COMM_WORLD_SIZE": str(n)},
    "pmi": lambda r, n, port: {"MINIMPI_COORDINATOR": f"127.0.0.1:{port}",
                               "PMI_RANK": str(r), "PMI_SIZE": str(n)},
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_processes_meet_through_rank_0(family, write_script, job_marker):
    script = write_script("prog.py", PROGRAM)
    port, n = free_port(), 3
    # rank 0 last: the others wait for its coordinator (zmq reconnects until it is there)
    envs = [{**FAMILIES[family](r, n, port), "MINIMPI_SECRET": SECRET} for r in range(n)]
    procs = start_ranks(script, envs[1:] + envs[:1], job_marker)
    results = finish_all(procs)
    for rc, out, err in results:
        assert rc == 0, err
    lines = sorted(line for _, out, _ in results for line in out.splitlines())
    source = "torchrun" if family == "torchrun" else "env"
    assert lines == [f"rank {r} of {n} ok via {source} bind 127.0.0.1" for r in range(n)]


def test_a_rank_with_another_secret_cannot_join_and_is_told_at_once(write_script, job_marker):
    """Before, the rank with the wrong secret waited for the startup timeout plus 5 s and
    then blamed the launcher ("is the launcher alive?"; there is none here), under a
    traceback of minimpi's frames."""
    script = write_script("prog.py", PROGRAM)
    port = free_port()
    base = {"MINIMPI_COORDINATOR": f"127.0.0.1:{port}", "MINIMPI_SIZE": "2"}
    t0 = time.monotonic()
    procs = start_ranks(script, [{**base, "MINIMPI_RANK": "0", "MINIMPI_SECRET": SECRET,
                                  "MINIMPI_STARTUP_TIMEOUT": "6"},
                                 {**base, "MINIMPI_RANK": "1",
                                  "MINIMPI_SECRET": "an-entirely-different-secret"}], job_marker)
    rc1, _, err1 = finish_all(procs[1:], timeout=30)[0]
    took = time.monotonic() - t0
    (rc0, _, err0), = finish_all(procs[:1], timeout=30)
    assert rc0 != 0 and rc1 != 0
    # the stranger: authentication failed, in one line, well before any startup timeout
    assert took < 15, (took, err1)
    assert err1.startswith("minimpi rank 1: AuthenticationError: rank 1: authentication with "
                           "the coordinator at tcp://127.0.0.1:"), err1
    assert "share one secret" in err1 and "prog.py:3)" in err1, err1
    assert len(err1.strip().splitlines()) == 1 and "Traceback" not in err1, err1
    # rank 0's coordinator says who never came, and that someone failed to authenticate
    assert "rank(s) 1 never registered" in err0, err0
    assert "failed authentication: a rank with another secret?" in err0, err0
    assert "Traceback" not in err0, err0


def test_without_a_secret_nothing_starts(write_script, job_marker, tmp_path):
    script = write_script("prog.py", PROGRAM)
    env = {"MINIMPI_COORDINATOR": f"127.0.0.1:{free_port()}", "MINIMPI_RANK": "0",
           "MINIMPI_SIZE": "2", "HOME": str(tmp_path)}      # no ~/.minimpi/secret there
    t0 = time.monotonic()
    [(rc, out, err)] = finish_all(start_ranks(script, [env], job_marker), timeout=20)
    assert rc != 0 and time.monotonic() - t0 < 15
    assert "no job secret" in err and "MINIMPI_SECRET" in err and "minimpi keygen" in err
    # one line that says where the program was, not an import traceback
    assert err.startswith("minimpi rank 0: no job secret") or err.startswith("minimpi: no job"), err
    assert "Traceback" not in err and "prog.py:3)" in err, err


def test_insecure_opt_out_runs_and_says_so(write_script, job_marker, tmp_path):
    script = write_script("prog.py", PROGRAM)
    port = free_port()
    envs = [{"MINIMPI_COORDINATOR": f"127.0.0.1:{port}", "MINIMPI_RANK": str(r),
             "MINIMPI_SIZE": "2", "HOME": str(tmp_path), "MINIMPI_INSECURE": "1"}
            for r in (1, 0)]
    results = finish_all(start_ranks(script, envs, job_marker))
    assert all(rc == 0 for rc, _, _ in results), results
    assert "runs without authentication" in results[1][2]


def test_coordinator_port_in_use_is_named(write_script, job_marker):
    script = write_script("prog.py", PROGRAM)
    busy = socket.create_server(("0.0.0.0", 0))
    port = busy.getsockname()[1]
    try:
        env = {"MINIMPI_COORDINATOR": f"127.0.0.1:{port}", "MINIMPI_RANK": "0",
               "MINIMPI_SIZE": "2", "MINIMPI_SECRET": SECRET}
        [(rc, _, err)] = finish_all(start_ranks(script, [env], job_marker), timeout=30)
    finally:
        busy.close()
    assert rc != 0
    assert f"could not start the coordinator on port {port}" in err
    assert "MINIMPI_COORDINATOR=HOST:PORT" in err
    assert_no_leftovers(job_marker)     # rank 0's helper too


def test_ranks_that_lose_a_peer_say_so_in_one_line(write_script, job_marker):
    """No launcher sums up here: each surviving rank prints one line (where the program was,
    then the error), not a traceback through minimpi's frames."""
    script = write_script("prog.py", """
        import os
        from minimpi import MPI
        comm = MPI.COMM_WORLD
        comm.Barrier()
        if comm.rank == 2:
            os._exit(3)
        comm.recv(source=2)
    """)
    port = free_port()
    envs = [{**FAMILIES["minimpi"](r, 3, port), "MINIMPI_SECRET": SECRET} for r in range(3)]
    results = finish_all(start_ranks(script, envs[1:] + envs[:1], job_marker), timeout=60)
    by_rank = {1: results[0], 2: results[1], 0: results[2]}
    assert by_rank[2][0] == 3
    for r in (0, 1):
        rc, _, err = by_rank[r]
        assert rc == 1, err
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith(f"minimpi rank {r}: PeerLostError: "), err
        assert lines[0].endswith("prog.py:8)"), err
