"""A program started with plain ``python`` (a singleton, no ``minimpi run``) spawns: its
first request starts its own launcher (launcher/singleton.py), which starts, watches and
ends the spawned processes as ``minimpi run -n 1`` would, and dies with the singleton.

Every process here carries the test's marker in its environment (the singleton's launcher
and the spawned processes inherit it), so ``job_marker`` checks that none is left."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from jobhelpers import MARKER_VAR, finish, leftover_processes

MANAGER = """
    import json, os, sys
    from minimpi import MPI
    import numpy as np
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")
    assert MPI.COMM_WORLD.Get_size() == 1
    comm = MPI.COMM_SELF.Spawn(sys.executable, args=[worker, "7"], maxprocs=2)
    assert comm.Get_remote_size() == 2
    n = np.array(10, dtype="i")
    comm.Bcast([n, MPI.INT], root=MPI.ROOT)
    total = np.array(0, dtype="i")
    comm.Reduce(None, [total, MPI.INT], op=MPI.SUM, root=MPI.ROOT)
    pids = comm.gather(None, root=MPI.ROOT)
    merged = comm.Merge(high=False)
    merged_rank, merged_size = merged.Get_rank(), merged.Get_size()
    ranks = merged.allgather(merged.Get_rank())
    summed = merged.allreduce(merged.Get_rank() + 1)
    merged.Free()
    comm.Disconnect()
    # one write: the launcher forwards the workers' lines to the same stdout meanwhile
    sys.stdout.write(json.dumps({"total": int(total), "pids": pids, "me": os.getpid(),
                                 "merged": [merged_rank, merged_size], "ranks": ranks,
                                 "summed": summed}) + "\\n")
    sys.stdout.flush()
"""

WORKER = """
    import os, sys
    from mpi4py import MPI          # the spawned processes get the mpi4py shim too
    import numpy as np
    parent = MPI.Comm.Get_parent()
    n = np.array(0, dtype="i")
    parent.Bcast([n, MPI.INT], root=0)
    mine = np.array(int(n) * (parent.Get_rank() + 1) + int(sys.argv[1]), dtype="i")
    parent.Reduce([mine, MPI.INT], None, op=MPI.SUM, root=0)
    parent.gather(os.getpid(), root=0)
    merged = parent.Merge(high=True)
    merged.allgather(merged.Get_rank())
    merged.allreduce(merged.Get_rank() + 1)
    merged.Free()
    print(f"worker {MPI.COMM_WORLD.Get_rank()} of {MPI.COMM_WORLD.Get_size()} done", flush=True)
    parent.Disconnect()
