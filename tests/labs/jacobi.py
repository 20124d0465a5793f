"""Lab 9: Jacobi iteration on a 2-D Cartesian process grid with halo exchange.

Each rank owns an NLxNL block of the global grid; ghost cells come from the neighbours
found with Cart.Shift (MPI.PROC_NULL at the fixed boundary). The result is compared with
the same iteration done serially on rank 0.
"""
import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
size = comm.Get_size()
dims = MPI.Compute_dims(size, [0, 0])
cart = comm.Create_cart(dims, periods=[False, False], reorder=True)
rank = cart.Get_rank()
px, py = cart.Get_coords(rank)
assert cart.Get_cart_rank([px, py]) == rank
assert cart.Get_topo()[0] == dims and cart.dims == dims and cart.ndim == 2
assert cart.Get_topology() == MPI.CART

NL = 6
NX, NY = dims[0] * NL, dims[1] * NL
STEPS = 30


def initial(nx, ny):
    g = np.zeros((nx + 2, ny + 2))
    g[0, :] = 1.0          # hot top edge (global boundary)
    return g


# local block with ghost layer
u = np.zeros((NL + 2, NL + 2))
if px == 0:
    u[0, :] = 1.0

up, down = cart.Shift(0, 1)
left, right = cart.Shift(1, 1)

for _ in range(STEPS):
    # rows: contiguous, send/recv straight from the array
    cart.Sendrecv(u[1, :].copy(), dest=up, recvbuf=(rbuf := np.empty(NL + 2)), source=down)
    if down != MPI.PROC_NULL:
        u[NL + 1, :] = rbuf
    cart.Sendrecv(u[NL, :].copy(), dest=down, recvbuf=rbuf, source=up)
    if up != MPI.PROC_NULL:
        u[0, :] = rbuf
    # columns: copy into contiguous buffers
    cbuf = np.empty(NL + 2)
    cart.Sendrecv(np.ascontiguousarray(u[:, 1]), dest=left, recvbuf=cbuf, source=right)
    if right != MPI.PROC_NULL:
        u[:, NL + 1] = cbuf
    cart.Sendrecv(np.ascontiguousarray(u[:, NL]), dest=right, recvbuf=cbuf, source=left)
    if left != MPI.PROC_NULL:
        u[:, 0] = cbuf
    new = u.copy()
    new[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    u = new

blocks = cart.gather(((px, py), u[1:-1, 1:-1]), root=0)
if rank == 0:
    g = initial(NX, NY)
    for _ in range(STEPS):
        n = g.copy()
        n[1:-1, 1:-1] = 0.25 * (g[:-2, 1:-1] + g[2:, 1:-1] + g[1:-1, :-2] + g[1:-1, 2:])
        g = n
    full = np.zeros((NX, NY))
    for (bx, by), blk in blocks:
        full[bx * NL:(bx + 1) * NL, by * NL:(by + 1) * NL] = blk
    err = np.abs(full - g[1:-1, 1:-1]).max()
    assert err < 1e-12, err
    print(f"jacobi: grid {dims}, max difference from serial {err:.1e}")
    print("jacobi: OK")
