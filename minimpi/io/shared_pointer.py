"""The shared file pointer (``Read_shared``, ``Write_ordered``, ``Seek_shared``...).

Where it lives:

* a file opened on **one** process keeps it in memory (:class:`LocalPointer`);
* otherwise in a small **lock file**: 8 bytes holding the pointer, read-modified-written under
  a blocking ``fcntl`` lock (:class:`LockFilePointer`). A lock file needs no progress from any
  other rank (there is no progress thread to serve a pointer held by one rank), and the
  waiting process sleeps in the kernel instead of spinning.

No lock file is left behind, after ``Close`` or a crash (MPICH's ROMIO leaves none either):

* all ranks on **one host** (the usual case): rank 0 makes the lock file in this host's
  temporary folder (``/dev/shm`` where there is one) during ``Open``, every rank opens it,
  and rank 0 removes its name before ``Open`` returns. The open descriptors keep it alive
  until the last rank closes it, or ends: the kernel then frees it.
* ranks on **several hosts**: an unlinked file cannot be shared over a network file system
  (NFS clients see it vanish), so the lock file is named at ``Open`` (``.<name>.<random>.shfp``
  next to the data file) but made only by the first shared-pointer call, as ROMIO does, and
  removed by rank 0 at ``Close``. A job that ends abnormally after a shared-pointer call
  leaves it (so does ROMIO); one that never uses the shared pointer never makes it.

Positions are in etypes of the current view, as MPI defines them.
"""
from __future__ import annotations

import errno
import fcntl
import os
import secrets
import struct
import tempfile
import threading
from typing import Any, Callable, Optional

from ..errors import ERR_ACCESS, FileError

_FMT = "<q"
# fcntl locks exclude other processes only; ranks that are threads of one process (the
# in-process worlds of the tests) also take this lock, one per lock file
_thread_locks: dict = {}
_thread_locks_guard = threading.Lock()
#: where a one-host lock file is made (its name is removed at once): memory, not a disk
_HOST_FOLDERS = ("/dev/shm",)


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
    """A shared pointer in a lock file (see the module docstring): ``fd`` is the descriptor
    of a lock file already open (one host; its name may be gone), or None to make or open
    ``path`` at the first use that needs it (several hosts)."""

    def __init__(self, path: str, fd: Optional[int] = None) -> None:
        self.path = path
        self._fd = fd
        with _thread_locks_guard:
            self._thread_lock = _thread_locks.setdefault(path, threading.Lock())

    def _descriptor(self, create: bool) -> Optional[int]:
        """The lock file's descriptor, opening (``create``: making) it on first use; None
        when it does not exist yet and ``create`` is false (the pointer is then 0)."""
        if self._fd is None:
            flags = os.O_RDWR | (os.O_CREAT if create else 0)
            try:
                self._fd = os.open(self.path, flags, 0o600)
            except FileNotFoundError:
                if create:
                    raise self._unavailable(FileNotFoundError(errno.ENOENT, "no such "
                                                              "folder")) from None
                return None
            except OSError as err:
                raise self._unavailable(err) from None
        return self._fd

    def _unavailable(self, err: OSError) -> FileError:
        return FileError(f"the shared file pointer needs its lock file {self.path!r}, which "
                         f"this rank could not open: {err}", ERR_ACCESS)

    def _locked(self, update: Callable[[int], int], create: bool = True) -> int:
        with self._thread_lock:
            fd = self._descriptor(create)
            if fd is None:
                return 0
            return _locked_between_processes(fd, update)

    def fetch_add(self, n: int) -> int:
        return self._locked(lambda v: v + n)

    def get(self) -> int:
        return self._locked(lambda v: v, create=False)

    def set(self, value: int) -> None:
        # a lock file nobody made yet holds 0: setting 0 needs no file
        self._locked(lambda v: value, create=value != 0)

    def close(self, remove: bool) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        with _thread_locks_guard:
            _thread_locks.pop(self.path, None)
        if remove:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass


class UnavailablePointer:
    """The shared pointer of a file whose lock file could not be made: every use says why."""

    def __init__(self, why: str) -> None:
        self.why = why

    def _refuse(self, *args: Any) -> int:
        raise FileError(self.why, ERR_ACCESS)

    fetch_add = get = set = _refuse

    def close(self, remove: bool) -> None:
        pass


def _locked_between_processes(fd: int, update: Callable[[int], int]) -> int:
    fcntl.lockf(fd, fcntl.LOCK_EX, 8, 0)
    try:
        raw = os.pread(fd, 8, 0)
        value = struct.unpack(_FMT, raw)[0] if len(raw) == 8 else 0
        new = update(value)
        if new != value:
            os.pwrite(fd, struct.pack(_FMT, new), 0)
        return value
    finally:
        fcntl.lockf(fd, fcntl.LOCK_UN, 8, 0)


def shared_pointer(comm: Any, path: str) -> Any:
    """The shared file pointer of ``path`` opened on ``comm`` (collective over ``comm``; see
    the module docstring for where it lives)."""
    if comm.Get_size() == 1:
        return LocalPointer()
    if len(set(comm.endpoint.hosts)) == 1:
        return _one_host_pointer(comm, path)
    name = None
    if comm.Get_rank() == 0:
        name = os.path.join(os.path.dirname(os.path.abspath(path)),
                            f".{os.path.basename(path)}.{secrets.token_hex(6)}.shfp")
    return LockFilePointer(comm.bcast(name, 0))


def _one_host_pointer(comm: Any, path: str) -> Any:
    """Rank 0 makes the lock file, every rank opens it, rank 0 removes its name."""
    rank = comm.Get_rank()
    made = None
    if rank == 0:
        made = _make_lock_file(path)
    kind, what = comm.bcast(None if made is None else made[:2], 0)
    if kind == "error":
        return UnavailablePointer(what)
    pointer: Any
    if rank == 0:
        pointer = LockFilePointer(what, made[2])
    else:
        try:
            pointer = LockFilePointer(what, os.open(what, os.O_RDWR))
        except OSError as err:
            pointer = UnavailablePointer(f"the shared file pointer of {path!r} needs the lock "
                                         f"file {what!r} that rank 0 made, which rank {rank} "
                                         f"could not open: {err}")
    comm.Barrier()               # every rank has it open: its name can go
    if rank == 0:
        try:
            os.unlink(what)
        except FileNotFoundError:
            pass
    return pointer


def _make_lock_file(path: str) -> tuple:
    """("ok", lock file path, descriptor) or ("error", why, None)."""
    folders = [f for f in _HOST_FOLDERS if os.path.isdir(f) and os.access(f, os.W_OK)]
    folders += [tempfile.gettempdir(), os.path.dirname(os.path.abspath(path))]
    problems = []
    for folder in folders:
        try:
            fd, lock = tempfile.mkstemp(prefix="minimpi-shfp-", suffix=".lock", dir=folder)
        except OSError as err:
            problems.append(f"{folder}: {err}")
            continue
        os.pwrite(fd, struct.pack(_FMT, 0), 0)
        return ("ok", lock, fd)
    return ("error", f"the shared file pointer of {path!r} needs a lock file, which rank 0 "
                     f"could not make ({'; '.join(problems)})", None)
