"""MPI-4 sessions over real processes (`minimpi run -n 3` and `-n 5`): psets, a communicator
made from a pset's group without COMM_WORLD, its collectives (a persistent one too), a
session error handler, and Finalize."""
from __future__ import annotations

import sys

import pytest
from jobhelpers import marker_args, run_minimpi

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux launcher tests")

SESSION_PROGRAM = """
    import numpy as np
    from mpi4py import MPI

    session = MPI.Session.Init()
    names = [session.Get_nth_pset(i) for i in range(session.Get_num_psets())]
    assert names == ["mpi://WORLD", "mpi://SELF"], names
    size = int(session.Get_pset_info("mpi://WORLD").Get("mpi_size"))
    comm = MPI.Intracomm.Create_from_group(session.Create_group("mpi://WORLD"),
                                           stringtag="test.sessions")
    assert comm.size == size and 0 <= comm.rank < size
    total = np.zeros(1)
    req = comm.Allreduce_init(np.array([float(comm.rank + 1)]), total)
    for _ in range(2):
        req.Start()
        req.Wait()
    assert total[0] == size * (size + 1) / 2, total
    self_group = MPI.Group.Create_from_session_pset(session, "mpi://SELF")
    assert (self_group.size, self_group.rank) == (1, 0)
    seen = []
    session.Set_errhandler(MPI.Session.Create_errhandler(lambda s, code: seen.append(code)))
    try:
        session.Get_pset_info("mpi://NOWHERE")
    except MPI.Exception as exc:
        assert exc.Get_error_class() == MPI.ERR_ARG
    assert seen == [MPI.ERR_ARG], seen
    comm.Free()
    session.Finalize()
    assert session == MPI.SESSION_NULL
    print("sessions ok", comm.rank if comm else "freed", size)
"""


@pytest.mark.parametrize("n", [3, 5])
def test_session_program(n, write_script, job_marker):
    script = write_script("sessions.py", SESSION_PROGRAM)
    res = run_minimpi("-n", n, "--timeout", "40", *marker_args(job_marker), script, timeout=60)
    assert res.returncode == 0, f"stdout:\n{res.stdout}\nstderr:\n{res.stderr}"
    ok = [line for line in res.stdout.splitlines() if "sessions ok" in line]
    assert len(ok) == n and all(line.endswith(f"freed {n}") for line in ok), res.stdout
