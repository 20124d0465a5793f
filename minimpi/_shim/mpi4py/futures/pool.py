"""``MPIPoolExecutor`` and ``MPICommExecutor``: a pool of MPI processes behind the
``concurrent.futures.Executor`` interface, written on minimpi's own MPI.

One *manager* thread per executor does all of the pool's MPI (the managers of several pools
take turns on :data:`_MPI_LOCK`; the program's own threads may make MPI calls meanwhile:
minimpi provides ``THREAD_MULTIPLE``). ``submit`` only
queues the call; the manager hands queued calls to the workers several at a time, keeping
each a few milliseconds of work ahead (:class:`Flight`), completes the futures as the
results come back one by one, and sleeps in ``poll`` meanwhile (woken by a result, or by
a ``submit`` ringing its :class:`Bell` when a worker has room). Workers come from ``Spawn``
(``MPIPoolExecutor``) or are the other ranks of a communicator (``MPICommExecutor``,
``python -m mpi4py.futures``). The messages are in :mod:`.protocol`.
"""
from __future__ import annotations

import atexit
import collections
import concurrent.futures as cf
import functools
import itertools
import os
import select
import sys
import threading
import time
import weakref
from typing import Any, Callable, Iterable, Iterator, Optional

from minimpi import MPI
from minimpi.p2p.request import engine_of

from . import protocol as P

#: the static pool of ``python -m mpi4py.futures`` (COMM_WORLD, root 0), when running
_STATIC: dict = {"comm": None, "root": 0, "busy": False}
#: pools still running; at exit each finishes its queued calls and lets its workers go
#: before MPI finalizes (registered after MPI's own exit hook, so it runs first)
_LIVE: "weakref.WeakSet[_Manager]" = weakref.WeakSet()


def _finish_live_pools() -> None:
    for manager in list(_LIVE):
        manager.stop(cancel=False)
        manager.thread.join()


atexit.register(_finish_live_pools)


def get_max_workers() -> int:
    """``MPI4PY_FUTURES_MAX_WORKERS``, else the universe's room beside COMM_WORLD, else 1."""
    value = os.environ.get("MPI4PY_FUTURES_MAX_WORKERS")
    if value:
        return int(value)
    universe = MPI.COMM_WORLD.Get_attr(MPI.UNIVERSE_SIZE)
    return max((universe or 0) - MPI.COMM_WORLD.Get_size(), 1)


class _Workers:
    """Where the workers are: ``comm``, the client's rank in it, the workers' ranks, and
    how to let them go."""

    def __init__(self, comm: Any, client: int, ranks: list, release: Callable[[], None]):
        self.comm, self.client, self.ranks, self.release = comm, client, ranks, release


def _spawned(count: int, options: dict) -> _Workers:
    """``count`` new worker processes (``Spawn`` of ``python -m mpi4py.futures.server``)."""
    info = MPI.Info.Create()
    info.Set("wdir", options.get("wdir") or os.getcwd())
    python = options.get("python_exe") or sys.executable
    args = [*options.get("python_args", []), "-m", "mpi4py.futures.server"]
    comm = MPI.COMM_SELF.Spawn(python, args, maxprocs=count, info=info)
    return _Workers(comm, 0, list(range(count)), comm.Disconnect)


def _static(comm: Any, root: int) -> _Workers:
    """The other ranks of ``comm`` (serving in :func:`serve_static`)."""
    return _Workers(comm, root, [r for r in range(comm.Get_size()) if r != root], lambda: None)


