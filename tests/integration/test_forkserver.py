"""Ranks forked from the fork server run the program as `python prog.py` would.

Each test runs the same program under the fork server (the default) and, where the point is
that both paths agree, under ``--no-fork-server`` too.
"""
from __future__ import annotations

import json
import os
import signal
import sys

import pytest
from jobhelpers import assert_no_leftovers, finish, marker_args, run_minimpi, start_minimpi

from minimpi.transports.shm import cleanup_job

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux launcher tests")

#: what a rank sees of itself, one JSON line per rank
INTROSPECT = """
    import json, os, random, sys
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    with open("/proc/self/cmdline", "rb") as f:
        cmdline = f.read().split(b"\\0")
    print(json.dumps({
        "rank": comm.Get_rank(), "argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(),
        "name": __name__, "env_rank": os.environ.get("MINIMPI_RANK"),
        "secret_in_env": "MINIMPI_SECRET" in os.environ,
        "leads_group": os.getpgrp() == os.getpid(), "leads_session": os.getsid(0) == os.getpid(),
        "random": random.random(), "numpy": float(np.random.rand()),
        "forked": any(part.endswith(b"forkserver.py") for part in cmdline),
        "stdin": sys.stdin.readline().strip() if comm.Get_rank() == 0 else "",
    }), flush=True)
    comm.Barrier()
"""


def _records(stdout: str) -> dict[int, dict]:
    rows = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return {row["rank"]: row for row in rows}


@pytest.mark.parametrize("flags", [[], ["--no-fork-server"]], ids=["fork-server", "fresh"])
def test_program_sees_what_python_prog_py_gives(write_script, job_marker, tmp_path, flags):
    script = write_script("sub/prog.py", INTROSPECT)
    res = run_minimpi("-n", 3, "--no-prefix", *flags, *marker_args(job_marker), script,
                      "a", "b c", cwd=tmp_path, input="typed line\n", timeout=60)
    assert res.returncode == 0, res.stderr
    ranks = _records(res.stdout)
    assert sorted(ranks) == [0, 1, 2]
    for r, row in ranks.items():
        assert row["argv"] == [script, "a", "b c"]
        assert row["path0"] == os.path.dirname(os.path.realpath(script))
        assert row["cwd"] == str(tmp_path)
        assert row["name"] == "__main__"
        assert row["env_rank"] == str(r)
        assert row["secret_in_env"] is False
        assert row["leads_group"] and row["leads_session"]
        assert row["forked"] is (not flags)
    assert ranks[0]["stdin"] == "typed line"
    # every rank seeds its generators anew, as a fresh interpreter does
    assert len({row["random"] for row in ranks.values()}) == 3
    assert len({row["numpy"] for row in ranks.values()}) == 3


MODULE = """
    import sys
    from mpi4py import MPI
    print("module", MPI.COMM_WORLD.Get_rank(), __name__, sys.argv[1:], flush=True)
"""


def test_module_mode(write_script, job_marker, tmp_path):
    write_script("startmod.py", MODULE)
    res = run_minimpi("-n", 2, "--no-prefix", *marker_args(job_marker), "-m", "startmod",
                      "x", cwd=tmp_path, timeout=60)
    assert res.returncode == 0, res.stderr
    assert sorted(res.stdout.splitlines()) == ["module 0 __main__ ['x']",
                                               "module 1 __main__ ['x']"]


EXIT_AND_SIGNAL = """
    import os, signal, sys
    from mpi4py import MPI
    rank = MPI.COMM_WORLD.Get_rank()
    MPI.COMM_WORLD.Barrier()
    if rank == 1:
        print("rank 1 ends itself", flush=True)
        os.kill(os.getpid(), signal.SIG{sig})
    if rank == 2:
        sys.exit({code})
"""


@pytest.mark.parametrize("flags", [[], ["--no-fork-server"]], ids=["fork-server", "fresh"])
def test_exit_code_of_a_rank(write_script, job_marker, flags):
    script = write_script("exit.py", EXIT_AND_SIGNAL.replace("{sig}", "CONT").replace(
        "{code}", "7"))
    res = run_minimpi("-n", 3, *flags, *marker_args(job_marker), script, timeout=60)
    assert res.returncode == 7, res.stderr
    assert "rank 2 exited with code 7" in res.stderr


