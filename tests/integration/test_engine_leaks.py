"""Leaks and false warnings (issue 17, section 4), over real jobs: many nonblocking requests
in flight are not reported as never completed once waited, and Dup/Split/Free keeps a
rank's memory flat."""
from __future__ import annotations

import sys

import pytest
from jobhelpers import marker_args, run_minimpi

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux launcher tests")


def test_thousands_of_requests_in_flight_are_not_reported_once_waited(write_script, job_marker):
    script = write_script("many.py", """
        import numpy as np
        from minimpi import MPI
        comm = MPI.COMM_WORLD
        n = 1500
        right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
        bufs = [np.zeros(1) for _ in range(n)]
        reqs = [comm.Irecv(bufs[i], source=left, tag=i) for i in range(n)]
        reqs += [comm.Isend(np.full(1, float(i)), dest=right, tag=i) for i in range(n)]
        MPI.Request.Waitall(reqs)
        assert [b[0] for b in bufs] == [float(i) for i in range(n)]
        open_ = [comm.isend(i, dest=right, tag=10_000 + i) for i in range(3)]
        got = [comm.recv(source=left, tag=10_000 + i) for i in range(3)]
        print("done", got)
    """)
    res = run_minimpi("-n", "3", *marker_args(job_marker), script, timeout=90)
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("done [0, 1, 2]") == 3, res.stdout
    # the three isend requests left open are reported, with their line, and nothing else
    assert res.stderr.count("3 nonblocking requests never completed") == 3, res.stderr
    assert "not recorded" not in res.stderr, res.stderr


def test_dup_split_free_keeps_memory_flat(write_script, job_marker):
    script = write_script("churn.py", """
        import numpy as np
        from minimpi import MPI
        comm = MPI.COMM_WORLD

        def rss_kib():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * 4

        def churn(n):
            for i in range(n):
                dup = comm.Dup()
                dup.Barrier()
                dup.Free()
                part = comm.Split(i % 2, comm.rank)
                part.Allreduce(np.ones(1), np.zeros(1))
                part.Free()

        churn(300)
        start = rss_kib()
        churn(2000)
        print(f"growth {rss_kib() - start} KiB")
    """)
    res = run_minimpi("-n", "3", *marker_args(job_marker), script, timeout=240)
    assert res.returncode == 0, res.stderr
    growth = [int(line.split()[-2]) for line in res.stdout.splitlines() if "growth" in line]
    assert len(growth) == 3, res.stdout
    # the communicators' bookkeeping kept forever was ~6 KiB per Dup/Split/Free pair
    assert max(growth) < 3 * 1024, res.stdout
