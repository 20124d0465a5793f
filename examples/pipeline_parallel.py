"""Pipeline parallelism: each rank is one stage of the model; activations flow on.

A batch is cut into micro-batches. Forward: stage s receives a micro-batch's activations
from stage s-1, applies its block (a small MLP: y = tanh(tanh(x @ A) @ B)), sends the result
on to stage s+1 - and goes on with the next micro-batch at once, so once the pipeline has
*filled* every stage works on a different micro-batch. Backward (GPipe's schedule: after every
forward): the gradients flow the other way, from the last stage to the first, and the
pipeline *drains*.

    minimpi run -n 4 examples/pipeline_parallel.py
    minimpi run -n 4 --trace pp.json examples/pipeline_parallel.py

In the trace (https://ui.perfetto.dev) each stage's first Recv lasts longer than the previous
stage's: stage s waits until s stages have computed micro-batch 0 (the fill; that idle time
is the pipeline "bubble"). The gaps between a stage's MPI calls are its computing. At the end
stage 0 waits in Recv for its first gradient while the later stages work backward (the
drain). With M micro-batches and p stages a stage is idle about (p-1)/(M+p-1) of the time:
more micro-batches, smaller bubble.

The activations (32 KiB per micro-batch) stay below the eager limit, so an Isend completes on
its own while the stage computes. Above it a message waits for its receiver (rendezvous) and
moves only when the sending stage next enters MPI: the stages stall; see it with
``--eager-limit 4KiB``. Every stage's weight gradients are checked against the same model
computed serially.
"""
import os
import sys

# One BLAS thread per rank, as MPI jobs usually run (OMP_NUM_THREADS=1): the ranks already
# share the cores, and threaded matrix products would make the stages fight over them.
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")

import numpy as np  # noqa: E402  (after the thread settings, which numpy reads at import)

from minimpi import MPI  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()

MICRO, BATCH, WIDTH, HIDDEN = 8, 32, 128, 2048   # ms of work per stage and micro-batch
FORWARD, BACKWARD = 0, 1000              # tags: forward mb is tag mb, backward 1000 + mb
rng = np.random.default_rng(2)
blocks = [(rng.normal(size=(WIDTH, HIDDEN)) / np.sqrt(WIDTH),
           rng.normal(size=(HIDDEN, WIDTH)) / np.sqrt(HIDDEN)) for _ in range(size)]
inputs = [rng.normal(size=(BATCH, WIDTH)) for _ in range(MICRO)]
targets = [rng.normal(size=(BATCH, WIDTH)) for _ in range(MICRO)]
A, B = blocks[rank]                      # my stage's block
first, last = rank == 0, rank == size - 1


def forward(x, A, B):
    h = np.tanh(x @ A)
    return h, np.tanh(h @ B)


def backward(x, h, y, dy, A, B):
    """Gradients of A and B, and of the block's input, from the gradient of its output."""
    dzb = dy * (1 - y * y)
    dza = (dzb @ B.T) * (1 - h * h)
    return x.T @ dza, h.T @ dzb, dza @ A.T


# -- forward: fill the pipeline, micro-batch after micro-batch ------------------------------
saved = []                               # each micro-batch's input and activations
sends = []
for mb in range(MICRO):
    if first:
        x = inputs[mb]
    else:
        x = np.empty((BATCH, WIDTH))
        comm.Recv(x, source=rank - 1, tag=FORWARD + mb)   # activations from the stage before
    h, y = forward(x, A, B)
    saved.append((x, h, y))
    if not last:
        sends.append(comm.Isend(y, dest=rank + 1, tag=FORWARD + mb))   # on to the next stage
MPI.Request.Waitall(sends)

# -- backward: the gradients flow back and the pipeline drains ------------------------------
grad_A, grad_B = np.zeros_like(A), np.zeros_like(B)
sends = []
for mb in range(MICRO):
    x, h, y = saved[mb]
    if last:                             # loss = sum of 0.5·|y - target|² over micro-batches
        dy = y - targets[mb]
    else:
        dy = np.empty((BATCH, WIDTH))
        comm.Recv(dy, source=rank + 1, tag=BACKWARD + mb)  # gradient from the stage after
    ga, gb, dx = backward(x, h, y, dy, A, B)
    grad_A += ga
    grad_B += gb
    if not first:
        sends.append(comm.Isend(dx, dest=rank - 1, tag=BACKWARD + mb))
MPI.Request.Waitall(sends)

# -- the same model, serially: every stage checks its own gradients ----------------------------
ref_A, ref_B = np.zeros_like(A), np.zeros_like(B)
for mb in range(MICRO):
    acts = [(inputs[mb], None, None)]
    for As, Bs in blocks:
        h, y = forward(acts[-1][0] if acts[-1][2] is None else acts[-1][2], As, Bs)
        acts.append((acts[-1][0] if acts[-1][2] is None else acts[-1][2], h, y))
    d = acts[-1][2] - targets[mb]
    for s in range(size - 1, rank - 1, -1):
        x, h, y = acts[s + 1]
        ga, gb, d = backward(x, h, y, d, *blocks[s])
        if s == rank:
            ref_A += ga
            ref_B += gb
if not (np.allclose(grad_A, ref_A) and np.allclose(grad_B, ref_B)):
    sys.exit(f"stage {rank}: pipeline gradients differ from the serial model")
if last:
    print(f"pipeline parallel ok: {MICRO} micro-batches forward and backward through "
          f"{size} stages")
