"""A target's lock table: who holds its window (``Win.Lock``), who waits, in order.

Shared locks coexist; an exclusive one excludes everything. Requests are granted in arrival
order (a shared request behind a waiting exclusive one waits too, so writers are not starved).
Granting calls the request's callback: the window's server answers the origin then.
"""
from __future__ import annotations

from collections import deque
from typing import Callable, Deque, Dict, Tuple

from ..constants import LOCK_EXCLUSIVE


class LockTable:
    """The locks on one rank's window."""

    def __init__(self) -> None:
        self.exclusive_holder: int = -1
        self.shared_holders: Dict[int, int] = {}      # origin -> how many shared locks it holds
        self._waiting: Deque[Tuple[int, int, Callable[[], None]]] = deque()

    def _free_for(self, mode: int) -> bool:
        if self.exclusive_holder >= 0:
            return False
        return mode != LOCK_EXCLUSIVE or not self.shared_holders

    def _take(self, origin: int, mode: int) -> None:
        if mode == LOCK_EXCLUSIVE:
            self.exclusive_holder = origin
        else:
            self.shared_holders[origin] = self.shared_holders.get(origin, 0) + 1

    def request(self, origin: int, mode: int, granted: Callable[[], None]) -> None:
        """Grant ``origin`` a lock of ``mode`` now if possible, else queue it."""
        if not self._waiting and self._free_for(mode):
            self._take(origin, mode)
            granted()
        else:
            self._waiting.append((origin, mode, granted))

    def release(self, origin: int) -> bool:
        """``origin`` gives its lock back; grant the waiters that now can go. False if
        ``origin`` held no lock here."""
        if self.exclusive_holder == origin:
            self.exclusive_holder = -1
        elif origin in self.shared_holders:
            n = self.shared_holders[origin] - 1
            if n:
                self.shared_holders[origin] = n
            else:
                del self.shared_holders[origin]
        else:
            return False
        self._grant_waiters()
        return True

    def forget(self, origin: int) -> bool:
        """``origin`` can never unlock (it is gone): drop its waiting requests, release what
        it holds and grant the waiters that now can go. True if it held or wanted a lock."""
        before = len(self._waiting)
        self._waiting = deque(w for w in self._waiting if w[0] != origin)
        touched = len(self._waiting) != before
        held = self.exclusive_holder == origin or origin in self.shared_holders
        if held:
            self.shared_holders.pop(origin, None)
            if self.exclusive_holder == origin:
                self.exclusive_holder = -1
        if touched or held:
            self._grant_waiters()
        return touched or held

    def _grant_waiters(self) -> None:
        while self._waiting and self._free_for(self._waiting[0][1]):
            o, mode, granted = self._waiting.popleft()
            self._take(o, mode)
            granted()

    def holders(self) -> Tuple[str, Tuple[int, ...]]:
        """(``"exclusive"``/``"shared"``/``"free"``, the origins that hold it)."""
        if self.exclusive_holder >= 0:
            return "exclusive", (self.exclusive_holder,)
        if self.shared_holders:
            return "shared", tuple(sorted(self.shared_holders))
        return "free", ()

    def waiters(self) -> Tuple[Tuple[int, int], ...]:
        """The origins waiting for a lock, in the order they will get it: (origin, mode)."""
        return tuple((o, mode) for o, mode, _ in self._waiting)

    def describe(self) -> str:
        if self.exclusive_holder >= 0:
            return f"held exclusively by rank {self.exclusive_holder}"
        if self.shared_holders:
            return f"held shared by ranks {sorted(self.shared_holders)}"
        return "free"
