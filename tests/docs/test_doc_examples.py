"""Every runnable example of the documentation runs, and prints what the page shows.

Each ``% run`` block of README.md and docs/ (see doc_blocks.py for the markers) runs in a
scratch directory under a hard timeout: a ``sh`` block with bash, a ``python`` block saved
under its file name and run with its command (``minimpi run ...``, ``python ...``). Its
exit code must be the expected one (0 unless ``exit=N``) and each ``% output`` block after
it must match its stdout (or stderr). The job's processes must all be gone afterwards.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
from doc_blocks import REPO, all_blocks, match_output, parse
from jobhelpers import MARKER_VAR, OWNER_VAR, _kill_group, leftover_processes

RUN_BLOCKS = [b for b in all_blocks() if b.marker == "run"]
DEFAULT_TIMEOUT = 60.0
#: blocks run at once (see _Runner)
CONCURRENT = 3
#: folders of the repository a block may name by relative path
LINKED = ("examples", "benchmarks", "tests")


def _sandbox(block, path: str) -> str:
    """A scratch directory with the page's named python blocks, the .py files beside the
    page and links to examples/, benchmarks/ and tests/."""
    page = os.path.join(REPO, block.path)
    for name in LINKED:
        os.symlink(os.path.join(REPO, name), os.path.join(path, name))
    here = os.path.dirname(page)
    if os.path.abspath(here) != REPO:
        for name in os.listdir(here):
            if name.endswith(".py"):
                shutil.copy(os.path.join(here, name), path)
    for other in parse(page):
        if (other.marker == "file" or (other.marker == "run" and other.language in
                                       ("python", "py"))) and other.file_name:
            with open(os.path.join(path, other.file_name), "w") as f:
                f.write(other.text)
    return str(path)


def _script(block) -> str:
    if block.language in ("python", "py"):
        if not block.argument or not block.file_name:
            raise AssertionError(f"{block.where}: a python run block needs a command naming "
                                 f"its file, e.g. `% run: minimpi run -n 2 prog.py`")
        return block.argument
    if block.argument:
        raise AssertionError(f"{block.where}: a {block.language} run block is run as it is; "
                             f"`% run: CMD` is for python blocks")
    return block.text


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str
    failure: str = ""          # set when the block could not be run to its end


def _run(block) -> Outcome:
    """Run one block to its end (called on a worker thread)."""
    path = tempfile.mkdtemp(prefix="minimpi-docs-")
    try:
        cwd = _sandbox(block, path)
        marker = uuid.uuid4().hex
        env = dict(os.environ)
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
        env[MARKER_VAR] = marker                 # inherited by the launcher and every rank
        # a job of its own: the per-test shared-memory check of whichever test is running
        # meanwhile counts this job's live processes as another's
        env[OWNER_VAR] = uuid.uuid4().hex
        env.pop("MINIMPI_COST_FILE", None)
        timeout = float(block.options.get("timeout", DEFAULT_TIMEOUT))
        proc = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", _script(block)],
                                cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            out, err = proc.communicate()
            return Outcome(proc.returncode, out, err,
                           f"did not finish within {timeout:.0f} s")
        left = _wait_for_leftovers(marker)
        if left:
            return Outcome(proc.returncode, out, err, f"processes left behind: {left}")
        return Outcome(proc.returncode, out, err)
    except Exception as exc:                     # a bad marker: reported by the test
        return Outcome(-1, "", "", f"{type(exc).__name__}: {exc}")
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _wait_for_leftovers(marker: str, wait: float = 3.0) -> list:
    deadline = time.monotonic() + wait
    pids = leftover_processes(marker)
    while pids and time.monotonic() < deadline:
        time.sleep(0.1)
        pids = leftover_processes(marker)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return pids


class _Runner:
    """Runs every block in the background, CONCURRENT at a time, in page order: most of a
    small job's time is start-up and waiting, so a few at once finish the set sooner than
    one after the other; each test then waits for its own block's outcome.

    Under pytest-xdist every worker collects every block but runs only the tests it is
    handed, which no worker knows beforehand: running them all ahead would run each block
    once per worker - twice the work, and two copies of a block that listens on a fixed
    port (the environment-rendezvous loop of docs/guide/hosts.md) failing each other. So
    there each worker runs its own blocks as their tests come (the workers are the
    concurrency)."""

    def __init__(self) -> None:
        self.pool = None
        self.futures = {}

    def outcome(self, block, selected: list) -> Outcome:
        if self.pool is None:
            self.pool = ThreadPoolExecutor(max_workers=CONCURRENT)
            for b in selected:
                self.futures[b.where] = self.pool.submit(_run, b)
        if block.where not in self.futures:
            self.futures[block.where] = self.pool.submit(_run, block)
        return self.futures[block.where].result(timeout=600)


_RUNNER = _Runner()


@pytest.mark.parametrize("block", RUN_BLOCKS, ids=[b.where for b in RUN_BLOCKS])
def test_example_runs(block, request):
    selected = [] if os.environ.get("PYTEST_XDIST_WORKER") else \
        [item.callspec.params["block"] for item in request.session.items
         if getattr(item, "originalname", None) == "test_example_runs"]
    result = _RUNNER.outcome(block, selected)
    report = f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"
    assert not result.failure, f"{block.where}: {result.failure}\n{report}"
    expected_exit = int(block.options.get("exit", 0))
    assert result.returncode == expected_exit, (
        f"{block.where}: exit code {result.returncode}, the page expects {expected_exit}\n"
        f"{report}")
    for shown in block.outputs:
        modes = {m.strip() for m in shown.argument.split(",") if m.strip()}
        unknown = modes - {"sorted", "stderr"}
        assert not unknown, f"{shown.where}: unknown output mode(s) {sorted(unknown)}"
        actual = result.stderr if "stderr" in modes else result.stdout
        problem = match_output(shown.text, actual, sort="sorted" in modes)
        assert problem is None, (f"{shown.where}: the output shown differs from the run's "
                                 f"{'stderr' if 'stderr' in modes else 'stdout'}\n{problem}\n"
                                 f"{report}")
