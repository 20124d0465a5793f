"""The collective calls of ``Intercomm``: arguments, buffers, roots.

Each function (a method of ``Intercomm``) parses its arguments as the intercommunicator form of the collective defines
them (block counts refer to the *remote* group; roots are ``MPI.ROOT``, ``MPI.PROC_NULL``
or a remote rank), then runs the schedule of :mod:`minimpi.coll.intercomm` on the call's
two channels (:func:`_inter_collective`): one over the remote group,
one over the local group. Both draw a slot (sequence number) of their endpoint on every
call, so the two groups' calls stay in step, and both are signed for the mismatch checks
(:mod:`minimpi.coll.mismatch`; the root and byte count are left out of the signature, as
they differ between the groups by definition).

A call that fails on this rank (a bad root or buffer) still consumes its slots and tells
every member of both groups (abort markers), so they raise ``CollectiveAbortedError``
instead of waiting.
"""
from __future__ import annotations

import operator
from typing import Any, Callable, List, Optional, Sequence

import numpy as np

from ...coll import slots
from ...coll.intercomm import (
    inter_allgather,
    inter_allreduce,
    inter_alltoall,
    inter_barrier,
    inter_bcast,
    inter_gather,
    inter_reduce,
    inter_reduce_scatter,
    inter_scatter,
)
from ...coll.mismatch import open_call, watch_of
from ...coll.reduction import Operand
from ...coll.schedule import Channel, Schedule, run, start
from ...coll.slots import SEQ_MASK
from ...constants import PROC_NULL, ROOT
from ...data.buffers import parse_buffer, parse_vbuffer, parse_wbuffer
from ...data.cint import as_int
from ...data.ops import SUM
from ...errors import (
    CollectiveAbortedError,
    CollectiveMismatchError,
    CountError,
    DatatypeError,
    JobAbortedError,
    PeerLostError,
    RootError,
)
from .common import check_op, comm_lock, same_datatype

#: errors a rank does not announce to the others (caused by another rank, or the job ending)
_NOT_ANNOUNCED = (CollectiveAbortedError, CollectiveMismatchError, PeerLostError,
                  JobAbortedError)
#: the algorithm name every intercommunicator collective is signed with
ALGORITHM = "inter"

Invoke = Callable[[Channel, Channel], Schedule]


def _announce(remote: Channel, local: Channel, opened: bool, exc: BaseException,
              call: str) -> None:
    """This rank failed in the call of ``remote``/``local``: consume both slots here and
    send every other process of both groups an abort marker on **both** collective
    contexts - a rank may be waiting on either (a leader on its group, its group on the
    leader). Both groups use the same context ids and draw the same slot numbers, so one
    marker means the same call everywhere. Never raises."""
    try:
        error_class = getattr(exc, "error_class", slots.ERR_OTHER)
        markers = []
        for ch in (remote, local):
            ep, low = ch.ep, ch.tag & SEQ_MASK
            watch = watch_of(ep)
            if not opened:
                watch.register(low, slots.marker_tag(low, 0), 0, "aborted", call)
            watch.abort(ep.engine, ep.coll_context, low, exc)
            markers.append((ep.coll_context, slots.marker_tag(low, error_class)))
        for ep, everyone in ((remote.ep, True), (local.ep, False)):
            for dest in range(ep.size):
                if everyone or dest != ep.rank:   # the remote group: every rank
                    for context, tag in markers:
                        ep.isend((), 0, dest, tag, 0, "collective abort", context)
        exc._minimpi_slot_aborted = True
    except Exception:  # noqa: S110 - the caller's own error is what must surface
        pass


def _announcing(schedule: Schedule, remote: Channel, local: Channel, call: str) -> Schedule:
    """``schedule``, telling both groups when it fails on this rank after the call returned
    its request (a user op that raised in a later step of a nonblocking call)."""
    try:
        return (yield from schedule)
    except Exception as exc:
        if not isinstance(exc, _NOT_ANNOUNCED):
            _announce(remote, local, True, exc, call)
        raise


def _signed(op: Any) -> Any:
    """The op a call's signature names (None means SUM, as the call itself takes it)."""
    return SUM if op is None else op


def _blocks(spec: Any, n: int) -> List[np.ndarray]:
    return [spec.block(i) for i in range(n)]


