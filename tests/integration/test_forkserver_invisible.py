"""A rank forked from the fork server's template is what `python prog.py` started with that
rank's environment would be: site hooks run per rank with the rank's environment, the
generators are seeded per rank and per run, and a rank whose environment or directory the
template could not have started in is a fresh interpreter."""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time

import pytest
from jobhelpers import MARKER_VAR, assert_no_leftovers, finish, marker_args, run_minimpi
from minimpi.launcher.forkserver import RANK_SCRIPT, ForkServer

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux launcher tests")

#: each rank: its pid, and whether it is a fork of the template (its command line)
WHO = """
    import json, os
    from mpi4py import MPI
    with open("/proc/self/cmdline", "rb") as f:
        cmdline = f.read().split(b"\\0")
    print(json.dumps({"rank": MPI.COMM_WORLD.Get_rank(), "pid": os.getpid(),
                      "forked": any(p.endswith(b"forkserver.py") for p in cmdline)}), flush=True)
    MPI.COMM_WORLD.Barrier()
"""
#: a site hook as job-wide tooling writes one: it reads the rank from the environment
HOOK = ("import os; d = os.environ.get('HOOK_DIR'); d and open(os.path.join(d, '{kind}.%d' % "
        "os.getpid()), 'w').write(os.environ.get('MINIMPI_RANK', 'none'))")


def _records(stdout: str) -> dict[int, dict]:
    rows = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return {row["rank"]: row for row in rows}


def _hook_ran_with_its_rank(records_dir, kind: str, ranks: dict[int, dict]) -> None:
    for rank, row in ranks.items():
        path = os.path.join(records_dir, f"{kind}.{row['pid']}")
        assert os.path.exists(path), (f"rank {rank} (pid {row['pid']}) never ran the {kind} "
                                      f"hook; ran in: {sorted(os.listdir(records_dir))}")
        with open(path) as f:
            assert f.read() == str(rank)


def test_sitecustomize_runs_in_each_rank_with_its_rank(write_script, job_marker, tmp_path):
    hooks, records = tmp_path / "hooks", tmp_path / "records"
    hooks.mkdir()
    records.mkdir()
    (hooks / "sitecustomize.py").write_text(HOOK.format(kind="site") + "\n")
    script = write_script("who.py", WHO)
    res = run_minimpi("-n", 3, "--no-prefix", "--verbose", *marker_args(job_marker), script,
                      env={"PYTHONPATH": str(hooks), "HOOK_DIR": str(records)}, timeout=60)
    assert res.returncode == 0, res.stderr
    ranks = _records(res.stdout)
    assert sorted(ranks) == [0, 1, 2]
    _hook_ran_with_its_rank(records, "site", ranks)
    assert "ranks start as fresh interpreters: the site hook sitecustomize" in res.stderr
    assert not any(row["forked"] for row in ranks.values())


def _venv(tmp_path) -> tuple[str, str]:
    """A fresh virtualenv that finds this one's packages (numpy, pyzmq, minimpi) through a
    path line and the editable install's finder: only lines known to act alike in every
    process. Returns its python and its site-packages."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120, capture_output=True)
    (site,) = glob.glob(str(venv / "lib" / "python*" / "site-packages"))
    ours = sysconfig.get_paths()["purelib"]
    with open(os.path.join(site, "00-deps.pth"), "w") as f:
        f.write(ours + "\n")
    for pth in glob.glob(os.path.join(ours, "*.pth")):
        if os.path.basename(pth).startswith(("__editable__", "distutils-precedence")):
            shutil.copy(pth, site)
    return str(venv / "bin" / "python"), site


def _run_with(python: str, *args, env: dict, timeout: float = 90) -> subprocess.CompletedProcess:
    full = dict(os.environ)
    full.update(env)
    proc = subprocess.Popen([python, "-m", "minimpi", "run", *map(str, args)], env=full,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    return finish(proc, timeout=timeout)


def test_pth_hook_in_a_venv_runs_in_each_rank(write_script, job_marker, tmp_path):
    python, site = _venv(tmp_path)
    script = write_script("who.py", WHO)
    records = tmp_path / "records"
    records.mkdir()
    env = {"HOOK_DIR": str(records), MARKER_VAR: job_marker}
    # the venv's own lines (a path, setuptools' finder and shim) keep the template
    res = _run_with(python, "-n", 2, "--no-prefix", script, env=env)
    assert res.returncode == 0, res.stderr
    assert all(row["forked"] for row in _records(res.stdout).values()), res.stdout
    # a hook that reads the rank: every rank runs it, with its own rank
    with open(os.path.join(site, "zz-rank-hook.pth"), "w") as f:
        f.write(HOOK.format(kind="pth") + "\n")
    res = _run_with(python, "-n", 3, "--no-prefix", "--stats", script, env=env)
    assert res.returncode == 0, res.stderr
    ranks = _records(res.stdout)
    assert sorted(ranks) == [0, 1, 2]
    _hook_ran_with_its_rank(records, "pth", ranks)
    assert "zz-rank-hook.pth" in res.stderr      # --stats says why the ranks start fresh
    assert_no_leftovers(job_marker)


SEEDS = """
    import json, random
    import numpy as np
    from mpi4py import MPI
    print(json.dumps({"rank": MPI.COMM_WORLD.Get_rank(), "random": random.random(),
                      "legacy": float(np.random.rand()),
                      "generator": float(np.random.default_rng().random())}), flush=True)
