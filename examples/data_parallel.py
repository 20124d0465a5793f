"""Data parallelism: every rank holds the whole model and a shard of the data.

Each step, every rank computes the gradient on its own shard, the gradients are summed with
Allreduce, and every rank applies the same update - so the replicas stay identical and the
result equals full-batch training on one machine.

    minimpi run -n 4 examples/data_parallel.py
    minimpi run -n 4 --trace dp.json examples/data_parallel.py    # one Allreduce per step
"""
import sys

import numpy as np

from minimpi import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()

# The same data on every rank (fixed seed), so each can also check against the serial answer.
rng = np.random.default_rng(0)
N, D, STEPS, LR = 64 * size, 8, 20, 0.1
X = rng.normal(size=(N, D))
true_w = rng.normal(size=D)
y = X @ true_w + 0.01 * rng.normal(size=N)


def gradient(w, Xs, ys):
    """Gradient of the summed squared error 0.5*|Xs w - ys|^2."""
    return Xs.T @ (Xs @ w - ys)


# Parallel: my shard is every size-th row starting at my rank.
Xs, ys = X[rank::size], y[rank::size]
w = np.zeros(D)
grad = np.empty(D)
for step in range(STEPS):
    comm.Allreduce(gradient(w, Xs, ys), grad, op=MPI.SUM)   # sum of the shards' gradients
    w -= LR * grad / N

# Serial reference: full-batch gradient descent on all the data.
w_serial = np.zeros(D)
for step in range(STEPS):
    w_serial -= LR * gradient(w_serial, X, y) / N

if not np.allclose(w, w_serial, rtol=1e-10, atol=1e-12):
    sys.exit(f"rank {rank}: data-parallel weights {w} differ from serial {w_serial}")
if rank == 0:
    loss = 0.5 * np.mean((X @ w - y) ** 2)
    print(f"data parallel ok: {STEPS} steps on {size} ranks, loss {loss:.4f}, "
          f"|w - w_true| = {np.linalg.norm(w - true_w):.3f}")
