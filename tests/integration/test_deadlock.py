"""Deadlock diagnosis and collective mismatch over real processes (``minimpi run``).

Small timeouts (``--deadlock-timeout 1``), hard test timeouts, and a leftover-process check
after every job (the ``job_marker`` fixture).
"""
from __future__ import annotations

import re
import sys

import pytest
from jobhelpers import marker_args, run_minimpi

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux launcher tests")

EXIT_DEADLOCK = 3


def run(n, script, marker, *extra, timeout=30):
    return run_minimpi("-n", n, "--deadlock-timeout", "1", *marker_args(marker), *extra, script,
                       timeout=timeout)


def test_recv_recv_deadlock(write_script, job_marker):
    script = write_script("ring.py", """
        from minimpi import MPI
        comm = MPI.COMM_WORLD
        other = 1 - comm.rank
        x = comm.recv(source=other, tag=7)
        comm.send(x, dest=other, tag=7)
    """)
    res = run(2, script, job_marker)
    assert res.returncode == EXIT_DEADLOCK, res.stderr
    err = res.stderr
    assert "minimpi: deadlock:" in err
    assert "rank 0: blocked in recv(source=1, tag=7) on COMM_WORLD at ring.py:5" in err
    assert "rank 1: blocked in recv(source=0, tag=7) on COMM_WORLD at ring.py:5" in err
    assert ("wait-for cycle: rank 0 waits for rank 1 in recv(tag=7) at ring.py:5 -> "
            "rank 1 waits for rank 0 in recv(tag=7) at ring.py:5 -> rank 0") in err
    assert err.count("minimpi: deadlock:") == 1


def test_unsafe_large_send_send(write_script, job_marker):
    script = write_script("unsafe.py", """
        import numpy as np
        from minimpi import MPI
        comm = MPI.COMM_WORLD
        other = 1 - comm.rank
        a = np.zeros(2 * 1024 * 1024)          # 16 MiB, far above the 64 KiB eager limit
        b = np.empty_like(a)
        comm.Send(a, dest=other, tag=1)
        comm.Recv(b, source=other, tag=1)
    """)
    res = run(2, script, job_marker)
    assert res.returncode == EXIT_DEADLOCK, res.stderr
    err = res.stderr
    for r in (0, 1):
        assert re.search(rf"rank {r}: blocked in Send\(dest={1 - r}, tag=1\) on COMM_WORLD: "
                         rf"Send\(dest={1 - r}\) of 16 MiB waits for its matching receive "
                         r"\(messages above the eager limit of 64 KiB use rendezvous, as in "
                         r"MPI\); fix: use Sendrecv, or Isend/Irecv \+ Waitall at unsafe.py:8", err), err
    assert "wait-for cycle: rank 0 waits for rank 1 in Send(dest=1, tag=1) of 16 MiB" in err


def test_three_rank_cycle(write_script, job_marker):
    script = write_script("cycle3.py", """
        from minimpi import MPI
        comm = MPI.COMM_WORLD
        r, p = comm.rank, comm.size

        def step():
            return comm.recv(source=(r + 1) % p, tag=3)

        step()
    """)
    res = run(3, script, job_marker)
    assert res.returncode == EXIT_DEADLOCK, res.stderr
    assert ("rank 0 waits for rank 1 in recv(tag=3) at cycle3.py:7 -> rank 1 waits for rank 2 "
            "in recv(tag=3) at cycle3.py:7 -> rank 2 waits for rank 0 in recv(tag=3) at "
            "cycle3.py:7 -> rank 0") in res.stderr


def test_waiting_for_a_finished_rank(write_script, job_marker):
    script = write_script("early.py", """
        from minimpi import MPI
        comm = MPI.COMM_WORLD
        if comm.rank == 0:
            comm.recv(source=MPI.ANY_SOURCE, tag=5)
    """)
    res = run(3, script, job_marker)
    assert res.returncode == EXIT_DEADLOCK, res.stderr
    err = res.stderr
    assert "rank 0: blocked in recv(source=ANY_SOURCE, tag=5) on COMM_WORLD at early.py:5" in err
    # ranks 1 and 2 waited for rank 0 in finalize (half the deadlock timeout), then left
    assert "rank 1: already exited normally" in err
    assert ("rank 0 waits for any of ranks 1, 2 in recv(tag=5) at early.py:5 -> ranks 1, 2 "
            "already finished; that message can never come from them") in err


def test_waiting_for_a_finished_rank_by_name(write_script, job_marker):
    # Without a connection from rank 1 (TCP, no start-up connections), only the coordinator
    # knows that rank 1 is gone: the deadlock report says so.
    script = write_script("early1.py", """
        from minimpi import MPI
        comm = MPI.COMM_WORLD
        if comm.rank == 0:
            comm.recv(source=1, tag=5)
    """)
    res = run(2, script, job_marker, "-x", "MINIMPI_CONNECT_ALL_MAX=0", "--transport", "tcp")
    assert res.returncode == EXIT_DEADLOCK, res.stderr
    assert ("rank 0 waits for rank 1 in recv(tag=5) at early1.py:5 -> rank 1 already exited "
            "normally") in res.stderr
    # Over shared memory a rank sees its peer exit (a pidfd): the receive fails at once with
    # PeerLostError, and the launcher names the rank that left early instead of a deadlock.
    res = run(2, script, job_marker, "--transport", "shm")
    assert res.returncode == 1, res.stderr
    assert "rank 1 exited with code 0 while rank(s) 0 still expected messages from it" \
        in res.stderr
    assert "rank(s) 0 lost a peer (PeerLostError)" in res.stderr


