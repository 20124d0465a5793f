"""Course material's command lines, run for real: `python -c`, interpreter options, MPMD
programs with MPI.APPNUM, CPU binding, and the installed mpiexec/mpirun commands."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from jobhelpers import assert_no_leftovers, marker_args, run_minimpi

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux launcher tests")

BOTH = pytest.mark.parametrize("flags", [[], ["--no-fork-server"]], ids=["fork-server", "fresh"])

SEEN = """
import json, os, sys
from mpi4py import MPI
comm = MPI.COMM_WORLD
print(json.dumps({"rank": comm.rank, "size": comm.size, "argv": sys.argv, "path0": sys.path[0],
                  "name": __name__, "optimize": sys.flags.optimize,
                  "warnoptions": sys.warnoptions, "xoptions": sorted(sys._xoptions),
                  "appnum": comm.Get_attr(MPI.APPNUM), "K": os.environ.get("K"),
                  "cwd": os.getcwd(), "flags_var": "MINIMPI_PYTHON_FLAGS" in os.environ,
                  "marker_var": "MINIMPI_START_APPLIED" in os.environ}), flush=True)
comm.Barrier()
"""


def records(stdout: str) -> dict[int, dict]:
    rows = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return {row["rank"]: row for row in rows}


@BOTH
def test_python_dash_c_runs_the_code_in_every_rank(job_marker, tmp_path, flags):
    res = run_minimpi("-n", 3, "--no-prefix", *flags, *marker_args(job_marker), "python", "-c",
                      SEEN, "a", "-n", cwd=tmp_path, timeout=60)
    assert res.returncode == 0, res.stderr
    ranks = records(res.stdout)
    assert sorted(ranks) == [0, 1, 2]
    for row in ranks.values():
        assert row["argv"] == ["-c", "a", "-n"]          # as python -c gives it
        assert row["path0"] == ""
        assert row["name"] == "__main__"
        assert row["size"] == 3


def test_python_dash_c_error_names_the_line(job_marker, tmp_path):
    res = run_minimpi("-n", 2, *marker_args(job_marker), "python", "-c",
                      "from mpi4py import MPI\nraise ValueError('from -c')", cwd=tmp_path,
                      timeout=60)
    assert res.returncode == 1, res.stderr
    assert 'File "<string>", line 2' in res.stderr
    assert "ValueError: from -c" in res.stderr


@BOTH
def test_interpreter_options_reach_every_rank(write_script, job_marker, flags):
    script = write_script("opts.py", SEEN + "assert False, 'asserts are off under -O'\n")
    res = run_minimpi("-n", 2, "--no-prefix", *flags, *marker_args(job_marker), "python",
                      "-OO", "-W", "error::UserWarning", "-X", "dev", "-u", script, timeout=60)
    assert res.returncode == 0, res.stderr
    for row in records(res.stdout).values():
        assert row["optimize"] == 2
        assert row["warnoptions"] == ["default", "error::UserWarning"]   # -X dev adds default
        assert row["xoptions"] == ["dev"]
        # minimpi's own variables do not reach the program
        assert not row["flags_var"] and not row["marker_var"]


def test_interpreter_options_with_a_module(write_script, job_marker, tmp_path):
    write_script("optmod.py", SEEN)
    res = run_minimpi("-n", 2, "--no-prefix", *marker_args(job_marker), "python", "-O", "-m",
                      "optmod", "z", cwd=tmp_path, timeout=60)
    assert res.returncode == 0, res.stderr
    for row in records(res.stdout).values():
        assert row["optimize"] == 1 and row["argv"][1:] == ["z"]
        assert row["path0"] == str(tmp_path)


def test_refused_interpreter_option_is_a_usage_error(write_script):
    script = write_script("x.py", "print(1)\n")
    res = run_minimpi("-n", 2, "python", "-i", script, timeout=30)
    assert res.returncode == 2
    assert "python -i is not supported" in res.stderr


@BOTH
def test_programs_separated_by_colons_have_their_appnum(write_script, job_marker, tmp_path,
                                                        flags):
    script = write_script("worker.py", SEEN)
    other = tmp_path / "elsewhere"
    other.mkdir()
    res = run_minimpi("-n", 1, "--no-prefix", *flags, *marker_args(job_marker), "python", "-O",
                      "-c", SEEN, ":", "-n", 3, "-x", "K=V", "--wdir", other, script, "w",
                      ":", "-n", 1, "python", "-c", SEEN, cwd=tmp_path, timeout=90)
    assert res.returncode == 0, res.stderr
    ranks = records(res.stdout)
    assert sorted(ranks) == [0, 1, 2, 3, 4]
    assert [ranks[r]["appnum"] for r in range(5)] == [0, 1, 1, 1, 2]
    assert ranks[0]["optimize"] == 1 and ranks[0]["argv"] == ["-c"]
    for r in (1, 2, 3):
        assert ranks[r]["argv"] == [script, "w"] and ranks[r]["optimize"] == 0
        assert ranks[r]["K"] == "V" and ranks[r]["cwd"] == str(other)
    assert ranks[4]["K"] is None and ranks[4]["optimize"] == 0
    assert ranks[4]["cwd"] == str(tmp_path)
    assert all(row["size"] == 5 for row in ranks.values())


FORKED = """
import json
from mpi4py import MPI
with open("/proc/self/cmdline", "rb") as f:
    forked = any(p.endswith(b"forkserver.py") for p in f.read().split(b"\\0"))
