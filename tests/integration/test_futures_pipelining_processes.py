"""mpi4py.futures' pipelined pools over real processes: many tiny calls and uneven ones in
order through spawned workers, and a worker process that dies holding calls - under
``--fault-tolerant`` in a static pool its calls fail naming it and the others finish; a
spawned worker's death ends the job, naming the spawned process."""
from __future__ import annotations

from jobhelpers import marker_args, run_minimpi

MANY = r'''
import time
from mpi4py.futures import MPIPoolExecutor

def nap(x):
    time.sleep(0.001 * (x % 4))
    return x

if __name__ == "__main__":
    with MPIPoolExecutor(max_workers=3) as pool:
        assert list(pool.map(abs, range(-3000, 0))) == list(range(3000, 0, -1))
        assert list(pool.map(nap, range(90))) == list(range(90))
        it = pool.map(int, ["1", "2", "x", "4"])
        assert [next(it), next(it)] == [1, 2]
        try:
            next(it)
        except ValueError as exc:
            print("carried", type(exc).__name__, flush=True)
        futures = [pool.submit(nap, i) for i in range(400)]
        futures[0].result()
        cancelled = sum(f.cancel() for f in futures)
        kept = [f.result() for f in futures if not f.cancelled()]
        assert kept == sorted(kept) and len(kept) + cancelled == 400
        print("ok", len(kept) > 0 and cancelled > 0, flush=True)
'''


def test_spawned_pool_keeps_order_and_carries_exceptions(write_script, job_marker):
    script = write_script("many.py", MANY)
    res = run_minimpi("-n", 1, "--timeout", 90, *marker_args(job_marker), script, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "[0] carried ValueError" in res.stdout and "[0] ok True" in res.stdout


DIES = r'''
import os, time
from concurrent.futures import BrokenExecutor
from mpi4py import MPI
from mpi4py.futures import MPIPoolExecutor

def short(x):
    return x

def die_on_1(x, die=True):
    time.sleep(0.02)
    if die and MPI.COMM_WORLD.Get_rank() == 1:
        os._exit(3)
    return x

if __name__ == "__main__":
    pool = MPIPoolExecutor()
    list(pool.map(die_on_1, range(20), [False] * 20))   # measured: 2 calls per worker
    futures = [pool.submit(die_on_1, i) for i in range(8)]
    died = [str(f.exception(timeout=30)) for f in futures if f.exception(timeout=30)]
    done = [f.result() for f in futures if not f.exception()]
    print("died", len(died), all("worker 1 failed" in e for e in died), flush=True)
    print("done", len(died) + len(done) == 8 and len(done) > 0, flush=True)
    try:
        pool.submit(short, 1)
    except BrokenExecutor as exc:
        print("broken", "worker 1" in str(exc), flush=True)
    pool.shutdown()
'''


def test_static_pool_worker_death_fails_its_calls_naming_it(write_script, job_marker):
    script = write_script("dies.py", DIES)
    res = run_minimpi("-n", 3, "--fault-tolerant", "--timeout", 90, *marker_args(job_marker),
                      "-m", "mpi4py.futures", script, timeout=120)
    assert res.returncode == 0, res.stderr            # the survivors' exit code
    out = res.stdout
    died = next(line for line in out.splitlines() if line.startswith("[0] died"))
    assert died.endswith("True") and int(died.split()[2]) >= 2, out
    assert "[0] done True" in out and "[0] broken True" in out
    assert "rank 1 exited with code 3" in res.stderr


def test_spawned_worker_death_ends_the_job_naming_it(write_script, job_marker):
    script = write_script("dies.py", DIES.replace("MPIPoolExecutor()",
                                                  "MPIPoolExecutor(max_workers=2)"))
    res = run_minimpi("-n", 1, "--timeout", 90, *marker_args(job_marker), script, timeout=120)
    assert res.returncode == 3, res.stderr
    assert "spawned job 1, rank 1" in res.stderr and "exited with code 3" in res.stderr


WAKE = r'''
import statistics, time
from mpi4py.futures import MPIPoolExecutor

def nap(x):
    time.sleep(x)
    return x

if __name__ == "__main__":
    with MPIPoolExecutor(max_workers=2) as pool:
        pool.submit(nap, 0).result()
        waits = []
        for _ in range(5):
            long = pool.submit(nap, 0.4)
            time.sleep(0.02)                    # the manager is asleep, waiting on `long`
            t = time.perf_counter()
            pool.submit(nap, 0).result()        # the idle worker takes it at once
            waits.append(time.perf_counter() - t)
            long.result()
        print("median wait", statistics.median(waits), flush=True)
'''


def test_a_call_submitted_while_another_runs_starts_at_once(write_script, job_marker):
    """The manager asleep in the transport is woken by a submit (before: up to the
    transport's 0.25 s timeout)."""
    script = write_script("wake.py", WAKE)
    res = run_minimpi("-n", 1, "--timeout", 90, *marker_args(job_marker), script, timeout=120)
    assert res.returncode == 0, res.stderr
    wait = float(res.stdout.split("median wait")[1].split()[0])
    assert wait < 0.12, res.stdout


SEVERAL = r'''
from concurrent.futures import wait
from mpi4py.futures import MPIPoolExecutor

if __name__ == "__main__":
    pools = [MPIPoolExecutor(1).bootup(wait=True) for _ in range(3)]
    fs = [[pool.submit(abs, -i - 1000 * k) for i in range(300)] for k, pool in enumerate(pools)]
    wait([f for group in fs for f in group], timeout=60)
    ok = all(f.result() == i + 1000 * k for k, group in enumerate(fs) for i, f in enumerate(group))
    for pool in pools:
        pool.shutdown()
    print("several pools", ok, flush=True)
'''


def test_several_pools_in_one_process_take_turns(write_script, job_marker):
    """Three managers share one engine (THREAD_SERIALIZED): they take turns on one lock."""
    script = write_script("several.py", SEVERAL)
    res = run_minimpi("-n", 1, "--timeout", 90, *marker_args(job_marker), script, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "[0] several pools True" in res.stdout
