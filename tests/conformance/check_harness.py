#!/usr/bin/env python3
"""Check run_mpi4py_suite.py itself on a small fake test suite (no download, no MPICH needed).

    python tests/conformance/check_harness.py [--runner minimpi|mpich] [--mpich-venv DIR]

The fake suite (written to a temporary folder) has a module with passing, failing, erroring,
skipped, rank-1-only failing and subtest-failing tests and a class whose setUpClass fails; a
module that deadlocks in its second test; one where rank 1 dies in its second test; one that
sleeps past the timeout; and one that cannot be imported. It checks the statuses, the
per-test outcomes, the rerun past the stuck tests, the --min-ratio exit status and that no
process of the jobs is left. Exit 0 when every check holds; prints each failed check.
Not a pytest module on purpose: it starts several multi-rank jobs (about 40 s).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
HARNESS = HERE / "run_mpi4py_suite.py"

FILES = {
    "mpiunittest.py": """
        from unittest import *  # noqa: F401,F403 - the fake suite's stand-in for mpi4py's helper
    """,
    "test_fake_basic.py": """
        import unittest
        from mpi4py import MPI

        class TestBasic(unittest.TestCase):
            def testPass(self):
                MPI.COMM_WORLD.Barrier()
            def testFail(self):
                self.assertEqual(1, 2)
            def testError(self):
                raise KeyError("boom")
            @unittest.skip("not here")
            def testSkip(self):
                pass
            def testRankOneFails(self):
                self.assertNotEqual(MPI.COMM_WORLD.Get_rank(), 1)
            def testSubtestFails(self):
                for i in range(3):
                    with self.subTest(i=i):
                        self.assertLess(i, 2)

        class TestBrokenFixture(unittest.TestCase):
            @classmethod
            def setUpClass(cls):
                raise RuntimeError("fixture broke")
            def testNeverRuns(self):
                pass
    """,
    "test_fake_hang.py": """
        import unittest
        from mpi4py import MPI

        class TestHang(unittest.TestCase):
            def test1Pass(self):
                pass
            def test2Hang(self):
                comm = MPI.COMM_WORLD  # every rank waits for a message nobody sends
                comm.recv(source=(comm.Get_rank() + 1) % comm.Get_size(), tag=99)
            def test3Pass(self):
                pass
    """,
    "test_fake_crash.py": """
        import os, unittest
        from mpi4py import MPI

        class TestCrash(unittest.TestCase):
            def test1Pass(self):
                pass
            def test2Crash(self):
                if MPI.COMM_WORLD.Get_rank() == 1:
                    os._exit(7)
            def test3Pass(self):
                pass
    """,
    "test_fake_sleep.py": """
        import time, unittest

        class TestSleep(unittest.TestCase):
            def test1Sleep(self):
                time.sleep(600)
    """,
    "test_fake_import.py": """
        raise ImportError("this module cannot be imported")
    """,
}


def run_harness(args: list[str], timeout: float) -> tuple[int, dict, str]:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    try:
        proc = subprocess.run([sys.executable, str(HARNESS), *args, "--json", out],
                              capture_output=True, text=True, timeout=timeout)
        doc = json.loads(Path(out).read_text()) if Path(out).stat().st_size else {}
        return proc.returncode, doc, proc.stdout + proc.stderr
    finally:
        os.unlink(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runner", choices=["minimpi", "mpich"], default="minimpi")
    ap.add_argument("--mpich-venv", default=os.environ.get("MPICH_VENV", "/tmp/mpich-venv"))
    opts = ap.parse_args()
    failures = []

    def check(cond: bool, what: str) -> None:
        print(("ok   " if cond else "FAIL ") + what)
        if not cond:
            failures.append(what)

    with tempfile.TemporaryDirectory(prefix="fake-mpi4py-suite-") as tmp:
        suite = Path(tmp) / "test"
        suite.mkdir()
        for name, text in FILES.items():
            (suite / name).write_text(textwrap.dedent(text).lstrip())
        base = ["--suite-dir", str(suite), "--runner", opts.runner, "--mpich-venv", opts.mpich_venv,
                "--baseline", str(Path(tmp) / "no-baseline.json")]

        rc, doc, log = run_harness(base + ["--modules", "test_fake_basic,test_fake_import",
                                           "--n", "2", "--timeout", "60"], 300)
        runs = {r["module"]: r for r in doc.get("runs", [])}
        check(rc == 0, f"plain run exits 0 (got {rc})")
        basic = runs.get("test_fake_basic", {})
        t = basic.get("tests", {})
        want = {"TestBasic.testPass": "pass", "TestBasic.testFail": "fail",
                "TestBasic.testError": "error", "TestBasic.testSkip": "skip",
                "TestBasic.testRankOneFails": "fail", "TestBasic.testSubtestFails": "fail",
                "TestBrokenFixture.testNeverRuns": "error"}
        for short, outcome in want.items():
            got = t.get(f"test_fake_basic.{short}", {}).get("outcome")
            check(got == outcome, f"{short}: {outcome} (got {got})")
        rank_one = t.get("test_fake_basic.TestBasic.testRankOneFails", {})
        check(rank_one.get("ranks") == {"0": "pass", "1": "fail"},
              f"rank-only failure names the rank (got {rank_one.get('ranks')})")
        check("fixture broke" in t.get("test_fake_basic.TestBrokenFixture.testNeverRuns", {})
              .get("detail", ""), "a setUpClass failure is reported on its tests")
        check(basic.get("status") == "OK", f"basic module status OK (got {basic.get('status')})")
        imp = runs.get("test_fake_import", {})
        check(imp.get("status") == "IMPORT_ERROR" and "cannot be imported" in imp.get("note", ""),
              f"import error reported (got {imp.get('status')}: {imp.get('note')})")

        rc, doc, log = run_harness(base + ["--modules", "test_fake_hang,test_fake_crash",
                                           "--n", "2", "--timeout", "60"], 400)
        runs = {r["module"]: r for r in doc.get("runs", [])}
        for mod, stuck, status in (("test_fake_hang", "test2Hang", "DEADLOCK"),
                                   ("test_fake_crash", "test2Crash", "CRASH")):
            r = runs.get(mod, {})
            t = r.get("tests", {})
            check(r.get("status") == status, f"{mod}: status {status} (got {r.get('status')})")
            check(stuck in r.get("note", ""), f"{mod}: note names the stuck test ({r.get('note')})")
            got = t.get(f"{mod}.TestHang.{stuck}" if "hang" in mod else f"{mod}.TestCrash.{stuck}",
                        {}).get("outcome")
            check(got in ("deadlock", "crash"), f"{mod}: {stuck} marked deadlock/crash (got {got})")
            cls = "TestHang" if "hang" in mod else "TestCrash"
            got3 = t.get(f"{mod}.{cls}.test3Pass", {}).get("outcome")
            check(got3 == "pass",
                  f"{mod}: the test after the stuck one ran in a rerun (got {got3})")

        rc, doc, log = run_harness(base + ["--modules", "test_fake_sleep", "--n", "2",
                                           "--timeout", "8", "--no-rerun"], 200)
        r = (doc.get("runs") or [{}])[0]
        check(r.get("status") == "DEADLOCK" and "timeout" in r.get("note", ""),
              f"a job past --timeout is DEADLOCK (got {r.get('status')}: {r.get('note')})")
        check(r.get("wall_s", 999) < 60, f"and it ended near its timeout ({r.get('wall_s')} s)")

        baseline = {"modules": {"test_fake_basic": {"status": {"1": "OK"}, "tests": {
            f"test_fake_basic.{k}": {"1": "pass"} for k in want}}}}
        bpath = Path(tmp) / "fake-baseline.json"
        bpath.write_text(json.dumps(baseline))
        gate = [a if a != str(Path(tmp) / "no-baseline.json") else str(bpath) for a in base]
        rc, doc, log = run_harness(gate + ["--modules", "test_fake_basic", "--n", "1",
                                           "--min-ratio", "0.5"], 200)
        check(rc == 1 and doc.get("gate_ok") is False,
              f"--min-ratio 0.5 fails at 2/7 (exit {rc}, totals {doc.get('totals')})")
        rc, doc, log = run_harness(gate + ["--modules", "test_fake_basic", "--n", "1",
                                           "--min-ratio", "0.2"], 200)
        check(rc == 0, f"--min-ratio 0.2 passes at 2/7 (exit {rc})")

        left = []
        for pid in os.listdir("/proc") if os.path.isdir("/proc") else []:
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if tmp.encode() in cmd and int(pid) != os.getpid():
                left.append(pid)
        check(not left, f"no process of the jobs is left (found {left})")

    print(f"{'all checks passed' if not failures else f'{len(failures)} check(s) failed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
