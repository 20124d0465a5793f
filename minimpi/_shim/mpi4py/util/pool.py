"""mpi4py.util.pool on minimpi: ``multiprocessing.pool.Pool``'s interface over an executor.

``Pool`` runs its calls on an ``MPIPoolExecutor`` (spawned MPI workers), ``ThreadPool`` on a
``concurrent.futures.ThreadPoolExecutor``; a subclass may set ``Executor`` to any executor
class whose ``map``/``starmap`` take ``timeout``, ``chunksize`` and ``unordered``.
"""
from __future__ import annotations

import concurrent.futures as cf
import functools
import itertools
import os
import threading
import warnings
from typing import Any, Callable, Iterable, Iterator, List, Optional

from .. import MPI  # noqa: F401  (binds mpi4py.MPI, as mpi4py's own import does)
from ..futures import MPIPoolExecutor

__all__ = ["Pool", "ThreadPool", "AsyncResult", "ApplyResult", "MapResult"]


def _star(fn: Callable, args: tuple) -> Any:
    return fn(*args)


class _ThreadExecutor(cf.ThreadPoolExecutor):
    """A thread pool whose ``map``/``starmap`` take mpi4py.futures' keywords."""

    def map(self, fn: Callable, *iterables: Iterable, timeout: Optional[float] = None,
            chunksize: int = 1, unordered: bool = False) -> Iterator:
        return super().map(fn, *iterables, timeout=timeout)

    def starmap(self, fn: Callable, iterable: Iterable, timeout: Optional[float] = None,
                chunksize: int = 1, unordered: bool = False) -> Iterator:
        return super().map(functools.partial(_star, fn), iterable, timeout=timeout)


