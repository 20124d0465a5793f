#!/usr/bin/env python3
"""Run mpi4py 4.1.2's own unit tests under `minimpi run` and compare with real mpi4py + MPICH.

    python tests/conformance/run_mpi4py_suite.py                      # all modules, n = 1, 2, 4
    python tests/conformance/run_mpi4py_suite.py --modules test_op,test_status --n 1,2
    python tests/conformance/run_mpi4py_suite.py --short --min-ratio 0.95   # CI gate
    python tests/conformance/run_mpi4py_suite.py --runner mpich --record-baseline

The test folder comes from mpi4py's source distribution, fetched once with pip into a cache
outside the repository (~/.cache/minimpi/conformance, or $MINIMPI_CONFORMANCE_CACHE, or
--cache-dir); nothing of it is committed. Each module runs as one job per N: `minimpi run -n
N --timeout T rank_runner.py ...` (or `mpiexec -n N` from a scratch virtualenv holding
mpi4py and MPICH with --runner mpich). rank_runner.py writes one result file per rank after
every test; a test counts as passed only if it passed on every rank. A job that deadlocks
(minimpi's deadlock detector, exit 3), runs past its timeout or loses a rank is reported
with the test each rank was running, then (unless --no-rerun) the module is run again
without the tests already done and without the stuck ones, so one deadlock does not hide the
rest of the module. The module's status stays DEADLOCK/CRASH either way.

Per test and rank the outcome is pass, fail, error, skip, xfail or xpass; merged over ranks:
deadlock > crash > error > fail (xpass) > lost (no result) > skip > pass (xfail).

Exit status: 0; 1 when --min-ratio is given and, at some N, fewer than that fraction of the
tests that pass under MPICH pass here, or a module deadlocked, crashed or lost results;
2 on a usage or setup error (suite could not be fetched, no baseline, runner missing).
"""
from __future__ import annotations

import argparse
import collections
import datetime
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
RANK_RUNNER = HERE / "rank_runner.py"
DEFAULT_BASELINE = HERE / "mpich_baseline.json"
BASELINE_MD = HERE / "MPICH_BASELINE.md"

MPI4PY_VERSION = "4.1.2"
# sha256 of the mpi4py-4.1.2.tar.gz source distribution this harness was written against
SDIST_SHA256 = "56860286dc45f20e8821e93cb06669e30462348bf866f685553fa4b712d58d02"

MODULES = ["test_p2p_obj", "test_p2p_buf", "test_cco_obj", "test_cco_buf", "test_cco_vec",
           "test_comm", "test_status", "test_request", "test_op", "test_environ",
           "test_msgspec", "test_msgzero"]
NS = [1, 2, 4]
# --short: a quick subset for CI (about two minutes): the core, and one module or two for
# each feature added since (windows, MPI-IO, intercommunicators, attributes, error handlers,
# persistent collectives, the object model, pkl5, util.sync, fault tolerance; derived datatypes
# have their unit tests)
SHORT_MODULES = ["test_p2p_obj", "test_cco_obj", "test_comm", "test_status", "test_request",
                 "test_op", "test_environ", "test_msgzero", "test_win", "test_rma", "test_file",
                 "test_io", "test_comm_inter", "test_attributes", "test_errhandler",
                 "test_cco_pr_buf", "test_info", "test_group",
                 "test_util_pkl5", "test_util_sync", "test_ulfm"]
SHORT_NS = [1, 2]

MARKER_VAR = "MINIMPI_CONFORMANCE_MARKER"
MINIMPI_DEADLOCK_EXIT = 3
TIMEOUT_EXIT = 124

# merged outcome of one test over all ranks: the first of these that any rank has wins
PRECEDENCE = ["deadlock", "crash", "error", "fail", "lost", "skip", "pass"]
RANK_OUTCOME = {"pass": "pass", "xfail": "pass", "fail": "fail", "xpass": "fail",
                "error": "error", "skip": "skip"}
BAD_STATUSES = {"DEADLOCK", "CRASH", "EXIT_HANG", "NO_RESULTS", "MPI_IMPORT_ERROR"}


