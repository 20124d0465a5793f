"""What every fault test checks after its job: nothing is left behind.

``Leftovers`` takes a snapshot before the job (shared-memory segments) and gives the job a
private TMPDIR; ``check()`` then asserts that no process carrying the job's marker runs,
that no new ``/dev/shm`` entry of minimpi's is left and that the TMPDIR is empty. Processes
still found are killed before the assertion fails, so a failing test cleans up too.

Adding a fault (e.g. a host agent or a whole host killed, once multi-host launch exists):
give ``fault_program.py`` a METHOD or POINT, or inject it from the test, and add a row to
the matrix in ``test_faults.py`` with the culprit and exit code the summary must show.
"""
from __future__ import annotations

import os
import pathlib
import time

from jobhelpers import assert_no_leftovers, marker_args, others_segments

SHM = pathlib.Path("/dev/shm")


def _shm_entries() -> set:
    try:
        return {p.name for p in SHM.iterdir() if "minimpi" in p.name.lower()}
    except OSError:
        return set()


class Leftovers:
    def __init__(self, marker: str, tmp_path: pathlib.Path) -> None:
        self.marker = marker
        self.tmpdir = tmp_path / "job-tmp"
        self.tmpdir.mkdir()
        self.shm_before = _shm_entries()

    def args(self) -> list:
        """``minimpi run`` options: the marker, and TMPDIR for every rank."""
        return [*marker_args(self.marker), "-x", f"TMPDIR={self.tmpdir}"]

    def check(self, wait: float = 5.0) -> None:
        assert_no_leftovers(self.marker, wait=wait)
        deadline = time.monotonic() + wait
        while True:
            new = _shm_entries() - self.shm_before
            theirs = {os.path.basename(p) for p in others_segments(
                [str(SHM / name) for name in new])}
            shm = new - theirs
            tmp = sorted(os.listdir(self.tmpdir))
            if not (shm or tmp) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert not shm, f"shared-memory segments left behind: {sorted(shm)}"
        assert not tmp, f"temporary files left behind in TMPDIR: {tmp}"
