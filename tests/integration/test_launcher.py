"""`minimpi run` end to end: real processes, small timeouts, no leftovers."""
from __future__ import annotations

import ast
import os
import signal
import sys
import time

import pytest
from jobhelpers import assert_no_leftovers, finish, marker_args, run_minimpi, start_minimpi

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux launcher tests")

HELLO = """
    import sys
    from minimpi.runtime.bootstrap import bootstrap
    b = bootstrap()
    print(f"hello from {b.rank} of {b.size}")
    sys.stdout.write(f"last line of {b.rank} without newline")
"""

# every rank writes DIR/ready.<rank> then sleeps; lets a test act once all ranks run
READY_THEN_SLEEP = """
    import os, sys, time, pathlib
    pathlib.Path(sys.argv[1], "ready." + os.environ["MINIMPI_RANK"]).touch()
    time.sleep(60)
"""


def wait_ready(directory, n: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(os.path.exists(os.path.join(directory, f"ready.{r}")) for r in range(n)):
            return
        time.sleep(0.05)
    pytest.fail(f"ranks did not all start within {timeout} s")


def test_hello_prefixes_and_last_line(write_script, job_marker):
    script = write_script("hello.py", HELLO)
    res = run_minimpi("-n", 3, *marker_args(job_marker), script)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    for r in range(3):
        assert f"[{r}] hello from {r} of 3" in lines
        assert f"[{r}] last line of {r} without newline" in lines
    assert len(lines) == 6   # nothing merged mid-line


def test_no_prefix(write_script, job_marker):
    script = write_script("hello.py", HELLO)
    res = run_minimpi("-n", 3, "--no-prefix", *marker_args(job_marker), script)
    assert res.returncode == 0, res.stderr
    assert sorted(res.stdout.splitlines()) == sorted(
        [f"hello from {r} of 3" for r in range(3)]
        + [f"last line of {r} without newline" for r in range(3)])


def test_output_dir(write_script, tmp_path, job_marker):
    script = write_script("out.py", """
        import os, sys
        r = os.environ["MINIMPI_RANK"]
        print("out", r)
        print("err", r, file=sys.stderr)
    """)
    outdir = tmp_path / "logs"
    res = run_minimpi("-n", 3, "--output-dir", outdir, *marker_args(job_marker), script)
    assert res.returncode == 0, res.stderr
    for r in range(3):
        assert (outdir / f"rank.{r}.stdout").read_text() == f"out {r}\n"
        assert (outdir / f"rank.{r}.stderr").read_text() == f"err {r}\n"
    assert "[1] err 1" in res.stderr.splitlines()


def test_stdin_goes_to_rank_0(write_script, job_marker):
    script = write_script("cat.py", """
        import os, sys
        data = sys.stdin.read()
        print(os.environ["MINIMPI_RANK"], repr(data))
    """)
    res = run_minimpi("-n", 3, *marker_args(job_marker), script, input="alpha\nbeta\n")
    assert res.returncode == 0, res.stderr
    lines = set(res.stdout.splitlines())
    assert "[0] 0 'alpha\\nbeta\\n'" in lines
    assert "[1] 1 ''" in lines and "[2] 2 ''" in lines


def test_script_without_py_suffix_imports_sibling(write_script, job_marker):
    write_script("prog/helper_mod.py", "VALUE = 42\n")
    script = write_script("prog/myprog", """
        import sys, helper_mod
        print("value", helper_mod.VALUE, sys.argv[1:])
    """)
    res = run_minimpi("-n", 2, *marker_args(job_marker), script, "a", "-n", "7", cwd="/")
    assert res.returncode == 0, res.stderr
    assert "[1] value 42 ['a', '-n', '7']" in res.stdout.splitlines()


def test_module_mode(write_script, tmp_path, job_marker):
    write_script("pkg_mm/__init__.py", "")
    write_script("pkg_mm/tool.py", """
        import os, sys
        print("tool", os.environ["MINIMPI_RANK"], sys.argv[1:])
    """)
    res = run_minimpi("-n", 3, *marker_args(job_marker), "-m", "pkg_mm.tool", "--flag", "x",
                      cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "[2] tool 2 ['--flag', 'x']" in res.stdout.splitlines()


def test_missing_program_and_module(tmp_path):
    res = run_minimpi("-n", 2, tmp_path / "nope.py")
    assert res.returncode == 2 and "not found" in res.stderr
    res = run_minimpi("-n", 2, "-m", "no_such_module_xyz", cwd=tmp_path)
    assert res.returncode == 2 and "no_such_module_xyz" in res.stderr


def test_env_options(write_script, job_marker):
    script = write_script("env.py", """
        import os
        e = os.environ
        print(e["MINIMPI_EAGER_LIMIT"], e["MINIMPI_BCAST"], e["MINIMPI_ALLREDUCE"], e["FOO"],
              e["MINIMPI_BIND"], e["PYTHONUNBUFFERED"], "MINIMPI_SECRET" in e,
              e["MINIMPI_COORD"].startswith("tcp://127.0.0.1:"))
    """)
    res = run_minimpi("-n", 3, "--eager-limit", "64KiB", "--coll", "bcast=ring",
                      "--coll", "allreduce=ring", "-x", "FOO=bar=baz", "--oversubscribe",
                      *marker_args(job_marker), script)
    assert res.returncode == 0, res.stderr
    # the secret reached the rank, and its start script took it out of the environment
    assert "[0] 65536 ring ring bar=baz 127.0.0.1 1 False True" in res.stdout.splitlines()


def test_failing_rank_ends_job_with_traceback(write_script, job_marker):
    script = write_script("fail.py", """
        import os, time
        if os.environ["MINIMPI_RANK"] == "2":
            time.sleep(0.2)
            raise ValueError("boom from rank two")
        time.sleep(60)
    """)
    t0 = time.monotonic()
    res = run_minimpi("-n", 5, *marker_args(job_marker), script, timeout=15)
    assert time.monotonic() - t0 < 5
    assert res.returncode == 1
    assert "minimpi: rank 2 exited with code 1" in res.stderr
    assert "  | ValueError: boom from rank two" in res.stderr.splitlines()
    assert_no_leftovers(job_marker)


def test_rank_killed_by_signal(write_script, job_marker):
    script = write_script("kill.py", """
        import os, signal, time
        if os.environ["MINIMPI_RANK"] == "1":
            time.sleep(0.2)
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)
    """)
    t0 = time.monotonic()
    res = run_minimpi("-n", 3, *marker_args(job_marker), script, timeout=15)
    assert time.monotonic() - t0 < 5
    assert res.returncode == 128 + 9
    assert "minimpi: rank 1 killed by signal 9 (SIGKILL)" in res.stderr
    assert_no_leftovers(job_marker)


def test_abort(write_script, job_marker):
    script = write_script("abort.py", """
        import os, time
        from minimpi.runtime.bootstrap import bootstrap
        b = bootstrap()
        if b.rank == 1:
            b.coordinator.abort(3, "cannot go on")
            os._exit(3)
        time.sleep(60)
    """)
    t0 = time.monotonic()
    res = run_minimpi("-n", 3, *marker_args(job_marker), script, timeout=15)
    assert time.monotonic() - t0 < 5
    assert res.returncode == 3
    assert "minimpi: rank 1 called Abort(3): cannot go on" in res.stderr
    assert_no_leftovers(job_marker)


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_to_launcher(write_script, tmp_path, job_marker, sig, code):
    script = write_script("sleep.py", READY_THEN_SLEEP)
    proc = start_minimpi("-n", 3, *marker_args(job_marker), script, tmp_path)
    wait_ready(tmp_path, 3)
    os.kill(proc.pid, sig)
    res = finish(proc, timeout=10)
    assert res.returncode == code, res.stderr
    assert f"received {signal.Signals(sig).name}" in res.stderr
    assert_no_leftovers(job_marker)


@pytest.mark.parametrize("pdeathsig", [True, False])
def test_ranks_die_with_killed_launcher(write_script, tmp_path, job_marker, pdeathsig):
    # without PDEATHSIG the lifeline pipe watched by bootstrap() must do the job
    script = write_script("boot_sleep.py", """
        import os, sys, time, pathlib
        from minimpi.runtime.bootstrap import bootstrap
        bootstrap()
        pathlib.Path(sys.argv[1], "ready." + os.environ["MINIMPI_RANK"]).touch()
        time.sleep(60)
    """)
    env = {} if pdeathsig else {"MINIMPI_LAUNCHER_NO_PDEATHSIG": "1"}
    proc = start_minimpi("-n", 3, *marker_args(job_marker), script, tmp_path, env=env)
    wait_ready(tmp_path, 3)
    os.kill(proc.pid, signal.SIGKILL)
    finish(proc, timeout=10)
    assert_no_leftovers(job_marker, wait=3.0)


def test_job_timeout_reports_states(write_script, job_marker):
    script = write_script("stuck.py", """
        import time
        from minimpi.runtime.bootstrap import bootstrap
        b = bootstrap()
        if b.rank != 2:
            b.coordinator.report_state({"call": "recv", "source": 2, "tag": 7})
        time.sleep(60)
    """)
    t0 = time.monotonic()
    res = run_minimpi("-n", 3, "--timeout", "1.5", *marker_args(job_marker), script, timeout=15)
    assert time.monotonic() - t0 < 5
    assert res.returncode == 124
    assert "timed out after 1.5 s" in res.stderr
    assert "  rank 0: call=recv, source=2, tag=7" in res.stderr.splitlines()
    assert "  rank 2: no state reported" in res.stderr.splitlines()
    assert_no_leftovers(job_marker)


def test_startup_timeout_names_missing_rank(write_script, job_marker):
    script = write_script("late.py", """
        import os, time
        if os.environ["MINIMPI_RANK"] == "3":
            time.sleep(60)     # never calls bootstrap
        from minimpi.runtime.bootstrap import bootstrap
        bootstrap().coordinator.exchange_addresses("127.0.0.1:1")
    """)
    res = run_minimpi("-n", 5, "--startup-timeout", "1", *marker_args(job_marker), script,
                      timeout=15)
    assert res.returncode == 124
    assert "rank(s) 3 never registered" in res.stderr
    assert_no_leftovers(job_marker)


def test_rank_exiting_without_registering_fails_fast(write_script, job_marker):
    script = write_script("quit.py", """
        import os
        if os.environ["MINIMPI_RANK"] != "1":
            from minimpi.runtime.bootstrap import bootstrap
            bootstrap().coordinator.exchange_addresses("127.0.0.1:1")
    """)
    t0 = time.monotonic()
    res = run_minimpi("-n", 3, *marker_args(job_marker), script, timeout=15)
    assert time.monotonic() - t0 < 5
    assert res.returncode == 1
    assert "rank(s) 1 ended without registering" in res.stderr


def test_rendezvous_same_table_everywhere(write_script, job_marker):
    script = write_script("rdv.py", """
        import os
        from minimpi.runtime.bootstrap import bootstrap
        b = bootstrap()
        table = b.coordinator.exchange_addresses(f"127.0.0.1:{20000 + b.rank}")
        print("TABLE", table)
        b.coordinator.finalize()
        b.coordinator.close()
    """)
    res = run_minimpi("-n", 5, *marker_args(job_marker), script)
    assert res.returncode == 0, res.stderr
    tables = [ast.literal_eval(l.split("TABLE ", 1)[1]) for l in res.stdout.splitlines()
              if "TABLE" in l]
    assert len(tables) == 5
    assert all(t == [f"127.0.0.1:{20000 + r}" for r in range(5)] for t in tables)


def test_bad_mac_is_ignored(write_script, job_marker):
    script = write_script("forge.py", """
        import os, time, zmq, msgpack
        from minimpi.runtime.bootstrap import bootstrap
        b = bootstrap()
        if b.rank == 0:
            ctx = zmq.Context(); s = ctx.socket(zmq.DEALER); s.connect(os.environ["MINIMPI_COORD"])
            forged = msgpack.packb({"t": "abort", "r": 0, "code": 9, "msg": "forged"})
            s.send_multipart([b"\\0" * 32, forged])
            s.close(linger=1000); ctx.term()
            time.sleep(0.3)
        t = b.coordinator.exchange_addresses("127.0.0.1:1")
        print("ok", len(t))
        b.coordinator.finalize(); b.coordinator.close()
    """)
    res = run_minimpi("-n", 3, *marker_args(job_marker), script)
    assert res.returncode == 0, res.stderr
    # a DEALER without the job's CURVE keys never completes the zmq handshake: nothing it
    # sends reaches the coordinator (tests/faults/test_fuzz.py covers peers that do)
    assert "forged" not in res.stderr and "Abort" not in res.stderr
    assert res.stdout.count("ok 3") == 3


def test_mpiexec_style_python_prefix(write_script, job_marker):
    script = write_script("viapython.py", """
        from mpi4py import MPI
        print("size", MPI.COMM_WORLD.Get_size())
    """)
    for argv in (["python", script], ["python3", "-u", "-m", "mpi4py", script]):
        r = run_minimpi("-n", "2", "--no-prefix", *marker_args(job_marker), *argv, timeout=30)
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines() == ["size 2", "size 2"]