class SetupError(Exception):
    """The harness cannot run (exit 2): suite not fetchable, runner missing, no baseline."""


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- the suite
def default_cache_dir() -> Path:
    """Outside the repository on purpose: pytest (testpaths = tests, no '.*' exclusion) would
    otherwise collect the cached mpi4py test_*.py files, and worktrees can share one copy."""
    env = os.environ.get("MINIMPI_CONFORMANCE_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "minimpi" / "conformance"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch_suite(cache: Path, pip_timeout: float = 600) -> Path:
    """mpi4py's test/ folder, extracted from the cached sdist (downloaded with pip if absent)."""
    root = cache / f"mpi4py-{MPI4PY_VERSION}"
    testdir = root / "test"
    if (testdir / "mpiunittest.py").is_file() and (testdir / "main.py").is_file():
        return testdir
    cache.mkdir(parents=True, exist_ok=True)
    tarball = cache / f"mpi4py-{MPI4PY_VERSION}.tar.gz"
    if not tarball.is_file():
        # only mpi4py itself as source: its build requirements (Cython...) come as wheels,
        # where ":all:" built Cython from source just to read the sdist's metadata
        cmd = [sys.executable, "-m", "pip", "download", "--no-binary", "mpi4py", "--no-deps",
               f"mpi4py=={MPI4PY_VERSION}", "-d", str(cache)]
        log(f"fetching the mpi4py {MPI4PY_VERSION} source distribution: {' '.join(cmd)}")
        try:
            proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=pip_timeout, start_new_session=True)
        except subprocess.TimeoutExpired:
            raise SetupError(f"pip download did not finish within {pip_timeout:.0f} s") from None
        except OSError as exc:
            raise SetupError(f"cannot run pip: {exc}") from None
        if proc.returncode != 0 or not tarball.is_file():
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
            raise SetupError(f"pip download failed (exit {proc.returncode}):\n{tail}")
    digest = sha256(tarball)
    if digest != SDIST_SHA256:
        raise SetupError(f"{tarball} has sha256 {digest}, expected {SDIST_SHA256}; delete it to "
                         "fetch it again")
    prefix = f"mpi4py-{MPI4PY_VERSION}/test/"
    tmp = Path(tempfile.mkdtemp(prefix="extract-", dir=cache))
    try:
        with tarfile.open(tarball, "r:gz") as tf:
            members = [m for m in tf.getmembers()
                       if m.name.startswith(prefix) and (m.isfile() or m.isdir())
                       and ".." not in Path(m.name).parts]
            if not members:
                raise SetupError(f"{tarball} has no {prefix} folder")
            kwargs = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tf.extractall(tmp, members=members, **kwargs)
        root.mkdir(parents=True, exist_ok=True)
        (tmp / prefix).rename(testdir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return testdir


# --------------------------------------------------------------------------- processes
def _pids_with_marker(marker: str) -> list[int]:
    needle = f"{MARKER_VAR}={marker}".encode()
    pids = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return pids
    for entry in entries:
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    pids.append(int(entry))
        except OSError:
            continue
    return pids


def kill_leftovers(marker: str, grace: float = 3.0) -> list[int]:
    """End, by pid, every process of this job that is still alive (SIGTERM, then SIGKILL)."""
    pids = _pids_with_marker(marker)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    deadline = time.monotonic() + grace
    while pids and time.monotonic() < deadline:
        time.sleep(0.1)
        pids = _pids_with_marker(marker)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return pids


def _kill_group(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except OSError:
            return
        try:
            proc.wait(timeout=3)
            return
        except subprocess.TimeoutExpired:
            continue


class Runner:
    """How to start N ranks of a Python program."""

    name = "?"

    def command(self, n: int, timeout: float, argv: list[str]) -> list[str]:
        raise NotImplementedError

    def describe(self) -> str:
        return self.name


class MinimpiRunner(Runner):
    name = "minimpi"

    def __init__(self, cmd: str | None, deadlock_timeout: float | None):
        if cmd:
            self.base = cmd.split()
        else:
            exe = Path(sys.executable).with_name("minimpi")
            found = str(exe) if exe.is_file() else shutil.which("minimpi")
            self.base = [found] if found else [sys.executable, "-m", "minimpi"]
        self.deadlock_timeout = deadlock_timeout
        self.python = sys.executable

    def command(self, n, timeout, argv):
        cmd = self.base + ["run", "-n", str(n), "--timeout", f"{timeout:g}"]
        if self.deadlock_timeout is not None:
            cmd += ["--deadlock-timeout", f"{self.deadlock_timeout:g}"]
        return cmd + [str(RANK_RUNNER)] + argv

    def describe(self):
        try:
            out = subprocess.run([self.python, "-c", "import minimpi; print(getattr("
                                  "minimpi, '__version__', '?'))"], capture_output=True,
                                 text=True, timeout=60).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            out = "?"
        return f"minimpi {out} ({' '.join(self.base)} run)"


class MpichRunner(Runner):
    name = "mpich"

    def __init__(self, venv: str):
        self.venv = Path(venv)
        self.mpiexec = self.venv / "bin" / "mpiexec"
        self.python = self.venv / "bin" / "python"
        if not self.mpiexec.exists() or not self.python.exists():
            raise SetupError(
                f"no mpiexec/python in {self.venv}; make the scratch virtualenv first:\n"
                f"  python3 -m venv {self.venv} && {self.venv}/bin/pip install "
                f"mpi4py=={MPI4PY_VERSION} mpich numpy")

    def command(self, n, timeout, argv):
        return [str(self.mpiexec), "-n", str(n), str(self.python), str(RANK_RUNNER)] + argv

    def describe(self):
        code = ("from mpi4py import MPI; import mpi4py; n, v = MPI.get_vendor(); "
                "print(mpi4py.__version__, n, '.'.join(map(str, v)))")
        try:
            out = subprocess.run([str(self.python), "-c", code], capture_output=True,
                                 text=True, timeout=60).stdout.split()
            return f"mpi4py {out[0]} + {out[1]} {out[2]} ({self.mpiexec})"
        except (OSError, subprocess.TimeoutExpired, IndexError):
            return f"mpi4py + MPI via {self.mpiexec}"


# --------------------------------------------------------------------------- one job
def read_rank_files(outdir: Path) -> tuple[dict, list]:
    ranks, strays = {}, []
    for path in sorted(outdir.glob("rank-*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data.get("rank"), int):
            ranks[data["rank"]] = data
        else:
            strays.append(data)  # mpi4py could not be imported on that rank
    return ranks, strays


def run_job(runner: Runner, testdir: Path, module: str, n: int, timeout: float,
            workdir: Path, select: dict | None, patch_get_vendor: bool,
            preload: Path | None = None) -> dict:
    """One `run -n N` of one module; returns the raw per-rank data and how the job ended."""
    workdir.mkdir(parents=True, exist_ok=True)
    outdir = workdir / "ranks"
    argv = ["--testdir", str(testdir), "--module", module, "--outdir", str(outdir)]
    if select is not None:
        sel = workdir / "select.json"
        sel.write_text(json.dumps(select), encoding="utf-8")
        argv += ["--select", str(sel)]
    if patch_get_vendor:
        argv.append("--patch-get-vendor")
    if preload:
        argv += ["--preload", str(preload)]
    marker = uuid.uuid4().hex
    env = dict(os.environ)
    env[MARKER_VAR] = marker
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(var, "1")
    cmd = runner.command(n, timeout, argv)
    logpath = workdir / "job.log"
    t0 = time.monotonic()
    harness_killed = False
    with open(logpath, "wb") as logf:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf,
                                stderr=subprocess.STDOUT, env=env, cwd=str(workdir),
                                start_new_session=True)
        try:
            # minimpi ends the job itself at --timeout; this is the harness's own net
            rc = proc.wait(timeout=timeout + (30 if runner.name == "minimpi" else 0))
        except subprocess.TimeoutExpired:
            harness_killed = True
            rc = None
        finally:
            _kill_group(proc)
            leftovers = kill_leftovers(marker)
    wall = time.monotonic() - t0
    ranks, strays = read_rank_files(outdir)
    try:
        lines = logpath.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        lines = []
    # exit 3 is also what a rank's own exit(3) gives: the launcher's report tells them apart
    deadlock_reported = any(line.startswith("minimpi: deadlock") for line in lines)
    tail = lines[-25:]
    return {"cmd": cmd, "rc": rc, "harness_killed": harness_killed, "wall_s": round(wall, 1),
            "ranks": ranks, "strays": strays, "log_tail": tail, "leftovers": leftovers,
            "deadlock_reported": deadlock_reported}


def job_status(job: dict, n: int) -> tuple[str, str]:
    """(status, note) of one job."""
    ranks, rc = job["ranks"], job["rc"]
    if job["strays"] and not ranks:
        err = job["strays"][0].get("mpi_import_error") or {}
        return "MPI_IMPORT_ERROR", f"{err.get('message', '?')} [{err.get('where', '')}]"
    imp = [r["import_error"] for r in ranks.values() if r.get("import_error")]
    if imp:
        return "IMPORT_ERROR", f"{imp[0]['message']} [{imp[0]['where']}]"
    finished = [r for r in ranks.values() if r.get("finished")]
    all_done = len(finished) == n
    if rc == MINIMPI_DEADLOCK_EXIT and not all_done and job["deadlock_reported"]:
        return "DEADLOCK", "minimpi's deadlock detector ended the job"
    if job["harness_killed"] or rc == TIMEOUT_EXIT:
        if all_done:
            return "EXIT_HANG", "every rank finished its tests but the job did not exit"
        return "DEADLOCK", f"job ran past its timeout ({job['wall_s']:.0f} s)"
    if not ranks:
        return "NO_RESULTS", f"exit {rc}, no result file"
    if not all_done:
        return "CRASH", f"exit {rc}: {len(finished)} of {n} ranks finished"
    if rc not in (0, None):
        return "OK", f"every rank finished, but the job exited {rc}"
    return "OK", ""


def merge_ranks(job: dict, n: int, status: str) -> tuple[list, dict]:
    """(test ids in order, {id: merged record}) of one job; tests without results are omitted
    unless a rank was running them (deadlock/crash) or a class fixture failed."""
    ranks = job["ranks"]
    order: list[str] = []
    seen = set()
    for r in sorted(ranks):
        for tid in ranks[r].get("tests", []):
            if tid not in seen:
                seen.add(tid)
                order.append(tid)
    merged = {}
    stuck_kind = "deadlock" if status in ("DEADLOCK", "EXIT_HANG") else "crash"
    for tid in order:
        per_rank = {}
        for r in range(n):
            data = ranks.get(r)
            res = (data or {}).get("results", {}).get(tid)
            if res is not None:
                per_rank[r] = (RANK_OUTCOME.get(res["outcome"], "error"), res)
            elif data and data.get("current") == tid:
                per_rank[r] = (stuck_kind, {"detail": f"rank {r} was running this test when the "
                                            f"job ended ({status})", "where": ""})
            elif data and data.get("finished"):
                fx = [f for f in data.get("fixture_errors", [])
                      if tid.startswith(_fixture_scope(f["id"]))]
                detail = (f"not run: {fx[0]['id']} failed: {fx[0]['detail']}" if fx
                          else "not run although the module finished")
                per_rank[r] = ("error", {"detail": detail, "where": fx[0]["where"] if fx else ""})
            else:
                per_rank[r] = ("lost", {"detail": "no result", "where": ""})
        outcomes = {o for o, _ in per_rank.values()}
        if "lost" in outcomes and outcomes <= {"lost", "pass", "skip"}:
            continue  # not reached on every rank: the caller reruns it or counts it lost
        outcome = next(o for o in PRECEDENCE if o in outcomes)
        first = min(r for r, (o, _) in per_rank.items() if o == outcome)
        rec = {"outcome": outcome}
        if outcome != "pass":
            res = per_rank[first][1]
            rec["detail"] = res.get("detail", "")
            rec["where"] = res.get("where", "")
            rec["ranks"] = {str(r): o for r, (o, _) in sorted(per_rank.items())}
            if res.get("tb"):
                rec["tb"] = res["tb"]
        merged[tid] = rec
    return order, merged


def _fixture_scope(holder_id: str) -> str:
    """'setUpClass (test_x.TestFoo)' -> 'test_x.TestFoo.'"""
    m = re.search(r"\(([\w.]+)\)", holder_id)
    return (m.group(1) + ".") if m else "\0"


def run_module(runner: Runner, testdir: Path, module: str, n: int, args, workroot: Path) -> dict:
    t0 = time.monotonic()
    all_tests: list[str] | None = None
    results: dict[str, dict] = {}
    attempts = []
    status, note, stuck_all = "OK", "", []
    select = None
    for attempt in range(1 + (0 if args.no_rerun else args.max_reruns)):
        job = run_job(runner, testdir, module, n, args.timeout,
                      workroot / f"{module}-n{n}-{attempt}", select, args.patch_get_vendor,
                      args.preload)
        st, nt = job_status(job, n)
        order, merged = merge_ranks(job, n, st)
        if all_tests is None:
            all_tests = order
            status, note = st, nt
        results.update({k: v for k, v in merged.items() if k not in results})
        stuck = sorted({d["current"] for d in job["ranks"].values()
                        if d.get("current") and not d["current"].startswith("<")})
        attempts.append({"status": st, "note": nt, "rc": job["rc"], "wall_s": job["wall_s"],
                         "stuck": stuck, "log_tail": job["log_tail"],
                         "leftovers_killed": job["leftovers"]})
        stuck_all += [s for s in stuck if s not in stuck_all]
        if st not in ("DEADLOCK", "CRASH") or not stuck:
            break  # finished, or stuck outside any test (a rerun would stick again)
        remaining = [t for t in all_tests if t not in results]
        if not remaining:
            break
        select = {"include": remaining, "exclude": []}
    if len(attempts) > 1:
        note += (f"; reran the rest {len(attempts) - 1}x without the stuck tests: "
                 + ", ".join(a["status"] for a in attempts[1:]))
    if stuck_all:
        note += "; running: " + ", ".join(stuck_all)
    for tid in all_tests or []:  # never reached on any rank in any attempt
        results.setdefault(tid, {"outcome": "lost", "detail": f"no result ({status})",
                                 "where": ""})
    counts = collections.Counter(r["outcome"] for r in results.values())
    return {"module": module, "n": n, "status": status, "note": note,
            "wall_s": round(time.monotonic() - t0, 1), "attempts": attempts,
            "counts": {k: counts.get(k, 0) for k in ("pass", "fail", "error", "skip", "lost",
                                                      "deadlock", "crash")},
            "order": all_tests or [], "tests": results}


# --------------------------------------------------------------------------- baseline
def load_baseline(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def baseline_outcomes(baseline: dict | None, module: str, n: int) -> dict | None:
    if not baseline:
        return None
    mod = baseline.get("modules", {}).get(module)
    if not mod or str(n) not in mod.get("status", {}):
        return None
    return {tid: per_n[str(n)] for tid, per_n in mod["tests"].items() if str(n) in per_n}


def record_baseline(path: Path, runs: list[dict], runner_desc: str, old: dict | None) -> dict:
    base = old or {}
    base.update({
        "about": ("Outcome of each test of mpi4py's own test suite under real mpi4py + MPICH, "
                  "per number of ranks; written by run_mpi4py_suite.py --runner mpich "
                  "--record-baseline. Outcomes merge all ranks: pass only if every rank passed."),
        "mpi4py_sdist": f"mpi4py-{MPI4PY_VERSION}.tar.gz sha256:{SDIST_SHA256}",
        "runner": runner_desc,
        "python": platform.python_version(),
        "recorded": datetime.date.today().isoformat(),
    })
    try:
        import numpy  # the tests use numpy arrays when numpy is importable
        base["numpy_in_harness_env"] = numpy.__version__
    except ImportError:
        pass
    mods = base.setdefault("modules", {})
    for run in runs:
        mod = mods.setdefault(run["module"], {"status": {}, "tests": {}, "notes": {}})
        mod.setdefault("notes", {})
        key = str(run["n"])
        mod["status"][key] = run["status"]
        for table in (mod["tests"], mod["notes"]):
            for tid in list(table):
                table[tid].pop(key, None)
        for tid, rec in run["tests"].items():
            mod["tests"].setdefault(tid, {})[key] = rec["outcome"]
            if rec["outcome"] != "pass":  # why it did not pass (e.g. the skip reason)
                mod["notes"].setdefault(tid, {})[key] = rec.get("detail", "")
        for name in ("tests", "notes"):
            mod[name] = {k: dict(sorted(v.items())) for k, v in sorted(mod[name].items()) if v}
    base["modules"] = dict(sorted(mods.items(), key=lambda kv: _module_key(kv[0])))
    path.write_text(json.dumps(base, indent=1) + "\n", encoding="utf-8")
    write_baseline_md(base, BASELINE_MD if path == DEFAULT_BASELINE else path.with_suffix(".md"))
    return base


def _module_key(name: str):
    return (MODULES.index(name) if name in MODULES else len(MODULES), name)


def write_baseline_md(base: dict, path: Path) -> None:
    lines = ["# mpi4py's test suite under real mpi4py + MPICH (baseline)", "",
             f"Generated by `tests/conformance/run_mpi4py_suite.py --runner mpich "
             f"--record-baseline`; the per-test data is `{DEFAULT_BASELINE.name}`.", "",
             f"- runner: {base.get('runner')}", f"- tests: {base.get('mpi4py_sdist')}",
             f"- Python {base.get('python')}, numpy {base.get('numpy_in_harness_env', '?')}, "
             f"recorded {base.get('recorded')}", "",
             "A test passes only if it passed on every rank. `pass` is what minimpi is "
             "measured against.", "",
             "| module | N | status | tests | pass | fail | error | skip |",
             "|---|---:|---|---:|---:|---:|---:|---:|"]
    totals = collections.defaultdict(collections.Counter)
    others = []
    for module, mod in base.get("modules", {}).items():
        for key in sorted(mod["status"], key=int):
            c = collections.Counter(t[key] for t in mod["tests"].values() if key in t)
            total = sum(c.values())
            totals[key].update(c)
            totals[key]["tests"] += total
            lines.append(f"| {module} | {key} | {mod['status'][key]} | {total} | {c['pass']} | "
                         f"{c['fail']} | {c['error']} | {c['skip']} |")
        notes = mod.get("notes", {})
        for tid, per_n in mod["tests"].items():
            bad = {k: v for k, v in per_n.items() if v != "pass"}
            if bad:
                why = notes.get(tid, {})
                others.append(f"- `{tid}`: " + ", ".join(
                    f"n={k} {v}" + (f" ({why[k]})" if why.get(k) else "")
                    for k, v in sorted(bad.items(), key=lambda kv: int(kv[0]))))
    for key in sorted(totals, key=int):
        c = totals[key]
        lines.append(f"| **all** | {key} | | {c['tests']} | {c['pass']} | {c['fail']} | "
                     f"{c['error']} | {c['skip']} |")
    lines += ["", "## Tests that do not pass under MPICH", ""] + (others or ["(none)"])
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


# --------------------------------------------------------------------------- report
def compare(run: dict, base: dict | None) -> dict:
    """Adds baseline numbers to one module/N run."""
    if base is None:
        run["baseline"] = None
        return run
    for tid in base:  # never collected here (import error, lost rank): count it as lost
        if tid not in run["tests"]:
            run["tests"][tid] = {"outcome": "lost", "detail": f"{run['status']}: {run['note']}",
                                 "where": ""}
    counts = collections.Counter(r["outcome"] for r in run["tests"].values())
    run["counts"] = {k: counts.get(k, 0) for k in run["counts"]}
    bc = collections.Counter(base.values())
    passing = [t for t, o in base.items() if o == "pass"]
    matched = [t for t in passing if run["tests"].get(t, {}).get("outcome") == "pass"]
    run["baseline"] = {"counts": {k: bc.get(k, 0) for k in ("pass", "fail", "error", "skip")},
                       "tests": len(base), "pass": len(passing), "matched": len(matched),
                       "regressions": [t for t in passing if t not in set(matched)],
                       "extra_pass": sorted(t for t, r in run["tests"].items()
                                            if r["outcome"] == "pass" and base.get(t) != "pass"),
                       "not_in_baseline": sorted(t for t in run["tests"] if t not in base)}
    return run


def normalize(detail: str) -> str:
    d = re.sub(r"0x[0-9a-fA-F]+", "0x?", detail)
    d = re.sub(r"(?<![\w.])-?\d+(\.\d+)?", "#", d)
    d = re.sub(r"<[^<>]* object at 0x\?>", "<obj>", d)
    return d[:220]


def print_table(runs: list[dict], header: str, out) -> None:
    w = max([len(r["module"]) for r in runs] + [6])
    print(header, file=out)
    print(f"{'module':<{w}} {'N':>2} {'status':<16} {'pass':>5} {'fail':>5} {'error':>5} "
          f"{'skip':>5} {'lost':>5} | {'MPICH pass/fail/err/skip':>24} | {'matched':>13}  time",
          file=out)
    last_note = {}
    for r in runs:
        c = r["counts"]
        lost = c["lost"] + c["deadlock"] + c["crash"]
        b = r.get("baseline")
        if b:
            bc = b["counts"]
            bstr = f"{bc['pass']}/{bc['fail']}/{bc['error']}/{bc['skip']}"
            pct = 100.0 * b["matched"] / b["pass"] if b["pass"] else 100.0
            mstr = f"{b['matched']}/{b['pass']} {pct:3.0f}%"
        else:
            bstr, mstr = "(no baseline)", "-"
        print(f"{r['module']:<{w}} {r['n']:>2} {r['status']:<16} {c['pass']:>5} {c['fail']:>5} "
              f"{c['error']:>5} {c['skip']:>5} {lost:>5} | {bstr:>24} | {mstr:>13}  "
              f"{r['wall_s']:.0f}s", file=out)
        if (r["status"] != "OK" or r["note"]) and last_note.get(r["module"]) != r["note"]:
            print(f"{'':<{w}}    -> {r['status']}: {r['note']}", file=out)
        last_note[r["module"]] = r["note"]


def totals_by_n(runs: list[dict]) -> dict:
    tot = {}
    for r in runs:
        t = tot.setdefault(str(r["n"]), {"baseline_pass": 0, "matched": 0, "pass": 0,
                                         "tests": 0, "modules_bad": []})
        t["pass"] += r["counts"]["pass"]
        t["tests"] += len(r["tests"])
        if r.get("baseline"):
            t["baseline_pass"] += r["baseline"]["pass"]
            t["matched"] += r["baseline"]["matched"]
        if r["status"] in BAD_STATUSES or r["status"] == "IMPORT_ERROR":
            t["modules_bad"].append(f"{r['module']}:{r['status']}")
    for t in tot.values():
        t["ratio"] = round(t["matched"] / t["baseline_pass"], 4) if t["baseline_pass"] else None
    return tot


def print_causes(runs: list[dict], out) -> None:
    """Tests that pass under MPICH but not here, grouped by their normalized message."""
    groups: dict[str, dict] = {}
    for r in runs:
        b = r.get("baseline")
        if not b:
            continue
        for tid in b["regressions"]:
            rec = r["tests"].get(tid, {"outcome": "lost", "detail": "not in this run"})
            key = f"{rec['outcome']}: {normalize(rec.get('detail', ''))}"
            g = groups.setdefault(key, {"count": 0, "where": collections.Counter(),
                                        "example": (tid, rec.get("where", ""))})
            g["count"] += 1
            g["where"][f"{r['module']}@{r['n']}"] += 1
    print("\nTests that pass under MPICH but not here, by message:", file=out)
    for key, g in sorted(groups.items(), key=lambda kv: -kv[1]["count"]):
        where = ", ".join(f"{k}:{v}" for k, v in sorted(g["where"].items()))
        print(f"{g['count']:5}  {key}\n       e.g. {g['example'][0]}  [{g['example'][1]}]\n"
              f"       {where}", file=out)


# --------------------------------------------------------------------------- main
def parse_list(text: str, kind=str) -> list:
    return [kind(x) for x in re.split(r"[,\s]+", text.strip()) if x]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description="Run mpi4py's own test suite under minimpi (or real MPICH) and compare.",
        epilog=__doc__.split("\n\n", 2)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modules", type=parse_list, help=f"comma list (default: {','.join(MODULES)})")
    ap.add_argument("--n", type=lambda s: parse_list(s, int), help="comma list (default 1,2,4)")
    ap.add_argument("--runner", choices=["minimpi", "mpich"], default="minimpi")
    ap.add_argument("--mpich-venv", default=os.environ.get("MPICH_VENV", "/tmp/mpich-venv"),
                    help="scratch virtualenv with mpi4py + mpich for --runner mpich "
                         "(default $MPICH_VENV or /tmp/mpich-venv)")
    ap.add_argument("--minimpi", help="command that starts minimpi (default: the `minimpi` "
                                      "next to this Python, else on PATH, else python -m minimpi)")
    ap.add_argument("--timeout", type=float, default=150.0,
                    help="seconds one module may run at one N (default 150)")
    ap.add_argument("--deadlock-timeout", type=float,
                    help="passed to minimpi run --deadlock-timeout (default: minimpi's)")
    ap.add_argument("--no-rerun", action="store_true",
                    help="after a deadlock or crash, do not run the module's remaining tests")
    ap.add_argument("--max-reruns", type=int, default=6)
    ap.add_argument("--patch-get-vendor", action="store_true",
                    help="add a stand-in MPI.get_vendor in the ranks when the MPI module lacks "
                         "it (only to see past that import error; reported in the output)")
    ap.add_argument("--preload", type=lambda p: Path(p).resolve(),
                    help="a Python file each rank runs (MPI in its namespace) before importing "
                         "the test module: for triage experiments ('what if X were fixed'); "
                         "reported in the output")
    ap.add_argument("--short", action="store_true",
                    help=f"quick CI subset: {','.join(SHORT_MODULES)} "
                         f"at n={','.join(map(str, SHORT_NS))}")
    ap.add_argument("--min-ratio", type=float,
                    help="exit 1 if at some N the fraction of MPICH-passing tests that pass here "
                         "is below this, or a module deadlocked/crashed/lost results")
    ap.add_argument("--record-baseline", action="store_true",
                    help="write the results into the baseline file (with --runner mpich)")
    ap.add_argument("--baseline", type=Path, default=DEFAULT_BASELINE)
    ap.add_argument("--json", nargs="?", const="-", metavar="FILE",
                    help="write the full results as JSON to FILE (or stdout; the table then "
                         "goes to stderr)")
    ap.add_argument("--causes", action="store_true",
                    help="also list the MPICH-passing tests that fail here, grouped by message")
    ap.add_argument("--cache-dir", type=Path, default=default_cache_dir())
    ap.add_argument("--suite-dir", type=Path,
                    help="an extracted mpi4py test/ folder to use instead of fetching one")
    ap.add_argument("--keep", type=Path,
                    help="keep every job's rank files and log under this folder")
    args = ap.parse_args(argv)

    modules = args.modules or (SHORT_MODULES if args.short else MODULES)
    ns = args.n or (SHORT_NS if args.short else NS)
    unknown = [m for m in modules if not re.fullmatch(r"test_\w+", m)]
    if unknown or any(n < 1 for n in ns):
        ap.error(f"bad --modules/--n: {unknown or ns}")
    if args.record_baseline and args.runner != "mpich":
        ap.error("--record-baseline records what real MPI gives: use it with --runner mpich")
    table_out = sys.stderr if args.json == "-" else sys.stdout

    try:
        testdir = args.suite_dir.resolve() if args.suite_dir else fetch_suite(args.cache_dir)
        if not (testdir / "mpiunittest.py").is_file():
            raise SetupError(f"{testdir} is not mpi4py's test folder (no mpiunittest.py)")
        runner = (MpichRunner(args.mpich_venv) if args.runner == "mpich"
                  else MinimpiRunner(args.minimpi, args.deadlock_timeout))
    except SetupError as exc:
        log(f"run_mpi4py_suite: {exc}")
        return 2
    baseline = load_baseline(args.baseline)
    if args.min_ratio is not None and args.runner == "minimpi" and baseline is None:
        log(f"run_mpi4py_suite: --min-ratio needs the baseline {args.baseline}")
        return 2

    desc = runner.describe()
    log(f"mpi4py {MPI4PY_VERSION} tests from {testdir}\nrunner: {desc}")
    workroot = Path(tempfile.mkdtemp(prefix="mpi4py-suite-"))
    runs = []
    try:
        for module in modules:
            for n in ns:
                log(f"  {module} n={n} ...")
                run = run_module(runner, testdir, module, n, args, workroot)
                compare(run, baseline_outcomes(baseline, module, n)
                        if args.runner == "minimpi" or not args.record_baseline else None)
                c = run["counts"]
                log(f"  {module} n={n}: {run['status']} pass={c['pass']} fail={c['fail']} "
                    f"error={c['error']} skip={c['skip']} "
                    f"lost={c['lost'] + c['deadlock'] + c['crash']} ({run['wall_s']:.0f} s)")
                runs.append(run)
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    finally:
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            shutil.copytree(workroot, args.keep / workroot.name, dirs_exist_ok=True)
        shutil.rmtree(workroot, ignore_errors=True)

    if args.record_baseline:
        record_baseline(args.baseline, runs, desc, baseline)
        log(f"baseline written to {args.baseline} (and its .md table)")

    patched = args.patch_get_vendor and args.runner == "minimpi"
    header = (f"mpi4py {MPI4PY_VERSION} test suite under {desc}"
              + ("  [PATCHED: stand-in MPI.get_vendor added in the ranks]" if patched else "")
              + (f"  [PRELOAD: {args.preload}]" if args.preload else "")
              + (f"\nbaseline: {baseline.get('runner')}" if baseline and args.runner == "minimpi"
                 else ""))
    print_table(runs, header, table_out)
    totals = totals_by_n(runs)
    gate_ok = True
    for key in sorted(totals, key=int):
        t = totals[key]
        if t["ratio"] is not None:
            line = (f"TOTAL n={key}: {t['matched']}/{t['baseline_pass']} of the tests that pass "
                    f"under MPICH pass here ({100 * t['ratio']:.1f}%)")
        else:
            line = f"TOTAL n={key}: {t['pass']}/{t['tests']} pass"
        if t["modules_bad"]:
            by_status = collections.defaultdict(list)
            for item in t["modules_bad"]:
                mod, st = item.split(":")
                by_status[st].append(mod)
            line += "; " + "; ".join(f"{st} x{len(mods)}: {', '.join(mods)}"
                                     for st, mods in by_status.items())
        print(line, file=table_out)
        if args.min_ratio is not None:
            if (t["ratio"] or 0.0) < args.min_ratio or any(
                    s.split(":")[1] in BAD_STATUSES for s in t["modules_bad"]):
                gate_ok = False
    if args.causes:
        print_causes(runs, table_out)
    if args.min_ratio is not None:
        print(f"gate --min-ratio {args.min_ratio}: {'PASS' if gate_ok else 'FAIL'}", file=table_out)

    if args.json:
        doc = {"mpi4py": MPI4PY_VERSION, "testdir": str(testdir), "runner": desc,
               "patched_get_vendor": patched,
               "preload": str(args.preload) if args.preload else None,
               "baseline": baseline.get("runner") if baseline else None,
               "totals": totals, "min_ratio": args.min_ratio, "gate_ok": gate_ok,
               "runs": [{k: v for k, v in r.items() if k != "order"} for r in runs]}
        text = json.dumps(doc, indent=1)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n", encoding="utf-8")
    return 0 if gate_ok else 1


if __name__ == "__main__":
    sys.exit(main())
