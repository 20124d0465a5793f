"""Dynamic processes over real jobs: Spawn (and what it must never do: hang, or leave
processes behind), ports and names, and mpi4py.futures' pools (through the shim)."""
from __future__ import annotations

import json

from jobhelpers import marker_args, run_minimpi

PARENT = r'''
import sys
from mpi4py import MPI
world = MPI.COMM_WORLD
errcodes = []
child = world.Spawn(sys.executable, [sys.argv[1]], maxprocs=2, root=1, errcodes=errcodes)
assert errcodes == [MPI.SUCCESS] * 2, errcodes
assert (child.Get_size(), child.Get_remote_size()) == (3, 2)
assert world.Get_attr(MPI.UNIVERSE_SIZE) == 8
# point-to-point across, and a collective rooted in each group
if world.rank == 2:
    child.send({"to": 1}, dest=1, tag=7)
got = child.bcast(None, root=0)          # from the children's rank 0
assert got == "from the children", got
total = child.reduce(None, op=MPI.SUM, root=MPI.ROOT if world.rank == 0 else MPI.PROC_NULL)
merged = child.Merge(high=False)
assert merged.Get_size() == 5 and merged.Get_rank() == world.rank
assert merged.allreduce(1) == 5
merged.Free()
child.Disconnect()
print("parent", world.rank, "total", total, flush=True)
'''

CHILD = r'''
from mpi4py import MPI
parent = MPI.Comm.Get_parent()
world = MPI.COMM_WORLD
assert world.Get_size() == 2 and parent.Get_remote_size() == 3
if world.rank == 1:
    assert parent.recv(source=2, tag=7) == {"to": 1}
parent.bcast("from the children", root=MPI.ROOT if world.rank == 0 else MPI.PROC_NULL)
parent.reduce(world.rank + 10, op=MPI.SUM, root=0)
merged = parent.Merge(high=True)
assert merged.Get_rank() == 3 + world.rank
assert merged.allreduce(1) == 5
merged.Free()
parent.Disconnect()
assert parent == MPI.COMM_NULL and MPI.Comm.Get_parent() == MPI.COMM_NULL
print("child", world.rank, "done", flush=True)
'''


