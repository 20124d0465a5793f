"""Which epochs a rank has open on a window, and the ERR_RMA_SYNC checks built on them.

An operation to a target is allowed inside a fence epoch (after a ``Fence`` without
``MODE_NOSUCCEED``), a lock on that target (``Lock``/``Lock_all``) or an access epoch that
names it (``Start``). Everything else - and ``Unlock`` without ``Lock``, ``Complete``
without ``Start``, ``Wait`` without ``Post`` - is an :class:`RmaSyncError`.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from ..constants import LOCK_EXCLUSIVE
from .errors import RmaSyncError


class Epochs:
    def __init__(self, rank: int, label: str) -> None:
        self.rank = rank
        self.label = label
        self.fence_open = False
        #: target -> (lock type, no lock taken because of MODE_NOCHECK)
        self.locks: Dict[int, Tuple[int, bool]] = {}
        self.lock_all: Optional[bool] = None          # None, or "taken with MODE_NOCHECK"
        self.access: Optional[List[int]] = None       # Start's targets
        self.exposure: Optional[List[int]] = None     # Post's origins

    def _error(self, call: str, what: str) -> RmaSyncError:
        return RmaSyncError(f"rank {self.rank}: Win.{call} on window {self.label}: {what} "
                            f"(MPI_ERR_RMA_SYNC)")

    def check_access(self, target: int, call: str) -> None:
        if self.fence_open or self.lock_all is not None or target in self.locks:
            return
        if self.access is not None and target in self.access:
            return
        raise self._error(call, f"no access epoch is open for target rank {target}; "
                                f"call Fence, Lock({target}), Lock_all or Start first")

    def passive(self, target: int) -> bool:
        """Whether a lock epoch covers ``target`` (Flush needs one)."""
        return self.lock_all is not None or target in self.locks

    def check_flush(self, target: int, call: str) -> None:
        if not self.passive(target):
            raise self._error(call, f"no passive target epoch on rank {target}: Flush needs "
                                    f"Lock({target}) or Lock_all")

    def check_lock(self, target: int, lock_type: int, call: str) -> None:
        if target in self.locks:
            raise self._error(call, f"rank {target} is already locked by this rank "
                                    f"(Unlock it first)")
        if self.lock_all is not None:
            raise self._error(call, "this rank holds Lock_all; Lock a single target after "
                                    "Unlock_all")
        if self.access is not None or self.exposure is not None:
            raise self._error(call, "a post/start epoch is open; close it first")

    def check_unlock(self, target: int, call: str) -> Tuple[int, bool]:
        held = self.locks.get(target)
        if held is None:
            raise self._error(call, f"this rank holds no lock on rank {target} "
                                    f"(Unlock without Lock)")
        return held

    def check_fence(self) -> None:
        if self.locks or self.lock_all is not None:
            raise self._error("Fence", "a lock epoch is open (Unlock/Unlock_all first)")
        if self.access is not None or self.exposure is not None:
            raise self._error("Fence", "a post/start epoch is open (Complete/Wait first)")

    @staticmethod
    def lock_name(lock_type: int) -> str:
        return "exclusive" if lock_type == LOCK_EXCLUSIVE else "shared"
