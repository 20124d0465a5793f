"""Expert parallelism (mixture of experts): each rank hosts one expert; tokens travel to it.

1. Every rank routes each of its tokens to an expert (argmax of a router score).
2. Alltoall of the counts: rank j learns how many tokens each rank will send it.
3. Alltoallv of the tokens, grouped by destination: each expert receives its tokens.
4. Each expert applies its weights; Alltoallv sends the results back the same way.
5. Every rank puts its tokens' results back in the original order.

    minimpi run -n 4 examples/expert_parallel.py
    minimpi draw alltoall --algorithm ring -n 4
"""
import sys

import numpy as np

from minimpi import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()

rng = np.random.default_rng(3)
TOKENS, D = 12, 4                                        # tokens per rank, model width
router = rng.normal(size=(D, size))
experts = [rng.normal(size=(D, D)) for _ in range(size)]   # expert e lives on rank e
all_tokens = rng.normal(size=(size, TOKENS, D))
x = all_tokens[rank]                                     # my tokens

# 1) route, and group my tokens by destination expert
dest = np.argmax(x @ router, axis=1)
order = np.argsort(dest, kind="stable")
send = np.ascontiguousarray(x[order])
send_counts = np.bincount(dest, minlength=size).astype(np.int64)

# 2) exchange counts (one number per pair of ranks)
recv_counts = np.empty(size, dtype=np.int64)
comm.Alltoall(send_counts, recv_counts)

# 3) tokens to their experts: counts and displacements in numbers of doubles
def spec(buf, counts):
    counts = [int(c) * D for c in counts]
    displs = [sum(counts[:i]) for i in range(size)]
    return [buf, (counts, displs), MPI.DOUBLE]

arrived = np.empty((int(recv_counts.sum()), D))
comm.Alltoallv(spec(send, send_counts), spec(arrived, recv_counts))

# 4) my expert's work, and the results back to where the tokens came from
processed = np.ascontiguousarray(arrived @ experts[rank])
back = np.empty_like(send)
comm.Alltoallv(spec(processed, recv_counts), spec(back, send_counts))

# 5) undo the grouping
y = np.empty_like(x)
y[order] = back

# serial reference: every token through its own expert
ref = np.stack([tok @ experts[e] for tok, e in zip(x, dest)])
if not np.allclose(y, ref):
    sys.exit(f"rank {rank}: expert-parallel output differs from the serial computation")
load = np.empty(size, dtype=np.int64)
comm.Allreduce(send_counts, load, op=MPI.SUM)
if rank == 0:
    print(f"expert parallel ok: tokens per expert {load.tolist()} ({size * TOKENS} tokens)")
