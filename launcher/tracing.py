"""``minimpi run --trace FILE`` / ``--stats``: the launcher's half (see :mod:`minimpi.runtime.trace`).

Before the job: a private temporary directory, named to every rank by ``MINIMPI_OBSERVE_DIR``
(with ``MINIMPI_TRACE=1`` and/or ``MINIMPI_STATS=1``). Each rank writes ``rank.N.json`` there
at finalize. After the job (whatever its exit code): the per-rank files are merged into one
Chrome/Perfetto trace-event JSON and/or the statistics tables are printed, and the directory
is removed.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from typing import Optional, TextIO

# (minimpi.runtime.trace is imported by a Session only: it loads the communicator layer,
# which a run without --trace/--stats does not need in the launcher)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trace", metavar="FILE",
                   help="write a Chrome/Perfetto trace of every MPI call, collective step and "
                        "message to FILE (open it in ui.perfetto.dev or chrome://tracing)")
    p.add_argument("--stats", action="store_true",
                   help="print per-rank message/byte counts and time in MPI vs computing at exit")


class Session:
    def __init__(self, trace: Optional[str], stats: bool, nprocs: int, program: str) -> None:
        self.trace = trace
        self.stats = stats
        self.nprocs = nprocs
        self.program = program
        # the launcher's pid in the name: `minimpi clean` removes it once that pid is gone
        self.dir = tempfile.mkdtemp(prefix=f"minimpi-observe-{os.getpid()}-")

    def env(self) -> dict:
        from minimpi.runtime.observe_env import ENV_DIR, ENV_STATS, ENV_TRACE
        env = {ENV_DIR: self.dir}
        if self.trace:
            env[ENV_TRACE] = "1"
        if self.stats:
            env[ENV_STATS] = "1"
        return env

    def finish(self, stderr: TextIO = sys.stderr) -> None:
        from minimpi.runtime.trace import format_stats, load_rank_files, merge_traces
        try:
            docs = load_rank_files(self.dir)
            if self.trace:
                merged = merge_traces(docs, self.nprocs, self.program)
                with open(self.trace, "w") as f:
                    json.dump(merged, f)
                flows = sum(1 for e in merged["traceEvents"] if e.get("ph") == "s")
                print(f"minimpi: trace of {len(docs)} rank(s), {flows} messages written to "
                      f"{self.trace} (open in https://ui.perfetto.dev)", file=stderr, flush=True)
            if self.stats:
                print(format_stats(docs, self.nprocs), file=stderr, flush=True)
        except (OSError, ValueError) as exc:
            print(f"minimpi: could not write the trace/statistics: {exc}", file=stderr, flush=True)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def prepare(args: argparse.Namespace, program: str = "") -> Optional[Session]:
    trace, stats = getattr(args, "trace", None), getattr(args, "stats", False)
    if not trace and not stats:
        return None
    if trace:
        parent = os.path.dirname(os.path.abspath(trace))
        if not os.path.isdir(parent):
            raise SystemExit(f"minimpi run: --trace {trace}: directory {parent} does not exist")
    return Session(trace, stats, args.nprocs, program)
