"""The messages between an ``MPIPoolExecutor`` (the client) and its workers, and the worker loop.

All messages are pickled objects on one communicator: an intercommunicator to spawned
workers (the client is rank 0 of its group, the workers the remote group) or an
intracommunicator whose root is the client and whose other ranks are the workers (the
static pool of ``python -m mpi4py.futures`` and ``MPICommExecutor``).

client -> worker
    SETUP  {"path": sys.path, "main": file of __main__ or None, "init": (fn, args) or None}
    TASK   (flush, [(task id, pickled (fn, args, kwargs), short), ...]): calls, run in order
    STOP   None
worker -> client
    READY  None, or the exception the initializer raised
    RESULT [(task id, True, value, seconds) or (task id, False, exception, seconds), ...]

**Pipelining.** The client keeps several calls in flight per worker (see ``pool.py``), so
that a worker that finishes a call finds the next one already here instead of waiting for
the client's round trip, and sends several calls in one TASK message. The worker runs its
calls in order and sends their results back together: once it holds ``flush`` unsent
results, when it has nothing left to run, once its oldest unsent result is
:data:`FLUSH_AFTER` old, and before it starts a call not marked ``short`` (the client marks
the calls of functions it measured as much shorter than that), so that no result waits
behind a long call;
``seconds`` is the time the call took to run, from which the client sizes the batches of
the calls of that function. Each message costs both sides one pickle and one send or receive, so
batches cut the client's per-call cost (its share of a tiny call is most of the pool's).
"""
from __future__ import annotations

import collections
import os
import runpy
import sys
import time
import types
from typing import Any, List, Optional

from minimpi import MPI

SETUP, READY, TASK, RESULT, STOP = 101, 102, 103, 104, 105

#: a worker sends its unsent results once the oldest is this old (s), even mid-batch
FLUSH_AFTER = 0.002


def setup_message(initializer: Any, initargs: tuple, path: Optional[list] = None,
                  main: Optional[str] = None) -> dict:
    """What every worker needs first: the client's import path, its main script (whose
    functions pickle as ``__main__.name``) and the initializer."""
    if main is None:
        main_module = sys.modules.get("__main__")
        main = getattr(main_module, "__file__", None)
        if main is not None and not os.path.isfile(main):
            main = None
    return {"path": list(sys.path if path is None else path), "main": main,
            "init": (initializer, tuple(initargs)) if initializer is not None else None}


def _import_main(path: str) -> None:
    """Run the client's main script as ``__mp_main__`` (its ``if __name__ == "__main__"``
    part does not run) and make it ``__main__`` here, so that what it defines unpickles."""
    if getattr(sys.modules.get("__mp_main__"), "__file__", None) == path:
        return
    module = types.ModuleType("__mp_main__")
    module.__file__ = path
    sys.modules["__mp_main__"] = module
    module.__dict__.update(runpy.run_path(path, run_name="__mp_main__"))
    sys.modules["__main__"] = module


def apply_chunk(fn: Any, chunk: list) -> list:
    """A chunk of ``map``/``starmap``: ``fn(*args)`` for each argument tuple."""
    return [fn(*args) for args in chunk]


def send_results(comm: Any, client: int, replies: List[tuple]) -> None:
    """One RESULT message with ``replies``; if it does not pickle, each reply alone, and a
    result that does not pickle becomes its task's exception (the pickler's own, as
    mpi4py's, else minimpi's ``SerializationError``)."""
    try:
        comm.send(replies, dest=client, tag=RESULT)
        return
    except Exception:
        pass
    for reply in replies:
        try:
            comm.send([reply], dest=client, tag=RESULT)
        except Exception as exc:   # a result that does not pickle: the pickler's exception
            try:
                comm.send([(reply[0], False, exc.__cause__ or exc, reply[3])], dest=client,
                          tag=RESULT)
            except Exception:
                comm.send([(reply[0], False, exc, reply[3])], dest=client, tag=RESULT)


def serve(comm: Any, client: int) -> None:
    """The worker loop: set up, then run tasks from rank ``client`` of ``comm`` until STOP.

    Calls arrive in batches (TASK) and run in order; results go back in batches (see the
    module docstring). Cost per call: the call, two clock reads and its share of one
    pickled message each way."""
    status = MPI.Status()
    setup = comm.recv(source=client, tag=SETUP)
    problem = None
    try:
        for entry in setup["path"]:
            if entry not in sys.path:
                sys.path.append(entry)
        if setup["main"]:
            _import_main(setup["main"])
        if setup["init"] is not None:
            fn, args = setup["init"]
            fn(*args)
    except BaseException as exc:   # the client marks the pool broken
        problem = exc
    comm.send(problem, dest=client, tag=READY)
    if problem is not None:
        comm.recv(source=client, tag=STOP)
        return
    calls: collections.deque = collections.deque()
    replies: List[tuple] = []
    flush, oldest = 1, 0.0
    clock = time.perf_counter
    loads = MPI.pickle.loads
    while True:
        if not calls:
            message = comm.recv(source=client, tag=MPI.ANY_TAG, status=status)
            if status.Get_tag() == STOP:
                return
            flush, batch = message
            calls.extend(batch)
            continue
        task_id, call, short = calls.popleft()
        if replies and not short:
            send_results(comm, client, replies)
            replies = []
        start = clock()
        try:
            fn, args, kwargs = loads(call)
            value, ok = fn(*args, **kwargs), True
        except BaseException as exc:   # the call raised, or did not unpickle
            value, ok = exc, False
        end = clock()
        if not replies:
            oldest = start
        replies.append((task_id, ok, value, end - start))
        if len(replies) >= flush or not calls or end - oldest >= FLUSH_AFTER:
            send_results(comm, client, replies)
            replies = []
