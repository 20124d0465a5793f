"""minimpi under a real (one-node) Slurm: `srun -n 4 python prog.py` with no minimpi launcher,
and `minimpi run` inside salloc and sbatch, which places its agents with srun."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest
import slurm_cluster as slurm_mod
from infra_common import pids_with_env

PY = sys.executable
MARKER = "MINIMPI_TEST_MARKER"
REQUIRED = os.environ.get("MINIMPI_MULTIHOST_REQUIRED", "") not in ("", "0")
SECRET = "slurm-test-secret-0123456789"

PROGRAM = r'''
import os, sys
import numpy as np
from minimpi import MPI
from minimpi.runtime import world
comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
y = np.empty(100)
comm.Allreduce(np.full(100, rank + 1.0), y, op=MPI.SUM)
assert y[0] == size * (size + 1) / 2
assert comm.allgather(rank) == list(range(size))
st = world.world_state()
with open(f"/proc/{os.environ.get('MINIMPI_LAUNCHER_PID', os.getppid())}/cmdline", "rb") as f:
    parent = b"agent" if b"minimpi.launcher.agent" in f.read() else b"other"
print(f"rank {rank} of {size} source {st.info.source} hosts {len(set(st.engine.hosts))} "
      f"step {'SLURM_STEP_ID' in os.environ} parent {parent.decode()}", flush=True)
'''


@pytest.fixture(scope="module")
def cluster():
    reason = slurm_mod.unavailable_reason()
    if reason is not None:
        if REQUIRED:
            pytest.fail(f"Slurm unavailable but MINIMPI_MULTIHOST_REQUIRED is set: {reason}")
        pytest.skip(f"Slurm: {reason}")
    c = slurm_mod.SlurmCluster(cpus=8).up()
    try:
        yield c
    finally:
        c.down()


@pytest.fixture
def marker():
    value = uuid.uuid4().hex
    yield value
    deadline = time.monotonic() + 5
    left = pids_with_env(MARKER, value)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = pids_with_env(MARKER, value)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not left, f"processes left behind: {left}"


def program(tmp_path, source: str = PROGRAM) -> str:
    path = tmp_path / "prog.py"
    path.write_text(textwrap.dedent(source))
    return str(path)


def slurm(cluster, argv, marker: str, timeout: float = 90.0, env=None, cwd=None):
    full = cluster.client_env({MARKER: marker, **(env or {})})
    try:
        return subprocess.run(argv, env=full, capture_output=True, text=True, timeout=timeout,
                              cwd=cwd, stdin=subprocess.DEVNULL, start_new_session=True)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{' '.join(argv)} did not finish within {timeout} s\n{exc.stdout}\n"
                    f"{exc.stderr}\n{cluster.logs()}")


def test_srun_alone_starts_a_job(cluster, marker, tmp_path):
    prog = program(tmp_path)
    res = slurm(cluster, ["srun", "-n", "4", f"--output={tmp_path}/task.%t", PY, prog], marker,
                env={"MINIMPI_SECRET": SECRET}, cwd=tmp_path)
    assert res.returncode == 0, res.stderr + cluster.logs()
    lines = [(tmp_path / f"task.{t}").read_text().strip() for t in range(4)]
    assert sorted(lines) == [f"rank {r} of 4 source slurm hosts 1 step True parent other"
                             for r in range(4)]


def test_srun_without_a_secret_refuses_to_start(cluster, marker, tmp_path):
    prog = program(tmp_path)
    t0 = time.monotonic()
    res = slurm(cluster, ["srun", "-n", "2", PY, prog], marker,
                env={"HOME": str(tmp_path)}, cwd=tmp_path)
    assert res.returncode != 0
    assert "no job secret" in res.stderr and "minimpi keygen" in res.stderr
    # no launcher sums up here: one line per rank, not under an import traceback
    assert "Traceback" not in res.stderr, res.stderr
    assert time.monotonic() - t0 < 60


def test_srun_with_the_per_user_key_file(cluster, marker, tmp_path):
    home = tmp_path / "home"
    res = subprocess.run([PY, "-m", "minimpi", "keygen"], env={**os.environ, "HOME": str(home)},
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    prog = program(tmp_path)
    res = slurm(cluster, ["srun", "-n", "2", f"--output={tmp_path}/task.%t", PY, prog], marker,
                env={"HOME": str(home)}, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "task.1").read_text().startswith("rank 1 of 2 source slurm")


def test_minimpi_run_inside_salloc_places_agents_with_srun(cluster, marker, tmp_path):
    prog = program(tmp_path)
    res = slurm(cluster, ["salloc", "-n", "4", PY, "-m", "minimpi", "run", "-n", "4",
                          "-x", f"{MARKER}={marker}", prog], marker, cwd=tmp_path)
    assert res.returncode == 0, res.stderr + cluster.logs()
    assert sorted(ln for ln in res.stdout.splitlines() if ln.startswith("[")) == [
        f"[{r}] rank {r} of 4 source minimpi-run hosts 1 step True parent agent"
        for r in range(4)]


def test_a_failing_rank_under_salloc_is_named(cluster, marker, tmp_path):
    prog = program(tmp_path, """
        import sys, time
        from minimpi import MPI
        MPI.COMM_WORLD.Barrier()
        if MPI.COMM_WORLD.rank == 2:
            sys.exit(4)
        time.sleep(60)
    """)
    res = slurm(cluster, ["salloc", "-n", "3", PY, "-m", "minimpi", "run", "-n", "3",
                          "-x", f"{MARKER}={marker}", prog], marker, cwd=tmp_path)
    assert res.returncode == 4, res.stderr
    assert "minimpi: rank 2 exited with code 4" in res.stderr


def test_minimpi_run_in_a_batch_script(cluster, marker, tmp_path):
    prog = program(tmp_path)
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/sh\nexec {PY} -m minimpi run -n 2 -x {MARKER}={marker} {prog}\n")
    script.chmod(0o755)
    res = slurm(cluster, ["sbatch", "--wait", "-n", "2", f"--output={tmp_path}/out.txt",
                          str(script)], marker, cwd=tmp_path)
    out = (tmp_path / "out.txt").read_text() if (tmp_path / "out.txt").exists() else ""
    assert res.returncode == 0, res.stderr + out
    assert sorted(ln for ln in out.splitlines() if ln.startswith("[")) == [
        f"[{r}] rank {r} of 2 source minimpi-run hosts 1 step True parent agent"
        for r in range(2)]
