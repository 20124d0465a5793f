"""MPI-IO over real processes (n = 3 and 4): shared files, pointers, strided views,
two-phase collective I/O, a full disk and read-only files (io_programs/io_checks.py)."""
from __future__ import annotations

import os
import pathlib
import subprocess
import uuid

import pytest
from jobhelpers import marker_args, run_minimpi

PROGRAM = pathlib.Path(__file__).resolve().parent / "io_programs" / "io_checks.py"


def run_check(check: str, n: int, folder, marker: str, env=None):
    res = run_minimpi("-n", str(n), *marker_args(marker), str(PROGRAM), check, str(folder),
                      timeout=60, env=env)
    assert res.returncode == 0, f"{check} on {n} ranks failed:\n{res.stdout}\n{res.stderr}"
    assert f"{check} ok" in res.stdout
    return res


@pytest.mark.parametrize("n", [3, 4])
@pytest.mark.parametrize("check", ["blocks", "blocks_two_phase", "pointers", "read_only",
                                   "strided_two_phase"])
def test_io(check, n, tmp_path, job_marker):
    run_check(check, n, tmp_path, job_marker)


@pytest.mark.parametrize("check", ["strided", "strided_independent", "strided_rounds"])
def test_strided_paths_agree(check, tmp_path, job_marker):
    run_check(check, 3, tmp_path, job_marker)


def test_strided_view_with_real_vector_type(tmp_path, job_marker):
    """The same strided check through MPI.Datatype.Create_vector (the datatype seam)."""
    from minimpi.data.datatypes import Datatype
    if not hasattr(Datatype, "blocks"):
        pytest.skip("needs the datatype seam (Datatype.blocks, Create_vector) from the "
                    "datatypes work; io_programs/strided_type.py stands in until then")
    res = run_check("strided_two_phase", 4, tmp_path, job_marker)
    assert "(seam)" in res.stdout


def _mount_tmpfs(where: pathlib.Path, size: str, readonly: bool = False) -> bool:
    where.mkdir()
    opts = f"size={size}" + (",ro" if readonly else "")
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)],
                              capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _umount(where: pathlib.Path) -> None:
    subprocess.run(["umount", str(where)], capture_output=True, timeout=10)


def test_full_disk_every_rank_raises(tmp_path, job_marker):
    """A 64 KiB tmpfs (or, where mounting is not allowed, a 64 KiB file-size limit)."""
    disk = tmp_path / f"small-{uuid.uuid4().hex[:6]}"
    if _mount_tmpfs(disk, "64k"):
        try:
            run_check("full_disk", 3, disk, job_marker)
        finally:
            _umount(disk)
    else:
        run_check("full_disk", 3, disk, job_marker, env={"IO_TEST_FSIZE": str(64 * 1024)})


def test_read_only_file_system(tmp_path, job_marker):
    ro = tmp_path / "ro"
    if not _mount_tmpfs(ro, "64k"):
        pytest.skip("cannot mount a tmpfs here (needs root); test_io[read_only] covers "
                    "read-only files")
    try:
        (ro / "read_only_fs.dat").exists()
        subprocess.run(["mount", "-o", "remount,rw", str(ro)], capture_output=True, timeout=10)
        (ro / "read_only_fs.dat").write_bytes(b"x" * 100)
        done = subprocess.run(["mount", "-o", "remount,ro", str(ro)], capture_output=True,
                              timeout=10)
        assert done.returncode == 0, done.stderr
        run_check("read_only_fs", 3, ro, job_marker)
        assert (ro / "read_only_fs.dat").read_bytes() == b"x" * 100
    finally:
        _umount(ro)


def test_no_lock_files_left(tmp_path, job_marker):
    run_check("pointers", 3, tmp_path, job_marker)
    assert os.listdir(tmp_path) == []
