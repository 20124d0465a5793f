"""``mpi4py.util.sync`` over minimpi's RMA windows: Sequential, Counter, Mutex, Condition,
Semaphore - synchronisation objects shared by the ranks of a communicator.

minimpi's own design (same API as mpi4py's module):

* **Counter**: one integer (any numeric typecode) in a window on ``root``; ``next(incr)``
  is one ``Fetch_and_op(SUM)`` under a shared lock - atomic, so every value is handed out once.
* **Mutex**: a queue lock. The tail of the queue (a rank, or -1) lives in a window on rank 0.
  ``acquire`` swaps itself in as the tail (``Fetch_and_op(REPLACE)``); if there was a
  predecessor it tells it "I am next" and sleeps in a receive until the predecessor hands
  over. ``release`` takes itself out of the tail (``Compare_and_swap``) or, if somebody queued
  behind it, hands over to that rank. Waiting is a blocking receive: no spinning, first come
  first served.
* **Condition**: a ticket per waiter in a window on rank 0 (read and written while holding
  the mutex); ``notify(n)`` wakes the ``n`` oldest waiters with a message.
* **Semaphore**: a Counter guarded by a Condition.

Every object is collective to make and to free (it holds windows and a communicator).
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np
from mpi4py import MPI

__all__ = ["Sequential", "Counter", "Mutex", "Condition", "Semaphore"]

_NEXT, _GRANT, _WAKE = 1, 2, 3


class Sequential:
    """Run a block on one rank after another, in rank order (``with Sequential(comm):``)."""

    def __init__(self, comm: Any, tag: int = 0) -> None:
        self.comm = comm
        self.tag = tag

    def __enter__(self) -> "Sequential":
        self.begin()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.end()

    def begin(self) -> None:
        """Wait for the previous rank's ``end``."""
        if self.comm.Get_rank() > 0:
            self.comm.recv(source=self.comm.Get_rank() - 1, tag=self.tag)

    def end(self) -> None:
        """Let the next rank go."""
        rank, size = self.comm.Get_rank(), self.comm.Get_size()
        if rank < size - 1:
            self.comm.send(None, rank + 1, tag=self.tag)


def _freed(what: str) -> RuntimeError:
    return RuntimeError(f"mpi4py.util.sync: this {what} was freed")


class Counter:
    """A counter shared by the ranks of ``comm``: ``next()`` returns the current value and
    adds ``step`` to it, atomically (each value is handed out once)."""

    def __init__(self, start: Any = 0, step: Any = 1, *, typecode: str = "i",
                 comm: Any = MPI.COMM_SELF, info: Any = MPI.INFO_NULL, root: int = 0) -> None:
        dtype = np.dtype(typecode)
        self._dtype = dtype
        self._step = step
        self._root = root
        self._datatype = MPI.Datatype.fromcode(typecode)
        self._win: Optional[Any] = MPI.Win.Allocate(
            dtype.itemsize if comm.Get_rank() == root else 0, dtype.itemsize, info, comm)
        if comm.Get_rank() == root:
            np.frombuffer(self._win.tomemory(), dtype)[0] = start
        comm.Barrier()

    def __iter__(self) -> "Counter":
        return self

    def __next__(self) -> Any:
        return self.next()

    def next(self, incr: Any = None) -> Any:
        """The current value; the counter moves on by ``incr`` (default: ``step``)."""
        win = self._win
        if win is None:
            raise _freed("counter")
        add = np.array([self._step if incr is None else incr], self._dtype)
        old = np.zeros(1, self._dtype)
        win.Lock(self._root, MPI.LOCK_SHARED)
        win.Fetch_and_op([add, self._datatype], [old, self._datatype], self._root, 0, MPI.SUM)
        win.Unlock(self._root)
        return old[0].item()

    def free(self) -> None:
        """Free the counter (collective; a second call does nothing)."""
        if self._win is not None:
            self._win.Free()
            self._win = None


