"""The mpi4py shim binds ``mpi4py.MPI`` wherever mpi4py's own imports do (issue 29): a
``mpi4py.futures`` task that does ``import mpi4py`` and then uses ``mpi4py.MPI`` raised
``AttributeError`` on minimpi (its futures package imported minimpi's MPI directly), while it
works under mpi4py + MPICH. Checked in spawned pools and in the static pool
(``-m mpi4py.futures``)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from jobhelpers import marker_args, run_minimpi

import minimpi

SHIM = os.path.join(os.path.dirname(minimpi.__file__), "_shim")

TASK = """
from mpi4py.futures import MPIPoolExecutor


def task(x):
    import mpi4py
    return x, bool(mpi4py.MPI.Get_processor_name()), mpi4py.MPI.COMM_WORLD.Get_size() >= 1


if __name__ == "__main__":
    with MPIPoolExecutor(max_workers=2) as ex:
        print("RESULTS", list(ex.map(task, range(4))), flush=True)
"""


@pytest.mark.parametrize("n, launch", [(1, ()), (3, ("-m", "mpi4py.futures"))],
                         ids=["spawned", "static"])
def test_a_futures_task_finds_mpi4py_MPI(write_script, job_marker, n, launch):
    script = write_script("task.py", TASK)
    proc = run_minimpi(*marker_args(job_marker), "-n", str(n), "--timeout", "50", *launch,
                       script, timeout=70)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "RESULTS [(0, True, True), (1, True, True), (2, True, True), (3, True, True)]" \
        in proc.stdout, out


def test_the_modules_that_import_mpi4py_MPI_bind_it():
    # the modules whose mpi4py 4.1.2 original binds mpi4py.MPI on import (checked against it)
    modules = ["mpi4py.futures", "mpi4py.futures.server", "mpi4py.util.dtlib",
               "mpi4py.util.pkl5", "mpi4py.util.sync", "mpi4py.util.pool"]
    code = ("import importlib, sys\n"
            "for name in sys.argv[1:]:\n"
            "    for m in [k for k in sys.modules if k == 'mpi4py' or k.startswith('mpi4py.')]:\n"
            "        del sys.modules[m]\n"
            "    importlib.import_module(name)\n"
            "    import mpi4py\n"
            "    print(name, 'MPI' in vars(mpi4py) and mpi4py.MPI is sys.modules['mpi4py.MPI'])\n")
    env = dict(os.environ, PYTHONPATH=SHIM)
    out = subprocess.run([sys.executable, "-c", code, *modules], env=env, text=True,
                         capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [w for m in modules for w in (m, "True")], out.stdout