class _Manager:
    """The thread that runs one executor's pool (see the module docstring)."""

    def __init__(self, connect: Callable[[], _Workers], setup: dict) -> None:
        self.connect, self.setup = connect, setup
        self.queue: collections.deque = collections.deque()
        self.cond = threading.Condition()
        self.stopping = False
        self.broken: Optional[str] = None
        self.workers: Optional[_Workers] = None
        self.started = threading.Event()     # the workers are set up (or the pool broke)
        self.dead: list = []                 # workers known to have failed
        self.bell = Bell()                   # wakes the manager asleep in the transport
        self.thread = threading.Thread(target=self._main, name="mpi4py.futures manager",
                                       daemon=True)
        self.thread.start()
        _LIVE.add(self)

    def push(self, future: cf.Future, fn: Any, args: tuple, kwargs: dict) -> None:
        with self.cond:
            if self.broken:
                raise cf.BrokenExecutor(self.broken)
            self.queue.append((future, fn, args, kwargs))
            self.cond.notify()
            self.bell.ring()

    def stop(self, cancel: bool) -> None:
        with self.cond:
            self.stopping = True
            if cancel:
                while self.queue:
                    self.queue.popleft()[0].cancel()
            self.cond.notify()

    # -- the manager thread ----------------------------------------------------------------
    def _main(self) -> None:
        _MPI_LOCK.acquire()          # released only while this manager sleeps or idles
        try:
            try:
                self.workers = self.connect()
            except BaseException as exc:   # no workers: every call fails as mpi4py's would
                self._break(f"cannot start the pool's workers: {type(exc).__name__}: {exc}")
                self.started.set()
                return
            _SERVING.add(self)
            for other in list(_SERVING):   # a sleeping manager now shares the engine
                other.bell.ring()
            try:
                self._serve(self.workers)
            except BaseException as exc:
                self._break(f"the pool's manager failed: {type(exc).__name__}: {exc}")
            finally:
                _SERVING.discard(self)
                self.started.set()
        finally:
            _MPI_LOCK.release()
            self.bell.close()

    def _break(self, why: str) -> None:
        with self.cond:
            self.broken = why
            while self.queue:
                future = self.queue.popleft()[0]
                if future.set_running_or_notify_cancel():
                    future.set_exception(cf.BrokenExecutor(why))

    def _serve(self, w: _Workers) -> None:
        comm = w.comm
        for r in w.ranks:
            comm.send(self.setup, dest=r, tag=P.SETUP)
        problems = [comm.recv(source=r, tag=P.READY) for r in w.ranks]
        failed = next((p for p in problems if p is not None), None)
        if failed is not None:
            self._break(f"a worker's initializer raised {type(failed).__name__}: {failed}")
            self.started.set()
            self._release(w)
            return
        self.started.set()
        flight = Flight(w.ranks)
        sends: list = []          # TASK messages on their way
        status = MPI.Status()
        pending = None            # the receive of the next results, while calls run
        while True:
            with self.cond:
                if not self.queue and not flight.running and not self.stopping:
                    _MPI_LOCK.release()      # idle: other pools' managers may work
                    try:
                        while not self.queue and not flight.running and not self.stopping:
                            self.cond.wait()
                    finally:
                        self.cond.release()  # lock order: the MPI lock, then cond
                        _MPI_LOCK.acquire()
                        self.cond.acquire()
                batches = flight.assign(self.queue)
                hungry = flight.hungry(self.queue)
                if self.stopping and not self.queue and not flight.running and not batches:
                    break
            for rank, calls in batches.items():
                self._send(comm, rank, flight, calls, sends)
            if sends:
                sends = [req for req in sends if not req.Test()]
            if not flight.running:
                continue
            if pending is None:
                pending = comm.irecv(source=MPI.ANY_SOURCE, tag=P.RESULT)
            try:
                engine = engine_of(pending)
                if engine is not None and not pending.done:
                    # asleep in the transport until results come, or new work for a worker
                    # with room (then a submit rings the bell)
                    self._doze(engine, pending, sends, hungry)
                # every result already here (a receive of one that arrived completes as it
                # is posted), then back to handing out calls
                while pending is not None and pending.done:
                    replies = pending.wait(status)
                    pending = None
                    _complete(flight.finished(status.Get_source(), replies))
                    if flight.running:
                        pending = comm.irecv(source=MPI.ANY_SOURCE, tag=P.RESULT)
            except Exception as exc:      # a worker is gone (--fault-tolerant) or MPI failed
                self._lost(comm, flight, exc)
                break
        self._release(w)

    def _doze(self, engine: Any, pending: Any, sends: list, hungry: bool) -> None:
        """Wait until ``pending`` (the receive of results) completes or, if ``hungry`` (a
        worker has room), a call is queued, without the MPI lock (other pools' managers
        work meanwhile). Alone in the process, asleep in ``poll`` on the transport's file
        descriptors (``Transport.wait_fds``, armed with ``prepare_sleep`` as the router
        does) and on the bell that ``push`` rings, so a call submitted while others run
        starts at once instead of at the transport's next timeout: one ``progress(0)``
        round per wake-up, no spinning. With other pools' managers on the same engine
        (whose progress may complete this one's receive without waking its ``poll``), or
        a transport that cannot share a poll (the in-process one of ``run_threads``), or
        another thread of the program waiting in MPI (then that thread runs the engine's
        progress and owns the transport's sleep): ``progress(0)`` then sleeps backing off
        from 0.1 to 10 ms, as mpi4py's manager. The transport's sleep is armed and ended
        under the engine's lock."""
        def ready() -> bool:
            return pending.done or (hungry and bool(self.queue))

        transport = engine.transport
        try:
            fds: Optional[tuple] = tuple(transport.wait_fds())
        except (NotImplementedError, AttributeError):
            fds = None
        poller = None if fds is None else self.bell.poller(fds)
        delay = 1e-4
        self.bell.arm()
        try:
            while True:
                engine.poll()
                if ready():
                    return
                if poller is None or len(_SERVING) > 1 or engine.waiting_threads():
                    _MPI_LOCK.release()
                    try:
                        time.sleep(delay)
                    finally:
                        _MPI_LOCK.acquire()
                    delay = min(2 * delay, 0.01)
                    continue
                with engine.lock:
                    armed = transport.prepare_sleep()
                if not armed:
                    continue
                _MPI_LOCK.release()
                try:
                    poller.poll(int(DOZE_S * 1000))
                finally:
                    _MPI_LOCK.acquire()
                    with engine.lock:
                        transport.end_sleep()
                self.bell.clear()
                fds_now = tuple(transport.wait_fds())
                if fds_now != fds:
                    fds, poller = fds_now, self.bell.poller(fds_now)
        finally:
            self.bell.disarm()

    def _send(self, comm: Any, rank: int, flight: "Flight", calls: list, sends: list) -> None:
        """One TASK message of ``calls`` (task id, future, fn, args, kwargs) to
        ``rank``, not waiting for it to go (a worker busy with a call takes a large message
        only when it is done; meanwhile the other workers' results keep coming); its
        request goes to ``sends``. Each call is pickled on its own (``MPI.pickle``), so a
        call that does not pickle fails alone with the pickler's exception, and one that
        does not unpickle fails alone in the worker. Cost: one ``dumps`` per call, one
        message per batch."""
        dumps = MPI.pickle.dumps
        items = []
        for task, future, fn, args, kwargs in calls:
            try:
                items.append((task, dumps((fn, args, kwargs))))
            except BaseException as exc:   # the call does not pickle: its future fails
                flight.withdraw(rank, task)
                future.set_exception(exc)
        if items:
            sends.append(comm.isend(items, dest=rank, tag=P.TASK))

    def _lost(self, comm: Any, flight: "Flight", exc: BaseException) -> None:
        """The pool's MPI failed while calls ran (a worker died, under ``--fault-tolerant``).
        The pool is broken, as ``ProcessPoolExecutor`` is when a worker dies: the calls the
        failed workers held fail naming the worker, queued and later calls fail with
        ``BrokenExecutor``; the calls the other workers hold finish (their results are
        received from each worker by name: a wildcard receive would keep failing)."""
        gone = _failed_workers(comm)
        detail = f"{type(exc).__name__}: {exc}"
        if gone:
            who = ", ".join(f"worker {r}" for r in gone)
            why = f"the pool is broken: {who} failed ({detail})"
        else:
            why = f"the pool is broken: its MPI communication failed ({detail})"
        self._break(why)
        self.dead = gone or list(flight.ranks)
        for rank, future in flight.drain(self.dead):
            future.set_exception(cf.BrokenExecutor(
                f"worker {rank} failed while it held this call ({detail})" if gone else why))
        for rank in flight.ranks:
            while flight.held[rank] > 0:
                try:
                    replies = comm.recv(source=rank, tag=P.RESULT)
                except Exception as again:
                    self.dead.append(rank)
                    for _, future in flight.drain([rank]):
                        future.set_exception(cf.BrokenExecutor(
                            f"worker {rank} failed while it held this call "
                            f"({type(again).__name__}: {again})"))
                    break
                _complete(flight.finished(rank, replies))

    def _release(self, w: _Workers) -> None:
        for r in w.ranks:
            if r in self.dead:
                continue
            try:
                w.comm.send(None, dest=r, tag=P.STOP)
            except Exception:
                if not self.dead:
                    raise
        w.release()


