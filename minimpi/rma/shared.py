"""Windows in shared memory: one segment per window on one host, every rank's part mapped
by every rank (``Win.Allocate_shared``, and ``Win.Allocate`` when all ranks share a host).

Rank 0 of the window's communicator creates a file in ``/dev/shm`` (else the temporary
directory) of the summed sizes, every rank maps it, and once all have mapped it rank 0 removes
the name, so nothing is left behind even if the job dies. Rank ``r``'s part starts at the
sum of the sizes before it, each rounded up to 64 bytes (so parts never share a cache line
and any element type is aligned). ``Put``/``Get`` to a rank of such a window copy straight
from and to that memory, and the accumulates are applied there by the origin under the
segment's byte-range lock (:mod:`minimpi.rma.atomics`; every rank keeps its descriptor of the
file open for it): the target need not call MPI for any of them.
"""
from __future__ import annotations

import mmap
import os
import tempfile
import uuid
from typing import Any, List, Optional, Sequence

import numpy as np

from .atomics import RangeLock
from .errors import RmaSharedError

_ALIGN = 64


def _shm_dir() -> str:
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        return "/dev/shm"
    return tempfile.gettempdir()


def one_host(hosts: Sequence[int]) -> bool:
    return len(set(hosts)) <= 1


class SharedSegment:
    """The mapped segment of one window: ``parts[r]`` is rank ``r``'s memory (uint8)."""

    def __init__(self, mapping: Any, sizes: Sequence[int], offsets: Sequence[int],
                 fd: int = -1) -> None:
        self.mapping = mapping
        whole = np.frombuffer(mapping, np.uint8) if mapping is not None else np.zeros(0, np.uint8)
        self.parts: List[np.ndarray] = [whole[o:o + n] for o, n in zip(offsets, sizes)]
        #: the accumulates' cross-process lock (None for an empty segment: nothing to lock)
        self.lock: Optional[RangeLock] = RangeLock(fd, offsets) if fd >= 0 else None

    def release(self) -> None:
        """Drop this side's references (the mapping goes when its last view does) and
        close its descriptor."""
        self.parts = []
        self.mapping = None
        if self.lock is not None:
            self.lock.close()


def allocate(comm: Any, size: int, call: str) -> SharedSegment:
    """Collective over ``comm`` (every rank on one host): map one segment holding every
    rank's ``size`` bytes. Any rank's failure is raised on every rank."""
    sizes = comm.allgather(int(size))
    offsets, total = [], 0
    for n in sizes:
        offsets.append(total)
        total += -(-n // _ALIGN) * _ALIGN
    if total == 0:
        return SharedSegment(None, sizes, offsets)
    path, problem = None, None
    if comm.Get_rank() == 0:
        path = os.path.join(_shm_dir(), f"minimpi-win-{os.getpid()}-{uuid.uuid4().hex[:12]}")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.ftruncate(fd, total)
            finally:
                os.close(fd)
        except OSError as exc:
            problem = f"{call}: rank 0 could not create shared memory {path} ({exc})"
    path, problem = comm.bcast((path, problem), root=0)
    mapping, fd = None, -1
    if problem is None:
        try:
            fd = os.open(path, os.O_RDWR)      # kept open: the accumulates lock ranges of it
            mapping = mmap.mmap(fd, total)
        except OSError as exc:
            if fd >= 0:
                os.close(fd)
                fd = -1
            problem = f"{call}: rank {comm.Get_rank()} could not map shared memory {path} ({exc})"
    problems = [p for p in comm.allgather(problem) if p]
    if comm.Get_rank() == 0 and path is not None:
        try:
            os.unlink(path)
        except OSError:
            pass
    if problems:
        if fd >= 0:
            os.close(fd)
        raise RmaSharedError("; ".join(problems))
    return SharedSegment(mapping, sizes, offsets, fd)
