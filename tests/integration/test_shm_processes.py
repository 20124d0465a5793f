"""Shared memory between real processes: which transport `minimpi run` picks, segments that
never outlive a job (crash, kill -9, death during start-up), and waiting that costs no CPU
when ranks outnumber cores.

The data-moving tests of test_p2p_tcp.py and test_collectives_tcp.py run over both
transports; the conftest fixture checks after every test that no segment is left.
"""
from __future__ import annotations

import glob
import time

import pytest
from jobhelpers import marker_args, run_minimpi

ROUTES = """
    from minimpi import MPI
    from minimpi.runtime.world import world_state
    comm = MPI.COMM_WORLD
    state = world_state()
    routes = state.engine.transport.routes()
    print("routes", comm.rank, ",".join(r or "self" for r in routes))
    print("policy", comm.rank, state.engine.progress_policy.mode)
    assert comm.allreduce(comm.rank) == comm.size * (comm.size - 1) // 2
"""


@pytest.mark.parametrize("options, route", [((), "shm"), (("--transport", "auto"), "shm"),
                                            (("--transport", "tcp"), "tcp"),
                                            (("-x", "MINIMPI_TRANSPORT=tcp"), "tcp"),
                                            (("--transport", "shm"), "shm")])
def test_run_picks_shared_memory_on_one_host_unless_told(options, route, write_script, job_marker):
    script = write_script("routes.py", ROUTES)
    r = run_minimpi("-n", "3", *options, *marker_args(job_marker), script, timeout=30)
    assert r.returncode == 0, r.stderr
    assert f"[0] routes 0 self,{route},{route}" in r.stdout
    assert f"[2] routes 2 {route},{route},self" in r.stdout


def test_progress_policy_follows_the_option_and_the_core_count(write_script, job_marker):
    import os
    script = write_script("routes.py", ROUTES)
    cores = len(os.sched_getaffinity(0))
    r = run_minimpi("-n", "2", "--progress", "block", *marker_args(job_marker), script, timeout=30)
    assert r.returncode == 0 and "[0] policy 0 block" in r.stdout, r.stderr
    r = run_minimpi("-n", str(cores + 1), *marker_args(job_marker), script, timeout=60)
    assert r.returncode == 0 and "[0] policy 0 yield" in r.stdout, r.stderr   # oversubscribed
    from minimpi.p2p.progress import YIELD_UP_TO
    if YIELD_UP_TO * cores + 1 <= 33:   # (a job this size on a machine with many cores: too long)
        r = run_minimpi("-n", str(YIELD_UP_TO * cores + 1), *marker_args(job_marker), script,
                        timeout=60)
        assert r.returncode == 0 and "[0] policy 0 block" in r.stdout, r.stderr  # far more so


def test_kill_9_in_the_middle_of_a_large_message_ends_the_job_and_leaves_nothing(
        write_script, job_marker):
    script = write_script("kill_mid.py", """
        import os, signal, numpy as np
        from minimpi import MPI
        comm = MPI.COMM_WORLD
        a = np.ones(32 << 20, np.uint8)
        if comm.rank == 1:
            req = comm.Isend(a, 0, tag=1)         # rank 0 reads it straight from our memory
            os.kill(os.getpid(), signal.SIGKILL)  # ... while we die
        elif comm.rank == 0:
            comm.Recv(a, 1, tag=1)
            comm.Recv(a, 1, tag=2)                # never comes
        comm.Barrier()
    """)
    start = time.monotonic()
    r = run_minimpi("-n", "3", "--transport", "shm", *marker_args(job_marker), script, timeout=30)
    assert time.monotonic() - start < 10
    assert r.returncode == 128 + 9, r.stderr
    assert "rank 1" in r.stderr and "SIGKILL" in r.stderr


def test_a_rank_that_dies_during_start_up_leaves_no_segment(write_script, job_marker,
                                                            tmp_path):
    # rank 0 creates its segment and waits for the others; rank 1 never initializes, so
    # nobody maps rank 0's segment and only the launcher can remove it. Only this job's
    # files are looked at (rank 1 says its id): other jobs may run meanwhile.
    job_file = tmp_path / "job_id"
    script = write_script("early_death.py", f"""
        import os, sys, time
        if os.environ["MINIMPI_RANK"] == "1":
            open({str(job_file)!r}, "w").write(os.environ["MINIMPI_JOBID"])
            time.sleep(0.5)
            sys.exit(5)
        from minimpi import MPI
        MPI.COMM_WORLD.Barrier()
    """)
    r = run_minimpi("-n", "2", "--transport", "shm", *marker_args(job_marker), script, timeout=30)
    assert r.returncode == 5, r.stderr
    job_id = job_file.read_text()
    assert job_id and glob.glob(f"/dev/shm/minimpi-*{job_id}*") == []


