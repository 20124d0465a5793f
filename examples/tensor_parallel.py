"""Tensor parallelism: one layer's weight matrices are split across ranks (Megatron-style MLP).

    Z = relu(X @ A) @ B

* A is split by columns: rank r holds A[:, r-th slice] and computes its slice of Y = X @ A
  with no communication.
* B is split by rows, the same slices: rank r holds B[r-th slice, :] and computes
  relu(Y)[:, slice] @ B_r from its own slice of Y alone - a partial sum of Z. So the two
  matrix products need no communication in between. Reduce_scatter_block adds the partial
  sums and leaves each rank one block of rows of Z (Allreduce would leave all of Z
  everywhere).

Why the Allgather, then? The MLP itself does not need it: it is here to show what the full Y
costs when something does need it - an operation over the whole hidden dimension (a
normalisation, a layer that is not split) - and to check Y against the serial computation.
Every rank then receives (p-1)/p of Y; pairing a column split with a row split, as above, is
how Megatron avoids exactly that.

    minimpi run -n 4 examples/tensor_parallel.py
    minimpi draw reduce_scatter --algorithm ring -n 4
"""
import sys

import numpy as np

from minimpi import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()

rng = np.random.default_rng(1)
n, d, h, m = 4 * size, 6, 4 * size, 5            # batch, input, hidden, output sizes
X = rng.normal(size=(n, d))
A = rng.normal(size=(d, h))
B = rng.normal(size=(h, m))
cols = slice(rank * h // size, (rank + 1) * h // size)   # my slice of the hidden dimension

# 1) column-parallel: my slice of Y - all that step 2 needs
Y_mine = np.ascontiguousarray(X @ A[:, cols])               # (n, h/p)
# the full Y, for what needs all of it (here: the check against the serial model below)
gathered = np.empty((size, n, h // size))
comm.Allgather(Y_mine, gathered)
Y = np.concatenate(list(gathered), axis=1)                   # (n, h)

# 2) row-parallel: a partial Z from my rows of B, summed and split by rows of Z
Z_partial = np.maximum(Y_mine, 0) @ B[cols, :]               # (n, m), summed over ranks = Z
Z_rows = np.empty((n // size, m))
comm.Reduce_scatter_block(Z_partial, Z_rows, op=MPI.SUM)

# serial reference
Y_serial = X @ A
Z_serial = np.maximum(Y_serial, 0) @ B
ok_y = np.allclose(Y, Y_serial)
ok_z = np.allclose(Z_rows, Z_serial[rank * n // size:(rank + 1) * n // size])
if not (ok_y and ok_z):
    sys.exit(f"rank {rank}: tensor-parallel Y ok={ok_y}, Z ok={ok_z}")
if rank == 0:
    print(f"tensor parallel ok: Y {Y.shape} via Allgather, Z rows {Z_rows.shape} per rank via "
          f"Reduce_scatter_block on {size} ranks")