def test_no_false_alarm_for_a_computing_rank(write_script, job_marker):
    script = write_script("slow.py", """
        import time
        from minimpi import MPI
        comm = MPI.COMM_WORLD
        if comm.rank == 0:
            time.sleep(3)                 # computing for 3x the deadlock timeout
            comm.send("done", dest=1)
            comm.send("again", dest=2)
        else:
            print(comm.recv(source=0))
    """)
    res = run(3, script, job_marker)
    assert res.returncode == 0, res.stderr
    assert "deadlock" not in res.stderr
    assert "[1] done" in res.stdout and "[2] again" in res.stdout


def test_no_false_alarm_after_a_long_wait_ends(write_script, job_marker):
    # rank 1 is blocked (reported), then its wait ends and it computes while rank 0 waits
    script = write_script("pingpong.py", """
        import time
        from minimpi import MPI
        comm = MPI.COMM_WORLD
        if comm.rank == 0:
            time.sleep(1.5)
            comm.send(1, dest=1)
            print(comm.recv(source=1))
        else:
            x = comm.recv(source=0)
            time.sleep(2.5)
            comm.send(x + 1, dest=0)
    """)
    res = run(2, script, job_marker)
    assert res.returncode == 0, res.stderr
    assert "[0] 2" in res.stdout


def test_collective_step_in_report(write_script, job_marker):
    script = write_script("roots.py", """
        import numpy as np
        from minimpi import MPI
        comm = MPI.COMM_WORLD
        a = np.zeros(10)
        comm.Bcast(a, root=0, algorithm="binomial")
        comm.Bcast(a, root=1 - comm.rank, algorithm="binomial")   # both wait for the other
    """)
    res = run(2, script, job_marker)
    assert res.returncode == EXIT_DEADLOCK, res.stderr
    err = res.stderr
    assert ("rank 0: blocked in Bcast[binomial] on COMM_WORLD (step 1: waiting for rank 1) - "
            "collective #2: Bcast(root=1) at roots.py:7") in err
    assert "collective mismatch on COMM_WORLD: rank 1 is in Bcast(root=0) as collective #2" in err


def test_deadlock_timeout_zero_disables(write_script, job_marker):
    script = write_script("ring0.py", """
        from minimpi import MPI
        comm = MPI.COMM_WORLD
        comm.recv(source=1 - comm.rank, tag=7)
    """)
    res = run_minimpi("-n", 2, "--deadlock-timeout", "0", "--timeout", "3",
                      *marker_args(job_marker), script, timeout=30)
    assert res.returncode == 124, res.stderr
    assert "deadlock" not in res.stderr
    # the job-timeout report uses the same per-rank states
    assert "rank 0: blocked in recv(source=1, tag=7) on COMM_WORLD at ring0.py:4" in res.stderr


def test_help_documents_exit_code():
    res = run_minimpi("--help", timeout=20)
    assert "--deadlock-timeout" in res.stdout
    assert "3 when a deadlock was detected" in res.stdout


def test_collective_mismatch_real_processes(write_script, job_marker):
    script = write_script("mismatch.py", """
        import numpy as np
        from minimpi import MPI
        comm = MPI.COMM_WORLD
        a = np.arange(8.0)
        comm.Bcast(a, root=0)
        comm.Barrier()
        if comm.rank == 2:
            comm.Reduce(a, None, op=MPI.SUM, root=0)
        else:
            comm.Bcast(a, root=0)
    """)
    res = run(4, script, job_marker)
    assert res.returncode not in (0, EXIT_DEADLOCK), res.stderr
    # Over shared memory the calls meet in the communicator's segment, where a Bcast root and
    # a Reduce sender both return without waiting for anyone: the mismatch is then found at
    # finalize (over messages, in the call) - named alike either way, by whichever rank
    # reaches its check first (the launcher may end the others before they print theirs).
    assert re.search(r"CollectiveMismatchError: (rank \d at finalize: )?collective mismatch: "
                     r"rank (2 called Reduce\(root=0, op=SUM\) as collective #3 on COMM_WORLD "
                     r"while rank \d called Bcast\(root=0\)|\d called Bcast\(root=0\) as "
                     r"collective #3 on COMM_WORLD while rank 2 called Reduce\(root=0, op=SUM\))",
                     res.stderr), res.stderr
    over_tcp = run(4, script, job_marker, "--transport", "tcp")       # messages: in the call
    assert ("CollectiveMismatchError: collective mismatch: rank 2 called Reduce(root=0, op=SUM) "
            "as collective #3 on COMM_WORLD while rank 0 called Bcast(root=0)"
            in over_tcp.stderr), over_tcp.stderr