def test_spawn_joins_parents_and_children_and_ends_clean(write_script, job_marker):
    parent = write_script("parent.py", PARENT)
    child = write_script("child.py", CHILD)
    res = run_minimpi("-n", 3, "--universe-size", 8, "--timeout", 90, *marker_args(job_marker),
                      parent, child, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "[0] parent 0 total 21" in res.stdout     # 10 + 11, from the children
    assert "[1] parent 1 total None" in res.stdout
    assert "[job1:0] child 0 done" in res.stdout and "[job1:1] child 1 done" in res.stdout


FAILURES = r'''
import os, sys
from mpi4py import MPI
here = os.path.dirname(os.path.abspath(__file__))
def refused(command, args, maxprocs=1):
    try:
        MPI.COMM_SELF.Spawn(command, args, maxprocs=maxprocs)
    except MPI.Exception as exc:
        assert exc.Get_error_class() == MPI.ERR_SPAWN, exc
        return str(exc)
    raise AssertionError("not refused")
text = refused("no-such-program-xyz", [])
assert "no-such-program-xyz" in text and "not found" in text, text
text = refused(sys.executable, [os.path.join(here, "quits.py")])
assert "quits.py" in text and "exited with code 3 before it initialized MPI" in text, text
assert "leaving at once" in text, text          # its last stderr lines come along
text = refused(sys.executable, [os.path.join(here, "quits.py")], maxprocs=5)
assert "--universe-size" in text, text
# after all that, a spawn still works
child = MPI.COMM_SELF.Spawn(sys.executable, [os.path.join(here, "joins.py")], maxprocs=2)
assert child.recv(source=1) == "joined"
child.Disconnect()
print("all refused clearly", flush=True)
'''


def test_spawn_that_cannot_start_raises_naming_the_command(write_script, job_marker):
    script = write_script("failures.py", FAILURES)
    write_script("quits.py", """
        import sys
        print("leaving at once", file=sys.stderr)
        sys.exit(3)
    """)
    write_script("joins.py", """
        from mpi4py import MPI
        parent = MPI.Comm.Get_parent()
        if MPI.COMM_WORLD.rank == 1:
            parent.send("joined", dest=0)
        parent.Disconnect()
    """)
    res = run_minimpi("-n", 1, "--universe-size", 4, "--timeout", 90, *marker_args(job_marker),
                      script, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "[0] all refused clearly" in res.stdout


def test_a_failing_spawned_process_ends_the_job_and_is_named(write_script, job_marker):
    script = write_script("parent.py", """
        import os, sys
        from mpi4py import MPI
        child = MPI.COMM_WORLD.Spawn(sys.executable, [os.path.join(os.path.dirname(__file__),
                                     "bad.py")], maxprocs=2)
        child.recv(source=0)     # never comes: the child fails first
    """)
    write_script("bad.py", """
        from mpi4py import MPI
        MPI.Comm.Get_parent()
        if MPI.COMM_WORLD.rank == 1:
            raise RuntimeError("child gives up")
        MPI.COMM_WORLD.Barrier()
    """)
    res = run_minimpi("-n", 2, "--timeout", 60, *marker_args(job_marker), script, timeout=90)
    assert res.returncode != 0
    assert "spawned job 1, rank 1" in res.stderr, res.stderr
    assert "child gives up" in res.stderr


def test_timeout_covers_spawned_processes(write_script, job_marker):
    script = write_script("parent.py", """
        import os, sys
        from mpi4py import MPI
        child = MPI.COMM_SELF.Spawn(sys.executable, [os.path.join(os.path.dirname(__file__),
                                    "slow.py")])
        child.recv(source=0)
    """)
    write_script("slow.py", """
        import time
        from mpi4py import MPI
        MPI.Comm.Get_parent()
        time.sleep(600)
    """)
    res = run_minimpi("-n", 1, "--timeout", 15, *marker_args(job_marker), script, timeout=60)
    assert res.returncode == 124, res.stderr
    assert "spawned job 1, rank 0" in res.stderr


APPNUM = r'''
import json, sys
from mpi4py import MPI
world = MPI.COMM_WORLD
mine = world.gather(world.Get_attr(MPI.APPNUM), root=0)
child = world.Spawn_multiple([sys.executable] * 2, [[sys.argv[1], "a"], [sys.argv[1], "b"]],
                             maxprocs=[2, 3], root=0)
# each child: (its world rank, APPNUM, the command's argument it got)
got = child.gather(None, root=MPI.ROOT if world.rank == 0 else MPI.PROC_NULL)
child.Disconnect()
if world.rank == 0:
    print("appnums", json.dumps({"job": mine, "spawned": got}), flush=True)
'''

APPNUM_CHILD = r'''
import sys
from mpi4py import MPI
parent = MPI.Comm.Get_parent()
world = MPI.COMM_WORLD
parent.gather((world.rank, world.Get_attr(MPI.APPNUM), sys.argv[1]), root=0)
parent.Disconnect()
'''


def test_appnum_says_which_command_of_spawn_multiple_started_a_process(write_script,
                                                                       job_marker):
    """MPICH gives 0, 0, 1, 1, 1 for Spawn_multiple with counts (2, 3), and 0 in every
    process of a job started with one program (before: 0 everywhere)."""
    script = write_script("appnum.py", APPNUM)
    child = write_script("child.py", APPNUM_CHILD)
    res = run_minimpi("-n", 3, "--timeout", 90, *marker_args(job_marker), script, child,
                      timeout=120)
    assert res.returncode == 0, res.stderr
    line = next((ln for ln in res.stdout.splitlines() if "appnums" in ln), None)
    assert line is not None, res.stdout + res.stderr
    out = json.loads(line.split("appnums", 1)[1])
    assert out["job"] == [0, 0, 0]
    assert [tuple(x) for x in out["spawned"]] == [
        (0, 0, "a"), (1, 0, "a"), (2, 1, "b"), (3, 1, "b"), (4, 1, "b")]


PORTS = r'''
from mpi4py import MPI
world = MPI.COMM_WORLD
rank = world.rank
port = MPI.Open_port()
MPI.Publish_name(f"svc-{rank}", port)
assert MPI.Lookup_name(f"svc-{rank}") == port
MPI.Unpublish_name(f"svc-{rank}", port)
MPI.Close_port(port)
try:
    MPI.Lookup_name("nobody")
except MPI.Exception as exc:
    assert exc.Get_error_class() == MPI.ERR_NAME
else:
    raise AssertionError("found a name nobody published")
others = world.Create(world.Get_group().Excl([0]))
if rank == 0:
    port = MPI.Open_port()
    MPI.Publish_name("the-service", port)
    world.Barrier()
    inter = MPI.COMM_SELF.Accept(port)
    MPI.Unpublish_name("the-service", port)
    MPI.Close_port(port)
else:
    world.Barrier()
    port = MPI.Lookup_name("the-service") if rank == 1 else None
    inter = others.Connect(port, root=0)
assert inter.Get_remote_size() == (world.size - 1 if rank == 0 else 1)
value = inter.bcast(list(range(5)) if rank == 0 else None,
                    root=MPI.ROOT if rank == 0 else 0)
print("rank", rank, "got", value, flush=True)
inter.Free()
'''


def test_accept_connect_through_a_published_name(write_script, job_marker):
    script = write_script("ports.py", PORTS)
    res = run_minimpi("-n", 3, "--timeout", 60, *marker_args(job_marker), script, timeout=90)
    assert res.returncode == 0, res.stderr
    assert "[2] rank 2 got [0, 1, 2, 3, 4]" in res.stdout
    assert "[0] rank 0 got None" in res.stdout


FUTURES = r'''
from concurrent.futures import as_completed
from mpi4py import MPI
from mpi4py.futures import MPIPoolExecutor

def where(x):
    return x * x, MPI.COMM_WORLD.Get_rank(), MPI.Comm.Get_parent() != MPI.COMM_NULL

def fail(x):
    raise KeyError(x)

if __name__ == "__main__":
    with MPIPoolExecutor(max_workers=2) as pool:
        out = list(pool.map(where, range(30), chunksize=4))
        assert [v for v, _, _ in out] == [x * x for x in range(30)]
        print("workers", sorted({r for _, r, _ in out}), "spawned", out[0][2], flush=True)
        futures = [pool.submit(fail, i) for i in range(3)]
        assert all(isinstance(f.exception(), KeyError) for f in as_completed(futures))
        assert sorted(pool.starmap(pow, [(2, 5), (3, 2)], unordered=True)) == [9, 32]
'''


def test_futures_pool_spawns_workers(write_script, job_marker):
    script = write_script("pool.py", FUTURES)
    res = run_minimpi("-n", 1, "--timeout", 90, *marker_args(job_marker), script, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "[0] workers [0, 1] spawned True" in res.stdout


def test_futures_static_pool_uses_the_other_ranks(write_script, job_marker):
    script = write_script("pool.py", FUTURES)
    res = run_minimpi("-n", 3, "--timeout", 90, *marker_args(job_marker), "-m", "mpi4py.futures",
                      script, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "[0] workers [1, 2] spawned False" in res.stdout
    assert "job1" not in res.stdout          # nothing was spawned
