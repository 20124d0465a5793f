"""A course-style program that sends and reduces Fortran sized datatypes (``MPI.INTEGER4``,
``MPI.REAL8``) runs under ``minimpi run`` as under mpi4py + MPICH (issue 29: those names were
null handles here). The types themselves: tests/unit/test_fortran_sized_types.py."""
from __future__ import annotations

from jobhelpers import marker_args, run_minimpi


def test_a_course_program_with_integer4_runs_as_under_mpich(write_script, job_marker):
    # the shape of the course programs that failed: a sum over ranks of Fortran-typed data
    script = write_script("integer4.py", """
        import numpy as np
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        n = np.array([comm.rank + 1], dtype=np.int32)
        total = np.zeros(1, dtype=np.int32)
        comm.Reduce([n, MPI.INTEGER4], [total, MPI.INTEGER4], op=MPI.SUM, root=0)
        x = np.full(2, comm.rank, dtype=np.float64)
        if comm.rank == 0:
            for src in range(1, comm.size):
                comm.Recv([x, MPI.REAL8], source=src)
                total[0] += int(x.sum())
            print("TOTAL", int(total[0]), flush=True)
        else:
            comm.Send([x, MPI.REAL8], dest=0)
    """)
    proc = run_minimpi(*marker_args(job_marker), "-n", "3", "--timeout", "30", script,
                       timeout=50)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "TOTAL 12" in proc.stdout, proc.stdout + proc.stderr     # 1+2+3 + 2*1 + 2*2