#: the longest the manager sleeps in one poll (s): a failure that no file descriptor shows
#: is noticed within this
DOZE_S = 0.25
#: held by a pool's manager thread while it makes MPI calls (minimpi's engine is
#: THREAD_SERIALIZED); released while it sleeps or has nothing to do, so that the managers
#: of several pools in one process take turns
_MPI_LOCK = threading.Lock()
#: the managers serving now
_SERVING: "weakref.WeakSet[_Manager]" = weakref.WeakSet()


class Bell:
    """A pipe that wakes the manager asleep in ``poll`` when a call is submitted: ``ring``
    writes one byte, only while the manager is armed and not yet rung (so a burst of
    submits costs one ``write``); thread-safe."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        os.set_blocking(self.write_fd, False)
        self.lock = threading.Lock()
        self.armed = self.rung = False

    def poller(self, fds: tuple) -> Any:
        """A ``select.poll`` on ``fds`` and the bell."""
        poller = select.poll()
        for fd in (*fds, self.read_fd):
            poller.register(fd, select.POLLIN)
        return poller

    def arm(self) -> None:
        with self.lock:
            self.armed, self.rung = True, False

    def disarm(self) -> None:
        with self.lock:
            self.armed = False
        self.clear()

    def ring(self) -> None:
        with self.lock:
            if not self.armed or self.rung:
                return
            self.rung = True
        try:
            os.write(self.write_fd, b"!")
        except (BlockingIOError, OSError):
            pass

    def clear(self) -> None:
        """Empty the pipe (after a wake-up), so the next ring wakes the next sleep."""
        try:
            while os.read(self.read_fd, 64):
                pass
        except (BlockingIOError, OSError):
            pass
        with self.lock:
            self.rung = False

    def close(self) -> None:
        for fd in (self.read_fd, self.write_fd):
            try:
                os.close(fd)
            except OSError:
                pass


def _complete(done: list) -> None:
    """Set each future of ``done`` ((future, ok, pickled value)) to its result or exception;
    a value that does not unpickle is its call's exception."""
    loads = MPI.pickle.loads
    for future, ok, blob in done:
        try:
            value = loads(blob)
        except BaseException as exc:
            ok, value = False, exc
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)


