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


# -- --fault-tolerant: a failed rank is reported to the others, the job goes on ----------------
class _RankState:
    def __init__(self, rank):
        self.rank, self.failure, self.exit_status = rank, None, None


class _FTCoord:
    table_sent = True

    def __init__(self, n):
        self.ranks = [_RankState(r) for r in range(n)]
        self.sent = []

    def send(self, rank, message):
        self.sent.append((rank, message))


class _Proc:
    def __init__(self, rank, returncode=None):
        self.rank, self.returncode = rank, returncode

    @property
    def alive(self):
        return self.returncode is None


def _ft_job(n=4):
    err = io.BytesIO()
    job = Job(JobSpec(nprocs=n, program="x.py", fault_tolerant=True), io.BytesIO(), err)
    job.coord = _FTCoord(n)
    job.ranks = [_Proc(r) for r in range(n)]
    return job, err


def test_the_flag_reaches_the_ranks_environment_only_when_given():
    assert _ft_job()[0].rank_env(0, "tcp://x", 3)["MINIMPI_FAULT_TOLERANT"] == "1"
    assert "MINIMPI_FAULT_TOLERANT" not in _job().rank_env(0, "tcp://x", 3)


def test_a_failed_rank_is_told_to_the_running_ranks_and_the_survivors_code_wins():
    job, err = _ft_job()
    job.ranks[3].returncode = 1
    job.ranks[1].returncode = 0                   # finished already: not told
    job.coord.ranks[3].exit_status = "exited with code 1"
    job.coord.ranks[3].failure = {"error": "ValueError: boom"}
    job._tolerate(3, "exited with code 1")
    assert job.failure is None and job.tolerated == [3]
    assert [r for r, _ in job.coord.sent] == [0, 2]
    assert all(m == {"t": "proc_failed", "rank": 3, "why": "exited with code 1: ValueError: boom"}
               for _, m in job.coord.sent)
    for p in (0, 2):
        job.ranks[p].returncode = 0
    assert job._finish() == 0
    text = err.getvalue().decode()
    assert "rank 3 failed (exited with code 1); the job went on without it" in text
    assert "3 rank(s) finished with exit code 0 (0-2) after rank(s) 3 failed" in text


def test_when_no_rank_finishes_the_code_is_the_first_failed_ranks():
    job, err = _ft_job(2)
    job.ranks[1].returncode = 7
    job._tolerate(1, "exited with code 7")
    job.ranks[0].returncode = 1
    job._tolerate(0, "exited with code 1")
    assert job._finish() == 7
    assert "every rank failed; exit code 7 (rank 1's, the first to fail)" in err.getvalue().decode()
