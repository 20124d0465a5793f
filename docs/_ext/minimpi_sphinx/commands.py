"""Running ``minimpi`` commands during the build, with a cache.

Every figure and generated output of the site is what a ``minimpi`` command prints or
writes at build time. A command's result is cached under ``docs/_generated/`` by a key made
of the command, the files it reads and the state of minimpi's sources, so a rebuild after
editing one page does not run every command again, while any change to minimpi does.
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Optional, Sequence

DOCS_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REPO_DIR = os.path.dirname(DOCS_DIR)
GENERATED_DIR = os.path.join(DOCS_DIR, "_generated")

#: The cost model's inputs are pinned so that `minimpi explain` prints the same on every
#: builder: the built-in defaults (no calibration file of the builder's), cores as the page
#: says (--cores), and output without a rank prefix where a page shows it raw.
BUILD_ENV = {
    "MINIMPI_COST_FILE": os.path.join(GENERATED_DIR, "no-calibration.json"),
    "PYTHONDONTWRITEBYTECODE": "1",
}
#: Seconds one command may take (a figure's job runs a few ranks for well under that).
COMMAND_TIMEOUT = 120.0


class CommandFailed(Exception):
    """A documentation command exited non-zero or timed out."""


@dataclass
class Result:
    stdout: str
    stderr: str
    files: dict          # name -> absolute path of each file the command wrote


def _sources_stamp() -> str:
    """A digest of the names, sizes and modification times of minimpi's Python files."""
    digest = hashlib.sha256()
    for top in ("minimpi", "launcher"):
        for root, dirs, files in os.walk(os.path.join(REPO_DIR, top)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith(".py"):
                    st = os.stat(os.path.join(root, name))
                    digest.update(f"{root}/{name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return digest.hexdigest()


_STAMP: Optional[str] = None


def sources_stamp() -> str:
    global _STAMP
    if _STAMP is None:
        _STAMP = _sources_stamp()
    return _STAMP


def minimpi_argv(args: Sequence[str]) -> list:
    """``minimpi ARGS`` with the Python that runs the build (so the docs' minimpi is the
    one installed beside Sphinx)."""
    return [sys.executable, "-m", "minimpi.launcher.cli", *args]


def run_minimpi(args: Sequence[str], outputs: Sequence[str] = (),
                inputs: Sequence[str] = ()) -> Result:
    """Run ``minimpi ARGS`` in a scratch directory and return its stdout and the files named
    in ``outputs`` (relative names that ``ARGS`` writes, e.g. ``-o fig.svg``).

    ``inputs`` are files the command reads (a program, by absolute path in ``ARGS``): their
    contents join the cache key. The command runs in a scratch directory, where ``outputs``
    land.
    """
    key = hashlib.sha256()
    key.update(json.dumps([list(args), list(outputs), sources_stamp()]).encode())
    for path in inputs:
        with open(path, "rb") as f:
            key.update(f.read())
    digest = key.hexdigest()[:20]
    cache_dir = os.path.join(GENERATED_DIR, digest)
    done = os.path.join(cache_dir, "stdout.txt")
    if not os.path.exists(done):
        os.makedirs(GENERATED_DIR, exist_ok=True)
        scratch = tempfile.mkdtemp(prefix=f"{digest}.", dir=GENERATED_DIR)
        env = {**os.environ, **BUILD_ENV}
        env.pop("MINIMPI_COST_CORES", None)
        try:
            proc = subprocess.run(minimpi_argv(args), cwd=scratch, env=env,
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=COMMAND_TIMEOUT)
        except subprocess.TimeoutExpired as exc:
            raise CommandFailed(f"`minimpi {shlex.join(args)}` did not finish in "
                                f"{COMMAND_TIMEOUT:.0f} s") from exc
        if proc.returncode != 0:
            raise CommandFailed(f"`minimpi {shlex.join(args)}` exited with code "
                                f"{proc.returncode}:\n{proc.stderr[-3000:]}")
        for name in outputs:
            if not os.path.exists(os.path.join(scratch, name)):
                raise CommandFailed(f"`minimpi {shlex.join(args)}` wrote no {name}")
        with open(os.path.join(scratch, "stderr.txt"), "w") as f:
            f.write(proc.stderr)
        with open(os.path.join(scratch, "stdout.txt"), "w") as f:   # last: marks it done
            f.write(proc.stdout)
        if os.path.isdir(cache_dir):           # another build got there first
            import shutil
            shutil.rmtree(scratch)
        else:
            os.rename(scratch, cache_dir)
    with open(done) as f:
        stdout = f.read()
    with open(os.path.join(cache_dir, "stderr.txt")) as f:
        stderr = f.read()
    return Result(stdout, stderr, {name: os.path.join(cache_dir, name) for name in outputs})