class Mutex:
    """A mutual exclusion lock shared by the ranks of ``comm`` (``recursive``: the holder
    may acquire it again and must release it as often)."""

    def __init__(self, *, recursive: bool = False, comm: Any = MPI.COMM_SELF,
                 info: Any = MPI.INFO_NULL) -> None:
        self._recursive = recursive
        self._comm: Optional[Any] = comm.Dup()
        self._rank = self._comm.Get_rank()
        self._win = MPI.Win.Allocate(4 if self._rank == 0 else 0, 4, info, self._comm)
        if self._rank == 0:
            np.frombuffer(self._win.tomemory(), "i")[0] = -1     # nobody holds or waits
        self._count = 0
        self._comm.Barrier()

    def _alive(self) -> Any:
        if self._comm is None:
            raise _freed("mutex")
        return self._comm

    def _tail_op(self, value: int, compare: Optional[int]) -> int:
        """Swap (or compare-and-swap) the queue's tail; return what was there."""
        old = np.zeros(1, "i")
        self._win.Lock(0, MPI.LOCK_SHARED)
        if compare is None:
            self._win.Fetch_and_op(np.array([value], "i"), old, 0, 0, MPI.REPLACE)
        else:
            self._win.Compare_and_swap(np.array([value], "i"), np.array([compare], "i"),
                                       old, 0, 0)
        self._win.Unlock(0)
        return int(old[0])

    def acquire(self, blocking: bool = True) -> bool:
        """Take the lock (waiting in line unless ``blocking`` is False); True if taken."""
        comm = self._alive()
        if self._count:
            if not self._recursive:
                raise RuntimeError("mpi4py.util.sync.Mutex: already acquired by this rank "
                                   "(a non-recursive mutex)")
            self._count += 1
            return True
        if not blocking:
            if self._tail_op(self._rank, -1) != -1:
                return False
        else:
            previous = self._tail_op(self._rank, None)
            if previous != -1:
                comm.send(None, previous, _NEXT)      # "I am behind you"
                comm.recv(source=previous, tag=_GRANT)
        self._count = 1
        return True

    def release(self) -> None:
        """Give the lock back (to the next rank in line, if any)."""
        comm = self._alive()
        if not self._count:
            raise RuntimeError("mpi4py.util.sync.Mutex: release of a mutex this rank does "
                               "not hold")
        self._count -= 1
        if self._count:
            return
        if self._tail_op(-1, self._rank) != self._rank:    # somebody queued behind us
            status = MPI.Status()
            comm.recv(source=MPI.ANY_SOURCE, tag=_NEXT, status=status)
            comm.send(None, status.Get_source(), _GRANT)

    def locked(self) -> bool:
        """Whether this rank holds the lock."""
        self._alive()
        return self._count > 0

    def count(self) -> int:
        """How many times this rank holds the lock (recursive mutexes)."""
        self._alive()
        return self._count

    def __enter__(self) -> "Mutex":
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def free(self) -> None:
        """Free the mutex (collective); a rank that holds it releases it first."""
        if self._comm is None:
            return
        if self._count:
            self._count = 1
            self.release()
        self._win.Free()
        self._comm.Free()
        self._comm = None


