"""Spawn through agents on one machine (`--hosts localhost:2,127.0.0.1:2`: two agents, both
here): the path of a job on several hosts - placement on the `host` info key and on free
slots, a `spawn` frame to an agent (the second one started for it), output and exits in
frames - testable without root; tests/multihost runs it across network namespaces."""
from __future__ import annotations

import sys

import pytest
from jobhelpers import marker_args, run_minimpi

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

MANAGER = """
import os, sys
import numpy as np
from mpi4py import MPI
worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")
assert MPI.COMM_WORLD.Get_attr(MPI.UNIVERSE_SIZE) == 4
info = MPI.Info.Create()
info.Set("host", "127.0.0.1")
a = MPI.COMM_SELF.Spawn(sys.executable, [worker, "a"], maxprocs=2, info=info)
b = MPI.COMM_SELF.Spawn(sys.executable, [worker, "b"], maxprocs=1)
try:
    MPI.COMM_SELF.Spawn(sys.executable, [worker, "c"], maxprocs=1)
except MPI.Exception as exc:
    assert exc.Get_error_class() == MPI.ERR_SPAWN
    print("refused:", str(exc).split("): ", 1)[1], flush=True)
for name, child, n in (("a", a, 2), ("b", b, 1)):
    data = np.arange(8, dtype="d")
    child.Bcast(data, root=MPI.ROOT)
    total = np.zeros(8)
    child.Reduce(None, total, op=MPI.SUM, root=MPI.ROOT)
    merged = child.Merge(high=False)
    print(name, "total", total[1], "merged", merged.Get_size(),
          "hosts", sorted(child.gather(None, root=MPI.ROOT)), flush=True)
    merged.Free()
    child.Disconnect()
"""

WORKER = """
import os, sys
import numpy as np
from mpi4py import MPI
parent = MPI.Comm.Get_parent()
data = np.empty(8)
parent.Bcast(data, root=0)
parent.Reduce(data * (MPI.COMM_WORLD.rank + 1), None, op=MPI.SUM, root=0)
merged = parent.Merge(high=True)
parent.gather(os.environ["MINIMPI_LOCAL_RANKS"], root=0)
merged.Free()
parent.Disconnect()
print(sys.argv[1], MPI.COMM_WORLD.rank, "of", MPI.COMM_WORLD.size, flush=True)
"""


def test_spawn_through_local_agents(write_script, job_marker):
    manager = write_script("manager.py", MANAGER)
    write_script("worker.py", WORKER)
    res = run_minimpi("-n", 1, "--hosts", "localhost:2,127.0.0.1:2", "--timeout", 60,
                      *marker_args(job_marker), manager, timeout=90)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert "[0] a total 3.0 merged 3 hosts ['0-1', '0-1']" in lines, res.stdout
    assert "[0] b total 1.0 merged 2 hosts ['0']" in lines, res.stdout
    assert {"[job1:0] a 0 of 2", "[job1:1] a 1 of 2", "[job2:0] b 0 of 1"} <= set(lines)
    [refused] = [ln for ln in lines if ln.startswith("[0] refused:")]
    assert "worker.py c`: 4 of the universe's 4 (the hosts' slots) are running" in refused
