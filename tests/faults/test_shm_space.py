"""A /dev/shm too small for the job is a clear error naming its free space, never a SIGBUS.

Every page of an inbox is reserved (posix_fallocate) before it is touched: the control page
at creation, each ring by its reader and by its writer before either reads or writes it.
Before, the control page was written first and a peer's ring could be touched before it was
reserved: in a full /dev/shm the rank died of SIGBUS (exit 135) without a word."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

SCRIPT = textwrap.dedent("""
    import os, sys
    from minimpi.errors import TransportError
    from minimpi.transports.shm import ShmTransport

    directory, size, ring = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    job = "space" + os.urandom(4).hex()
    ts = []
    try:
        ts = [ShmTransport(r, size, job, directory=directory, ring=ring) for r in range(size)]
        addresses = [t.listen() for t in ts]
        for t in ts:
            t.set_peers(addresses)
        print("fitted")
    except TransportError as exc:
        print("ERROR", exc)
    finally:
        for t in ts:
            t.close()
""")


@pytest.fixture(params=["short", "long"])
def small_shm(tmp_path, request):
    # "long": a directory whose wake-up socket paths are too long for AF_UNIX, so the ranks
    # bind abstract names instead (they made the directory anyway, and it was left behind)
    where = tmp_path / ("shm" if request.param == "short" else "shm-" + "x" * 100)
    where.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=1777", "tmpfs", str(where)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    yield str(where)
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


def test_a_full_shared_memory_directory_is_an_error_not_sigbus(small_shm):
    res = subprocess.run([sys.executable, "-c", SCRIPT, small_shm, "8", str(64 * 1024)],
                         capture_output=True, text=True, timeout=60)
    out = res.stdout + res.stderr
    assert res.returncode == 0, f"exit {res.returncode} (135 = SIGBUS): {out}"
    assert "ERROR" in res.stdout and "MiB free" in res.stdout, out
    assert "--transport tcp" in res.stdout, out
    assert os.listdir(small_shm) == [], "segments left behind"


def test_creating_an_inbox_in_a_full_directory_is_an_error_not_sigbus(small_shm):
    # fill it: creating the (sparse) inbox file still works, its first write cannot
    with open(os.path.join(small_shm, "filler"), "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    res = subprocess.run([sys.executable, "-c", SCRIPT, small_shm, "2", "4096"],
                         capture_output=True, text=True, timeout=60)
    out = res.stdout + res.stderr
    assert res.returncode == 0, f"exit {res.returncode} (135 or -7 = SIGBUS): {out}"
    assert "ERROR" in res.stdout and "cannot create its shared-memory inbox" in res.stdout, out
    assert os.listdir(small_shm) == ["filler"], "segments left behind"


def test_a_job_that_fits_still_runs(small_shm):
    res = subprocess.run([sys.executable, "-c", SCRIPT, small_shm, "3", "4096"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "fitted" in res.stdout, res.stdout + res.stderr


def test_rings_shrink_so_a_host_full_of_ranks_fits_a_small_dev_shm(tmp_path):
    """Docker's 64 MiB /dev/shm: 32 ranks with the default 256 KiB rings need 248 MiB."""
    from minimpi.transports.shm import RING_CTL, ring_bytes, ring_for_space

    class FakeStat:
        f_frsize = 4096
        f_bavail = 64 * 1024 * 1024 // 4096

    import minimpi.transports.shm as shm
    real = shm.os.statvfs
    shm.os.statvfs = lambda path: FakeStat()
    try:
        for n in (20, 32):
            ring = ring_for_space(n, "/dev/shm")
            assert ring is not None and ring < ring_bytes(n)
            assert ring & (ring - 1) == 0
            assert n * (n - 1) * (ring + RING_CTL) <= 32 * 1024 * 1024   # half the space
        assert ring_for_space(2, "/dev/shm") is None      # the default fits: left alone
    finally:
        shm.os.statvfs = real


def test_the_launcher_passes_the_shrunk_ring_to_every_rank():
    import argparse

    from minimpi.launcher import run as run_cmd

    import minimpi.transports.shm as shm

    def parsed(argv):
        parser = argparse.ArgumentParser()
        run_cmd.add_arguments(parser)
        return parser.parse_known_args(argv)[0]

    class FakeStat:
        f_frsize = 4096
        f_bavail = 64 * 1024 * 1024 // 4096

    real = shm.os.statvfs
    shm.os.statvfs = lambda path: FakeStat()
    try:
        env = run_cmd.extra_env(parsed(["-n", "32", "prog.py"]))
        assert int(env["MINIMPI_SHM_RING"]) == shm.ring_for_space(32)
        env = run_cmd.extra_env(parsed(["-n", "32", "--transport", "tcp", "prog.py"]))
        assert "MINIMPI_SHM_RING" not in env
    finally:
        shm.os.statvfs = real