class Pool:
    """A pool of workers with ``multiprocessing.pool.Pool``'s methods."""

    Executor: Any = MPIPoolExecutor

    def __init__(self, processes: Optional[int] = None, initializer: Any = None,
                 initargs: Iterable = (), **kwargs: Any) -> None:
        if processes is not None and processes < 1:
            raise ValueError("number of processes must be at least 1")
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be a callable")
        for unsupported in ("maxtasksperchild", "context"):
            if kwargs.pop(unsupported, None) is not None:
                warnings.warn(f"argument {unsupported!r} is not supported", UserWarning,
                              stacklevel=2)
        executor = self.Executor
        if executor is MPIPoolExecutor or (isinstance(executor, type) and
                                           issubclass(executor, MPIPoolExecutor)):
            self.executor = executor(processes, initializer=initializer,
                                     initargs=tuple(initargs), **kwargs)
        else:
            self.executor = executor(processes, initializer=initializer,
                                     initargs=tuple(initargs))
        self._closed = False

    # -- one call ------------------------------------------------------------------------
    def apply(self, func: Callable, args: Iterable = (), kwds: Optional[dict] = None) -> Any:
        """``func(*args, **kwds)`` in a worker; its result."""
        return self.apply_async(func, args, kwds).get()

    def apply_async(self, func: Callable, args: Iterable = (), kwds: Optional[dict] = None,
                    callback: Optional[Callable] = None,
                    error_callback: Optional[Callable] = None) -> "ApplyResult":
        """As ``apply``, without waiting: an ``ApplyResult``."""
        future = self.executor.submit(func, *args, **(kwds or {}))
        return ApplyResult(future, callback, error_callback)

    # -- many calls ----------------------------------------------------------------------
    def map(self, func: Callable, iterable: Iterable, chunksize: Optional[int] = None) -> list:
        return self.map_async(func, iterable, chunksize).get()

    def map_async(self, func: Callable, iterable: Iterable, chunksize: Optional[int] = None,
                  callback: Optional[Callable] = None,
                  error_callback: Optional[Callable] = None) -> "MapResult":
        return self.starmap_async(func, zip(iterable), chunksize, callback, error_callback)

    def starmap(self, func: Callable, iterable: Iterable,
                chunksize: Optional[int] = None) -> list:
        return self.starmap_async(func, iterable, chunksize).get()

    def starmap_async(self, func: Callable, iterable: Iterable,
                      chunksize: Optional[int] = None, callback: Optional[Callable] = None,
                      error_callback: Optional[Callable] = None) -> "MapResult":
        items = list(iterable)
        if chunksize is None:
            chunksize = max(1, -(-len(items) // (4 * self._workers())))
        chunks = [items[i:i + chunksize] for i in range(0, len(items), chunksize)]
        futures = [self.executor.submit(_apply_chunk, func, chunk) for chunk in chunks]
        return MapResult(futures, callback, error_callback)

    def imap(self, func: Callable, iterable: Iterable, chunksize: int = 1) -> Iterator:
        return self.executor.map(func, iterable, chunksize=chunksize)

    def imap_unordered(self, func: Callable, iterable: Iterable, chunksize: int = 1) -> Iterator:
        return self.executor.map(func, iterable, chunksize=chunksize, unordered=True)

    def istarmap(self, func: Callable, iterable: Iterable, chunksize: int = 1) -> Iterator:
        return self.executor.starmap(func, iterable, chunksize=chunksize)

    def istarmap_unordered(self, func: Callable, iterable: Iterable,
                           chunksize: int = 1) -> Iterator:
        return self.executor.starmap(func, iterable, chunksize=chunksize, unordered=True)

    def _workers(self) -> int:
        count = getattr(self.executor, "num_workers", None)
        if count is None:
            count = getattr(self.executor, "_max_workers", None) or os.cpu_count() or 1
        return max(1, int(count))

    # -- the end -------------------------------------------------------------------------
    def close(self) -> None:
        """No new calls; the workers end once the queued ones are done."""
        self._closed = True
        self.executor.shutdown(wait=False)

    def terminate(self) -> None:
        """No new calls, and the queued ones are cancelled."""
        self._closed = True
        self.executor.shutdown(wait=False, cancel_futures=True)

    def join(self) -> None:
        """Wait for the workers to end (after ``close`` or ``terminate``)."""
        if not self._closed:
            raise ValueError("Pool is still running")
        self.executor.shutdown(wait=True)

    def __enter__(self) -> "Pool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.terminate()


class ThreadPool(Pool):
    """A ``Pool`` of threads of this process."""

    Executor = _ThreadExecutor


def _apply_chunk(func: Callable, chunk: list) -> list:
    return [func(*args) for args in chunk]


class AsyncResult:
    """The result of an ``*_async`` call (``multiprocessing``'s interface)."""

    def __init__(self, futures: List[cf.Future], callback: Optional[Callable],
                 error_callback: Optional[Callable]) -> None:
        self._futures = futures
        self._event = threading.Event()
        self._callback, self._error_callback = callback, error_callback
        self._left = len(futures)
        self._lock = threading.Lock()
        if not futures:
            self._finish()
        for future in futures:
            future.add_done_callback(self._one_done)

    def _one_done(self, _: cf.Future) -> None:
        with self._lock:
            self._left -= 1
            last = self._left == 0
        if last:
            self._finish()

    def _value(self) -> Any:
        raise NotImplementedError

    def _finish(self) -> None:
        if not any(f.cancelled() for f in self._futures):
            error = next((f.exception() for f in self._futures if f.exception()), None)
            if error is not None:
                if self._error_callback is not None:
                    self._error_callback(error)
            elif self._callback is not None:
                self._callback(self._value())
        self._event.set()

    def ready(self) -> bool:
        return self._event.is_set()

    def successful(self) -> bool:
        if not self.ready():
            raise ValueError(f"{self!r} not ready")
        return not any(f.cancelled() or f.exception() for f in self._futures)

    def wait(self, timeout: Optional[float] = None) -> None:
        self._event.wait(timeout)

    def get(self, timeout: Optional[float] = None) -> Any:
        """The result; ``TimeoutError`` if it is not there within ``timeout`` seconds (or
        never will be: the call was cancelled by ``terminate``)."""
        self.wait(timeout)
        if not self.ready() or any(f.cancelled() for f in self._futures):
            raise TimeoutError
        error = next((f.exception() for f in self._futures if f.exception()), None)
        if error is not None:
            raise error
        return self._value()


class ApplyResult(AsyncResult):
    """The result of ``apply_async``."""

    def __init__(self, future: cf.Future, callback: Optional[Callable],
                 error_callback: Optional[Callable]) -> None:
        super().__init__([future], callback, error_callback)

    def _value(self) -> Any:
        return self._futures[0].result()


class MapResult(AsyncResult):
    """The result of ``map_async``/``starmap_async`` (its chunks' results, flattened)."""

    def _value(self) -> Any:
        return list(itertools.chain.from_iterable(f.result() for f in self._futures))