def _equal(comm: Any, call: str, spec: Any, arg: str, vector: str) -> None:
    if len(set(spec.counts)) > 1:
        raise CountError(f"rank {comm.rank}: {call} on {comm.name}: {arg} holds "
                         f"{spec.total_count} {spec.datatype.name} items, which do not split "
                         f"evenly over the remote group's {comm.remote_size} ranks; use "
                         f"{vector} for uneven blocks")


# -- running one call ------------------------------------------------------------------
def _inter_collective(comm, collective: str, call: str,
                      prepare: Callable[[], Any], *, objects: bool = False,
                      nonblocking: bool = False, op: Any = None) -> Any:
    """Draw the call's two channels, ``prepare()`` (parse the arguments; returns
    ``invoke`` or ``(invoke, finalize)``), sign the channels and run the schedule."""
    comm._alive(call)
    hook = comm._ep.engine.step_reporter()
    label = f"{call}[{ALGORITHM}]"
    remote = Channel(comm._ep, label, hook, objects)
    local = Channel(comm._local_endpoint, label, hook, objects)
    opened = False
    try:
        prepared = prepare()
        invoke, finalize = prepared if isinstance(prepared, tuple) else (prepared, None)
        open_call(remote, collective, call, ALGORITHM, None, op, 0, objects)
        open_call(local, collective, call, ALGORITHM, None, op, 0, objects)
        opened = True
        schedule = invoke(remote, local)
        if nonblocking:
            return start(remote, _announcing(schedule, remote, local, call), finalize)
        if objects:   # as mpi4py: one thread at a time per lowercase collective
            with comm_lock(comm, collective):
                result = run(remote, schedule)
        else:
            result = run(remote, schedule)
    except Exception as exc:
        if not isinstance(exc, _NOT_ANNOUNCED) and \
                not getattr(exc, "_minimpi_slot_aborted", False):
            _announce(remote, local, opened, exc, call)
        raise
    return finalize(result) if finalize is not None else result


def _check_root(comm, root: Any, call: str) -> int:
    """``MPI.ROOT``, ``MPI.PROC_NULL`` or a rank of the remote group (else RootError,
    MPI_ERR_ROOT)."""
    try:   # as mpi4py's C int argument: numpy integers, floats truncated
        value = as_int(root)
    except (TypeError, ValueError, OverflowError):
        value = None
    if value is not None and (value in (ROOT, PROC_NULL) or 0 <= value < comm._ep.size):
        return value
    raise RootError(f"rank {comm.rank}: {call}(root={root!r}) on {comm.name}: invalid root "
                    f"for an intercommunicator; expected MPI.ROOT (this rank is the root), "
                    f"MPI.PROC_NULL (another rank of this group is) or a rank of the remote "
                    f"group, 0..{comm._ep.size - 1}")


# -- barrier -----------------------------------------------------------------------------
def Barrier(comm) -> None:
    """Wait until every rank of both groups has called Barrier."""
    _inter_collective(comm, "barrier", "Barrier", lambda: inter_barrier)


def barrier(comm) -> None:
    _inter_collective(comm, "barrier", "barrier", lambda: inter_barrier)


def Ibarrier(comm) -> Any:
    return _inter_collective(comm, "barrier", "Ibarrier", lambda: inter_barrier,
                                  nonblocking=True)


def ibarrier(comm) -> Any:
    return _inter_collective(comm, "barrier", "ibarrier", lambda: inter_barrier,
                                  nonblocking=True)


# -- bcast -----------------------------------------------------------------------------
def Bcast(comm, buf: Any, root: int = 0) -> None:
    """The root (``MPI.ROOT``) sends ``buf`` to every rank of the other group; its
    group's other ranks pass ``MPI.PROC_NULL``."""
    _bcast_buf(comm, buf, root, "Bcast", False)


def Ibcast(comm, buf: Any, root: int = 0) -> Any:
    return _bcast_buf(comm, buf, root, "Ibcast", True)


def _bcast_buf(comm, buf: Any, root: int, call: str, nonblocking: bool) -> Any:
    def prepare():
        r = _check_root(comm, root, call)
        if r == PROC_NULL:
            return lambda remote, local: inter_bcast(remote, local, None, r)
        spec = parse_buffer(buf, writable=r != ROOT, call=call, arg="buf")
        return (lambda remote, local: inter_bcast(remote, local, spec.array, r),
                lambda _: spec.finish())
    return _inter_collective(comm, "bcast", call, prepare, nonblocking=nonblocking)


