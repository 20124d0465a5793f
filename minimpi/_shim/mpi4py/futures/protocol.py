"""The messages between an ``MPIPoolExecutor`` (the client) and its workers, and the worker loop.

All messages are pickled objects on one communicator: an intercommunicator to spawned
workers (the client is rank 0 of its group, the workers the remote group) or an
intracommunicator whose root is the client and whose other ranks are the workers (the
static pool of ``python -m mpi4py.futures`` and ``MPICommExecutor``).

client -> worker
    SETUP  {"path": sys.path, "main": file of __main__ or None, "init": (fn, args) or None}
    TASK   (task id, fn, args, kwargs)
    STOP   None
worker -> client
    READY  None, or the exception the initializer raised
    RESULT (task id, True, value) or (task id, False, exception)
"""
from __future__ import annotations

import os
import runpy
import sys
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


def serve(comm: Any, client: int) -> None:
    """The worker loop: set up, then run tasks from rank ``client`` of ``comm`` until STOP."""
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
    while True:
        message = comm.recv(source=client, tag=MPI.ANY_TAG, status=status)
        if status.Get_tag() == STOP:
            return
        task_id, fn, args, kwargs = message
        try:
            reply = (task_id, True, fn(*args, **kwargs))
        except BaseException as exc:
            reply = (task_id, False, exc)
        try:
            comm.send(reply, dest=client, tag=RESULT)
        except Exception as exc:   # a result that does not pickle
            comm.send((task_id, False, exc), dest=client, tag=RESULT)
