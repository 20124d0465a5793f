"""The tests' own bookkeeping: a shared-memory segment of a job someone else runs on this
machine (a developer's job, another test run) is not this test's leftover."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest
from jobhelpers import OWNER_VAR, others_segments


@pytest.fixture(scope="module")
def someone_elses_job():
    """A live process of a job this test did not start (no MINIMPI_TEST_OWNER of ours);
    its segment is made by the test and removed here, after the test's own checks."""
    job = uuid.uuid4().hex[:16]
    env = {k: v for k, v in os.environ.items() if k != OWNER_VAR}
    env["MINIMPI_JOBID"] = job
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env=env)
    path = f"/dev/shm/minimpi-{job}-0"
    yield job, path
    proc.kill()
    proc.wait()
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def test_a_segment_of_a_job_someone_else_runs_is_not_a_leftover(someone_elses_job):
    job, path = someone_elses_job
    with open(path, "wb") as f:        # made during this test, as a concurrent job would
        f.write(b"\0" * 64)
    mine = f"/dev/shm/minimpi-{uuid.uuid4().hex[:16]}-0"   # a job nobody runs any more
    assert others_segments([path, mine]) == {path}
    # (the autouse no_shared_memory_left check runs after this: it must neither fail
    # nor remove the other job's segment)


def test_the_other_jobs_segment_was_left_alone(someone_elses_job):
    assert os.path.exists(someone_elses_job[1])


def test_a_job_of_this_test_is_never_someone_elses(tmp_path):
    job = uuid.uuid4().hex[:16]
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                            env={**os.environ, "MINIMPI_JOBID": job})
    try:
        assert others_segments([f"/dev/shm/minimpi-{job}-3"]) == set()
    finally:
        proc.kill()
        proc.wait()
