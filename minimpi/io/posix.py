"""The operating system side of MPI-IO: whole-run ``pread``/``pwrite`` and error classes.

Every byte minimpi moves to or from a file goes through :func:`write_runs` or
:func:`read_runs`: one ``os.pwrite``/``os.preadv`` per contiguous file run (reads of runs
close together are sieved: one ``preadv`` of their extent), repeated until the run is
complete, so a short write is never taken for success (a write that returns 0
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


#: Data sieving, for reads (ROMIO's idea): runs separated by small holes are read with one
#: ``preadv`` of their whole extent into a scratch buffer, and copied out of it - one system
#: call instead of one per run. A hole ends a sieve group when reading it would cost more
#: than the call it saves (two_phase's READ_CALL / IO_BYTE is about 12 KiB); a group reads
#: at most about SIEVE_BUFFER bytes.
SIEVE_MAX_HOLE = 16 * 2**10
SIEVE_BUFFER = 4 * 2**20


def sieve_groups(offsets: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The index where each sieve group of the runs starts (the runs of one group are read
    with one call); runs out of order or overlapping start a group of their own."""
    n = len(offsets)
    if n == 0:
        return np.zeros(0, np.int64)
    holes = offsets[1:] - (offsets[:-1] + lengths[:-1])
    new_segment = np.concatenate(([True], (holes < 0) | (holes > SIEVE_MAX_HOLE)))
    segment_lo = offsets[new_segment][np.cumsum(new_segment) - 1]
    chunk = (offsets - segment_lo) // SIEVE_BUFFER
    new_group = new_segment | np.concatenate(([True], chunk[1:] != chunk[:-1]))
    return np.flatnonzero(new_group)


def _pread_full(fd: int, into: memoryview, offset: int, where: Where) -> int:
    """Read ``len(into)`` bytes at ``offset`` (fewer only at the end of the file)."""
    done, n = 0, len(into)
    while done < n:
        try:
            got = os.preadv(fd, [into[done:]], offset + done)
        except OSError as err:
            raise os_error(err, call=where.call, path=where.path, rank=where.rank,
                           offset=offset + done) from None
        if got == 0:
            break
        done += got
    return done


def _copy_runs(scratch: np.ndarray, rel: np.ndarray, lens: np.ndarray, dest: np.ndarray
               ) -> None:
    """``dest`` (the runs back to back) from ``scratch`` at offsets ``rel``: a strided view
    when the runs are equal and evenly spaced (a vector filetype), else a gather."""
    k = len(rel)
    run = int(lens[0])
    if (lens == run).all() and (k == 1 or (np.diff(rel) == rel[1] - rel[0]).all()):
        stride = int(rel[1] - rel[0]) if k > 1 else run
        src = np.lib.stride_tricks.as_strided(scratch[int(rel[0]):], shape=(k, run),
                                              strides=(stride, 1), writeable=False)
        dest.reshape(k, run)[...] = src
        return
    starts = np.concatenate(([0], np.cumsum(lens)[:-1]))
    dest[...] = scratch[np.arange(len(dest)) + np.repeat(rel - starts, lens)]


def read_runs(fd: int, offsets: np.ndarray, lengths: np.ndarray, out: memoryview,
              where: Where) -> int:
    """Read the file runs into ``out`` back to back; returns how many bytes were read
    before the end of the file (the rest of ``out`` is left as it was). Runs close
    together are sieved (see SIEVE_MAX_HOLE)."""
    offsets = np.asarray(offsets, np.int64)
    lengths = np.asarray(lengths, np.int64)
    n = len(offsets)
    groups = sieve_groups(offsets, lengths)
    if len(groups) == n:                      # nothing to sieve: one call per run
        return _read_each(fd, offsets, lengths, out, where, 0)
    flat = np.frombuffer(out, np.uint8)
    positions = np.concatenate(([0], np.cumsum(lengths)))
    scratch = None
    for a, b in zip(groups.tolist(), groups[1:].tolist() + [n]):
        pos = int(positions[a])
        if b - a == 1:
            done = _read_each(fd, offsets[a:b], lengths[a:b], out, where, pos)
            if done < int(positions[b]):
                return done
            continue
        lo, hi = int(offsets[a]), int(offsets[b - 1] + lengths[b - 1])
        if scratch is None or len(scratch) < hi - lo:
            scratch = np.empty(hi - lo, np.uint8)
        got = _pread_full(fd, memoryview(scratch)[:hi - lo], lo, where)
        rel, lens = offsets[a:b] - lo, lengths[a:b]
        if got == hi - lo:
            _copy_runs(scratch, rel, lens, flat[pos:int(positions[b])])
            continue
        # the end of the file falls in this group: the runs before it, in order
        for r, length in zip(rel.tolist(), lens.tolist()):
            have = max(0, min(length, got - r))
            flat[pos:pos + have] = scratch[r:r + have]
            pos += have
            if have < length:
                return pos
    return int(positions[n])


def _read_each(fd: int, offsets: np.ndarray, lengths: np.ndarray, out: memoryview,
               where: Where, pos: int) -> int:
    """One ``preadv`` per run (repeated until the run is complete), into ``out`` from
    ``pos``; returns where the data ends (short at the end of the file)."""
    for off, n in zip(offsets.tolist(), lengths.tolist()):
        got = _pread_full(fd, out[pos:pos + n], off, where)
        pos += got
        if got < n:
            return pos
    return pos
