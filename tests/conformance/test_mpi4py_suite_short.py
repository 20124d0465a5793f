"""CI gate of issue 12: the short form of mpi4py's own test suite under ``minimpi run``.

Runs ``run_mpi4py_suite.py --short --min-ratio 0.95`` (a subset of mpi4py 4.1.2's test
modules at n = 1 and 2, compared with the committed MPICH baseline): it fails when fewer
than 95% of the tests that pass under real mpi4py + MPICH pass here, or when a module
deadlocks, crashes or loses results. The mpi4py source distribution is fetched once with
pip into a cache outside the repository; the test is skipped - with the reason - only when
it cannot be fetched.
"""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
HARNESS = HERE / "run_mpi4py_suite.py"


def _harness():
    spec = importlib.util.spec_from_file_location("run_mpi4py_suite", HARNESS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(600)
def test_mpi4py_suite_short_form_passes_the_gate():
    harness = _harness()
    try:
        testdir = harness.fetch_suite(harness.default_cache_dir())
    except harness.SetupError as exc:
        pytest.skip(f"mpi4py {harness.MPI4PY_VERSION} source distribution not available: {exc}")
    proc = subprocess.run(
        [sys.executable, str(HARNESS), "--short", "--min-ratio", "0.95",
         "--suite-dir", str(testdir)],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=540)
    report = proc.stdout + "\n" + proc.stderr[-4000:]
    assert proc.returncode == 0, f"mpi4py suite gate failed (exit {proc.returncode}):\n{report}"
    assert "gate --min-ratio 0.95: PASS" in proc.stdout, report
