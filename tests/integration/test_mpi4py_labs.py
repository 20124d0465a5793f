"""Classic mpi4py labs, unmodified (`from mpi4py import MPI`), run through `minimpi run`.

Each lab in tests/labs checks its own results and prints "<lab>: OK" (from rank 0, or from
every rank); these tests assert the job succeeded and that line is there. Plus the launcher
behaviours mpi4py users rely on: the shim and --no-mpi4py-shim, stdin to rank 0, scripts
without a .py suffix importing their neighbours, -m module, whole lines, and a pending
Irecv at exit.
"""
from __future__ import annotations

import os
import sys

import pytest
from jobhelpers import marker_args, run_minimpi

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux launcher tests")

LABS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "labs")

# (lab, number of ranks): sizes 3, 4, 5 as the course material uses them
CASES = [
    ("hello", 3), ("pingpong", 3), ("ring", 5), ("pi", 4), ("scatter_gather", 3),
    ("scatterv_gatherv", 5), ("master_worker", 4), ("split_rowcol", 5), ("jacobi", 4),
    ("oddeven_sort", 5), ("persistent", 3), ("irecv_test", 4), ("user_op", 5),
    ("groups_create", 5), ("mprobe", 3),
]


@pytest.mark.parametrize("lab,n", CASES, ids=[c[0] for c in CASES])
def test_lab(lab, n, job_marker):
    res = run_minimpi("-n", n, "--timeout", "40", *marker_args(job_marker),
                      os.path.join(LABS, f"{lab}.py"), timeout=60)
    assert res.returncode == 0, f"stdout:\n{res.stdout}\nstderr:\n{res.stderr}"
    lines = res.stdout.splitlines()
    if lab == "ring":
        assert all(f"[{r}] ring: OK rank {r}" in lines for r in range(n)), res.stdout
    else:
        assert f"[0] {lab}: OK" in lines, res.stdout
    if lab == "hello":
        host_lines = [ln for ln in lines if "Hello, World!" in ln]
        assert sorted(ln.split("] ", 1)[0] for ln in host_lines) == [f"[{r}" for r in range(n)]


SHIM_PROBE = """
    import mpi4py, sys
    from mpi4py import MPI
    import mpi4py.MPI
    from mpi4py.util import dtlib
    import numpy as np
    assert mpi4py.MPI is MPI and MPI.__name__ == "minimpi.MPI", MPI.__name__
    assert dtlib.to_numpy_dtype(dtlib.from_numpy_dtype(np.dtype("f8"))) == np.dtype("f8")
    assert dtlib.to_numpy_dtype(MPI.INT) == np.dtype("i")
    assert isinstance(mpi4py.get_config(), dict)
    mpi4py.rc.threads = True
    mpi4py.rc(thread_level="serialized")
    print("shim", MPI.COMM_WORLD.rank, mpi4py.__file__.count("minimpi"))
"""


def test_shim_wins_over_installed_mpi4py(write_script, tmp_path, job_marker):
    # a fake "real" mpi4py, installed on the user's PYTHONPATH
    fake = tmp_path / "site" / "mpi4py"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('the real mpi4py was imported')\n")
    script = write_script("probe.py", SHIM_PROBE)
    env = {"PYTHONPATH": str(tmp_path / "site")}
    res = run_minimpi("-n", 2, *marker_args(job_marker), script, env=env)
    assert res.returncode == 0, res.stderr
    assert "[0] shim 0 1" in res.stdout and "[1] shim 1 1" in res.stdout

    # --no-mpi4py-shim: the installed one is imported
    res = run_minimpi("-n", 1, "--no-mpi4py-shim", *marker_args(job_marker), script, env=env)
    assert res.returncode != 0
    assert "the real mpi4py was imported" in res.stderr


def test_rc_initialize_false(write_script, job_marker):
    script = write_script("late.py", """
        import mpi4py
        mpi4py.rc.initialize = False
        from mpi4py import MPI
        assert not MPI.Is_initialized()
        MPI.Init()
        assert MPI.Is_initialized()
        print("late", MPI.COMM_WORLD.allreduce(1))
    """)
    res = run_minimpi("-n", 3, *marker_args(job_marker), script)
    assert res.returncode == 0, res.stderr
    assert "[2] late 3" in res.stdout