WAIT_CPU = """
    import time
    from minimpi import MPI
    comm = MPI.COMM_WORLD
    comm.Barrier()
    if comm.rank == 0:
        time.sleep(1.0)                    # everyone else waits for this rank
    cpu = time.process_time()
    wall = time.monotonic()
    comm.Barrier()
    used = comm.gather((time.process_time() - cpu, time.monotonic() - wall), root=0)
    if comm.rank == 0:
        waited = [c for c, w in used[1:]]
        print("max cpu while waiting %.3f s" % max(waited), "over %.2f s" % min(w for c, w in used[1:]))
"""


@pytest.mark.parametrize("nprocs, progress", [(32, "auto"), (2, "spin")])
def test_waiting_ranks_do_not_burn_cpu(nprocs, progress, write_script, job_marker):
    # 32 ranks on 2 cores block at once (auto); a rank that spins (2 ranks, --progress spin)
    # spins less and less while its peer stays silent, so a 1 s wait costs little CPU either way
    script = write_script("wait_cpu.py", WAIT_CPU)
    r = run_minimpi("-n", str(nprocs), "--progress", progress, *marker_args(job_marker), script,
                    timeout=120)
    assert r.returncode == 0, r.stderr
    line = next(l for l in r.stdout.splitlines() if "max cpu while waiting" in l)
    cpu = float(line.split("waiting ")[1].split()[0])
    assert cpu < 0.25, line


def test_stats_say_which_wire_and_progress_policy_each_rank_used(write_script, job_marker):
    script = write_script("routes.py", ROUTES)
    r = run_minimpi("-n", "3", "--stats", "--transport", "tcp", "--progress", "block",
                    *marker_args(job_marker), script, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "every rank: tcp to 2 peers; progress block (asked for)" in r.stderr
    r = run_minimpi("-n", "2", "--stats", *marker_args(job_marker), script, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "every rank: shm to 1 peer; progress " in r.stderr
    assert "(auto: 2 ranks on this host, " in r.stderr


@pytest.mark.parametrize("barrier", ["1", "0"])
def test_ranks_that_sleep_before_every_message_are_woken_for_each(barrier, write_script,
                                                                 job_marker):
    # --progress block: every wait sleeps at once, so each message meets a sleeping peer;
    # with the process-wide barrier (1) the writers publish without a fence, without it
    # (0) both sides fence. A lost wake-up would stall a round trip until the wait's poll
    # interval (0.25 s) ends it.
    script = write_script("sleepy_pingpong.py", """
        import time, numpy as np
        from minimpi import MPI
        from minimpi.runtime.world import world_state
        comm = MPI.COMM_WORLD
        transport = world_state().engine.transport
        a = np.zeros(4, np.int64)
        slowest = 0.0
        for i in range(300):
            start = time.monotonic()
            if comm.rank == 0:
                comm.Send(np.full(4, i, np.int64), 1, tag=i % 7)
                comm.Recv(a, 1, tag=i % 7)
                assert (a == i + 1).all(), (i, a)
            else:
                comm.Recv(a, 0, tag=i % 7)
                assert (a == i).all(), (i, a)
                comm.Send(a + 1, 0, tag=i % 7)
            slowest = max(slowest, time.monotonic() - start)
        print("asymmetric", comm.rank, transport.member("shm").asymmetric, "slowest", slowest)
    """)
    r = run_minimpi("-n", "2", "--transport", "shm", "--progress", "block",
                    "-x", f"MINIMPI_SHM_MEMBARRIER={barrier}", *marker_args(job_marker),
                    script, timeout=60)
    assert r.returncode == 0, r.stderr
    from minimpi.transports import membarrier
    expected = barrier == "1" and membarrier.supported()
    assert f"[0] asymmetric 0 {expected} slowest" in r.stdout, r.stdout
