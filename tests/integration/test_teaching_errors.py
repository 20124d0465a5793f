"""Errors that point at the cause (issue 13), over real jobs: collective mismatches found at
finalize, messages never received, a tag mix-up in a deadlock report, object/buffer mix-ups,
``--coll`` checked before any rank starts, and a current directory that holds another
``minimpi``."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from jobhelpers import marker_args, run_minimpi

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux launcher tests")


def run(n, script, marker, *extra, timeout=40):
    return run_minimpi("-n", n, "--deadlock-timeout", "2", *marker_args(marker), *extra, script,
                       timeout=timeout)


@pytest.mark.parametrize("p", [2, 3, 4])
def test_a_wrong_root_on_one_rank_is_a_root_mismatch(write_script, job_marker, p):
    # Rank 1 broadcasts from itself, the others from rank 0: every Bcast returns (small
    # messages are sent eagerly), so only the check at finalize can tell.
    script = write_script("root.py", """
        import numpy as np
        from minimpi import MPI
        comm = MPI.COMM_WORLD
        buf = np.arange(4.0) if comm.rank == 0 else np.zeros(4)
        comm.Bcast(buf, root=1 if comm.rank == 1 else 0)
    """)
    res = run(p, script, job_marker)
    assert res.returncode == 1, res.stderr
    err = res.stderr
    # (a rank waiting for one that failed may add "world rank 2 is gone": a consequence)
    assert "CollectiveMismatchError" in err, err
    assert ("called Bcast(root=0) as collective #1 on COMM_WORLD while rank 1 called "
            "Bcast(root=1)") in err or \
           ("rank 1 called Bcast(root=1) as collective #1 on COMM_WORLD while rank 0 called "
            "Bcast(root=0)") in err, err


def test_bcast_against_reduce_is_no_longer_silent(write_script, job_marker):
    script = write_script("cross.py", """
        import numpy as np
        from minimpi import MPI
        comm = MPI.COMM_WORLD
        x = np.full(4, comm.rank + 1.0)
        if comm.rank == 0:
            comm.Bcast(x, root=0)
        else:
            comm.Reduce(x, np.zeros(4), root=0)
    """)
    res = run(3, script, job_marker)
    assert res.returncode == 1, res.stderr
    # whichever rank the launcher names first, its error names both calls
    summary = next(line for line in res.stderr.splitlines() if "exited with code 1" in line)
    assert "CollectiveMismatchError" in summary, res.stderr
    assert ("called Reduce(root=0, op=SUM) as collective #1 on COMM_WORLD while rank 0 called "
            "Bcast(root=0)") in summary or \
           ("rank 0 called Bcast(root=0) as collective #1 on COMM_WORLD while rank ") in summary \
           and "called Reduce(root=0, op=SUM)" in summary, summary


def test_unreceived_messages_are_warnings_with_their_line(write_script, job_marker):
    script = write_script("stray.py", """
        from minimpi import MPI
        comm = MPI.COMM_WORLD
        if comm.rank == 0:
            comm.send("for tag 1", dest=1, tag=2)
            req = comm.isend("never waited", dest=1, tag=9)
        else:
            comm.recv(source=0, tag=9)
        print("done")
    """)
    res = run(2, script, job_marker)
    assert res.returncode == 0, res.stderr
    err = res.stderr
    assert "[1] minimpi rank 1: warning at finalize: 1 message sent to this rank was never " \
           "received" in err
    assert "from rank 0: tag 2, a pickled object of " in err and "sent by send at stray.py:5" in err
    assert "[0] minimpi rank 0: warning at finalize: 1 nonblocking request never completed" in err
    assert "isend(dest=1, tag=9) on COMM_WORLD, started at stray.py:6" in err


def test_deadlock_report_shows_the_message_that_waits_unreceived(write_script, job_marker):
    script = write_script("tags.py", """
        from minimpi import MPI
        comm = MPI.COMM_WORLD
        if comm.rank == 0:
            comm.send("hello", dest=1, tag=2)
            comm.recv(source=1, tag=3)
        else:
            comm.recv(source=0, tag=1)
    """)
    res = run(2, script, job_marker)
    assert res.returncode == 3, res.stderr
    assert ("rank 1 waits for tag 1 from rank 0 in recv at tags.py:8; waiting unreceived at "
            "rank 1: a message with tag 2 from rank 0 (") in res.stderr, res.stderr


@pytest.mark.parametrize("code, expected, fix", [
    ("data = {}\n    comm.recv(data, source=0)",
     "recv(buf=dict, source=0) on COMM_WORLD: buf must be a writable buffer",
     "so write: data = comm.recv(source=0)"),
    ("comm.Recv([], source=0)",
     "Recv(buf=[], source=0) on COMM_WORLD: buf is a list of 0 items",
     "buf = numpy.empty(count, dtype); comm.Recv(buf, source=0)"),
    ("print(comm.recv(source=0))",
     "recv(source=0, tag=-1) on COMM_WORLD: the 32-byte message from rank 0 is not a pickled "
     "Python object, so it was sent as a buffer",
     "buf = numpy.empty(count, dtype); comm.Recv(buf, source=0)"),
    # the message is there before the receive (the express lane takes it): the same words
    ("import time; time.sleep(0.5); print(comm.recv(source=0))",
     "recv(source=0, tag=-1) on COMM_WORLD: the 32-byte message from rank 0 is not a pickled "
     "Python object, so it was sent as a buffer",
     "buf = numpy.empty(count, dtype); comm.Recv(buf, source=0)"),
])
def test_object_and_buffer_mix_ups_say_the_fix(write_script, job_marker, code, expected, fix):
    script = write_script("mixup.py", f"""
