"""The operating system side of MPI-IO: whole-run ``pread``/``pwrite`` and error classes.

Every byte minimpi moves to or from a file goes through :func:`write_runs` or
:func:`read_runs`: one ``os.pwrite``/``os.preadv`` per contiguous file run, repeated until
the run is complete, so a short write is never taken for success (a write that returns 0
bytes, or fails, raises). :func:`os_error` turns an ``OSError`` into an ``MPI.Exception``
of the matching MPI error class that names the file, the rank, the call, the offset and
the operating system's error.
"""
from __future__ import annotations

import errno
import os

import numpy as np

from ..errors import (
    ERR_ACCESS,
    ERR_BAD_FILE,
    ERR_FILE_EXISTS,
    ERR_IO,
    ERR_NO_SPACE,
    ERR_NO_SUCH_FILE,
    ERR_QUOTA,
    ERR_READ_ONLY,
    FileError,
)

#: errno -> MPI error class (anything else is ERR_IO)
ERRNO_CLASSES = {
    errno.ENOENT: ERR_NO_SUCH_FILE,
    errno.ENOTDIR: ERR_NO_SUCH_FILE,
    errno.EACCES: ERR_ACCESS,
    errno.EPERM: ERR_ACCESS,
    errno.EEXIST: ERR_FILE_EXISTS,
    errno.ENOSPC: ERR_NO_SPACE,
    errno.EFBIG: ERR_NO_SPACE,       # past the file-size limit: no room for these bytes
    errno.EDQUOT: ERR_QUOTA,
    errno.EROFS: ERR_READ_ONLY,
    errno.EISDIR: ERR_BAD_FILE,
    errno.ENAMETOOLONG: ERR_BAD_FILE,
    errno.EBADF: ERR_ACCESS,         # a write on a descriptor opened read-only
}


def os_error(err: OSError, *, call: str, path: str, rank: int | None,
             offset: int | None = None) -> FileError:
    """``err`` as an MPI.Exception of the right class, naming the file, rank and offset
    (``rank`` None: a call made outside any communicator, such as ``File.Delete``)."""
    code = err.errno if err.errno is not None else 0
    name = errno.errorcode.get(code, str(code))
    at = "" if offset is None else f" at byte offset {offset}"
    who = "" if rank is None else f" on rank {rank}"
    return FileError(f"{call}{who}: file {path!r}{at}: {name}: "
                     f"{err.strerror or err}", ERRNO_CLASSES.get(code, ERR_IO))


class Where:
    """What an error message names: the call, the file and the rank."""

    __slots__ = ("call", "path", "rank")

    def __init__(self, call: str, path: str, rank: int) -> None:
        self.call, self.path, self.rank = call, path, rank


def write_runs(fd: int, offsets: np.ndarray, lengths: np.ndarray, data: memoryview,
               where: Where) -> None:
    """Write ``data`` (the runs' bytes back to back) to the file runs ``offsets``/``lengths``.

    Raises a FileError at the first failing run; a short write is continued until the run
    is complete (and a write of 0 bytes is an error, never a silent truncation).
    """
    pos = 0
    for off, n in zip(offsets.tolist(), lengths.tolist()):
        done = 0
        while done < n:
            try:
                wrote = os.pwrite(fd, data[pos + done:pos + n], off + done)
            except OSError as err:
                raise os_error(err, call=where.call, path=where.path, rank=where.rank,
                               offset=off + done) from None
            if wrote <= 0:
                raise FileError(f"{where.call} on rank {where.rank}: file {where.path!r} at "
                                f"byte offset {off + done}: the system wrote 0 of "
                                f"{n - done} bytes", ERR_IO)
            done += wrote
        pos += n


def read_runs(fd: int, offsets: np.ndarray, lengths: np.ndarray, out: memoryview,
              where: Where) -> int:
    """Read the file runs into ``out`` back to back; returns how many bytes were read
    before the end of the file (the rest of ``out`` is left as it was)."""
    pos = 0
    for off, n in zip(offsets.tolist(), lengths.tolist()):
        done = 0
        while done < n:
            try:
                got = os.preadv(fd, [out[pos + done:pos + n]], off + done)
            except OSError as err:
                raise os_error(err, call=where.call, path=where.path, rank=where.rank,
                               offset=off + done) from None
            if got == 0:          # end of file
                return pos + done
            done += got
        pos += n
    return pos