def _failed_workers(comm: Any) -> list:
    """The ranks of ``comm``'s workers known to have failed (``Get_failed``, translated to
    ``comm``'s ranks or, on an intercommunicator, its remote group's)."""
    try:
        failed = comm.Get_failed()
        if failed.Get_size() == 0:
            return []
        group = comm.Get_remote_group() if comm.Is_inter() else comm.Get_group()
        ranks = MPI.Group.Translate_ranks(failed, list(range(failed.Get_size())), group)
        return sorted(r for r in ranks if r is not None and r >= 0)
    except Exception:
        return []


class Flight:
    """Which calls each worker holds, and how many to send it: the pipelining policy.

    A worker is given up to ``depth`` calls at a time; it gets more once it holds no more
    than half of them, in one message, so that it never waits for the client's round trip
    and the client sends one message per several calls (results come back one per call,
    as soon as each returns). ``depth`` follows
    the measured run time of the calls of the same function (an average over its results,
    weighted to the latest; a ``map``'s function, not its chunks' wrapper):
    :data:`AHEAD_S` of work per worker, at least 2 (one running, one waiting), at most
    :data:`MAX_DEPTH`; 1 (nothing sent ahead) for a function not measured yet and for
    calls longer than :data:`LONG_S`, where the round trip is negligible and a call sent
    ahead could wait behind a long one while another worker is idle. A call sent ahead
    counts as running (it cannot be cancelled), as in ``ProcessPoolExecutor``, whose call
    queue holds one call beyond its workers. Pure bookkeeping (no MPI): O(workers) per
    call assigned, O(1) per result."""

    #: how much work (s) to keep queued at each worker
    AHEAD_S = 0.005
    #: the most calls one worker holds at once
    MAX_DEPTH = 64
    #: calls at least this long (s) on average are not sent ahead
    LONG_S = 0.05
    #: the most functions whose times are kept
    MAX_KEYS = 256

    def __init__(self, ranks: list) -> None:
        self.ranks = list(ranks)
        self.held: dict = {r: 0 for r in self.ranks}       # worker -> calls it holds
        self.running: dict = {}                     # task id -> (future, worker, key)
        self.ids = itertools.count()
        self.means: dict = {}                       # key -> seconds per call, measured
        self.depth = 1                              # the last calls' depth

    @staticmethod
    def key(fn: Any, args: tuple) -> Any:
        """What calls are timed by: the function (a ``map`` chunk's function, a
        ``functools.partial``'s function)."""
        if fn is P.apply_chunk and args:
            fn = args[0]
        while isinstance(fn, functools.partial):
            fn = fn.func
        try:
            hash(fn)
        except TypeError:
            return type(fn)
        return fn

    def depth_for(self, key: Any) -> int:
        """How many calls of ``key`` one worker may hold."""
        mean = self.means.get(key)
        if mean is None or mean >= self.LONG_S:
            return 1
        return max(2, min(self.MAX_DEPTH, int(self.AHEAD_S / max(mean, 1e-9))))

    def hungry(self, queue: collections.deque) -> bool:
        """Whether some worker would take the first call of ``queue`` now - as ``assign``
        decides, so that a manager woken for it does not find nothing to do and spin -
        or, with ``queue`` empty, a call like the last ones."""
        if queue:
            future, fn, args, kwargs = queue[0]
            depth = self.depth_for(self.key(fn, args))
        else:
            depth = self.depth
        low = depth // 2
        return any(n <= low for n in self.held.values())

    def assign(self, queue: collections.deque) -> dict:
        """Take calls from ``queue`` ((future, fn, args, kwargs); cancelled ones dropped)
        for the workers with room, each to the least busy: worker -> [(task id, future,
        fn, args, kwargs)]. The futures are marked running."""
        batches: dict = {}
        held = self.held
        while queue:
            future, fn, args, kwargs = queue[0]
            key = self.key(fn, args)
            depth = self.depth_for(key)
            low = depth // 2
            best = None
            for r in self.ranks:
                n = held[r]
                if (n <= low or (r in batches and n < depth)) and (best is None
                                                                   or n < held[best]):
                    best = r
            if best is None:
                break
            queue.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            task = next(self.ids)
            self.running[task] = (future, best, key)
            batches.setdefault(best, []).append((task, future, fn, args, kwargs))
            held[best] += 1
            self.depth = depth
        return batches

    def withdraw(self, rank: int, task: int) -> None:
        """A call that was never sent (it did not pickle)."""
        del self.running[task]
        self.held[rank] -= 1

    def finished(self, rank: int, replies: list) -> list:
        """``rank`` sent ``replies`` ((task id, ok, value, seconds it ran)):
        [(future, ok, value)]; the calls' functions' average times updated."""
        self.held[rank] -= len(replies)
        means = self.means
        out = []
        for task, ok, value, seconds in replies:
            future, _, key = self.running.pop(task)
            mean = means.get(key)
            if mean is None and len(means) >= self.MAX_KEYS:
                means.clear()      # many distinct callables: forget (they are re-timed)
            means[key] = seconds if mean is None else 0.5 * mean + 0.5 * seconds
            out.append((future, ok, value))
        return out

    def drain(self, ranks: list) -> list:
        """The calls in flight on ``ranks``, as (worker, future); they are no longer."""
        ranks = set(ranks)
        out = [(r, future) for future, r, _ in self.running.values() if r in ranks]
        self.running = {t: fr for t, fr in self.running.items() if fr[1] not in ranks}
        for r in ranks:
            self.held[r] = 0
        return out