print(json.dumps({"rank": MPI.COMM_WORLD.rank, "appnum": MPI.COMM_WORLD.Get_attr(MPI.APPNUM),
                  "forked": forked}), flush=True)
"""


def test_forked_ranks_of_each_program_know_their_appnum(write_script, job_marker):
    """Programs with the same interpreter options fork from the one template, which
    imported minimpi before any rank knew its program: APPNUM is each rank's own."""
    first, second = write_script("first.py", FORKED), write_script("second.py", FORKED)
    res = run_minimpi("-n", 2, "--no-prefix", *marker_args(job_marker), first, ":", "-n", 2,
                      second, timeout=60)
    assert res.returncode == 0, res.stderr
    ranks = records(res.stdout)
    assert [ranks[r]["appnum"] for r in range(4)] == [0, 0, 1, 1]
    assert all(row["forked"] for row in ranks.values())


def expected_cores() -> list[set[int]]:
    """This process's allowed CPUs grouped by core, ordered by their lowest CPU."""
    groups: dict = {}
    for cpu in sorted(os.sched_getaffinity(0)):
        base = f"/sys/devices/system/cpu/cpu{cpu}/topology/"
        try:
            key = (open(base + "physical_package_id").read().strip(),
                   open(base + "core_id").read().strip())
        except OSError:
            key = ("", str(cpu))
        groups.setdefault(key, set()).add(cpu)
    return list(groups.values())


BOUND = """
import json, os
import numpy
from mpi4py import MPI
comm = MPI.COMM_WORLD
threads = {}
for tid in os.listdir("/proc/self/task"):
    threads[tid] = sorted(os.sched_getaffinity(int(tid)))
print(json.dumps({"rank": comm.rank, "cpus": sorted(os.sched_getaffinity(0)),
                  "threads": threads}), flush=True)
comm.Barrier()
"""


@BOTH
def test_bind_to_core_pins_every_thread_round_robin(write_script, job_marker, flags):
    script = write_script("bound.py", BOUND)
    res = run_minimpi("-n", 3, "--no-prefix", "--bind-to", "core", "--report-bindings", *flags,
                      *marker_args(job_marker), script, timeout=60)
    assert res.returncode == 0, res.stderr
    cores = expected_cores()
    ranks = records(res.stdout)
    for r in range(3):
        want = sorted(cores[r % len(cores)])
        assert ranks[r]["cpus"] == want, (r, ranks[r])
        assert len(ranks[r]["threads"]) >= 1
        for tid, cpus in ranks[r]["threads"].items():     # numpy's and minimpi's threads too
            assert cpus == want, (r, tid, cpus)
        assert f"minimpi: rank {r} bound to core {r % len(cores)} (CPUs " in res.stderr


