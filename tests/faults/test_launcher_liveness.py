"""The launcher never freezes: a slow or gone reader of its output, a launcher that was
itself stopped (Ctrl-Z), a line without end, a rank in one long call that holds the GIL.

Each test runs real jobs through ``minimpi run`` with small timeouts; the launcher's stdout
and stderr are read by threads that note when each line came, so a test can say "the
failure was reported within N s while nobody read stdout".
"""
from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import pytest
from jobhelpers import MINIMPI, _kill_group, marker_args

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


class Launcher:
    """``minimpi run ARGS`` in its own session; stderr is read as it comes (with times),
    stdout only when the test says so (``read_stdout``), so that it can play a stalled
    reader. Always ends the job's process group in :meth:`close`."""

    def __init__(self, *args, stdout=subprocess.PIPE) -> None:
        self.started = time.monotonic()
        self.proc = subprocess.Popen([*MINIMPI, "run", *map(str, args)],
                                     stdin=subprocess.DEVNULL, stdout=stdout,
                                     stderr=subprocess.PIPE, start_new_session=True)
        self.err: list[tuple[float, str]] = []
        self.out = bytearray()
        self._err_thread = threading.Thread(target=self._read_err, daemon=True)
        self._err_thread.start()
        self._out_thread: threading.Thread | None = None

    def _read_err(self) -> None:
        for raw in self.proc.stderr:
            self.err.append((time.monotonic() - self.started, raw.decode(errors="replace")))

    def read_stdout(self) -> None:
        def pump():
            while True:
                data = self.proc.stdout.read1(1 << 16)
                if not data:
                    return
                self.out += data
        self._out_thread = threading.Thread(target=pump, daemon=True)
        self._out_thread.start()

    def wait_err(self, text: str, timeout: float) -> float | None:
        """Seconds after the start at which a stderr line containing ``text`` came."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for when, line in list(self.err):
                if text in line:
                    return when
            time.sleep(0.05)
        return None

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the launcher did not end within {timeout} s\n{self.stderr()}")

    def stderr(self) -> str:
        return "".join(line for _, line in self.err)

    def close(self) -> None:
        _kill_group(self.proc)
        self.proc.wait()
        self._err_thread.join(5)
        if self._out_thread is not None:
            self._out_thread.join(5)


@pytest.fixture
def launchers():
    started: list[Launcher] = []

    def start(*args, **kwargs) -> Launcher:
        job = Launcher(*args, **kwargs)
        started.append(job)
        return job
    yield start
    for job in started:
        job.close()


CHATTY = """
    import os, sys, time
    from mpi4py import MPI
    rank = MPI.COMM_WORLD.Get_rank()
    if rank == 1 and sys.argv[1] == "exit":
        time.sleep(1)
        os._exit(3)
    if rank == 0:
        print("flooding", file=sys.stderr, flush=True)
        time.sleep(0.5)
        for i in range(300000):          # ~17 MB: more than pipes and the launcher hold
            print("line", i, "x" * 50)
    time.sleep(60)
"""


@pytest.mark.parametrize("how,hosts", [("exit", []), ("timeout", []),
                                       ("exit", ["--hosts", "localhost:2"])],
                         ids=["exit", "timeout", "exit-through-an-agent"])
def test_a_stalled_stdout_reader_does_not_stop_failure_detection(how, hosts, launchers,
                                                                  write_script, job_marker):
    # minimpi run -n 2 --timeout T prog.py | (sleep 30; wc -c): the launcher used to sit in
    # a blocking write, so rank 1's exit was lost and --timeout came 30 s late (exit 124);
    # through an agent, the ranks' exits share the agent's stream with their output
    prog = write_script("chatty.py", CHATTY)
    job = launchers("-n", 2, *hosts, "--timeout", 8 if how == "exit" else 5,
                    *marker_args(job_marker), prog, how)
    summary = ("minimpi: rank 1 exited with code 3" if how == "exit"
               else "minimpi: job timed out after 5 s")
    when = job.wait_err(summary, timeout=25)
    assert when is not None, f"no {summary!r} on stderr while stdout was not read\n{job.stderr()}"
    assert job.proc.poll() is None or job.proc.returncode == (3 if how == "exit" else 124)
    job.read_stdout()   # the reader wakes up: everything the ranks wrote arrives, then the end
    assert job.wait(30) == (3 if how == "exit" else 124), job.stderr()
    lines = bytes(job.out).splitlines()[:-1]   # (the last one may be cut by the SIGTERM)
    assert len(lines) > 1000
    assert all(ln.startswith(b"[0] line ") and ln.endswith(b"x" * 50)
               for ln in lines), "a line was cut or mixed up"
    assert [int(ln.split()[2]) for ln in lines] == list(range(len(lines)))


def test_sigterm_ends_the_job_while_nobody_reads_stdout(launchers, write_script, job_marker):
    prog = write_script("chatty.py", CHATTY)
    job = launchers("-n", 2, "--timeout", 60, *marker_args(job_marker), prog, "run")
    assert job.wait_err("flooding", timeout=25) is not None, job.stderr()
    time.sleep(3.0)   # rank 0 fills the pipes and the launcher's queue
    sent = time.monotonic()
    job.proc.send_signal(signal.SIGTERM)
    rc = job.wait(15)   # stdout is never read: the launcher gives up its queue and ends
    assert rc == 143, job.stderr()
    assert time.monotonic() - sent < 10
    assert "minimpi: received SIGTERM" in job.stderr()


IDLE = """
    import time
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    comm.Barrier()
    print("ready", flush=True)
    time.sleep(6)
    comm.Barrier()
    print("done", comm.Get_rank(), flush=True)