class MPIPoolExecutor(cf.Executor):
    """A pool of MPI worker processes (spawned, or the static pool of ``python -m
    mpi4py.futures``) running calls asynchronously.

    ``max_workers``: how many (default :func:`get_max_workers`); ``initializer(*initargs)``
    runs in each worker first (if it raises, the pool is broken). Other keywords as
    mpi4py's: ``python_exe``, ``python_args``, ``wdir``, ``path``, ``main`` (whether to run
    the client's main script in the workers, default True).
    """

    def __init__(self, max_workers: Optional[int] = None, initializer: Any = None,
                 initargs: tuple = (), **kwargs: Any) -> None:
        if max_workers is not None:
            max_workers = int(max_workers)
            if max_workers <= 0:
                raise ValueError("max_workers must be greater than 0")
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be a callable")
        self._max_workers = max_workers
        self._options = kwargs
        self._initializer, self._initargs = initializer, tuple(initargs)
        self._manager: Optional[_Manager] = None
        self._shutdown = False
        self._lock = threading.Lock()

    @property
    def num_workers(self) -> int:
        """How many workers the pool has (starting it if need be)."""
        manager = self._boot()
        manager.started.wait()
        return len(manager.workers.ranks) if manager.workers else 0

    def _boot(self) -> _Manager:
        with self._lock:
            if self._manager is None:
                if self._shutdown:
                    raise RuntimeError("cannot schedule new futures after shutdown")
                main = None if self._options.get("main", True) else ""
                setup = P.setup_message(self._initializer, self._initargs,
                                        self._options.get("path"), main)
                self._manager = _Manager(self._connector(), setup)
            return self._manager

    def _connector(self) -> Callable[[], _Workers]:
        if _STATIC["comm"] is not None:
            if _STATIC["busy"]:
                raise RuntimeError("under `python -m mpi4py.futures` one MPIPoolExecutor at "
                                   "a time uses the pool's workers")
            _STATIC["busy"] = True
            comm, root = _STATIC["comm"], _STATIC["root"]

            def static() -> _Workers:
                w = _static(comm, root)
                w.release = lambda: _STATIC.update(busy=False)
                return w
            return static
        count = self._max_workers or get_max_workers()
        return functools.partial(_spawned, count, self._options)

    def bootup(self, wait: bool = True) -> "MPIPoolExecutor":
        """Start the workers now (``wait``: until they are ready)."""
        manager = self._boot()
        if wait:
            manager.started.wait()
        return self

    def submit(self, fn: Callable, /, *args: Any, **kwargs: Any) -> cf.Future:
        """Schedule ``fn(*args, **kwargs)``; a Future of its result."""
        if self._shutdown:
            raise RuntimeError("cannot schedule new futures after shutdown")
        future: cf.Future = cf.Future()
        self._boot().push(future, fn, args, kwargs)
        return future

    def map(self, fn: Callable, *iterables: Iterable, timeout: Optional[float] = None,
            chunksize: int = 1, buffersize: Optional[int] = None,
            unordered: bool = False) -> Iterator:
        """``fn`` over the iterables' items in chunks of ``chunksize``; results in order
        (``unordered``: as they complete); ``timeout`` bounds the whole iteration;
        ``buffersize``: at most that many chunks submitted and not yet yielded (the
        iterables are read as the results are consumed)."""
        return self.starmap(fn, zip(*iterables), timeout=timeout, chunksize=chunksize,
                            buffersize=buffersize, unordered=unordered)

    def starmap(self, fn: Callable, iterable: Iterable, timeout: Optional[float] = None,
                chunksize: int = 1, buffersize: Optional[int] = None,
                unordered: bool = False) -> Iterator:
        """As ``map``, with each item the argument tuple of one call."""
        if chunksize < 1:
            raise ValueError("chunksize must be >= 1.")
        if buffersize is not None:
            if not isinstance(buffersize, int):
                raise TypeError("buffersize must be an integer or None")
            if buffersize < 1:
                raise ValueError("buffersize must be None or > 0")
            if unordered:
                raise ValueError("buffersize must be None if unordered")
        deadline = None if timeout is None else time.monotonic() + timeout
        it = iter(iterable)
        chunks = iter(lambda: list(itertools.islice(it, chunksize)), [])
        if buffersize is not None:
            window = collections.deque(self.submit(P.apply_chunk, fn, chunk)
                                       for chunk in itertools.islice(chunks, buffersize))
            return _buffered_results(self, fn, chunks, window, deadline)
        futures = [self.submit(P.apply_chunk, fn, chunk) for chunk in chunks]
        return _results(futures, deadline, unordered)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No new calls; the workers end once the queued calls (none, with
        ``cancel_futures``) have run; ``wait``: until then."""
        with self._lock:
            self._shutdown = True
            manager = self._manager
        if manager is not None:
            manager.stop(cancel_futures)
            if wait:
                manager.thread.join()


def _results(futures: list, deadline: Optional[float], unordered: bool) -> Iterator:
    """The chunks' results one by one; what is left is cancelled if the caller stops."""
    try:
        if unordered:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            for future in cf.as_completed(futures, timeout=remaining):
                yield from future.result()
        else:
            for future in futures:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                yield from future.result(timeout=remaining)
    finally:
        for future in futures:
            future.cancel()


