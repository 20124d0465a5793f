"""The accumulate lock of a window in shared memory: byte-range locks on the segment's file.

MPI makes ``Accumulate``, ``Get_accumulate``, ``Fetch_and_op`` and ``Compare_and_swap``
atomic per element against each other. In a shared-memory window every rank applies them
straight in the target's part of the segment (:mod:`minimpi.rma.operations`), so the ranks
must exclude each other across processes. They do it with the kernel's record locks on the
segment's file: before touching bytes ``[low, high)`` of rank ``r``'s part, an origin locks
exactly that range of the file (``part offset + low`` .. ``+ high``), applies the op, and
unlocks. Overlapping accumulates wait for each other; disjoint ones (other elements, other
ranks' parts) never do, so no striping is needed. A waiting rank sleeps in the kernel
(``F_OFD_SETLKW``), it never spins. Fetches with ``NO_OP`` take a read lock, so atomic reads
share the range.

Open-file-description locks (``F_OFD_SETLKW``, Linux >= 3.15) belong to one ``open`` of the
file, not to a process, so every rank holds its own descriptor and the ranks of an
in-process world (threads) exclude each other as well as processes do. Where the platform
lacks them, classic ``lockf`` locks (per process) are taken under a per-process mutex of the
file, which keeps threads of one process apart.

Cost: two ``fcntl`` system calls per operation (lock, unlock), a few microseconds
(``benchmarks/rma_lock_cost.py`` measures it); the operation itself stays under the
lock only for the numpy update.
"""
from __future__ import annotations

import fcntl
import os
import struct
import threading
from typing import Dict, Sequence, Tuple

#: ``struct flock`` on Linux (x86-64, aarch64): short type, short whence, off_t start,
#: off_t len, pid_t pid (0 for open-file-description locks), padded to 32 bytes
_FLOCK = struct.Struct("hh4xqqi4x")
_OFD_WAIT = getattr(fcntl, "F_OFD_SETLKW", None)
_OFD_SET = getattr(fcntl, "F_OFD_SETLK", None)

#: fallback (no OFD locks): a mutex per file (device, inode) for the threads of this process
_PROCESS_MUTEXES: Dict[Tuple[int, int], threading.Lock] = {}
_PROCESS_MUTEXES_GUARD = threading.Lock()


class RangeLock:
    """Byte-range locks on one window segment, held through this rank's descriptor ``fd``.

    ``offsets[r]`` is where rank ``r``'s part starts in the segment. :meth:`hold` is the
    only entry: ``with lock.hold(r, low, high, write): ...``.
    """

    def __init__(self, fd: int, offsets: Sequence[int]) -> None:
        self.fd = fd
        self.offsets = tuple(int(o) for o in offsets)
        self.ofd = _OFD_WAIT is not None
        self._mutex = None
        if not self.ofd:
            st = os.fstat(fd)
            with _PROCESS_MUTEXES_GUARD:
                self._mutex = _PROCESS_MUTEXES.setdefault((st.st_dev, st.st_ino),
                                                          threading.Lock())

    def hold(self, rank: int, low: int, high: int, write: bool = True) -> "_Held":
        """Hold bytes ``[low, high)`` of rank ``rank``'s part (a write lock, or a read lock
        that other readers share) for a ``with`` body."""
        return _Held(self, self.offsets[rank] + low, high - low, write)

    def _acquire(self, start: int, length: int, write: bool) -> None:
        if self.ofd:
            kind = fcntl.F_WRLCK if write else fcntl.F_RDLCK
            fcntl.fcntl(self.fd, _OFD_WAIT, _FLOCK.pack(kind, os.SEEK_SET, start, length, 0))
        else:
            self._mutex.acquire()
            try:
                fcntl.lockf(self.fd, fcntl.LOCK_EX if write else fcntl.LOCK_SH, length, start)
            except BaseException:
                self._mutex.release()
                raise

    def _release(self, start: int, length: int) -> None:
        if self.ofd:
            fcntl.fcntl(self.fd, _OFD_SET,
                        _FLOCK.pack(fcntl.F_UNLCK, os.SEEK_SET, start, length, 0))
        else:
            try:
                fcntl.lockf(self.fd, fcntl.LOCK_UN, length, start)
            finally:
                self._mutex.release()

    def close(self) -> None:
        """Close this rank's descriptor (``Win.Free``); its locks go with it."""
        if self.fd >= 0:
            try:
                os.close(self.fd)
            finally:
                self.fd = -1


class _Held:
    """One ``with lock.hold(...)``: a plain class, not a generator (this is on the path
    of every accumulate, where a generator's frame costs more than the system calls)."""

    __slots__ = ("lock", "start", "length", "write")

    def __init__(self, lock: RangeLock, start: int, length: int, write: bool) -> None:
        self.lock, self.start, self.length, self.write = lock, start, length, write

    def __enter__(self) -> None:
        if self.length > 0:    # nothing touched; a zero length would mean "to end of file"
            self.lock._acquire(self.start, self.length, self.write)

    def __exit__(self, *exc: object) -> None:
        if self.length > 0:
            self.lock._release(self.start, self.length)
