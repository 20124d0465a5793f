"""Lab 4: pi by numerical integration of 4/(1+x^2), with bcast and reduce."""
import math

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()

n = comm.bcast(100_000 if rank == 0 else None, root=0)
h = 1.0 / n
x = h * (np.arange(rank, n, size) + 0.5)
mypi = np.array(h * np.sum(4.0 / (1.0 + x * x)))

pi = np.array(0.0)
comm.Reduce([mypi, MPI.DOUBLE], [pi, MPI.DOUBLE], op=MPI.SUM, root=0)
pi_obj = comm.reduce(float(mypi), op=MPI.SUM, root=0)

# buffer bcast of the parameters, too
params = np.array([n, 0], dtype="i") if rank == 0 else np.empty(2, dtype="i")
comm.Bcast(params, root=0)
assert params[0] == n

if rank == 0:
    err = abs(float(pi) - math.pi)
    assert err < 1e-8, err
    assert abs(pi_obj - float(pi)) < 1e-12
    print(f"pi is approximately {float(pi):.10f}, error {err:.2e}")
    print("pi: OK")
else:
    assert pi_obj is None