def bcast(comm, obj: Any = None, root: int = 0) -> Any:
    """The root's object, on every rank of the other group (None in the root's group)."""
    return _bcast_obj(comm, obj, root, "bcast", False)


def ibcast(comm, obj: Any = None, root: int = 0) -> Any:
    return _bcast_obj(comm, obj, root, "ibcast", True)


def _bcast_obj(comm, obj: Any, root: int, call: str, nonblocking: bool) -> Any:
    def prepare():
        r = _check_root(comm, root, call)
        return lambda remote, local: inter_bcast(remote, local,
                                                 obj if r == ROOT else None, r)
    return _inter_collective(comm, "bcast", call, prepare, objects=True,
                                  nonblocking=nonblocking)


# -- gather ----------------------------------------------------------------------------
def Gather(comm, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
    """Remote rank i's ``sendbuf`` lands in block i of the root's ``recvbuf``."""
    _gather_buf(comm, sendbuf, recvbuf, root, "Gather", False, False)


def Igather(comm, sendbuf: Any, recvbuf: Any, root: int = 0) -> Any:
    return _gather_buf(comm, sendbuf, recvbuf, root, "Igather", False, True)


def Gatherv(comm, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
    """``Gather`` with per-rank counts at the root: ``[buf, (counts, displs), TYPE]``."""
    _gather_buf(comm, sendbuf, recvbuf, root, "Gatherv", True, False)


def Igatherv(comm, sendbuf: Any, recvbuf: Any, root: int = 0) -> Any:
    return _gather_buf(comm, sendbuf, recvbuf, root, "Igatherv", True, True)


def _gather_buf(comm, sendbuf, recvbuf, root, call, vector, nonblocking):
    def prepare():
        r = _check_root(comm, root, call)
        if r == ROOT:
            recv = parse_vbuffer(recvbuf, comm._ep.size, writable=True, call=call,
                                 arg="recvbuf")
            if not vector:
                _equal(comm, call, recv, "recvbuf", "Gatherv")
            blocks = _blocks(recv, comm._ep.size)
            return (lambda remote, local: inter_gather(remote, local, None, blocks, r),
                    lambda _: recv.finish())
        send = None if r == PROC_NULL else \
            parse_buffer(sendbuf, writable=False, call=call, arg="sendbuf").array
        return lambda remote, local: inter_gather(remote, local, send, None, r)
    return _inter_collective(comm, "gatherv" if vector else "gather", call, prepare,
                                  nonblocking=nonblocking)


def gather(comm, sendobj: Any, root: int = 0) -> Optional[list]:
    """The root returns the list of the remote ranks' objects; every other rank None."""
    return _gather_obj(comm, sendobj, root, "gather", False)


def igather(comm, sendobj: Any, root: int = 0) -> Any:
    return _gather_obj(comm, sendobj, root, "igather", True)


def _gather_obj(comm, sendobj, root, call, nonblocking):
    def prepare():
        r = _check_root(comm, root, call)
        return lambda remote, local: inter_gather(remote, local, sendobj, None, r)
    return _inter_collective(comm, "gather", call, prepare, objects=True,
                                  nonblocking=nonblocking)


# -- scatter ---------------------------------------------------------------------------
def Scatter(comm, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
    """Block i of the root's ``sendbuf`` lands in remote rank i's ``recvbuf``."""
    _scatter_buf(comm, sendbuf, recvbuf, root, "Scatter", False, False)


def Iscatter(comm, sendbuf: Any, recvbuf: Any, root: int = 0) -> Any:
    return _scatter_buf(comm, sendbuf, recvbuf, root, "Iscatter", False, True)


def Scatterv(comm, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
    """``Scatter`` with per-rank counts at the root: ``[buf, (counts, displs), TYPE]``."""
    _scatter_buf(comm, sendbuf, recvbuf, root, "Scatterv", True, False)


def Iscatterv(comm, sendbuf: Any, recvbuf: Any, root: int = 0) -> Any:
    return _scatter_buf(comm, sendbuf, recvbuf, root, "Iscatterv", True, True)


def _scatter_buf(comm, sendbuf, recvbuf, root, call, vector, nonblocking):
    def prepare():
        r = _check_root(comm, root, call)
        if r == ROOT:
            send = parse_vbuffer(sendbuf, comm._ep.size, writable=False, call=call,
                                 arg="sendbuf")
            if not vector:
                _equal(comm, call, send, "sendbuf", "Scatterv")
            blocks = _blocks(send, comm._ep.size)
            return lambda remote, local: inter_scatter(remote, local, blocks, None, r)
        if r == PROC_NULL:
            return lambda remote, local: inter_scatter(remote, local, None, None, r)
        recv = parse_buffer(recvbuf, writable=True, call=call, arg="recvbuf")
        return (lambda remote, local: inter_scatter(remote, local, None, recv.array, r),
                lambda _: recv.finish())
    return _inter_collective(comm, "scatterv" if vector else "scatter", call, prepare,
                                  nonblocking=nonblocking)


def scatter(comm, sendobj: Any, root: int = 0) -> Any:
    """The root passes one object per remote rank; each remote rank returns its own
    (the root's group returns None)."""
    return _scatter_obj(comm, sendobj, root, "scatter", False)


def iscatter(comm, sendobj: Any, root: int = 0) -> Any:
    return _scatter_obj(comm, sendobj, root, "iscatter", True)


def _scatter_obj(comm, sendobj, root, call, nonblocking):
    def prepare():
        r = _check_root(comm, root, call)
        items = None
        if r == ROOT:
            items = _one_per_remote(comm, sendobj, call, "sendobj")
        return lambda remote, local: inter_scatter(remote, local, items, None, r)
    return _inter_collective(comm, "scatter", call, prepare, objects=True,
                                  nonblocking=nonblocking)


def _one_per_remote(comm, seq: Any, call: str, arg: str) -> list:
    q = comm._ep.size
    try:
        # As in mpi4py, None stands for a None to every remote rank.
        items = [None] * q if seq is None else list(seq)
    except TypeError:
        items = None
    if items is None or len(items) != q:
        got = f"{len(items)} items" if items is not None else type(seq).__name__
        raise CountError(f"rank {comm.rank}: {call} on {comm.name}: {arg} must be a "
                         f"sequence of {q} objects (one per remote rank), got {got}")
    return items


# -- allgather ---------------------------------------------------------------------------
def Allgather(comm, sendbuf: Any, recvbuf: Any) -> None:
    """Every rank receives remote rank j's ``sendbuf`` into block j of ``recvbuf``."""
    _allgather_buf(comm, sendbuf, recvbuf, "Allgather", False, False)


def Iallgather(comm, sendbuf: Any, recvbuf: Any) -> Any:
    return _allgather_buf(comm, sendbuf, recvbuf, "Iallgather", False, True)


def Allgatherv(comm, sendbuf: Any, recvbuf: Any) -> None:
    _allgather_buf(comm, sendbuf, recvbuf, "Allgatherv", True, False)


def Iallgatherv(comm, sendbuf: Any, recvbuf: Any) -> Any:
    return _allgather_buf(comm, sendbuf, recvbuf, "Iallgatherv", True, True)


def _allgather_buf(comm, sendbuf, recvbuf, call, vector, nonblocking):
    def prepare():
        send = parse_buffer(sendbuf, writable=False, call=call, arg="sendbuf")
        recv = parse_vbuffer(recvbuf, comm._ep.size, writable=True, call=call,
                             arg="recvbuf")
        if not vector:
            _equal(comm, call, recv, "recvbuf", "Allgatherv")
        blocks = _blocks(recv, comm._ep.size)
        return (lambda remote, local: inter_allgather(remote, local, send.array, blocks),
                lambda _: recv.finish())
    return _inter_collective(comm, "allgatherv" if vector else "allgather", call, prepare,
                                  nonblocking=nonblocking)


def allgather(comm, sendobj: Any) -> list:
    """The list of the remote group's objects, in remote rank order."""
    return _inter_collective(comm, 
        "allgather", "allgather",
        lambda: lambda remote, local: inter_allgather(remote, local, sendobj, None),
        objects=True)


def iallgather(comm, sendobj: Any) -> Any:
    return _inter_collective(comm, 
        "allgather", "iallgather",
        lambda: lambda remote, local: inter_allgather(remote, local, sendobj, None),
        objects=True, nonblocking=True)


# -- alltoall ----------------------------------------------------------------------------
def Alltoall(comm, sendbuf: Any, recvbuf: Any) -> None:
    """Block j of ``sendbuf`` goes to remote rank j; remote rank j's block for this rank
    lands in block j of ``recvbuf``."""
    _alltoall_buf(comm, sendbuf, recvbuf, "Alltoall", False, False)


def Ialltoall(comm, sendbuf: Any, recvbuf: Any) -> Any:
    return _alltoall_buf(comm, sendbuf, recvbuf, "Ialltoall", False, True)


def Alltoallv(comm, sendbuf: Any, recvbuf: Any) -> None:
    _alltoall_buf(comm, sendbuf, recvbuf, "Alltoallv", True, False)


def Ialltoallv(comm, sendbuf: Any, recvbuf: Any) -> Any:
    return _alltoall_buf(comm, sendbuf, recvbuf, "Ialltoallv", True, True)


def _alltoall_buf(comm, sendbuf, recvbuf, call, vector, nonblocking):
    q = comm._ep.size

    def prepare():
        send = parse_vbuffer(sendbuf, q, writable=False, call=call, arg="sendbuf")
        recv = parse_vbuffer(recvbuf, q, writable=True, call=call, arg="recvbuf")
        if not vector:
            _equal(comm, call, send, "sendbuf", "Alltoallv")
            _equal(comm, call, recv, "recvbuf", "Alltoallv")
        sends, blocks = _blocks(send, q), _blocks(recv, q)
        return (lambda remote, local: inter_alltoall(remote, local, sends, blocks),
                lambda _: recv.finish())
    return _inter_collective(comm, "alltoallv" if vector else "alltoall", call, prepare,
                                  nonblocking=nonblocking)


def Alltoallw(comm, sendbuf: Any, recvbuf: Any) -> None:
    """``Alltoall`` with a count, a byte displacement and a datatype per remote rank."""
    _alltoallw(comm, sendbuf, recvbuf, "Alltoallw", False)


def Ialltoallw(comm, sendbuf: Any, recvbuf: Any) -> Any:
    return _alltoallw(comm, sendbuf, recvbuf, "Ialltoallw", True)


def _alltoallw(comm, sendbuf, recvbuf, call, nonblocking):
    q = comm._ep.size

    def prepare():
        send = parse_wbuffer(sendbuf, q, writable=False, call=call, arg="sendbuf")
        recv = parse_wbuffer(recvbuf, q, writable=True, call=call, arg="recvbuf")
        return lambda remote, local: inter_alltoall(remote, local, send.blocks,
                                                    recv.blocks)
    return _inter_collective(comm, "alltoallw", call, prepare, nonblocking=nonblocking)


def alltoall(comm, sendobj: Any) -> list:
    """Send ``sendobj[j]`` to remote rank j; return what each remote rank sent here."""
    def prepare():
        items = _one_per_remote(comm, sendobj, "alltoall", "sendobj")
        return lambda remote, local: inter_alltoall(remote, local, items, None)
    return _inter_collective(comm, "alltoall", "alltoall", prepare, objects=True)


def ialltoall(comm, sendobj: Any) -> Any:
    def prepare():
        items = _one_per_remote(comm, sendobj, "ialltoall", "sendobj")
        return lambda remote, local: inter_alltoall(remote, local, items, None)
    return _inter_collective(comm, "alltoall", "ialltoall", prepare, objects=True,
                                  nonblocking=True)


# -- reduce ------------------------------------------------------------------------------
def Reduce(comm, sendbuf: Any, recvbuf: Any, op: Any = SUM, root: int = 0) -> None:
    """The root's ``recvbuf`` gets the reduction (``op``, default SUM) of the other
    group's ``sendbuf``s."""
    _reduce_buf(comm, sendbuf, recvbuf, op, root, "Reduce", False)


def Ireduce(comm, sendbuf: Any, recvbuf: Any, op: Any = SUM, root: int = 0) -> Any:
    return _reduce_buf(comm, sendbuf, recvbuf, op, root, "Ireduce", True)


def _reduce_buf(comm, sendbuf, recvbuf, op, root, call, nonblocking):
    def prepare():
        nonlocal op
        op = check_op(comm, op, call)
        r = _check_root(comm, root, call)
        if r == ROOT:
            recv = parse_buffer(recvbuf, writable=True, call=call, arg="recvbuf")
            op.check_datatype(recv.datatype, call)
            return (lambda remote, local: inter_reduce(remote, local, None, None,
                                                       recv.array, r),
                    lambda _: recv.finish())
        if r == PROC_NULL:
            return lambda remote, local: inter_reduce(remote, local, None, None, None, r)
        send = parse_buffer(sendbuf, writable=False, call=call, arg="sendbuf")
        op.check_datatype(send.datatype, call)
        return lambda remote, local: inter_reduce(
            remote, local, Operand(op, False, send.datatype, remote.call).on(remote), send.array,
            None, r)
    return _inter_collective(comm, "reduce", call, prepare, op=_signed(op),
                                  nonblocking=nonblocking)


def reduce(comm, sendobj: Any, op: Any = SUM, root: int = 0) -> Any:
    """The root returns the reduction of the other group's objects; others None."""
    return _reduce_obj(comm, sendobj, op, root, "reduce", False)


def ireduce(comm, sendobj: Any, op: Any = SUM, root: int = 0) -> Any:
    return _reduce_obj(comm, sendobj, op, root, "ireduce", True)


def _reduce_obj(comm, sendobj, op, root, call, nonblocking):
    def prepare():
        r = _check_root(comm, root, call)
        checked = check_op(comm, op, call)
        return lambda remote, local: inter_reduce(
            remote, local, Operand(checked, True, None, remote.call).on(remote), sendobj, None, r)
    return _inter_collective(comm, "reduce", call, prepare, objects=True, op=_signed(op),
                                  nonblocking=nonblocking)


# -- allreduce ---------------------------------------------------------------------------
def Allreduce(comm, sendbuf: Any, recvbuf: Any, op: Any = SUM) -> None:
    """Each group's ``recvbuf`` gets the reduction of the other group's ``sendbuf``s."""
    _allreduce_buf(comm, sendbuf, recvbuf, op, "Allreduce", False)


def Iallreduce(comm, sendbuf: Any, recvbuf: Any, op: Any = SUM) -> Any:
    return _allreduce_buf(comm, sendbuf, recvbuf, op, "Iallreduce", True)


def _allreduce_buf(comm, sendbuf, recvbuf, op, call, nonblocking):
    def prepare():
        nonlocal op
        op = check_op(comm, op, call)
        recv = parse_buffer(recvbuf, writable=True, call=call, arg="recvbuf")
        send = parse_buffer(sendbuf, writable=False, call=call, arg="sendbuf")
        _same_shape(comm, call, send, recv)
        op.check_datatype(recv.datatype, call)
        return (lambda remote, local: inter_allreduce(
                    remote, local, Operand(op, False, recv.datatype, remote.call).on(remote),
                    send.array, recv.array),
                lambda _: recv.finish())
    return _inter_collective(comm, "allreduce", call, prepare, op=_signed(op),
                                  nonblocking=nonblocking)


def allreduce(comm, sendobj: Any, op: Any = SUM) -> Any:
    """The reduction of the other group's objects, on every rank."""
    return _allreduce_obj(comm, sendobj, op, "allreduce", False)


def iallreduce(comm, sendobj: Any, op: Any = SUM) -> Any:
    return _allreduce_obj(comm, sendobj, op, "iallreduce", True)


def _allreduce_obj(comm, sendobj, op, call, nonblocking):
    def prepare():
        checked = check_op(comm, op, call)
        return lambda remote, local: inter_allreduce(
            remote, local, Operand(checked, True, None, remote.call).on(remote), sendobj, None)
    return _inter_collective(comm, "allreduce", call, prepare, objects=True,
                                  op=_signed(op), nonblocking=nonblocking)


def _same_shape(comm, call: str, send: Any, recv: Any) -> None:
    if not same_datatype(send.datatype, recv.datatype):
        raise DatatypeError(
            f"rank {comm.rank}: {call} on {comm.name}: sendbuf has datatype "
            f"{send.datatype.name} but recvbuf has {recv.datatype.name}; a reduction "
            f"needs the same datatype on both sides")
    if send.count != recv.count:
        raise CountError(
            f"rank {comm.rank}: {call} on {comm.name}: sendbuf holds {send.count} x "
            f"{send.datatype.name} but recvbuf holds {recv.count}; they must match")


# -- reduce_scatter ----------------------------------------------------------------------
def Reduce_scatter(comm, sendbuf: Any, recvbuf: Any, recvcounts: Any = None,
                   op: Any = SUM) -> None:
    """Rank i of each group gets ``recvcounts[i]`` items (block i) of the reduction of
    the other group's ``sendbuf``s; ``recvcounts`` is the local group's, and
    ``sendbuf`` holds ``sum(recvcounts)`` items (the same total in both groups)."""
    _reduce_scatter(comm, sendbuf, recvbuf, recvcounts, op, "Reduce_scatter", False, False)


def Ireduce_scatter(comm, sendbuf: Any, recvbuf: Any, recvcounts: Any = None,
                    op: Any = SUM) -> Any:
    return _reduce_scatter(comm, sendbuf, recvbuf, recvcounts, op, "Ireduce_scatter",
                                False, True)


def Reduce_scatter_block(comm, sendbuf: Any, recvbuf: Any, op: Any = SUM) -> None:
    """``Reduce_scatter`` with equal blocks: ``sendbuf`` holds (local size) x
    ``recvbuf``'s count."""
    _reduce_scatter(comm, sendbuf, recvbuf, None, op, "Reduce_scatter_block", True, False)


def Ireduce_scatter_block(comm, sendbuf: Any, recvbuf: Any, op: Any = SUM) -> Any:
    return _reduce_scatter(comm, sendbuf, recvbuf, None, op, "Ireduce_scatter_block",
                                True, True)


def _reduce_scatter(comm, sendbuf, recvbuf, recvcounts, op, call, block, nonblocking):
    p, rank = comm.size, comm.rank

    def prepare():
        nonlocal op
        op = check_op(comm, op, call)
        recv = parse_buffer(recvbuf, writable=True, call=call, arg="recvbuf")
        send = parse_buffer(sendbuf, writable=False, call=call, arg="sendbuf")
        op.check_datatype(recv.datatype, call)
        if block:
            counts = [recv.count] * p
        elif recvcounts is None:
            raise CountError(f"rank {rank}: {call} on {comm.name}: an intercommunicator "
                             f"needs explicit recvcounts (one per local rank)")
        else:
            counts = _counts(comm, recvcounts, call)
        if not same_datatype(send.datatype, recv.datatype):
            raise DatatypeError(
                f"rank {rank}: {call} on {comm.name}: sendbuf has datatype "
                f"{send.datatype.name} but recvbuf has {recv.datatype.name}")
        if send.count != sum(counts):
            raise CountError(
                f"rank {rank}: {call} on {comm.name}: sendbuf has {send.count} x "
                f"{send.datatype.name} but the local group's blocks add up to "
                f"{sum(counts)}")
        if recv.count < counts[rank]:
            raise CountError(
                f"rank {rank}: {call} on {comm.name}: recvbuf has {recv.count} items, "
                f"fewer than this rank's block (recvcounts[{rank}]) of {counts[rank]}")
        k = recv.datatype.base_count
        elems = [c * k for c in counts]
        out = recv.array[:elems[rank]]
        return (lambda remote, local: inter_reduce_scatter(
                    remote, local, Operand(op, False, recv.datatype, remote.call).on(remote),
                    send.array, out, elems),
                lambda _: recv.finish())
    return _inter_collective(comm, 
        "reduce_scatter_block" if block else "reduce_scatter", call, prepare,
        op=_signed(op), nonblocking=nonblocking)


def _counts(comm, recvcounts: Sequence[int], call: str) -> List[int]:
    """One block count (>= 0) per local rank."""
    try:
        counts = [operator.index(c) for c in recvcounts]
    except TypeError:
        counts = None
    if counts is None or len(counts) != comm.size or min(counts, default=0) < 0:
        raise CountError(f"rank {comm.rank}: {call}(recvcounts={recvcounts!r:.60}) on "
                         f"{comm.name}: expected {comm.size} counts >= 0, one per local "
                         f"rank")
    return counts
