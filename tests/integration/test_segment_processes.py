"""Collectives that meet in one shared segment, between real processes on one host: every
segment algorithm at non-power-of-two sizes against numpy, the fused repeats, the segment's
file gone once every rank mapped it, and a rank dying while the others wait in the segment
(the job ends naming it; nothing is left)."""
from __future__ import annotations

import pytest
from jobhelpers import marker_args, run_minimpi

EVERY = """
    import glob
    import numpy as np
    from minimpi import MPI
    comm = MPI.COMM_WORLD
    p, r = comm.size, comm.rank
    for alg in ("segment", None):
        for i in range(20):
            root = i % p
            x = np.zeros(1); comm.Allreduce(np.array([r + i], dtype=float), x, algorithm=alg)
            assert x[0] == sum(range(p)) + p * i, x
            m = np.empty(5000); comm.Allreduce(np.full(5000, float(r)), m, op=MPI.MAX, algorithm=alg)
            assert (m == p - 1).all()
            b = np.full(3, r + i if r == root else -1, dtype=np.int64)
            comm.Bcast(b, root=root, algorithm=alg)
            assert (b == root + i).all(), b
            red = np.zeros(2) if r == root else None
            comm.Reduce(np.full(2, float(r)), red, op=MPI.SUM, root=root, algorithm=alg)
            assert r != root or (red == sum(range(p))).all()
            g = np.empty(2 * p, dtype=np.int32)
            comm.Allgather(np.full(2, r * 10 + i, dtype=np.int32), g, algorithm=alg)
            assert (g == np.repeat(np.arange(p) * 10 + i, 2)).all(), g
            t = np.empty(3 * p)
            comm.Alltoall(np.arange(3 * p, dtype=float) + 100 * r, t, algorithm=alg)
            want = np.concatenate([np.arange(3 * r, 3 * r + 3) + 100 * j for j in range(p)])
            assert (t == want).all(), t
            gat = np.empty(2 * p) if r == root else None
            comm.Gather(np.full(2, float(r + i)), gat, root=root, algorithm=alg)
            assert r != root or (gat == np.repeat(np.arange(p) + i, 2)).all(), gat
            sc = np.empty(2)
            comm.Scatter(np.arange(2.0 * p) + i if r == root else None, sc, root=root,
                         algorithm=alg)
            assert (sc == np.arange(2 * r, 2 * r + 2) + i).all(), sc
            s, e = np.empty(1), np.full(1, -1.0)
            comm.Scan(np.array([r + 1.0]), s, algorithm=alg)
            comm.Exscan(np.array([r + 1.0]), e, algorithm=alg)
            assert s[0] == (r + 1) * (r + 2) / 2 and (r == 0 or e[0] == r * (r + 1) / 2), (s, e)
            rs = np.empty(2)
            comm.Reduce_scatter_block(np.arange(2.0 * p) + r, rs, algorithm=alg)
            assert (rs == p * np.arange(2 * r, 2 * r + 2) + sum(range(p))).all(), rs
            comm.Barrier(algorithm=alg)
    from minimpi.runtime.world import world_state
    job = world_state().info.job_id
    assert job
    left = glob.glob(f"/dev/shm/minimpi-{job}-c*")
    print("done", r, "segments named", len(left), flush=True)
"""


@pytest.mark.parametrize("n", [3, 5])
def test_every_segment_collective_between_processes(n, write_script, job_marker):
    script = write_script("every.py", EVERY)
    r = run_minimpi("-n", str(n), "--transport", "shm", *marker_args(job_marker), script,
                    timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in range(n):
        # the name is removed once every rank has the segment mapped
        assert f"[{rank}] done {rank} segments named 0" in r.stdout, r.stdout


def test_a_rank_that_dies_while_the_others_wait_in_the_segment_ends_the_job(
        write_script, job_marker):
    script = write_script("dies.py", """
        import os, signal, time
        import numpy as np
        from minimpi import MPI
        comm = MPI.COMM_WORLD
        x = np.zeros(1)
        for _ in range(5):
            comm.Allreduce(np.ones(1), x)
        if comm.rank == 2:
            time.sleep(0.5)
            os.kill(os.getpid(), signal.SIGKILL)
        comm.Allreduce(np.ones(1), x)      # the others wait for rank 2 in the segment
    """)
    r = run_minimpi("-n", "4", "--transport", "shm", *marker_args(job_marker), script,
                    timeout=60)
    assert r.returncode == 137, r.stdout + r.stderr
    assert "rank 2" in r.stderr and "SIGKILL" in r.stderr, r.stderr
