"""The launcher's job loop decisions that need no processes: signals and the startup deadline."""
from __future__ import annotations

import io
import signal

from minimpi.launcher.job import Job, JobSpec


class _Coord:
    table_sent = False


def _job(**spec) -> Job:
    job = Job(JobSpec(nprocs=2, program="x.py", **spec), io.BytesIO(), io.BytesIO())
    job.coord = _Coord()
    return job


def test_two_signals_before_the_loop_saw_the_first_still_fail_the_job():
    job = _job()
    job._on_signal(signal.SIGINT, None)
    job._on_signal(signal.SIGINT, None)      # both arrive before the loop looks
    job._on_signal_received()
    assert job.failure is not None and job.failure.kind == "interrupt"
    assert job.failure.exit_code == 128 + signal.SIGINT
    assert job._finish() == 130


def test_one_signal_fails_the_job_with_128_plus_signal():
    job = _job()
    job._on_signal(signal.SIGTERM, None)
    job._on_signal_received()
    assert job._finish() == 143