"""


def test_generators_differ_per_rank_and_per_run(write_script, job_marker):
    script = write_script("seeds.py", SEEDS)
    rows = []
    for _ in range(2):
        res = run_minimpi("-n", 3, "--no-prefix", *marker_args(job_marker), script, timeout=60)
        assert res.returncode == 0, res.stderr
        rows += list(_records(res.stdout).values())
    assert len(rows) == 6
    for key in ("random", "legacy", "generator"):
        assert len({row[key] for row in rows}) == 6, key


SHOW = """
import json, os, sys, time
with open("/proc/self/cmdline", "rb") as f:
    forked = any(p.endswith(b"forkserver.py") for p in f.read().split(b"\\0"))
print(json.dumps({"tzname": list(time.tzname), "path": sys.path, "cwd": os.getcwd(),
                  "forked": forked, "pid": os.getpid()}), flush=True)
"""


def test_a_child_the_template_could_not_have_started_is_a_fresh_interpreter(tmp_path,
                                                                            monkeypatch):
    """Driven through the launcher's end of the fork server, as Spawn drives it: children
    whose environment or directory differ from the template's."""
    prog = tmp_path / "show.py"
    prog.write_text(SHOW)
    other = tmp_path / "other"
    other.mkdir()
    monkeypatch.chdir(tmp_path)
    base = dict(os.environ)
    base.update({"TZ": "AAA+3", "PYTHONPATH": "lib"})          # a relative entry
    children = [
        ("same", {}, None),
        ("tz", {"TZ": "BBB+5"}, None),                       # TZ: read again, still a fork
        ("path", {"PYTHONPATH": "/abs/elsewhere"}, None),    # read at start-up: fresh
        ("cwd", {}, str(other)),                             # relative PYTHONPATH: fresh
    ]
    server = ForkServer(base)
    try:
        procs = []
        for number, (_, extra, cwd) in enumerate(children):
            procs.append(server.start_rank(number, [sys.executable, RANK_SCRIPT, str(prog)],
                                           {**base, **extra}, stdin_inherit=False, cwd=cwd))
        server.wait_started()
        seen = {}
        deadline = time.monotonic() + 60
        for (name, _, _), rp in zip(children, procs):
            out = rp.popen.stdout.read().decode()
            rp.popen.stderr.read()
            assert rp.popen.wait(timeout=max(1.0, deadline - time.monotonic())) == 0, name
            seen[name] = json.loads(out)
    finally:
        server.close()
    assert seen["same"]["forked"] and seen["same"]["tzname"] == ["AAA", "AAA"]
    assert seen["same"]["path"][1] == str(tmp_path / "lib")
    assert seen["tz"]["forked"] and seen["tz"]["tzname"] == ["BBB", "BBB"]
    assert not seen["path"]["forked"] and "/abs/elsewhere" in seen["path"]["path"]
    assert str(tmp_path / "lib") not in seen["path"]["path"]
    assert not seen["cwd"]["forked"] and seen["cwd"]["cwd"] == str(other)
    assert str(other / "lib") in seen["cwd"]["path"]
