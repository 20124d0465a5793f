"""The messages between an ``MPIPoolExecutor`` (the client) and its workers, and the worker loop.

All messages are pickled objects on one communicator: an intercommunicator to spawned
workers (the client is rank 0 of its group, the workers the remote group) or an
intracommunicator whose root is the client and whose other ranks are the workers (the
static pool of ``python -m mpi4py.futures`` and ``MPICommExecutor``).

client -> worker
    SETUP  {"path": sys.path, "main": file of __main__ or None, "init": (fn, args) or None}
    TASK   [(task id, pickled (fn, args, kwargs)), ...]: one or more calls, run in order
    STOP   None
worker -> client
    READY  None, or the exception the initializer raised
    RESULT [(task id, True, pickled value, seconds) or (task id, False, pickled exception,
           seconds)]

**Pipelining.** The client keeps several calls in flight per worker (see ``pool.py``), so
that a worker that finishes a call finds the next one already here instead of waiting for
the client's round trip, and sends several calls in one TASK message (each call, and each
result, pickled on its own, so that one that does not unpickle fails alone). The worker runs them in order and
sends each result as soon as its call returns (a result held back to share a message
would wait behind the next call, however long: ``wait``/``as_completed``/``map`` timeouts
would see it late); ``seconds`` is the time the call ran, from which the client sizes the
batches of the calls of that function.
"""
from __future__ import annotations

import collections
import os
import runpy
import sys
import time
import types
from typing import Any, Optional

from minimpi import MPI

SETUP, READY, TASK, RESULT, STOP = 101, 102, 103, 104, 105


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


def reply(task_id: int, ok: bool, value: Any, seconds: float) -> tuple:
    """A RESULT entry, its value pickled on its own (``MPI.pickle``): a value that does not
    pickle becomes the pickler's exception, and one that does not unpickle at the client
    fails its call alone there."""
    dumps = MPI.pickle.dumps
    try:
        return (task_id, ok, dumps(value), seconds)
    except BaseException as exc:
        try:
            return (task_id, False, dumps(exc), seconds)
        except BaseException:
            return (task_id, False, dumps(RuntimeError(
                f"the result of the call does not pickle: {type(exc).__name__}: {exc}")),
                seconds)


def serve(comm: Any, client: int) -> None:
    """The worker loop: set up, then run tasks from rank ``client`` of ``comm`` until STOP.

    Calls arrive in batches (TASK) and run in order; each result goes back as soon as its
    call returns (see the module docstring). Cost per call: the call, its unpickling, two
    clock reads, one pickled RESULT message and a share of one TASK message."""
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
    clock = time.perf_counter
    loads = MPI.pickle.loads
    while True:
        if not calls:
            message = comm.recv(source=client, tag=MPI.ANY_TAG, status=status)
            if status.Get_tag() == STOP:
                return
            calls.extend(message)
            continue
        task_id, call = calls.popleft()
        start = clock()
        try:
            fn, args, kwargs = loads(call)
            value, ok = fn(*args, **kwargs), True
        except BaseException as exc:   # the call raised, or did not unpickle
            value, ok = exc, False
        comm.send([reply(task_id, ok, value, clock() - start)], dest=client, tag=RESULT)
