"""MPI-IO (``MPI.File``): file views, independent and collective (two-phase) access.

file.py       the handle: Open/Close/Delete, sizes, info, atomicity, views, pointers
view.py       file views: etype/filetype/disp -> file byte runs; datareps
independent.py explicit offsets, individual and shared file pointers, ordered access
two_phase.py  collective access: the plan (cost model) and the two-phase schedule
shared.py     where the shared file pointer lives (memory, or a lock file)
userbuf.py    the user's buffer as packed bytes and back
runs.py       vectorised arithmetic on file byte runs
posix.py      pread/pwrite of whole runs; OS errors as MPI error classes
state.py      an open file's state; the error agreement of collective calls
"""
from .file import FILE_NULL, File

__all__ = ["File", "FILE_NULL"]
