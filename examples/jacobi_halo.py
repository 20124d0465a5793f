"""2-D Jacobi iteration with column halos sent as derived datatypes.

The global (ROWS, COLS) grid is split by columns: each rank holds a block of columns plus
one ghost column on each side. Every iteration a rank sends its first and last owned
columns to its neighbours and receives theirs into its ghost columns. A column of a C-order
array is strided in memory, so it travels as a derived datatype, never copied by hand:

    --datatype vector     MPI.DOUBLE.Create_vector(rows, 1, row_length)  (one type, the
                          buffer argument points at the column: [u[0, j:], 1, column])
    --datatype subarray   MPI.DOUBLE.Create_subarray(shape, [rows, 1], [0, j]) per column

The result is gathered on rank 0 (Gatherv with a resized column type) and compared with
the same iteration done serially; the program exits 1 if they differ.

    minimpi run -n 3 examples/jacobi_halo.py --datatype subarray
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
from mpi4py import MPI


def initial_grid(rows: int, cols: int) -> np.ndarray:
    """A fixed start: a hot left edge, a cool right edge, something non-trivial inside."""
    g = np.zeros((rows, cols))
    g[:, 0] = 100.0
    g[:, -1] = -50.0
    g[0, :] = np.linspace(100.0, -50.0, cols)
    g[1:-1, 1:-1] = np.fromfunction(lambda i, j: np.sin(i * 0.3) * np.cos(j * 0.2),
                                    (rows - 2, cols - 2))
    return g


def jacobi_step(u: np.ndarray) -> None:
    """One Jacobi sweep of the interior of ``u`` (in place, from a copy of the old values)."""
    old = u.copy()
    u[1:-1, 1:-1] = 0.25 * (old[:-2, 1:-1] + old[2:, 1:-1] + old[1:-1, :-2] + old[1:-1, 2:])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--datatype", choices=["vector", "subarray"], default="vector")
    parser.add_argument("--rows", type=int, default=40)
    parser.add_argument("--cols", type=int, default=31)
    parser.add_argument("--iterations", type=int, default=25)
    args = parser.parse_args()

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    rows, cols = args.rows, args.cols
    counts = [cols // size + (1 if r < cols % size else 0) for r in range(size)]
    first = sum(counts[:rank])
    width = counts[rank] + 2                       # owned columns + two ghost columns
    u = np.zeros((rows, width))
    u[:, 1:-1] = initial_grid(rows, cols)[:, first:first + counts[rank]]
    left = rank - 1 if rank > 0 else MPI.PROC_NULL
    right = rank + 1 if rank < size - 1 else MPI.PROC_NULL

    if args.datatype == "vector":
        column = MPI.DOUBLE.Create_vector(rows, 1, width).Commit()

        def col(j):                               # [buffer starting at column j, 1, column]
            return [u[0, j:], 1, column]
    else:
        columns = [MPI.DOUBLE.Create_subarray([rows, width], [rows, 1], [0, j]).Commit()
                   for j in range(width)]

        def col(j):
            return [u, 1, columns[j]]

    for _ in range(args.iterations):
        comm.Sendrecv(col(1), left, 0, col(width - 1), right, 0)          # to the left
        comm.Sendrecv(col(width - 2), right, 1, col(0), left, 1)          # to the right
        # the global boundary columns stay fixed: only interior columns are updated
        keep_left, keep_right = u[:, 1].copy(), u[:, -2].copy()
        jacobi_step(u)
        if rank == 0:
            u[:, 1] = keep_left
        if rank == size - 1:
            u[:, -2] = keep_right

    # gather the owned columns on rank 0 column by column: a column type resized to one
    # double, so that consecutive items are consecutive columns (on both sides)
    whole = np.zeros((rows, cols)) if rank == 0 else None
    local_column = MPI.DOUBLE.Create_vector(rows, 1, width).Create_resized(0, 8).Commit()
    global_column = MPI.DOUBLE.Create_vector(rows, 1, cols).Create_resized(0, 8).Commit()
    displs = [sum(counts[:r]) for r in range(size)]
    comm.Gatherv([u[0, 1:], counts[rank], local_column],
                 [whole, counts, displs, global_column] if rank == 0 else None, root=0)

    if rank == 0:
        expect = initial_grid(rows, cols)
        for _ in range(args.iterations):
            jacobi_step(expect)
        err = float(np.abs(whole - expect).max())
        ok = err < 1e-12
        print(f"jacobi_halo: {size} ranks, {rows}x{cols} grid, {args.iterations} iterations, "
              f"{args.datatype} columns: max error {err:.3g} {'OK' if ok else 'WRONG'}")
        if not ok:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