import numpy as np
from minimpi import MPI
comm = MPI.COMM_WORLD
if comm.rank == 0:
    comm.Send(np.arange(4.0), dest=1)
else:
    {code}
""")
    res = run(2, script, job_marker)
    assert res.returncode == 1, res.stderr
    assert f"rank 1: {expected}" in res.stderr and fix in res.stderr, res.stderr


@pytest.mark.parametrize("setting, expected", [
    ("allreduc=ring", "unknown collective 'allreduc'; the collectives are: allgather, "
                      "allreduce, alltoall"),
    ("allreduce=rign", "allreduce has no algorithm 'rign'; it has: binomial, "
                       "recursive_doubling, rabenseifner, ring, "),
])
def test_coll_is_checked_before_any_rank_starts(write_script, tmp_path, setting, expected):
    started = tmp_path / "started"
    script = write_script("touch.py", f"open({str(started)!r}, 'w').close()\n")
    res = run_minimpi("-n", 2, "--coll", setting, script)
    assert res.returncode == 2 and f"--coll {setting}: {expected}" in res.stderr, res.stderr
    assert res.stderr.rstrip().endswith("auto") or "collectives are" in res.stderr
    assert not started.exists()
    assert run_minimpi("-n", 2, "--coll", "AllReduce=ring", script).returncode == 0


def _console_script():
    path = os.path.join(os.path.dirname(sys.executable), "minimpi")
    if not os.access(path, os.X_OK):
        pytest.skip("the minimpi console script is not installed next to this Python")
    return path


@pytest.fixture
def clone_dir(tmp_path):
    """A directory holding a ``minimpi`` folder that is not the installed package (like a
    clone of minimpi): importing it would fail loudly."""
    fake = tmp_path / "minimpi"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('the current directory shadowed minimpi')\n")
    (tmp_path / "where.py").write_text(
        "from mpi4py import MPI\nimport minimpi\n"
        "print(MPI.COMM_WORLD.rank, minimpi.__file__)\n")
    return tmp_path


@pytest.mark.parametrize("how", [["where.py"], ["-m", "where"], ["python", "-m", "mpi4py", "where.py"]])
def test_run_from_a_directory_holding_another_minimpi(clone_dir, job_marker, how):
    cmd = [_console_script(), "run", "-n", "2", *marker_args(job_marker), *how]
    res = subprocess.run(cmd, cwd=clone_dir, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    import minimpi
    assert f"[0] 0 {minimpi.__file__}" in res.stdout, res.stdout


def test_calibrate_from_a_directory_holding_another_minimpi(clone_dir):
    res = subprocess.run([_console_script(), "explain", "--calibrate", "--quick"], cwd=clone_dir,
                         capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "alpha =" in res.stdout and "not saved" in res.stdout
