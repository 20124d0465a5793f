import numpy as np
from mpi4py import MPI

NY, NX, STEPS = 16, 16, 50                    # the global grid and the iterations

comm = MPI.COMM_WORLD
dims = MPI.Compute_dims(comm.Get_size(), 2)   # e.g. 4 ranks -> a 2 x 2 grid of ranks
cart = comm.Create_cart(dims, periods=[False, False])
py, px = cart.Get_coords(cart.Get_rank())
h, w = NY // dims[0], NX // dims[1]           # my block (NY, NX divisible by dims)

# My block with one ghost cell on every side; the top edge of the whole plate is hot (1.0).
u = np.zeros((h + 2, w + 2))
if py == 0:
    u[0, :] = 1.0


def part(starts, subsizes):
    """The cells of u at `starts` of shape `subsizes`, as a datatype (no copy needed)."""
    return MPI.DOUBLE.Create_subarray([h + 2, w + 2], subsizes, starts).Commit()


row, col = [1, w], [h, 1]
send = {"up": part([1, 1], row), "down": part([h, 1], row),
        "left": part([1, 1], col), "right": part([1, w], col)}
recv = {"up": part([0, 1], row), "down": part([h + 1, 1], row),
        "left": part([1, 0], col), "right": part([1, w + 1], col)}
up, down = cart.Shift(0, 1)                   # MPI.PROC_NULL at the plate's edges
left, right = cart.Shift(1, 1)


def exchange_halos():
    for there, back, to, frm in (("up", "down", up, down), ("down", "up", down, up),
                                 ("left", "right", left, right),
                                 ("right", "left", right, left)):
        # send my edge towards `to`, receive the ghost cells on the opposite side
        cart.Sendrecv([u, 1, send[there]], dest=to, recvbuf=[u, 1, recv[back]], source=frm)


for _ in range(STEPS):
    exchange_halos()
    u[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])

# Check against the same computation on one rank.
blocks = cart.gather(((py, px), u[1:-1, 1:-1].copy()), root=0)
if cart.Get_rank() == 0:
    full = np.zeros((NY + 2, NX + 2))
    full[0, :] = 1.0
    for _ in range(STEPS):
        full[1:-1, 1:-1] = 0.25 * (full[:-2, 1:-1] + full[2:, 1:-1]
                                   + full[1:-1, :-2] + full[1:-1, 2:])
    ok = all(np.allclose(b, full[1 + y * h:1 + (y + 1) * h, 1 + x * w:1 + (x + 1) * w])
             for (y, x), b in blocks)
    print(f"{dims[0]} x {dims[1]} ranks, {STEPS} steps: matches the serial run: {ok}; "
          f"temperature at the centre {full[NY // 2, NX // 2]:.4f}")
for t in list(send.values()) + list(recv.values()):
    t.Free()