def test_python_m_mpi4py_runs_a_script(write_script, job_marker):
    script = write_script("prog.py", """
        import sys
        from mpi4py import MPI
        print("args", sys.argv[1:], MPI.COMM_WORLD.size)
    """)
    res = run_minimpi("-n", 2, *marker_args(job_marker), "-m", "mpi4py", script, "a", "b")
    assert res.returncode == 0, res.stderr
    assert "[1] args ['a', 'b'] 2" in res.stdout


def test_stdin_goes_to_rank_0(write_script, job_marker):
    script = write_script("stdin.py", """
        import sys
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        data = sys.stdin.read() if comm.rank == 0 else None
        data = comm.bcast(data, root=0)
        print("got", repr(data), "stdin empty" if comm.rank and not sys.stdin.read() else "")
    """)
    res = run_minimpi("-n", 3, *marker_args(job_marker), script, input="12 34\n")
    assert res.returncode == 0, res.stderr
    for r in range(3):
        assert any(ln.startswith(f"[{r}] got '12 34\\n'") for ln in res.stdout.splitlines())


def test_script_without_suffix_imports_sibling(write_script, job_marker):
    write_script("app/helper.py", "def answer():\n    return 42\n")
    script = write_script("app/runme", """
        from mpi4py import MPI
        import helper
        print("answer", helper.answer() + MPI.COMM_WORLD.rank)
    """)
    res = run_minimpi("-n", 2, *marker_args(job_marker), script)
    assert res.returncode == 0, res.stderr
    assert "[0] answer 42" in res.stdout and "[1] answer 43" in res.stdout


def test_dash_m_module(write_script, tmp_path, job_marker):
    write_script("pkg/__init__.py", "")
    write_script("pkg/tool.py", """
        import sys
        from mpi4py import MPI
        print("tool", MPI.COMM_WORLD.rank, sys.argv[1:])
    """)
    res = run_minimpi("-n", 2, *marker_args(job_marker), "-m", "pkg.tool", "--flag",
                      cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr
    assert "[1] tool 1 ['--flag']" in res.stdout


def test_lines_never_merge(write_script, job_marker):
    script = write_script("chatty.py", """
        import sys
        from mpi4py import MPI
        r = MPI.COMM_WORLD.rank
        for i in range(300):
            sys.stdout.write(f"rank{r}-" + "x" * (i % 50))
            sys.stdout.write(f"-end{i}\\n")
    """)
    res = run_minimpi("-n", 4, *marker_args(job_marker), script)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 1200
    for ln in lines:
        prefix, body = ln.split(" ", 1)
        r = prefix.strip("[]")
        assert body.startswith(f"rank{r}-") and body.count("-end") == 1, ln


def test_exit_with_pending_irecv_does_not_hang(write_script, job_marker):
    script = write_script("pending.py", """
        import numpy as np
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        buf = np.empty(10)
        req = comm.Irecv(buf, source=(comm.rank + 1) % comm.size, tag=99)   # never matched
        oreq = comm.irecv(source=MPI.ANY_SOURCE, tag=98)
        print("leaving", comm.rank)
    """)
    res = run_minimpi("-n", 3, *marker_args(job_marker), script, timeout=20)
    assert res.returncode == 0, res.stderr
    assert all(f"[{r}] leaving {r}" in res.stdout for r in range(3))


def test_uncaught_exception_aborts_the_job(write_script, job_marker):
    script = write_script("boom.py", """
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        if comm.rank == 1:
            raise ValueError("boom")
        comm.recv(source=1)          # would wait forever
    """)
    res = run_minimpi("-n", 3, *marker_args(job_marker), script, timeout=30)
    assert res.returncode != 0
    assert "ValueError: boom" in res.stderr


def test_out_of_scope_features_refuse_clearly(write_script, job_marker):
    script = write_script("refuse.py", """
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        calls = [lambda: MPI.Get_abi_version()]
        for call in calls:
            try:
                call()
            except NotImplementedError as exc:
                assert isinstance(exc, MPI.Exception) and "minimpi does not implement" in str(exc)
            else:
                raise AssertionError("not refused")
        assert MPI.Comm.Get_parent() == MPI.COMM_NULL
        print("refused all")
    """)
    res = run_minimpi("-n", 1, *marker_args(job_marker), script)
    assert res.returncode == 0, res.stderr
    assert "[0] refused all" in res.stdout
