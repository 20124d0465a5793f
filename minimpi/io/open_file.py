"""What an open file is (``OpenFile``) and the checks every data access shares.

``File`` (file.py) is the mpi4py-facing handle; the data-access modules
(independent.py, two_phase.py) work on the :class:`OpenFile` it holds.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
from typing import Any, Iterator, Optional

import numpy as np

from ..constants import MODE_RDONLY, MODE_SEQUENTIAL, MODE_WRONLY
from ..errors import (
    ERR_ACCESS,
    ERR_READ_ONLY,
    ERR_UNSUPPORTED_OPERATION,
    ArgumentError,
    DatatypeError,
    FileError,
    MinimpiError,
)
from .posix import Where, os_error
from .view import FileView


class OpenFile:
    """The state of one open file on this rank (see ``File``)."""

    def __init__(self, comm: Any, path: str, fd: int, amode: int, info: dict,
                 shared: Any) -> None:
        self.comm = comm                 # a private duplicate of the user's communicator
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.path = path
        self.fd = fd
        self.amode = amode
        self.info = info                 # hints (str -> str)
        self.view = FileView.default()
        self.position = 0                # individual file pointer, in etypes of the view
        self.shared = shared             # shared file pointer (shared.py)
        self.atomic = False
        # MINIMPI_IO_EXPLAIN=1: rank 0 prints each collective call's plan (two_phase.Plan)
        self.explain = os.environ.get("MINIMPI_IO_EXPLAIN", "") not in ("", "0")
        self.split: Optional[tuple] = None   # a split collective in progress: (name, status)

    # ------------------------------------------------------------------ checks
    def where(self, call: str) -> Where:
        return Where(call, self.path, self.rank)

    def check_can_write(self, call: str) -> None:
        if self.amode & MODE_RDONLY:
            raise FileError(f"{call} on rank {self.rank}: file {self.path!r} was opened "
                            "MODE_RDONLY; it cannot be written", ERR_READ_ONLY)

    def check_can_read(self, call: str) -> None:
        if self.amode & MODE_WRONLY:
            raise FileError(f"{call} on rank {self.rank}: file {self.path!r} was opened "
                            "MODE_WRONLY; it cannot be read", ERR_ACCESS)

    def check_not_sequential(self, call: str) -> None:
        if self.amode & MODE_SEQUENTIAL:
            raise FileError(f"{call} on rank {self.rank}: file {self.path!r} was opened "
                            "MODE_SEQUENTIAL; only shared file pointer calls may access "
                            "it", ERR_UNSUPPORTED_OPERATION)

    def start_of(self, offset: Optional[int], call: str) -> int:
        """Where a data call starts, in etypes of the view: the explicit ``offset``, or the
        individual file pointer when it is None; a negative offset is an argument error."""
        start = self.position if offset is None else int(offset)
        if start < 0:
            raise ArgumentError(f"{call} on rank {self.rank}: offset must be >= 0 etypes, got "
                                f"{start}")
        return start

    def etypes_of(self, nbytes: int, datatype: Any, call: str) -> int:
        """``nbytes`` of data as a whole number of etypes of the view."""
        esize = self.view.esize
        if nbytes % esize:
            raise DatatypeError(
                f"{call} on rank {self.rank}: {nbytes} bytes of {datatype.name} are not a "
                f"whole number of the view's etype {self.view.etype.name} ({esize} bytes)")
        return nbytes // esize

    def file_size(self, call: str) -> int:
        try:
            return os.fstat(self.fd).st_size
        except OSError as err:
            raise os_error(err, call=call, path=self.path, rank=self.rank) from None

    @contextlib.contextmanager
    def atomic_range(self, offsets: np.ndarray, lengths: np.ndarray, write: bool
                     ) -> Iterator[None]:
        """In atomic mode, hold an fcntl lock over the bytes an access spans (shared for
        reads, exclusive for writes), so concurrent accesses see all or nothing."""
        if not self.atomic or len(offsets) == 0:
            yield
            return
        start = int(offsets[0])
        length = int(offsets[-1] + lengths[-1]) - start
        kind = fcntl.LOCK_EX if write else fcntl.LOCK_SH
        fcntl.lockf(self.fd, kind, length, start)
        try:
            yield
        finally:
            fcntl.lockf(self.fd, fcntl.LOCK_UN, length, start)


def failure_of(err: BaseException) -> tuple:
    """What an error looks like when told to the other ranks: (error class, message)."""
    if isinstance(err, MinimpiError):
        return (err.Get_error_class(), str(err), type(err).__name__)
    return (FileError.error_class, f"{type(err).__name__}: {err}", "FileError")


def agree(comm: Any, err: Optional[BaseException], call: str) -> None:
    """A collective call fails on every rank when it failed on one: each rank tells the
    others whether it failed; a rank that did raises its own error, the others raise a
    FileError of the first failure's class naming the rank and what went wrong."""
    mine = None if err is None else failure_of(err)
    everyone = comm.allgather(mine)
    if err is not None:
        raise err
    for rank, failure in enumerate(everyone):
        if failure is not None:
            cls, message, _kind = failure
            raise FileError(f"{call}: failed on rank {rank}, so on every rank: {message}",
                            cls)
