"""What a job's processes load at start-up: only what a program's calls need.

A rank of a plain ``minimpi run -n 4 hello.py`` does not import the layers the program does
not use (windows, files, sessions, the launcher, the drawing tools) nor the parts of the
standard library that only they or pyzmq's extras pull in (asyncio, ssl); forked from the
fork server's template, it imports no part of minimpi itself besides ``minimpi.MPI`` (the
template loaded the rest: what any rank loads before its first ``Barrier``); a program that
uses a window loads the one-sided layer then. The launcher loads neither numpy nor the
communicator layer. (Before: every rank had minimpi.rma, minimpi.io, the sessions, asyncio
and ssl, and the launcher numpy, minimpi.comm and minimpi.rma.)
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from jobhelpers import MARKER_VAR, marker_args, run_minimpi

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux launcher tests")

#: modules no rank of a program without windows, files or sessions needs
NOT_NEEDED = ("minimpi.rma", "minimpi.io", "minimpi.runtime.session", "minimpi.runtime.trace",
              "minimpi.tools", "minimpi.launcher", "asyncio", "ssl", "zmq.asyncio",
              "zmq.utils.monitor")

HELLO = """
    import json, sys
    at_start = set(sys.modules)
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    comm.Barrier()
    print(json.dumps({"rank": comm.Get_rank(), "at_start": sorted(at_start),
                      "now": sorted(sys.modules)}), flush=True)
"""


def _unneeded(modules) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in NOT_NEEDED))


def _records(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("how", ["forked", "fresh"])
def test_a_hello_rank_loads_no_layer_it_does_not_use(write_script, job_marker, how):
    script = write_script("hello.py", HELLO)
    flags = ["--no-fork-server"] if how == "fresh" else []
    res = run_minimpi("-n", 4, "--no-prefix", *flags, *marker_args(job_marker), script,
                      timeout=90)
    assert res.returncode == 0, res.stderr
    rows = _records(res.stdout)
    assert sorted(r["rank"] for r in rows) == [0, 1, 2, 3]
    for row in rows:
        assert _unneeded(row["now"]) == [], (row["rank"], _unneeded(row["now"]))


def test_a_forked_rank_finds_minimpi_loaded(write_script, job_marker):
    """The template loaded everything a rank loads before its first Barrier: the rank
    itself imports only minimpi.MPI (which starts the runtime) and mpi4py's forwarder."""
    script = write_script("hello.py", HELLO)
    res = run_minimpi("-n", 3, "--no-prefix", *marker_args(job_marker), script, timeout=60)
    assert res.returncode == 0, res.stderr
    for row in _records(res.stdout):
        imported = set(row["now"]) - set(row["at_start"])
        ours = sorted(m for m in imported if m.startswith("minimpi"))
        assert ours == ["minimpi.MPI"], (row["rank"], ours)


WINDOW = """
    import sys
    from mpi4py import MPI
    before = "minimpi.rma" in sys.modules
    win = MPI.Win.Create(bytearray(8))        # comm=None: COMM_SELF, as in mpi4py
    assert win.Get_group().Get_size() == 1
    win.Free()
    world = MPI.Win.Allocate(8, comm=MPI.COMM_WORLD)
    world.Fence()
    world.Free()
    print("rank", MPI.COMM_WORLD.Get_rank(), "rma before", before, "after",
          "minimpi.rma" in sys.modules, flush=True)
"""


def test_a_program_that_uses_a_window_loads_the_one_sided_layer_then(write_script, job_marker):
    script = write_script("win.py", WINDOW)
    res = run_minimpi("-n", 3, "--no-prefix", *marker_args(job_marker), script, timeout=60)
    assert res.returncode == 0, res.stderr
    assert sorted(res.stdout.splitlines()) == [
        f"rank {r} rma before False after True" for r in range(3)]


LAUNCHER = """
import atexit, json, sys
def _dump():
    with open(sys.argv[1], "w") as f:
        json.dump(sorted(sys.modules), f)
atexit.register(_dump)
from minimpi.launcher.cli import main
sys.exit(main(sys.argv[2:]))
"""


def test_the_launcher_loads_neither_numpy_nor_the_communicator_layer(write_script, job_marker,
                                                                       tmp_path):
    script = write_script("hello.py", HELLO)
    dump = tmp_path / "launcher_modules.json"
    env = {**os.environ, MARKER_VAR: job_marker}
    res = subprocess.run([sys.executable, "-c", LAUNCHER, str(dump), "run", "-n", "2",
                          "--no-prefix", script], env=env, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    assert len(_records(res.stdout)) == 2
    loaded = json.loads(dump.read_text())
    heavy = sorted(m for m in loaded
                   if m.split(".")[0] == "numpy" or m.startswith(
                       ("minimpi.comm", "minimpi.coll.schedule", "minimpi.p2p", "minimpi.rma",
                        "minimpi.io", "minimpi.dynamic", "minimpi.runtime.world")))
    assert heavy == [], heavy


ENVIRONMENT = """
    import gc, json, os
    from mpi4py import MPI
    print(json.dumps({"rank": MPI.COMM_WORLD.Get_rank(), "gc": gc.isenabled(),
                      "blas": os.environ.get("OPENBLAS_THREAD_TIMEOUT")}), flush=True)
"""


@pytest.mark.parametrize("how", ["forked", "fresh"])
def test_start_up_settings_stay_out_of_the_program(write_script, job_marker, how):
    """The template imports with the collector off and numpy loads with a short BLAS spin:
    neither is left for the program to see (its collector runs, its environment is the one
    it was given, a value the user sets is kept)."""
    script = write_script("env.py", ENVIRONMENT)
    flags = ["--no-fork-server"] if how == "fresh" else []
    res = run_minimpi("-n", 2, "--no-prefix", *flags, *marker_args(job_marker), script,
                      timeout=60)
    assert res.returncode == 0, res.stderr
    assert sorted((r["rank"], r["gc"], r["blas"]) for r in _records(res.stdout)) == [
        (0, True, None), (1, True, None)]
    res = run_minimpi("-n", 2, "--no-prefix", *flags, "-x", "OPENBLAS_THREAD_TIMEOUT=7",
                      *marker_args(job_marker), script, timeout=60)
    assert res.returncode == 0, res.stderr
    assert sorted(r["blas"] for r in _records(res.stdout)) == ["7", "7"]