def _buffered_results(executor: cf.Executor, fn: Callable, chunks: Iterator,
                      window: collections.deque, deadline: Optional[float]) -> Iterator:
    """``map`` with ``buffersize``: the chunks' results in order, each yielded chunk
    replaced in ``window`` by the next one submitted; what is left is cancelled if the
    caller stops."""
    try:
        while window:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            values = window.popleft().result(timeout=remaining)
            chunk = next(chunks, None)
            if chunk is not None:
                window.append(executor.submit(P.apply_chunk, fn, chunk))
            yield from values
    finally:
        for future in window:
            future.cancel()


def serve_static(comm: Any, root: int) -> None:
    """A worker of a static pool: serve each executor of ``root`` until it says EXIT."""
    status = MPI.Status()
    while True:
        comm.probe(source=root, tag=MPI.ANY_TAG, status=status)
        if status.Get_tag() == P.STOP:
            comm.recv(source=root, tag=P.STOP)
            return
        P.serve(comm, root)


def release_static(comm: Any, root: int) -> None:
    """Tell a static pool's workers that no more executors come (not those known to have
    failed, under ``--fault-tolerant``)."""
    gone = _failed_workers(comm)
    for r in range(comm.Get_size()):
        if r != root and r not in gone:
            comm.send(None, dest=r, tag=P.STOP)


