"""Shared mechanics of the collective API methods: argument checks, choosing, running.

Every collective method follows the same three lines: parse and check its arguments,
:func:`execute` the chosen algorithm's schedule (blocking, or as a request for the ``I``
variants), then finish (copy back temporaries, unpickle). The algorithm choice depends only
on values every rank has (size, byte count, op, environment), so all ranks pick the same one.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from ..errors import RootError
from ..mismatch import open_call
from .registry import choose
from .schedule import Channel, Schedule, run, start


def check_root(comm: Any, root: int, call: str) -> None:
    if not isinstance(root, (int, np.integer)) or not 0 <= root < comm.size:
        raise RootError(f"rank {comm.rank}: {call}(root={root!r}) on {comm.name}: invalid root; "
                        f"expected 0..{comm.size - 1}")


def execute(comm: Any, collective: str, call: str, nbytes: int,
            invoke: Callable[[Callable, Channel], Schedule], *, op: Any = None,
            algorithm: Optional[str] = None, objects: bool = False, nonblocking: bool = False,
            finalize: Optional[Callable[[Any], Any]] = None, root: Optional[int] = None) -> Any:
    """Choose an algorithm, then run ``invoke(algorithm_function, channel)``'s schedule.

    Blocking: returns ``finalize(result)``. Nonblocking: returns a request whose ``wait()``
    gives ``finalize(result)``. ``root`` (rooted collectives), ``op``, ``nbytes`` and the
    algorithm go into the call's signature (:mod:`minimpi.mismatch`), so ranks that call
    different collectives fail with ``CollectiveMismatchError`` instead of hanging.
    """
    comm._alive(call)
    alg = choose(collective, comm.size, nbytes, op, algorithm, objects=objects,
                 rank=comm.rank, call=call)
    ch = Channel(comm, f"{call}[{alg.name}]", getattr(comm._engine, "step_hook", None), objects)
    open_call(comm, ch, collective, call, alg.name, root, op, nbytes, objects)
    schedule = invoke(alg.function, ch)
    if nonblocking:
        return start(ch, schedule, finalize)
    result = run(ch, schedule)
    return finalize(result) if finalize is not None else result


def check_op(comm: Any, op: Any, call: str) -> Any:
    """The op to use (SUM when None), or OpError before anything is sent."""
    from ..errors import OpError
    from ..ops import SUM, Op
    if op is None:
        return SUM
    if not isinstance(op, Op):
        raise OpError(f"rank {comm.rank}: {call}: op must be an MPI.Op such as MPI.SUM "
                      f"(or MPI.Op.Create(fn)), got {type(op).__name__} {op!r:.40}")
    op._check_usable(f"rank {comm.rank}: {call}")
    return op