"""


def _start(script: str, marker: str, cwd: str) -> subprocess.Popen:
    """``python script`` - no launcher - in a session of its own, with the marker."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINIMPI_")
           or k == "MINIMPI_TEST_OWNER"}
    env[MARKER_VAR] = marker
    return subprocess.Popen([sys.executable, script], cwd=cwd, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _gone(pids, wait: float = 5.0) -> list[int]:
    """The pids of ``pids`` still running (not zombies) after up to ``wait`` seconds."""
    deadline = time.monotonic() + wait
    while True:
        alive = []
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat", "rb") as f:
                    if f.read().rsplit(b")", 1)[1].split()[0] != b"Z":
                        alive.append(pid)
            except OSError:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


def test_a_singleton_spawns_workers(write_script, job_marker, tmp_path):
    script = write_script("manager.py", MANAGER)
    write_script("worker.py", WORKER)
    res = finish(_start(script, job_marker, str(tmp_path)), timeout=60)
    assert res.returncode == 0, res.stderr
    out = json.loads([line for line in res.stdout.splitlines() if line.startswith("{")][-1])
    assert out["total"] == 10 * 1 + 7 + 10 * 2 + 7
    assert out["merged"] == [0, 3]          # high=False: the singleton comes first
    assert out["ranks"] == [0, 1, 2]
    assert out["summed"] == 1 + 2 + 3
    assert len(set(out["pids"])) == 2 and out["me"] not in out["pids"]
    # the spawned processes' output is forwarded as under `minimpi run -n 1`
    assert "[job1:0] worker 0 of 2 done" in res.stdout, res.stdout
    assert "[job1:1] worker 1 of 2 done" in res.stdout, res.stdout
    assert "minimpi:" not in res.stderr, res.stderr     # it finalized: nothing to report
    # nothing it spawned, and not its launcher, outlives it
    assert _gone(out["pids"]) == []
    assert _gone(leftover_processes(job_marker)) == []


def test_a_spawn_of_a_missing_file_names_it(write_script, job_marker, tmp_path):
    script = write_script("manager.py", """
        import sys
        from minimpi import MPI
        for name in ("no_such_worker.py", "exits_at_once.py"):
            try:
                MPI.COMM_SELF.Spawn(sys.executable, args=[name], maxprocs=2)
            except MPI.Exception as exc:
                print("refused:", exc, flush=True)
            else:
                print("started:", name, flush=True)
    """)
    write_script("exits_at_once.py", "import sys\nsys.exit(3)\n")
    res = finish(_start(script, job_marker, str(tmp_path)), timeout=60)
    assert res.returncode == 0, res.stderr
    lines = [line for line in res.stdout.splitlines() if line.startswith("refused:")]
    assert len(lines) == 2, res.stdout + res.stderr
    assert "no_such_worker.py" in lines[0] and "not found" in lines[0], lines[0]
    assert "exits_at_once.py" in lines[1] and "exited with code 3" in lines[1], lines[1]
    assert "started:" not in res.stdout
    assert _gone(leftover_processes(job_marker)) == []


def test_killing_the_singleton_ends_what_it_spawned(write_script, job_marker, tmp_path):
    pids_file = tmp_path / "pids.json"
    script = write_script("manager.py", f"""
        import json, os, sys, time
        from minimpi import MPI
        comm = MPI.COMM_SELF.Spawn(sys.executable, args=["sleeper.py"], maxprocs=2)
        pids = comm.gather(None, root=MPI.ROOT)
        with open({str(pids_file)!r} + ".tmp", "w") as f:
            json.dump(pids, f)
        os.rename({str(pids_file)!r} + ".tmp", {str(pids_file)!r})
        time.sleep(120)
    """)
    write_script("sleeper.py", """
        import os, time
        from minimpi import MPI
        MPI.Comm.Get_parent().gather(os.getpid(), root=0)
        time.sleep(120)
    """)
    proc = _start(script, job_marker, str(tmp_path))
    try:
        deadline = time.monotonic() + 60
        while not pids_file.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the singleton did not spawn: {finish(proc, 5).stderr}")
            time.sleep(0.1)
        spawned = json.loads(pids_file.read_text())
        marked = leftover_processes(job_marker)
        # the singleton, its launcher, the fork server (or not) and the two spawned ones
        assert set(spawned) <= set(marked) and len(marked) >= 4, (spawned, marked)
        os.kill(proc.pid, signal.SIGKILL)
        res = finish(proc, timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert res.returncode == -signal.SIGKILL
    assert _gone(spawned, wait=10) == []
    assert _gone(marked, wait=10) == []
    assert "ended without finalizing MPI" in res.stderr, res.stderr


def test_a_failing_spawned_process_is_named_and_later_spawns_say_why(write_script,
                                                                     job_marker, tmp_path):
    script = write_script("manager.py", """
        import sys, time
        from minimpi import MPI
        comm = MPI.COMM_SELF.Spawn(sys.executable, args=["fails.py"], maxprocs=1)
        try:
            comm.recv(source=0)
        except MPI.Exception as exc:
            print("recv:", type(exc).__name__, flush=True)
        # the peer's loss shows here as soon as its sockets close; the launcher learns of
        # the end when it reaps the process: what is refused is a spawn it gets after that
        time.sleep(1.0)
        try:
            MPI.COMM_SELF.Spawn(sys.executable, args=["fails.py"], maxprocs=1)
        except MPI.Exception as exc:
            print("refused:", exc, flush=True)
    """)
    write_script("fails.py", """
        from minimpi import MPI
        MPI.Comm.Get_parent()
        raise SystemExit(5)
    """)
    res = finish(_start(script, job_marker, str(tmp_path)), timeout=60)
    assert res.returncode == 0, res.stderr
    assert "recv: PeerLostError" in res.stdout, res.stdout + res.stderr
    assert "minimpi: spawned job 1, rank 0 (`" in res.stderr, res.stderr
    assert "fails.py`) exited with code 5" in res.stderr, res.stderr
    refused = [line for line in res.stdout.splitlines() if line.startswith("refused:")]
    assert refused and "exited with code 5" in refused[0], res.stdout
    assert _gone(leftover_processes(job_marker)) == []


def test_a_spawned_process_that_never_connected_fails_the_singletons_calls(write_script,
                                                                           job_marker,
                                                                           tmp_path):
    """Rank 1 of the spawned job exits with code 7 before it ever connects to the
    singleton: no closed connection tells the singleton, its launcher does. Before: the
    singleton's gather waited forever in the TCP poll loop (5 of 5 runs)."""
    script = write_script("manager.py", """
        import sys, time
        from minimpi import MPI
        comm = MPI.COMM_SELF.Spawn(sys.executable, args=["child.py"], maxprocs=3)
        for what, call in (("gather", lambda: comm.gather(None, root=MPI.ROOT)),
                           ("send", lambda: comm.send("x", dest=1)),
                           ("recv", lambda: comm.recv(source=2))):
            start = time.monotonic()
            try:
                call()
            except MPI.Exception as exc:
                print(f"{what}: {type(exc).__name__} after {time.monotonic() - start:.1f} s:"
                      f" {exc}", flush=True)
            else:
                print(f"{what}: returned", flush=True)
    """)
    write_script("child.py", """
        import os, sys, time
        from minimpi import MPI
        parent = MPI.Comm.Get_parent()
        if parent.Get_rank() == 1:
            sys.exit(7)
        parent.gather(os.getpid(), root=0)
        time.sleep(60)              # ended by the launcher once rank 1 failed
    """)
    res = finish(_start(script, job_marker, str(tmp_path)), timeout=60)
    assert res.returncode == 0, res.stderr
    lines = {line.split(":", 1)[0]: line for line in res.stdout.splitlines()
             if line.split(":", 1)[0] in ("gather", "send", "recv")}
    assert set(lines) == {"gather", "send", "recv"}, res.stdout + res.stderr
    for what in ("gather", "send"):      # they need rank 1: the error names it and its end
        assert "PeerLostError" in lines[what], lines[what]
        assert "rank 1 of job 1" in lines[what], lines[what]
        assert "spawned job 1, rank 1 (`" in lines[what], lines[what]
        assert "child.py`) exited with code 7" in lines[what], lines[what]
    # rank 2 was ended by the launcher after rank 1 failed: a later call with it fails too
    assert "recv: PeerLostError" in lines["recv"] and "rank 2 of job 1" in lines["recv"], \
        lines["recv"]
    assert "minimpi: spawned job 1, rank 1 (`" in res.stderr, res.stderr
    assert _gone(leftover_processes(job_marker)) == []
