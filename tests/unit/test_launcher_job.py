"""The launcher's job loop decisions that need no processes: signals and the startup deadline."""
from __future__ import annotations

import io
import signal

from minimpi.launcher.coordinator import CoordEvent
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


def test_no_startup_deadline_before_any_rank_registered():
    job = _job(startup_timeout=5.0)
    assert job.startup_deadline() is None   # nothing to time out: no busy wait


def test_startup_deadline_counts_from_the_first_registration():
    job = _job(startup_timeout=5.0)
    job.first_registered_at = 130.0          # e.g. a program that initializes late
    assert job.startup_deadline() == 135.0
    job.coord.table_sent = True
    assert job.startup_deadline() is None


def test_first_registration_time_is_recorded():
    job = _job()
    job._check_vanished = lambda: None
    job._on_coord_event(CoordEvent("registered", 0))
    first = job.first_registered_at
    assert first is not None
    job._on_coord_event(CoordEvent("registered", 1))
    assert job.first_registered_at == first