class Condition:
    """A condition variable over a :class:`Mutex` (its own, or ``mutex``)."""

    def __init__(self, mutex: Optional[Mutex] = None, *, recursive: bool = True,
                 comm: Any = MPI.COMM_SELF, info: Any = MPI.INFO_NULL) -> None:
        self._own_mutex = mutex is None
        self._mutex = Mutex(recursive=recursive, comm=comm, info=info) if mutex is None \
            else mutex
        self._comm: Optional[Any] = self._mutex._alive().Dup()
        self._rank, self._size = self._comm.Get_rank(), self._comm.Get_size()
        # rank 0 holds [next ticket, ticket of rank 0, ..., ticket of rank size-1] (0: not waiting)
        n = (self._size + 1) * 8
        self._win = MPI.Win.Allocate(n if self._rank == 0 else 0, 8, info, self._comm)
        if self._rank == 0:
            np.frombuffer(self._win.tomemory(), "q")[:] = [1] + [0] * self._size
        self._comm.Barrier()

    def _alive(self) -> Any:
        if self._comm is None:
            raise _freed("condition")
        return self._comm

    def _held(self, call: str) -> Any:
        comm = self._alive()
        if not self._mutex.locked():
            raise RuntimeError(f"mpi4py.util.sync.Condition.{call}: the lock is not held")
        return comm

    def acquire(self, blocking: bool = True) -> bool:
        self._alive()
        return self._mutex.acquire(blocking)

    def release(self) -> None:
        self._alive()
        self._mutex.release()

    def __enter__(self) -> "Condition":
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def _tickets(self) -> np.ndarray:
        table = np.zeros(self._size + 1, "q")
        self._win.Lock(0)
        self._win.Get(table, 0)
        self._win.Unlock(0)
        return table

    def _store(self, start: int, values: np.ndarray) -> None:
        self._win.Lock(0)
        self._win.Put(values, 0, start)
        self._win.Unlock(0)

    def wait(self) -> bool:
        """Release the lock, sleep until notified, take the lock again."""
        comm = self._held("wait")
        table = self._tickets()
        self._store(0, np.array([table[0] + 1], "q"))
        self._store(1 + self._rank, np.array([table[0]], "q"))
        depth = self._mutex._count
        self._mutex._count = 1
        self._mutex.release()
        comm.recv(source=MPI.ANY_SOURCE, tag=_WAKE)
        self._mutex.acquire()
        self._mutex._count = depth
        return True

    def wait_for(self, predicate: Callable[[], Any]) -> Any:
        """Wait until ``predicate()`` is true; return its value."""
        self._held("wait_for")
        result = predicate()
        while not result:
            self.wait()
            result = predicate()
        return result

    def notify(self, n: int = 1) -> int:
        """Wake up to ``n`` waiting ranks (the longest waiting first); how many woke."""
        comm = self._held("notify")
        tickets = self._tickets()[1:]
        waiting = [r for r in np.argsort(tickets, kind="stable") if tickets[r] > 0][:n]
        for r in waiting:
            self._store(1 + int(r), np.zeros(1, "q"))
            comm.send(None, int(r), _WAKE)
        return len(waiting)

    def notify_all(self) -> int:
        """Wake every waiting rank; how many woke."""
        return self.notify(self._size)

    def free(self) -> None:
        """Free the condition (collective), and its mutex if it made it."""
        if self._comm is None:
            return
        if self._mutex._comm is not None and self._mutex._count:   # let queued ranks through
            self._mutex._count = 1
            self._mutex.release()
        self._win.Free()
        self._comm.Free()
        self._comm = None
        if self._own_mutex:
            self._mutex.free()


class Semaphore:
    """A counting semaphore shared by the ranks of ``comm`` (``bounded``: ``release`` may
    not raise the count above its initial ``value``)."""

    def __init__(self, value: int = 1, *, bounded: bool = True, comm: Any = MPI.COMM_SELF,
                 info: Any = MPI.INFO_NULL) -> None:
        if value < 0:
            raise ValueError(f"mpi4py.util.sync.Semaphore: initial value must be >= 0, "
                             f"got {value}")
        self._bounded = bounded
        self._value = value
        self._counter: Optional[Counter] = Counter(value, comm=comm, info=info)
        self._condition = Condition(comm=comm, info=info)

    def _alive(self) -> Counter:
        if self._counter is None or self._counter._win is None:
            raise _freed("semaphore")
        return self._counter

    def acquire(self, blocking: bool = True) -> bool:
        """Take one unit (waiting for one unless ``blocking`` is False); True if taken."""
        counter = self._alive()
        with self._condition:
            while counter.next(0) <= 0:
                if not blocking:
                    return False
                self._condition.wait()
            counter.next(-1)
        return True

    def release(self, n: int = 1) -> None:
        """Give back ``n`` units, waking as many waiters."""
        counter = self._alive()
        if n < 1:
            raise ValueError(f"mpi4py.util.sync.Semaphore.release: n must be >= 1, got {n}")
        with self._condition:
            if self._bounded and counter.next(0) + n > self._value:
                raise ValueError("mpi4py.util.sync.Semaphore.release: released too many "
                                 f"times (bounded to {self._value})")
            counter.next(n)
            self._condition.notify(n)

    def __enter__(self) -> "Semaphore":
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def free(self) -> None:
        """Free the semaphore (collective)."""
        if self._counter is None:
            return
        self._condition.free()
        self._counter.free()
        self._counter = None
