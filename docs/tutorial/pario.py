import numpy as np
from mpi4py import MPI

NY, NX = 8, 12                                  # a global 2-D array of int32

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
dims = MPI.Compute_dims(size, 2)
cart = comm.Create_cart(dims)
py, px = cart.Get_coords(rank)
h, w = NY // dims[0], NX // dims[1]

# My block of the global array, filled with my rank.
block = np.full((h, w), rank, dtype="i4")

# The file holds the whole array in row-major order; my view of it is my block.
view = MPI.INT.Create_subarray([NY, NX], [h, w], [py * h, px * w]).Commit()
fh = MPI.File.Open(cart, "grid.bin", MPI.MODE_CREATE | MPI.MODE_WRONLY)
fh.Set_view(0, MPI.INT, view)
fh.Write_all(block)                             # one collective write: all blocks at once
fh.Close()
view.Free()

if rank == 0:
    print(np.fromfile("grid.bin", dtype="i4").reshape(NY, NX))
