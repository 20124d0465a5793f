"""Shared mechanics of the collective API methods: argument checks, choosing, running.

Every collective method follows the same three lines: parse and check its arguments,
:func:`execute` the chosen algorithm's schedule (blocking, or as a request for the ``I``
variants), then finish (copy back temporaries, unpickle). The algorithm choice depends only
on values every rank has (size, byte count, op, environment, which ranks share a host), so
all ranks pick the same one.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from ...coll.blocks import as_bytes
from ...coll.cost import Layout
from ...coll.mismatch import open_call
from ...coll.registry import Algorithm, choose
from ...coll.schedule import Channel, Schedule, run, start
from ...data.ops import SUM, Op
from ...errors import CountError, OpError, RootError


def check_root(comm: Any, root: int, call: str) -> None:
    if not isinstance(root, (int, np.integer)) or not 0 <= root < comm.size:
        raise RootError(f"rank {comm.rank}: {call}(root={root!r}) on {comm.name}: invalid root; "
                        f"expected 0..{comm.size - 1}")


def execute(comm: Any, collective: str, call: str, nbytes: int,
            invoke: Callable[[Algorithm, Channel], Schedule], *, op: Any = None,
            algorithm: Optional[str] = None, objects: bool = False, nonblocking: bool = False,
            finalize: Optional[Callable[[Any], Any]] = None, root: Optional[int] = None) -> Any:
    """Choose an algorithm, then run ``invoke(algorithm, channel)``'s schedule (an
    :class:`~minimpi.coll.registry.Algorithm` is called like its function).

    Blocking: returns ``finalize(result)``. Nonblocking: returns a request whose ``wait()``
    gives ``finalize(result)``. ``root`` (rooted collectives), ``op``, ``nbytes`` and the
    algorithm go into the call's signature (:mod:`minimpi.coll.mismatch`), so ranks that call
    different collectives fail with ``CollectiveMismatchError`` instead of hanging.
    """
    comm._alive(call)
    ep = comm._ep
    alg = choose(collective, comm.size, nbytes, op, algorithm, objects=objects,
                 rank=comm.rank, call=call, layout=Layout.of_group(ep.engine.hosts, ep.group))
    ch = Channel(comm._ep, f"{call}[{alg.name}]", getattr(comm._ep.engine, "step_hook", None),
                 objects)
    open_call(ch, collective, call, alg.name, root, op, nbytes, objects)
    schedule = invoke(alg, ch)
    if nonblocking:
        return start(ch, schedule, finalize)
    result = run(ch, schedule)
    return finalize(result) if finalize is not None else result


def send_as_recv(comm: Any, call: str, send: Any, recv: Any) -> np.ndarray:
    """The input of a reduction (``Allreduce``, ``Reduce``, ``Scan``...): ``sendbuf``'s data
    read as ``recvbuf``'s element type (no copy); CountError unless both hold the same
    number of bytes."""
    if send.nbytes != recv.nbytes:
        raise CountError(
            f"rank {comm.rank}: {call}: sendbuf holds {send.count} x {send.datatype.name} "
            f"({send.nbytes} bytes) but recvbuf holds {recv.count} x {recv.datatype.name} "
            f"({recv.nbytes} bytes); they must match")
    if send.array.dtype == recv.array.dtype:
        return send.array
    return as_bytes(send.array).view(recv.array.dtype)


def check_equal_blocks(comm: Any, call: str, blocks: Any, blocks_arg: str, own: Any,
                       own_arg: str, uneven: str) -> None:
    """Scatter/Gather at the root: its v-buffer ``blocks`` must split into p equal blocks,
    each as large as its own buffer ``own`` (None: ``IN_PLACE``); CountError otherwise."""
    if len(set(blocks.counts)) > 1:
        raise CountError(
            f"rank {comm.rank}: {call}: {blocks_arg} holds {blocks.total_count} "
            f"{blocks.datatype.name} items, which do not split evenly over {comm.size} ranks; "
            f"use {uneven} for uneven blocks")
    if own is not None and blocks.block_nbytes(0) != own.nbytes:
        raise CountError(
            f"rank {comm.rank}: {call}: the root's {blocks_arg} has blocks of "
            f"{blocks.block_nbytes(0)} bytes ({blocks.counts[0]} x {blocks.datatype.name}) "
            f"but its {own_arg} holds {own.nbytes} bytes")


def check_op(comm: Any, op: Any, call: str) -> Any:
    """The op to use (SUM when None), or OpError before anything is sent."""
    if op is None:
        return SUM
    if not isinstance(op, Op):
        raise OpError(f"rank {comm.rank}: {call}: op must be an MPI.Op such as MPI.SUM "
                      f"(or MPI.Op.Create(fn)), got {type(op).__name__} {op!r:.40}")
    op._check_usable(f"rank {comm.rank}: {call}")
    return op
