"""Pipeline parallelism: each rank is one stage (layer) of the model; activations flow on.

Stage s receives a micro-batch's activations from stage s-1, applies its layer, and sends the
result to stage s+1. With several micro-batches in flight, all stages work at once (after the
pipeline fills): stage 0 is already on micro-batch 3 while stage 3 finishes micro-batch 0.

    minimpi run -n 4 examples/pipeline_parallel.py
    minimpi run -n 4 --trace pp.json examples/pipeline_parallel.py   # see the pipeline fill
"""
import sys

import numpy as np

from minimpi import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()

rng = np.random.default_rng(2)
MICRO, BATCH, WIDTH = 6, 8, 16
weights = [rng.normal(size=(WIDTH, WIDTH)) / np.sqrt(WIDTH) for _ in range(size)]
inputs = [rng.normal(size=(BATCH, WIDTH)) for _ in range(MICRO)]
W = weights[rank]                                       # my stage's layer

outputs = []
sends = []
for mb in range(MICRO):
    if rank == 0:
        x = inputs[mb]
    else:
        x = np.empty((BATCH, WIDTH))
        comm.Recv(x, source=rank - 1, tag=mb)           # activations from the previous stage
    y = np.tanh(x @ W)
    if rank < size - 1:
        sends.append(comm.Isend(y, dest=rank + 1, tag=mb))   # don't wait: start the next one
    else:
        outputs.append(y)
MPI.Request.Waitall(sends)

if rank == size - 1:
    for mb in range(MICRO):                             # serial reference: all layers in a row
        ref = inputs[mb]
        for Ws in weights:
            ref = np.tanh(ref @ Ws)
        if not np.allclose(outputs[mb], ref):
            sys.exit(f"micro-batch {mb}: pipeline output differs from the serial model")
    print(f"pipeline parallel ok: {MICRO} micro-batches through {size} stages")