@BOTH
def test_bound_ranks_wait_as_their_own_cores_allow(write_script, job_marker, flags):
    # bound to a core each, two ranks spin as unbound ones on two cores do; and with more
    # ranks than cores, a bound rank counts the ranks on its core, not "all on one core"
    cores = expected_cores()
    if len(cores) < 2:
        pytest.skip(f"needs two cores to bind two ranks to (this process may use {cores})")
    script = write_script("bound.py", BOUND)
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores[0] | cores[1])     # the job binds within two cores
    try:
        res = run_minimpi("-n", 2, "--no-prefix", "--bind-to", "core", "--stats", *flags,
                          *marker_args(job_marker), script, timeout=60)
        assert res.returncode == 0, res.stderr
        assert "progress spin (auto: 1 rank bound to this rank's " in res.stderr, res.stderr
        res = run_minimpi("-n", 8, "--no-prefix", "--bind-to", "core", "--stats", *flags,
                          *marker_args(job_marker), script, timeout=90)
    finally:
        os.sched_setaffinity(0, allowed)
    assert res.returncode == 0, res.stderr
    assert "progress yield (auto: 4 ranks bound to this rank's " in res.stderr, res.stderr
    assert "progress block" not in res.stderr


def test_without_binding_ranks_keep_every_cpu(write_script, job_marker):
    script = write_script("free.py", BOUND)
    res = run_minimpi("-n", 2, "--no-prefix", "--report-bindings", *marker_args(job_marker),
                      script, timeout=60)
    assert res.returncode == 0, res.stderr
    allowed = sorted(os.sched_getaffinity(0))
    for row in records(res.stdout).values():
        assert row["cpus"] == allowed
    assert "minimpi: rank 0 not bound" in res.stderr


def installed(command: str) -> str:
    """The console script pip installed beside this interpreter."""
    path = os.path.join(os.path.dirname(sys.executable), command)
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is not installed: run `pip install -e .` again (pyproject.toml "
                    f"lists the {command} console script)")
    return path


def run_command(argv: list, cwd=None, timeout: float = 60, env=None) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    full_env.update(env or {})
    try:
        return subprocess.run([str(a) for a in argv], cwd=cwd, env=full_env, text=True,
                              capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{argv[0]} did not finish within {timeout} s: {exc.stderr}")


def test_mpiexec_runs_a_course_line_as_written(write_script, job_marker, tmp_path):
    write_script("lab.py", """
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        print("hello from", comm.Get_rank(), "of", comm.Get_size(), flush=True)
    """)
    res = run_command([installed("mpiexec"), "-n", 4, "-x", f"MINIMPI_TEST_MARKER={job_marker}",
                       "python", "lab.py"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert sorted(res.stdout.splitlines()) == [f"hello from {r} of 4" for r in range(4)]
    assert_no_leftovers(job_marker)


def test_mpirun_binds_tags_and_exports(write_script, job_marker, tmp_path):
    script = write_script("b.py", BOUND + "import os; print('FOO', os.environ['FOO'])\n")
    out = tmp_path / "out"
    res = run_command([installed("mpirun"), "-np", 2, "--bind-to", "core", "--tag-output",
                       "-x", "FOO", "-x", f"MINIMPI_TEST_MARKER={job_marker}",
                       "--output-filename", out, "python", script], env={"FOO": "from shell"})
    assert res.returncode == 0, res.stderr
    cores = expected_cores()
    for r in range(2):
        line = next(ln for ln in res.stdout.splitlines() if ln.startswith(f"[{r}] {{"))
        assert json.loads(line.split(" ", 1)[1])["cpus"] == sorted(cores[r % len(cores)])
        assert f"[{r}] FOO from shell" in res.stdout
        assert "FOO from shell" in (out / f"rank.{r}.stdout").read_text()


def test_mpiexec_wdir_and_colon_programs(write_script, job_marker, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "p.py").write_text(SEEN)
    res = run_command([installed("mpiexec"), "-wdir", work, "-genv", "MINIMPI_TEST_MARKER",
                       job_marker, "-n", 1, "python", "p.py", ":", "-n", 2, "-env", "K", "V",
                       "python", "p.py"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    ranks = records(res.stdout)
    assert [ranks[r]["appnum"] for r in range(3)] == [0, 1, 1]
    assert [ranks[r]["K"] for r in range(3)] == [None, "V", "V"]
    assert all(row["cwd"] == str(work) for row in ranks.values())


def test_mpirun_option_minimpi_cannot_honour(tmp_path):
    res = run_command([installed("mpirun"), "-np", 2, "--timestamp-output", "python", "x.py"],
                      cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr == ("minimpi: mpirun option --timestamp-output is not supported (output "
                          "lines are forwarded as they come, without timestamps)\n")