"""


@pytest.mark.parametrize("attempt", range(2))
def test_a_launcher_stopped_longer_than_the_heartbeat_timeout_blames_no_rank(
        attempt, launchers, write_script, job_marker):
    # Ctrl-Z of the launcher for longer than --heartbeat-timeout, then fg: the ranks kept
    # sending heartbeats, the launcher was the one not listening
    prog = write_script("idle.py", IDLE)
    job = launchers("-n", 3, "--heartbeat-timeout", 2, "--timeout", 40,
                    *marker_args(job_marker), prog)
    job.read_stdout()
    deadline = time.monotonic() + 25
    while b"ready" not in job.out and time.monotonic() < deadline:
        time.sleep(0.05)
    assert b"ready" in job.out, job.stderr()
    job.proc.send_signal(signal.SIGSTOP)
    time.sleep(4.5)
    job.proc.send_signal(signal.SIGCONT)
    assert job.wait(30) == 0, job.stderr()
    assert job.out.count(b"done") == 3


def test_a_line_without_newline_is_cut_into_lines_in_linear_time(launchers, write_script,
                                                                  job_marker):
    prog = write_script("long.py", """
        import sys
        from mpi4py import MPI
        if MPI.COMM_WORLD.Get_rank() == 0:
            chunk = "y" * (1 << 20)
            for _ in range(40):
                sys.stdout.write(chunk)
            sys.stdout.write("\\nend\\n")
    """)
    job = launchers("-n", 2, "--timeout", 60, *marker_args(job_marker), prog)
    job.read_stdout()
    rc = job.wait(90)   # the old launcher took minutes and hundreds of MB on this
    assert rc == 0, job.stderr()
    lines = bytes(job.out).split(b"\n")
    assert lines[-2:] == [b"[0] end", b""]
    body = lines[:-2]
    # cut at 64 KiB as a terminal wraps a long line, each piece a prefixed line of its own
    assert len(body) == 40 * (1 << 20) // 65536
    assert all(ln == b"[0] " + b"y" * 65536 for ln in body)


def test_a_reader_that_goes_away_ends_the_job_with_141(launchers, write_script, job_marker):
    # minimpi run ... | head -1: as in a shell pipeline, SIGPIPE/EPIPE ends the job
    prog = write_script("ticker.py", """
        import time
        from mpi4py import MPI
        rank = MPI.COMM_WORLD.Get_rank()
        for i in range(150):
            print(rank, i, flush=True)
            time.sleep(0.2)
    """)
    job = launchers("-n", 3, "--timeout", 60, *marker_args(job_marker), prog)
    first = job.proc.stdout.readline()
    assert first.startswith(b"["), job.stderr()
    job.proc.stdout.close()   # like head -1 exiting after its line
    closed = time.monotonic()
    rc = job.wait(20)
    assert rc == 141, job.stderr()
    assert time.monotonic() - closed < 10
    assert "stdout was closed by its reader" in job.stderr()


def test_a_long_call_holding_the_gil_is_not_taken_for_a_hang(launchers, write_script,
                                                             job_marker):
    # sorted() of millions of floats holds the GIL for seconds: the heartbeat thread cannot
    # send, but the process is running, so the job must not be ended
    prog = write_script("sort.py", """
        import random, time
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        comm.Barrier()
        if comm.Get_rank() == 0:
            xs = [random.random() for _ in range(4_000_000)]
            t = time.monotonic()
            xs = sorted(xs)
            print("sorted for", round(time.monotonic() - t, 1), "s", flush=True)
        comm.Barrier()
    """)
    job = launchers("-n", 2, "--heartbeat-timeout", 1, "--timeout", 90,
                    *marker_args(job_marker), prog)
    job.read_stdout()
    assert job.wait(120) == 0, job.stderr()
    took = float(bytes(job.out).split(b"sorted for ")[1].split()[0])
    if took < 1.5:
        pytest.skip(f"the sort took only {took} s here: no longer than the heartbeat timeout")


def test_a_rank_hung_holding_the_gil_is_ended_with_what_to_do(launchers, write_script,
                                                              job_marker):
    # a C call that blocks with the GIL held (ctypes.PyDLL keeps it): silent and not running
    prog = write_script("hang.py", """
        import ctypes
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        comm.Barrier()
        if comm.Get_rank() == 1:
            ctypes.PyDLL(None).sleep(60)
        comm.Barrier()
    """)
    job = launchers("-n", 2, "--heartbeat-timeout", 2, "--timeout", 40,
                    *marker_args(job_marker), prog)
    assert job.wait(40) == 124, job.stderr()
    first = next(line for _, line in job.err if line.startswith("minimpi: "))
    assert "rank 1 sent no heartbeat" in first
    assert "holds Python's GIL" in first and "raise --heartbeat-timeout" in first, first