@pytest.mark.parametrize("flags", [[], ["--no-fork-server"]], ids=["fork-server", "fresh"])
def test_rank_killed_by_a_signal(write_script, job_marker, flags):
    script = write_script("kill.py", EXIT_AND_SIGNAL.replace("{sig}", "KILL").replace(
        "{code}", "0"))
    res = run_minimpi("-n", 3, *flags, *marker_args(job_marker), script, timeout=60)
    assert res.returncode == 128 + signal.SIGKILL, res.stderr
    assert "rank 1 killed by signal 9 (SIGKILL)" in res.stderr


UNCAUGHT = """
    from mpi4py import MPI
    if MPI.COMM_WORLD.Get_rank() == 0:
        raise ValueError("boom from the program")
    MPI.COMM_WORLD.Barrier()
"""


def test_uncaught_exception_exits_1_with_traceback(write_script, job_marker):
    script = write_script("boom.py", UNCAUGHT)
    res = run_minimpi("-n", 2, *marker_args(job_marker), script, timeout=60)
    assert res.returncode == 1, res.stderr
    assert "ValueError: boom from the program" in res.stderr
    assert "forkserver.py" not in res.stderr   # minimpi's own frames are left out


SLEEPER = """
    import os, time
    from mpi4py import MPI
    MPI.COMM_WORLD.Barrier()
    print("all up", os.environ["MINIMPI_JOBID"], flush=True)
    time.sleep(60)
"""


def test_launcher_killed_takes_forked_ranks_along(write_script, job_marker):
    """The fork server dies with the launcher, and every rank with the server."""
    script = write_script("sleep.py", SLEEPER)
    proc = start_minimpi("-n", 3, *marker_args(job_marker), script)
    line = proc.stdout.readline()
    assert "all up" in line
    os.kill(proc.pid, signal.SIGKILL)
    finish(proc, timeout=20)
    assert_no_leftovers(job_marker)      # no rank, and no fork server, outlives the launcher
    # what the launcher would have removed had it not been killed: the inboxes of ranks
    # that were asleep when their last peer mapped them
    cleanup_job(line.split()[-1])


def test_interrupt_ends_forked_job(write_script, job_marker):
    script = write_script("sleep.py", SLEEPER)
    proc = start_minimpi("-n", 3, *marker_args(job_marker), script)
    assert "all up" in proc.stdout.readline()
    proc.send_signal(signal.SIGINT)
    res = finish(proc, timeout=20)
    assert res.returncode == 128 + signal.SIGINT, res.stderr
    assert "received SIGINT" in res.stderr


SPAWNER = """
    import json, os, sys
    from mpi4py import MPI
    here = os.path.dirname(os.path.abspath(__file__))
    child = MPI.COMM_SELF.Spawn(sys.executable, [os.path.join(here, "child.py"), "x y"],
                                maxprocs=2, info=MPI.Info.Create({"wdir": here}))
    rows = [child.recv(source=r) for r in range(2)]
    child.Disconnect()
    for row in rows:
        print(json.dumps(row), flush=True)
"""
CHILD = """
    import json, os, random, sys
    from mpi4py import MPI
    with open("/proc/self/cmdline", "rb") as f:
        cmdline = f.read().split(b"\\0")
    parent = MPI.Comm.Get_parent()
    me = MPI.COMM_WORLD.Get_rank()
    parent.send({"rank": me, "argv": sys.argv, "cwd": os.getcwd(), "name": __name__,
                 "world": MPI.COMM_WORLD.Get_size(), "random": random.random(),
                 "forked": any(part.endswith(b"forkserver.py") for part in cmdline)}, dest=0)
    parent.Disconnect()
"""


@pytest.mark.parametrize("flags", [[], ["--no-fork-server"]], ids=["fork-server", "fresh"])
def test_spawned_python_ranks_fork_from_the_template_too(write_script, job_marker, flags):
    script = write_script("spawner.py", SPAWNER)
    child = write_script("child.py", CHILD)
    res = run_minimpi("-n", 1, "--no-prefix", *flags, *marker_args(job_marker), script,
                      timeout=90)
    assert res.returncode == 0, res.stderr
    rows = _records(res.stdout)
    assert sorted(rows) == [0, 1]
    for row in rows.values():
        assert row["argv"] == [child, "x y"]
        assert row["cwd"] == os.path.dirname(child)          # info 'wdir'
        assert row["name"] == "__main__" and row["world"] == 2
        assert row["forked"] is (not flags)
    assert rows[0]["random"] != rows[1]["random"]
    assert_no_leftovers(job_marker)