def open_static_pool(comm: Any, root: int) -> None:
    """From now on, ``MPIPoolExecutor`` uses ``comm``'s other ranks (serving in
    :func:`serve_static`) instead of spawning (``python -m mpi4py.futures``)."""
    _STATIC.update(comm=comm, root=root, busy=False)


def close_static_pool() -> None:
    """The static pool's workers may leave (the program at the root has ended)."""
    comm, root = _STATIC["comm"], _STATIC["root"]
    _STATIC.update(comm=None)
    if comm is not None:
        release_static(comm, root)


class MPICommExecutor:
    """``with MPICommExecutor(comm, root) as executor:`` - at ``root`` an executor whose
    workers are ``comm``'s other ranks (None elsewhere: those ranks serve inside the
    ``with`` statement until the root leaves it). On a communicator of one process the
    calls run in a thread of the root."""

    def __init__(self, comm: Any = None, root: int = 0, **kwargs: Any) -> None:
        comm = MPI.COMM_WORLD if comm is None else comm
        if comm.Is_inter():
            raise ValueError("MPICommExecutor: expecting an intracommunicator")
        if not 0 <= root < comm.Get_size():
            raise ValueError(f"MPICommExecutor: root={root}: expected 0..{comm.Get_size() - 1}")
        self._comm, self._root, self._options = comm, root, kwargs
        self._executor: Any = None

    def __enter__(self) -> Optional[cf.Executor]:
        comm, root = self._comm, self._root
        if comm.Get_rank() != root:
            serve_static(comm, root)
            return None
        if comm.Get_size() == 1:
            self._executor = cf.ThreadPoolExecutor(max_workers=1)
            return self._executor
        self._executor = _CommPoolExecutor(comm, root, **self._options)
        return self._executor

    def __exit__(self, *exc: Any) -> bool:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            if isinstance(self._executor, MPIPoolExecutor):
                release_static(self._comm, self._root)
            self._executor = None
        return False


class _CommPoolExecutor(MPIPoolExecutor):
    """The root's executor of ``MPICommExecutor``: the communicator's other ranks work."""

    def __init__(self, comm: Any, root: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._comm, self._root = comm, root

    def _connector(self) -> Callable[[], _Workers]:
        return functools.partial(_static, self._comm, self._root)


def get_comm_workers() -> Any:
    """In a worker: the communicator to the client (the parent intercommunicator of a
    spawned worker, COMM_WORLD in a static pool)."""
    parent = MPI.Comm.Get_parent()
    return parent if parent != MPI.COMM_NULL else MPI.COMM_WORLD
