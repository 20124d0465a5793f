"""Run one mpi4py test module inside one MPI rank and record every test's outcome.

Started by run_mpi4py_suite.py on every rank, under ``minimpi run`` or under a real
``mpiexec``; it only uses ``from mpi4py import MPI`` and the standard library, so it runs
the same on both.

    python rank_runner.py --testdir DIR --module test_p2p_obj --outdir DIR
                          [--select FILE] [--patch-get-vendor] [--preload FILE]

It writes DIR/rank-<rank>.json (rank-pid<pid>.json when mpi4py itself cannot be imported)
and rewrites it atomically after every test, so a job that deadlocks or is killed still
leaves everything finished so far plus the test each rank was running ("current").
The file holds:

    rank, size, module, pid, finished (true once the whole module ran)
    patched            names added to MPI by --patch-get-vendor (empty when none were needed)
    preload            the --preload file run in this rank before the module (null when none)
    mpi_import_error / import_error   {"type", "message", "where", "traceback"} or null
    tests              every selected test id, in run order
    current            the test id being run when the file was written (null between tests)
    results            {test id: {"outcome", "detail", "where", "tb", "time"}}
    fixture_errors     setUpClass/setUpModule failures {"id", "detail", "where", "tb"}

outcome is one of pass, fail, error, skip, xfail (expected failure), xpass (unexpected
success); detail is the exception's last line (or the skip reason); where is the deepest
frame of the traceback inside the test folder ("file:line: code").
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import traceback
import unittest

TB_LIMIT = 4000  # characters of traceback kept per failure


def _one_line(text: str, limit: int = 400) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe_exception(exc_info, testdir: str) -> dict:
    etype, value, tb = exc_info
    lines = traceback.format_exception_only(etype, value)
    detail = _one_line(lines[-1] if lines else repr(value))
    where = ""
    frames = traceback.extract_tb(tb)
    testdir = os.path.realpath(testdir)
    for fr in frames:  # deepest frame that lies in the test folder
        if os.path.realpath(fr.filename).startswith(testdir + os.sep):
            where = f"{os.path.basename(fr.filename)}:{fr.lineno}: {_one_line(fr.line or '', 200)}"
    if frames and not where:
        fr = frames[-1]
        where = f"{os.path.basename(fr.filename)}:{fr.lineno}: {_one_line(fr.line or '', 200)}"
    full = "".join(traceback.format_exception(etype, value, tb))
    if len(full) > TB_LIMIT:
        full = "..." + full[-TB_LIMIT:]
    return {"type": getattr(etype, "__name__", str(etype)), "detail": detail, "where": where,
            "tb": full}


class Recorder:
    """Holds the per-rank state and writes it to disk atomically."""

    def __init__(self, path: str, state: dict):
        self.path = path
        self.state = state

    def write(self) -> None:
        tmp = f"{self.path}.tmp{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.state, f)
        os.replace(tmp, self.path)


class RecordingResult(unittest.TestResult):
    """A TestResult that records one outcome per test id and saves after every test."""

    def __init__(self, recorder: Recorder, testdir: str):
        super().__init__()
        self.rec = recorder
        self.testdir = testdir
        self._t0 = 0.0
        self._cur: dict | None = None

    # --- helpers
    def _set(self, test, outcome: str, detail: str = "", err=None, force: bool = False) -> None:
        entry = {"outcome": outcome, "detail": _one_line(detail), "where": "", "tb": ""}
        if err is not None:
            d = describe_exception(err, self.testdir)
            entry.update(detail=d["detail"], where=d["where"], tb=d["tb"])
        tid = test.id()
        if tid not in self.rec.state["tests"]:  # a setUpClass/setUpModule error holder
            self.rec.state["fixture_errors"].append(
                {"id": tid, "detail": entry["detail"], "where": entry["where"], "tb": entry["tb"]})
            self.rec.write()
            return
        if self._cur is None or force or self._cur.get("outcome") in (None, "pass"):
            self._cur = entry

    # --- unittest hooks
    def startTest(self, test):
        super().startTest(test)
        self._t0 = time.monotonic()
        self._cur = None
        self.rec.state["current"] = test.id()
        self.rec.write()

    def stopTest(self, test):
        super().stopTest(test)
        tid = test.id()
        entry = self._cur or {"outcome": "error", "detail": "test ended without an outcome",
                              "where": "", "tb": ""}
        entry["time"] = round(time.monotonic() - self._t0, 3)
        self.rec.state["results"][tid] = entry
        self.rec.state["current"] = None
        self._cur = None
        self.rec.write()

    def addSuccess(self, test):
        super().addSuccess(test)
        if self._cur is None:
            self._set(test, "pass")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._set(test, "fail", err=err, force=True)

    def addError(self, test, err):
        super().addError(test, err)
        self._set(test, "error", err=err, force=True)

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._set(test, "skip", detail=reason, force=True)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._set(test, "xfail", err=err, force=True)

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._set(test, "xpass", detail="unexpected success", force=True)

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is None:
            return
        outcome = "fail" if issubclass(err[0], test.failureException) else "error"
        # keep the first failing subtest's message; a fail never downgrades an error
        if self._cur is None or self._cur.get("outcome") in (None, "pass") or (
                outcome == "error" and self._cur.get("outcome") == "fail"):
            self._set(test, outcome, err=err, force=True)
            self._cur["detail"] = _one_line(f"{subtest._subDescription()} {self._cur['detail']}")


def iter_tests(suite):
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from iter_tests(item)
        else:
            yield item


def filter_suite(suite, keep):
    """A copy of suite with the tests keep() takes, same nesting (class fixtures run once)."""
    out = unittest.TestSuite()
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            sub = filter_suite(item, keep)
            if sub.countTestCases():
                out.addTest(sub)
        elif keep(item.id()):
            out.addTest(item)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--testdir", required=True)
    ap.add_argument("--module", required=True)
    ap.add_argument("--outdir", required=True)
    ap.add_argument("--select", help="JSON file {'include': [ids] or null, 'exclude': [ids]}")
    ap.add_argument("--patch-get-vendor", action="store_true",
                    help="add MPI.get_vendor in this process when mpi4py.MPI lacks it")
    ap.add_argument("--preload", help="a Python file run in this rank (with MPI in its namespace) "
                                      "before the test module is imported: for triage experiments")
    args = ap.parse_args(argv)

    # as mpi4py's own test/main.py does: never probe GPU array libraries
    sys.modules.setdefault("cupy", None)
    sys.modules.setdefault("numba", None)
    testdir = os.path.abspath(args.testdir)
    sys.path.insert(0, testdir)
    os.makedirs(args.outdir, exist_ok=True)

    state = {"module": args.module, "pid": os.getpid(), "rank": None, "size": None,
             "finished": False, "patched": [], "preload": args.preload,
             "mpi_import_error": None, "import_error": None,
             "tests": [], "current": None, "results": {}, "fixture_errors": []}

    try:
        from mpi4py import MPI
        rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    except BaseException:  # noqa: BLE001 - recorded, never raised
        d = describe_exception(sys.exc_info(), testdir)
        state["mpi_import_error"] = {"type": d["type"], "message": d["detail"],
                                     "where": d["where"], "traceback": d["tb"]}
        Recorder(os.path.join(args.outdir, f"rank-pid{os.getpid()}.json"), state).write()
        return 0
    state.update(rank=rank, size=size)
    rec = Recorder(os.path.join(args.outdir, f"rank-{rank}.json"), state)

    if args.patch_get_vendor and not hasattr(MPI, "get_vendor"):
        MPI.get_vendor = lambda: ("minimpi", (0, 0, 0))
        state["patched"].append("get_vendor")
    rec.write()

    state["current"] = f"<import {args.module}>"
    rec.write()
    try:
        if args.preload:
            with open(args.preload, encoding="utf-8") as f:
                code = compile(f.read(), args.preload, "exec")
            exec(code, {"__name__": "__preload__", "MPI": MPI})  # noqa: S102 - the user's own file
        module = importlib.import_module(args.module)
    except BaseException:  # noqa: BLE001
        d = describe_exception(sys.exc_info(), testdir)
        state["import_error"] = {"type": d["type"], "message": d["detail"],
                                 "where": d["where"], "traceback": d["tb"]}
        state["current"] = None
        state["finished"] = True
        rec.write()
        return 0

    suite = unittest.defaultTestLoader.loadTestsFromModule(module)
    include = exclude = None
    if args.select:
        with open(args.select, encoding="utf-8") as f:
            sel = json.load(f)
        include = set(sel["include"]) if sel.get("include") is not None else None
        exclude = set(sel.get("exclude") or ())
    if include is not None or exclude:
        suite = filter_suite(suite, lambda tid: (include is None or tid in include)
                             and not (exclude and tid in exclude))
    state["tests"] = [t.id() for t in iter_tests(suite)]
    state["current"] = None
    rec.write()

    result = RecordingResult(rec, testdir)
    try:
        suite.run(result)
    except BaseException:  # noqa: BLE001 - e.g. KeyboardInterrupt raised inside a test
        d = describe_exception(sys.exc_info(), testdir)
        state["fixture_errors"].append({"id": "<suite>", "detail": d["detail"],
                                        "where": d["where"], "tb": d["tb"]})
    state["current"] = None
    state["finished"] = True
    rec.write()
    sys.stdout.flush()
    sys.stderr.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
