"""Many processes at once: the launcher never blocks on its fork server, obeys SIGTERM in
every state, and refuses at once a spawn it cannot serve - with real jobs, real processes.

Before (issue 29): ``Spawn(maxprocs=1000)`` left the launcher and the fork server each
blocked writing to the other (``socket.send_fds`` ignored MSG_DONTWAIT), 280 children
started, and SIGTERM did nothing; 400 children that exit at once hit it on a 2-core machine.
"""
from __future__ import annotations

import os
import resource
import signal
import subprocess
import time

import pytest
from jobhelpers import MINIMPI, finish, leftover_processes, marker_args

PARENT = r'''
import sys, time
from mpi4py import MPI
n, program = int(sys.argv[1]), sys.argv[2]
start = time.monotonic()
try:
    comm = MPI.COMM_SELF.Spawn(sys.executable, args=[program], maxprocs=n)
except MPI.Exception as exc:
    assert exc.Get_error_class() == MPI.ERR_SPAWN, exc
    print(f"refused after {time.monotonic() - start:.1f} s: {exc}", flush=True)
else:
    limits = comm.gather(None, root=MPI.ROOT)
    comm.Disconnect()
    print(f"joined {len(limits)} after {time.monotonic() - start:.1f} s, soft limits "
          f"{sorted(set(limits))}", flush=True)
'''

#: ends before it initializes MPI: every spawn of it is refused
QUICK = "import sys\nsys.exit(0)\n"
#: stays a while before it initializes MPI: its spawn is still being served
SLEEPY = "import time\ntime.sleep(60)\nfrom mpi4py import MPI\nMPI.Comm.Get_parent()\n"
#: joins its parents and tells them its soft descriptor limit
JOINER = r'''
import resource
from mpi4py import MPI
parent = MPI.Comm.Get_parent()
parent.gather(resource.getrlimit(resource.RLIMIT_NOFILE)[0], root=0)
parent.Disconnect()
'''


def _launch(args: list, marker: str, nofile: tuple[int, int] | None = None
            ) -> subprocess.Popen:
    """``minimpi run ARGS`` in a session of its own (``nofile``: its RLIMIT_NOFILE)."""
    def limit() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, nofile)
    return subprocess.Popen([*MINIMPI, "run", *marker_args(marker), *map(str, args)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=limit)


def _wait_for_processes(marker: str, count: int, proc: subprocess.Popen,
                        timeout: float = 60.0) -> int:
    """Wait until ``count`` processes carry ``marker``; returns how many do."""
    deadline = time.monotonic() + timeout
    while True:
        found = len(leftover_processes(marker))
        if found >= count:
            return found
        if proc.poll() is not None or time.monotonic() > deadline:
            res = finish(proc, 5)
            pytest.fail(f"only {found} of {count} processes started: {res.stderr[-2000:]}")
        time.sleep(0.1)


def _sigterm(proc: subprocess.Popen, marker: str, within: float) -> subprocess.CompletedProcess:
    """SIGTERM to the launcher: it must end within ``within`` seconds, with nothing left."""
    os.kill(proc.pid, signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=within)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        for pid in leftover_processes(marker):
            os.kill(pid, signal.SIGKILL)
        pytest.fail(f"the launcher did not end within {within:g} s of SIGTERM (SIGKILL "
                    f"ended it)\n{err[-2000:]}")
    res = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    deadline = time.monotonic() + 5
    while leftover_processes(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert leftover_processes(marker) == [], "processes left 5 s after the launcher ended"
    return res


def test_a_spawn_storm_is_refused_at_once_and_leaves_nothing(write_script, job_marker):
    """400 spawned processes that each end before initializing MPI: the launcher sees the
    first end while it still starts the others, stops, and refuses the spawn naming it."""
    parent = write_script("parent.py", PARENT)
    quick = write_script("quick.py", QUICK)
    res = finish(_launch(["-n", 1, "--timeout", 120, parent, 400, quick], job_marker),
                 timeout=150)
    assert res.returncode == 0, res.stderr[-3000:]
    line = next((ln for ln in res.stdout.splitlines() if "refused after" in ln), None)
    assert line is not None, res.stdout[-2000:] + res.stderr[-2000:]
    assert "quick.py" in line and "exited with code 0 before it initialized MPI" in line, line
    assert float(line.split("refused after ")[1].split(" s")[0]) < 60, line
    assert leftover_processes(job_marker) == []


def test_sigterm_to_the_launcher_mid_spawn_ends_everything(write_script, job_marker):
    """SIGTERM while the launcher starts 700 spawned processes (about 100 running)."""
    parent = write_script("parent.py", PARENT)
    sleepy = write_script("sleepy.py", SLEEPY)
    proc = _launch(["-n", 1, parent, 700, sleepy], job_marker)
    _wait_for_processes(job_marker, 100, proc)
    res = _sigterm(proc, job_marker, within=10.0)
    assert res.returncode == 128 + signal.SIGTERM, res.stderr[-2000:]
    assert "minimpi: received SIGTERM" in res.stderr, res.stderr[-2000:]


def test_sigterm_to_the_launcher_during_start_up_ends_everything(write_script, job_marker):
    """SIGTERM while the launcher starts the job's own 400 ranks (about 60 running)."""
    sleepy = write_script("sleepy.py", SLEEPY)
    proc = _launch(["-n", 400, sleepy], job_marker)
    _wait_for_processes(job_marker, 60, proc)
    res = _sigterm(proc, job_marker, within=10.0)
    assert res.returncode == 128 + signal.SIGTERM, res.stderr[-2000:]
    assert "minimpi: received SIGTERM" in res.stderr, res.stderr[-2000:]


def test_a_spawn_beyond_the_descriptor_limit_is_refused_naming_it(write_script, job_marker):
    """RLIMIT_NOFILE 256 (soft and hard): 100 processes need about 480 descriptors in the
    launcher; refused at once, naming the command, the count and the limit."""
    parent = write_script("parent.py", PARENT)
    joiner = write_script("joiner.py", JOINER)
    res = finish(_launch(["-n", 1, "--timeout", 60, parent, 100, joiner], job_marker,
                         nofile=(256, 256)), timeout=90)
    assert res.returncode == 0, res.stderr[-3000:]
    line = next((ln for ln in res.stdout.splitlines() if "refused after" in ln), None)
    assert line is not None, res.stdout[-2000:] + res.stderr[-2000:]
    assert "cannot start 100 process(es) of" in line and "joiner.py" in line, line
    assert "RLIMIT_NOFILE: soft 256, hard 256" in line and "ulimit -n" in line, line
    assert float(line.split("refused after ")[1].split(" s")[0]) < 5, line
    assert "joined" not in res.stdout


def test_a_spawn_beyond_the_soft_descriptor_limit_raises_it(write_script, job_marker):
    """Soft limit 128, hard limit higher: the launcher raises its own soft limit for a spawn
    that needs it (before: it ran out of descriptors and hung); the spawned processes keep
    the soft limit the job was started with."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 1024:
        pytest.skip(f"the hard descriptor limit here is {hard}")
    parent = write_script("parent.py", PARENT)
    joiner = write_script("joiner.py", JOINER)
    res = finish(_launch(["-n", 1, "--timeout", 90, parent, 30, joiner], job_marker,
                         nofile=(128, hard)), timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "[0] joined 30 after" in res.stdout, res.stdout[-2000:] + res.stderr[-2000:]
    assert "soft limits [128]" in res.stdout, res.stdout

