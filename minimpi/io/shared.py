"""The shared file pointer (``Read_shared``, ``Write_ordered``, ``Seek_shared``...).

Where it lives:

* a file opened on **one** process keeps it in memory (:class:`LocalPointer`);
* otherwise it lives in a small **lock file** next to the data file
  (``.<name>.<random>.shfp``, made by the group's rank 0 at ``Open`` and removed at
  ``Close``): 8 bytes holding the pointer, read-modified-written under a blocking
  ``fcntl`` lock (:class:`LockFilePointer`). A lock file needs no progress from any other
  rank (there is no progress thread to serve a pointer held by one rank), works between
  hosts on a POSIX file system with working locks, and the waiting process sleeps in the
  kernel instead of spinning.

Positions are in etypes of the current view, as MPI defines them.
"""
from __future__ import annotations

import fcntl
import os
import struct
import threading

_FMT = "<q"
# fcntl locks exclude other processes only; ranks that are threads of one process (the
# in-process worlds of the tests) also take this lock, one per lock file
_thread_locks: dict = {}
_thread_locks_guard = threading.Lock()


class LocalPointer:
    """A shared pointer of a file only one process opened."""

    def __init__(self) -> None:
        self._value = 0

    def fetch_add(self, n: int) -> int:
        old, self._value = self._value, self._value + n
        return old

    def get(self) -> int:
        return self._value

    def set(self, value: int) -> None:
        self._value = value

    def close(self, remove: bool) -> None:
        pass


class LockFilePointer:
    """A shared pointer in a lock file (see the module docstring)."""

    def __init__(self, path: str, create: bool) -> None:
        self.path = path
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        self._fd = os.open(path, flags, 0o600)
        with _thread_locks_guard:
            self._thread_lock = _thread_locks.setdefault(path, threading.Lock())
        if create:
            os.pwrite(self._fd, struct.pack(_FMT, 0), 0)

    def _locked(self, update):
        with self._thread_lock:
            return self._locked_between_processes(update)

    def _locked_between_processes(self, update):
        fcntl.lockf(self._fd, fcntl.LOCK_EX, 8, 0)
        try:
            raw = os.pread(self._fd, 8, 0)
            value = struct.unpack(_FMT, raw)[0] if len(raw) == 8 else 0
            new = update(value)
            if new != value:
                os.pwrite(self._fd, struct.pack(_FMT, new), 0)
            return value
        finally:
            fcntl.lockf(self._fd, fcntl.LOCK_UN, 8, 0)

    def fetch_add(self, n: int) -> int:
        return self._locked(lambda v: v + n)

    def get(self) -> int:
        return self._locked(lambda v: v)

    def set(self, value: int) -> None:
        self._locked(lambda v: value)

    def close(self, remove: bool) -> None:
        os.close(self._fd)
        with _thread_locks_guard:
            _thread_locks.pop(self.path, None)
        if remove:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
