"""minimpi.launch: a job started from inside a program, results and exceptions back, the
example application that uses it."""
from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest
from jobhelpers import MARKER_VAR, assert_no_leftovers

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"

APP = """
import io, os, sys
import minimpi

def work(scale, offset=0):
    from minimpi import MPI
    comm = MPI.COMM_WORLD
    print(f"working {comm.rank}")
    return {"rank": comm.rank, "sum": comm.allreduce(comm.rank * scale) + offset}

class Unpicklable(Exception):
    def __reduce__(self):
        raise TypeError("no pickling here")

def fail_on(rank, kind):
    from minimpi import MPI
    comm = MPI.COMM_WORLD
    comm.barrier()
    if comm.rank == rank:
        raise {"key": KeyError("missing on purpose"), "odd": Unpicklable("odd one")}[kind]
    comm.barrier()

def exits(code):
    import sys
    from minimpi import MPI
    MPI.COMM_WORLD.barrier()
    if MPI.COMM_WORLD.rank == 1:
        sys.exit(code)
    MPI.COMM_WORLD.barrier()

if __name__ == "__main__":
    what = sys.argv[1]
    if what == "ok":
        out = io.StringIO()
        res = minimpi.launch(work, n=3, args=(10,), kwargs={"offset": 1}, stdout=out,
                             env={"%(var)s": "%(marker)s"})
        assert res == [{"rank": r, "sum": 31} for r in range(3)], res
        assert sorted(out.getvalue().splitlines()) == [f"[{r}] working {r}" for r in range(3)]
        print("results", res)
    elif what in ("key", "odd"):
        try:
            minimpi.launch(fail_on, n=3, args=(2, what), env={"%(var)s": "%(marker)s"})
        except KeyError as exc:
            print("caught", type(exc).__name__, exc.minimpi_rank, type(exc.__cause__).__name__,
                  "fail_on" in str(exc.__cause__))
        except minimpi.launcher.embed.JobFailedError as exc:
            print("jobfailed", exc.rank, "Unpicklable: odd one" in str(exc))
    elif what == "exit":
        try:
            minimpi.launch(exits, n=2, args=(5,), env={"%(var)s": "%(marker)s"})
        except minimpi.launcher.embed.JobFailedError as exc:
            print("jobfailed", exc.exit_code, exc.rank, str(exc))
    elif what == "lambda":
        try:
            minimpi.launch(lambda: 1, n=2)
        except TypeError as exc:
            print("typeerror", exc)
"""


def run_app(write_script, marker: str, what: str, timeout: float = 60.0):
    script = write_script("app.py", APP % {"var": MARKER_VAR, "marker": marker})
    try:
        return subprocess.run([sys.executable, script, what], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the app did not finish within {timeout} s: {exc.stderr}")


def test_results_come_back_in_rank_order(write_script, job_marker):
    res = run_app(write_script, job_marker, "ok")
    assert res.returncode == 0, res.stderr
    assert "results [{'rank': 0, 'sum': 31}" in res.stdout


def test_a_ranks_exception_is_raised_in_the_caller_naming_the_rank(write_script, job_marker):
    res = run_app(write_script, job_marker, "key")
    assert res.returncode == 0, res.stderr
    assert "caught KeyError 2 RemoteTraceback True" in res.stdout
    # the launcher's summary names rank 2 too (as the failed rank, or as the first error
    # when a peer's consequential exit was reported first)
    assert re.search(r"^minimpi: rank 2 (failed: KeyError|exited with code 1)", res.stderr, re.M)


def test_an_exception_that_cannot_travel_still_names_rank_and_text(write_script, job_marker):
    res = run_app(write_script, job_marker, "odd")
    assert res.returncode == 0, res.stderr
    assert "jobfailed 2 True" in res.stdout


def test_a_rank_that_exits_fails_the_launch(write_script, job_marker):
    res = run_app(write_script, job_marker, "exit")
    assert res.returncode == 0, res.stderr
    assert "jobfailed 5 1 minimpi.launch: rank 1 exited with code 5" in res.stdout


def test_fn_must_be_importable(write_script, job_marker):
    res = run_app(write_script, job_marker, "lambda")
    assert "typeerror minimpi.launch: fn must be a module-level function" in res.stdout


def test_the_example_application(tmp_path):
    marker_free = [sys.executable, str(EXAMPLES / "embedding" / "word_count.py"), "-n", "3",
                   str(EXAMPLES.parent / "README.md")]
    res = subprocess.run(marker_free, capture_output=True, text=True, timeout=90,
                         stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr
    assert "counted by 3 ranks: same as the serial count" in res.stdout
    assert sum(line.startswith(f"[{r}] counted ") for r in range(3)
               for line in res.stdout.splitlines()) == 3


def test_no_leftovers_after_a_failed_launch(write_script, job_marker):
    run_app(write_script, job_marker, "key")
    assert_no_leftovers(job_marker)
