"""What one rank exposes in a window: its memory (or a dynamic window's attached regions),
its lock table and its post/start/complete/wait count - the target side the server uses."""
from __future__ import annotations

from contextlib import nullcontext
from typing import Any, ContextManager, Dict, Optional, Tuple

import numpy as np

from .atomics import RangeLock
from .errors import RmaAttachError, RmaRangeError
from .layout import Layout
from .locks import LockTable


class Exposed:
    """Rank ``rank``'s side of window ``label``.

    ``memory`` (uint8) is the window memory of a created/allocated/shared window; a dynamic
    window has none and exposes ``regions`` instead (attached buffers by absolute address).
    ``range_lock``: the shared segment's accumulate lock when ``memory`` lies in one (other
    ranks then apply accumulates to it straight, under that lock), else None.
    """

    def __init__(self, rank: int, label: str, memory: np.ndarray, dynamic: bool,
                 range_lock: Optional[RangeLock] = None) -> None:
        self.rank = rank
        self.label = label
        self.memory = memory
        self.dynamic = dynamic
        self.range_lock = range_lock
        self.regions: Dict[int, np.ndarray] = {}
        self.locks = LockTable()
        #: ``Complete`` notices received (``Win.Wait``/``Test`` consume them), in all and
        #: per origin
        self.completions = 0
        self.completed_by: Dict[int, int] = {}

    def completed(self, origin: int) -> None:
        self.completions += 1
        self.completed_by[origin] = self.completed_by.get(origin, 0) + 1

    def consume_completions(self, origins: Any) -> None:
        """An exposure epoch to ``origins`` ended: one notice of each is used up."""
        for origin in origins:
            n = self.completed_by.get(origin, 0) - 1
            if n > 0:
                self.completed_by[origin] = n
            else:
                self.completed_by.pop(origin, None)
        self.completions = sum(self.completed_by.values())

    # -- dynamic windows -------------------------------------------------------------------
    def attach(self, address: int, memory: np.ndarray) -> None:
        if address in self.regions:
            raise RmaAttachError(f"rank {self.rank}: Win.Attach on window {self.label}: "
                                 f"memory at address {address:#x} is already attached")
        self.regions[address] = memory

    def detach(self, address: int) -> None:
        if self.regions.pop(address, None) is None:
            raise RmaAttachError(f"rank {self.rank}: Win.Detach on window {self.label}: no "
                                 f"memory attached at address {address:#x} (attached: "
                                 f"{', '.join(hex(a) for a in sorted(self.regions)) or 'none'})")

    # -- what the server asks ----------------------------------------------------------------
    def atomic(self, memory: np.ndarray, layout: Layout, write: bool) -> ContextManager[Any]:
        """Hold what makes an accumulate on ``layout`` (relative to ``memory``, as
        :meth:`memory_for` returns them) atomic against the other ranks' accumulates: the
        segment's byte-range lock for window memory in shared memory; nothing otherwise
        (then this rank's server is the only writer, one request at a time)."""
        if self.range_lock is None or memory is not self.memory or not layout.nbytes:
            return _NOTHING
        return self.range_lock.hold(self.rank, layout.low, layout.high, write)

    def memory_for(self, layout: Layout, origin: int, call: str) -> Tuple[np.ndarray, Layout]:
        """The memory a layout falls in and the layout relative to it; a clear
        :class:`RmaRangeError` when it falls outside."""
        low, high = layout.low, layout.high
        if layout.nbytes == 0:
            return (self.memory if not self.dynamic else np.zeros(0, np.uint8)), \
                Layout(0, 0, layout.offsets, layout.lengths, True)
        if not self.dynamic:
            if low >= 0 and high <= self.memory.size:
                return self.memory, layout
            raise RmaRangeError(outside_text(origin, self.rank, self.label, call, low, high,
                                             self.memory.size))
        for address, memory in self.regions.items():
            if address <= low and high <= address + memory.size:
                return memory, layout.shifted(address)
        raise RmaRangeError(
            f"rank {origin}: Win.{call} on dynamic window {self.label}: bytes at address "
            f"{low:#x}..{high:#x} ({high - low} bytes) of rank {self.rank} are not inside "
            f"any attached memory (attached: "
            f"{', '.join(f'{a:#x}+{m.size}' for a, m in sorted(self.regions.items())) or 'none'}"
            f"); target displacements of a dynamic window are addresses (MPI.Get_address)")


_NOTHING = nullcontext()


def outside_text(origin: int, target: int, label: str, call: str, low: int, high: int,
                 size: int) -> str:
    return (f"rank {origin}: Win.{call} on window {label}: {high - low} bytes at offset {low} "
            f"are outside the window of rank {target}, which has {size} bytes "
            f"(MPI_ERR_RMA_RANGE); target displacements count in the target's disp_unit")
