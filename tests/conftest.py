"""Fixtures shared by every test folder; the helpers they use are in ``jobhelpers.py``.

(Test modules import helpers from ``jobhelpers``, never from ``conftest``: several folders
have a conftest.py, and whichever pytest loads first would win the name.)

Every test also checks that it leaves no shared-memory segment (``/dev/shm/minimpi-*``)
behind (:func:`no_shared_memory_left`).
"""
from __future__ import annotations

import glob
import os
import textwrap
import time
import uuid

import pytest
from jobhelpers import OWNER_VAR, assert_no_leftovers, others_segments

SHM_SEGMENTS = "/dev/shm/minimpi-*"


def shm_segments(since: float = 0.0) -> list[str]:
    """minimpi's shared-memory segments that exist now (created at or after ``since``)."""
    found = []
    for path in glob.glob(SHM_SEGMENTS):
        try:
            if os.stat(path).st_ctime >= since:
                found.append(path)
        except FileNotFoundError:
            pass
    return found


@pytest.fixture(autouse=True)
def no_shared_memory_left(monkeypatch):
    """Fail a test that leaves a segment behind: a job removes its segments on every exit
    path (ranks once their peers mapped them, the launcher when the job ends). Segments of
    jobs that others run on this machine at the same time are told apart by their creation
    time, by their live processes (which lack this test's MINIMPI_TEST_OWNER, see
    jobhelpers.others_segments), and given 3 s to go (ranks unlink theirs right after
    start-up); only this test's own are removed."""
    monkeypatch.setenv(OWNER_VAR, uuid.uuid4().hex)
    start = time.time() - 1.0
    before = set(shm_segments())

    def left_now() -> list[str]:
        new = [p for p in shm_segments(start) if p not in before]
        theirs = others_segments(new)
        return [p for p in new if p not in theirs]
    yield
    deadline = time.monotonic() + 3.0
    left = left_now()
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = left_now()
    if left:
        for path in left:
            try:
                os.unlink(path)
            except OSError:
                pass
        pytest.fail(f"shared-memory segments left behind: {left}")


@pytest.fixture
def job_marker():
    marker = uuid.uuid4().hex
    yield marker
    assert_no_leftovers(marker)


@pytest.fixture
def write_script(tmp_path):
    """write_script("name.py", source) -> path (source is dedented)."""
    def write(name: str, source: str) -> str:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
        return str(path)
    return write


def pytest_collection_modifyitems(config, items):
    """The fast tier (``pytest -m fast -n auto``): the unit tests that are not marked slow.
    Everything that starts real jobs (integration, faults, multihost, verbs, conformance)
    is outside it."""
    unit = os.path.join(os.path.dirname(os.path.abspath(__file__)), "unit") + os.sep
    for item in items:
        if str(item.path).startswith(unit) and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.fast)
