"""The collective calls of ``Intercomm``: arguments, buffers, roots.

Each function (a method of ``Intercomm``) parses its arguments as the intercommunicator
form of the collective defines them (block counts refer to the *remote* group; roots are
``MPI.ROOT``, ``MPI.PROC_NULL`` or a remote rank), then runs the algorithm its plan chooses
through :func:`~minimpi.comm.collectives.common.execute`, as every collective method does:
the registry's intercommunicator algorithms (``kinds=(INTER,)``: ``allreduce``'s
``leaders_swap``...), chosen by ``auto`` or forced by ``MINIMPI_<COLLECTIVE>``, an info key
or ``algorithm=``, compiled once per call signature
(:class:`~minimpi.coll.twogroups.TwoGroupCall`: a slot on both groups' endpoints, both
signed for the mismatch checks; the root and byte count are left out of the signature, as
they differ between the groups by definition).

A call that fails on this rank (a bad root or buffer) still consumes its slots and tells
every member of both groups (``@collective``: abort markers), so they raise
``CollectiveAbortedError`` instead of waiting.
"""
from __future__ import annotations

import operator
from typing import Any, List, Optional, Sequence

import numpy as np

from ...coll.reduction import Operand
from ...coll.twogroups import EXCHANGE
from ...constants import PROC_NULL, ROOT
from ...data.buffers import parse_buffer, parse_vbuffer, parse_wbuffer
from ...data.cint import as_int
from ...data.ops import SUM
from ...errors import CountError, DatatypeError, RootError
from .common import Prepared, check_op, collective, execute, same_datatype


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


def _run(comm: Any, collective: str, call: str, invoke: Any, *, objects: bool = False,
         nonblocking: bool = False, op: Any = None, finalize: Any = None,
         algorithm: Optional[str] = None) -> Any:
    """Run the call (``invoke(alg, remote)``, the local channel being ``remote.local``):
    no byte count, root or datatype, which differ between the groups."""
    return execute(comm, collective, call, 0, invoke, op=op, algorithm=algorithm,
                   objects=objects, nonblocking=nonblocking, finalize=finalize)


def _prepared(collective: str, call: str, invoke: Any, *, op: Any = None,
              finalize: Any = None, specs: tuple = ()) -> Prepared:
    """A buffer call prepared (:class:`~minimpi.comm.collectives.common.Prepared`) as
    :func:`_run` runs one: no byte count, root or datatype."""
    return Prepared(collective, call, 0, invoke, op=op, finalize=finalize, specs=specs)


@collective
def agree(comm: Any, value: Any, what: str) -> Any:
    """Every member's ``value``, of both groups: ``(local values, remote values)`` (the
    exchange of communicator creation; a collective of both groups)."""
    comm._alive(what)
    return execute(comm, "exchange", what, 0, lambda alg, ch: alg(ch, ch.local, value),
                   objects=True, fixed=EXCHANGE)


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
    _barrier(comm, "Barrier", False)


def barrier(comm) -> None:
    _barrier(comm, "barrier", False)


def Ibarrier(comm) -> Any:
    return _barrier(comm, "Ibarrier", True)


def ibarrier(comm) -> Any:
    return _barrier(comm, "ibarrier", True)


@collective
def _barrier(comm, call, nonblocking):
    return prepare_barrier(comm, call).execute(comm, nonblocking)


def prepare_barrier(comm, call: str) -> Prepared:
    """The call parsed and checked (:class:`~minimpi.comm.collectives.common.Prepared`)."""
    comm._alive(call)
    return _prepared("barrier", call, lambda alg, ch: alg(ch, ch.local))


# -- bcast -----------------------------------------------------------------------------
def Bcast(comm, buf: Any, root: int = 0) -> None:
    """The root (``MPI.ROOT``) sends ``buf`` to every rank of the other group; its
    group's other ranks pass ``MPI.PROC_NULL``."""
    _bcast_buf(comm, buf, root, "Bcast", False)


def Ibcast(comm, buf: Any, root: int = 0) -> Any:
    return _bcast_buf(comm, buf, root, "Ibcast", True)


@collective
def _bcast_buf(comm, buf: Any, root: int, call: str, nonblocking: bool) -> Any:
    return prepare_bcast(comm, call, buf, root).execute(comm, nonblocking)


def prepare_bcast(comm, call: str, buf: Any, root: int = 0) -> Prepared:
    """The call parsed and checked (:class:`~minimpi.comm.collectives.common.Prepared`)."""
    comm._alive(call)
    r = _check_root(comm, root, call)
    if r == PROC_NULL:
        return _prepared("bcast", call, lambda alg, ch: alg(ch, ch.local, None, r))
    spec = parse_buffer(buf, writable=r != ROOT, call=call, arg="buf")
    return _prepared("bcast", call, lambda alg, ch: alg(ch, ch.local, spec.array, r),
                     finalize=lambda _: spec.finish(), specs=((buf, spec),))


def bcast(comm, obj: Any = None, root: int = 0) -> Any:
    """The root's object, on every rank of the other group (None in the root's group)."""
    return _bcast_obj(comm, obj, root, "bcast", False)


def ibcast(comm, obj: Any = None, root: int = 0) -> Any:
    return _bcast_obj(comm, obj, root, "ibcast", True)


@collective
def _bcast_obj(comm, obj: Any, root: int, call: str, nonblocking: bool) -> Any:
    comm._alive(call)
    r = _check_root(comm, root, call)
    data = obj if r == ROOT else None
    return _run(comm, "bcast", call, lambda alg, ch: alg(ch, ch.local, data, r),
                objects=True, nonblocking=nonblocking)


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


@collective
def _gather_buf(comm, sendbuf, recvbuf, root, call, vector, nonblocking):
    return prepare_gather(comm, call, sendbuf, recvbuf, root, vector).execute(comm, nonblocking)


def prepare_gather(comm, call: str, sendbuf: Any, recvbuf: Any, root: int = 0,
                   vector: bool = False) -> Prepared:
    """The call parsed and checked (:class:`~minimpi.comm.collectives.common.Prepared`)."""
    comm._alive(call)
    collective = "gatherv" if vector else "gather"
    r = _check_root(comm, root, call)
    if r == ROOT:
        recv = parse_vbuffer(recvbuf, comm._ep.size, writable=True, call=call, arg="recvbuf")
        if not vector:
            _equal(comm, call, recv, "recvbuf", "Gatherv")
        blocks = _blocks(recv, comm._ep.size)
        return _prepared(collective, call, lambda alg, ch: alg(ch, ch.local, None, blocks, r),
                         finalize=lambda _: recv.finish(), specs=((recvbuf, recv),))
    send = None if r == PROC_NULL else \
        parse_buffer(sendbuf, writable=False, call=call, arg="sendbuf")
    data = None if send is None else send.array
    return _prepared(collective, call, lambda alg, ch: alg(ch, ch.local, data, None, r),
                     specs=((sendbuf, send),))


def gather(comm, sendobj: Any, root: int = 0) -> Optional[list]:
    """The root returns the list of the remote ranks' objects; every other rank None."""
    return _gather_obj(comm, sendobj, root, "gather", False)


def igather(comm, sendobj: Any, root: int = 0) -> Any:
    return _gather_obj(comm, sendobj, root, "igather", True)


@collective
def _gather_obj(comm, sendobj, root, call, nonblocking):
    comm._alive(call)
    r = _check_root(comm, root, call)
    return _run(comm, "gather", call, lambda alg, ch: alg(ch, ch.local, sendobj, None, r),
                objects=True, nonblocking=nonblocking)


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


@collective
def _scatter_buf(comm, sendbuf, recvbuf, root, call, vector, nonblocking):
    return prepare_scatter(comm, call, sendbuf, recvbuf, root, vector).execute(comm, nonblocking)


def prepare_scatter(comm, call: str, sendbuf: Any, recvbuf: Any, root: int = 0,
                    vector: bool = False) -> Prepared:
    """The call parsed and checked (:class:`~minimpi.comm.collectives.common.Prepared`)."""
    comm._alive(call)
    collective = "scatterv" if vector else "scatter"
    r = _check_root(comm, root, call)
    if r == ROOT:
        send = parse_vbuffer(sendbuf, comm._ep.size, writable=False, call=call, arg="sendbuf")
        if not vector:
            _equal(comm, call, send, "sendbuf", "Scatterv")
        blocks = _blocks(send, comm._ep.size)
        return _prepared(collective, call, lambda alg, ch: alg(ch, ch.local, blocks, None, r),
                         specs=((sendbuf, send),))
    if r == PROC_NULL:
        return _prepared(collective, call, lambda alg, ch: alg(ch, ch.local, None, None, r))
    recv = parse_buffer(recvbuf, writable=True, call=call, arg="recvbuf")
    return _prepared(collective, call, lambda alg, ch: alg(ch, ch.local, None, recv.array, r),
                     finalize=lambda _: recv.finish(), specs=((recvbuf, recv),))


def scatter(comm, sendobj: Any, root: int = 0) -> Any:
    """The root passes one object per remote rank; each remote rank returns its own
    (the root's group returns None)."""
    return _scatter_obj(comm, sendobj, root, "scatter", False)


def iscatter(comm, sendobj: Any, root: int = 0) -> Any:
    return _scatter_obj(comm, sendobj, root, "iscatter", True)


@collective
def _scatter_obj(comm, sendobj, root, call, nonblocking):
    comm._alive(call)
    r = _check_root(comm, root, call)
    items = _one_per_remote(comm, sendobj, call, "sendobj") if r == ROOT else None
    return _run(comm, "scatter", call, lambda alg, ch: alg(ch, ch.local, items, None, r),
                objects=True, nonblocking=nonblocking)


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


@collective
def _allgather_buf(comm, sendbuf, recvbuf, call, vector, nonblocking):
    return prepare_allgather(comm, call, sendbuf, recvbuf, vector).execute(comm, nonblocking)


def prepare_allgather(comm, call: str, sendbuf: Any, recvbuf: Any,
                      vector: bool = False) -> Prepared:
    """The call parsed and checked (:class:`~minimpi.comm.collectives.common.Prepared`)."""
    comm._alive(call)
    send = parse_buffer(sendbuf, writable=False, call=call, arg="sendbuf")
    recv = parse_vbuffer(recvbuf, comm._ep.size, writable=True, call=call, arg="recvbuf")
    if not vector:
        _equal(comm, call, recv, "recvbuf", "Allgatherv")
    blocks = _blocks(recv, comm._ep.size)
    return _prepared("allgatherv" if vector else "allgather", call,
                     lambda alg, ch: alg(ch, ch.local, send.array, blocks),
                     finalize=lambda _: recv.finish(), specs=((sendbuf, send), (recvbuf, recv)))


def allgather(comm, sendobj: Any) -> list:
    """The list of the remote group's objects, in remote rank order."""
    return _allgather_obj(comm, sendobj, "allgather", False)


def iallgather(comm, sendobj: Any) -> Any:
    return _allgather_obj(comm, sendobj, "iallgather", True)


@collective
def _allgather_obj(comm, sendobj, call, nonblocking):
    comm._alive(call)
    return _run(comm, "allgather", call, lambda alg, ch: alg(ch, ch.local, sendobj, None),
                objects=True, nonblocking=nonblocking)


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


@collective
def _alltoall_buf(comm, sendbuf, recvbuf, call, vector, nonblocking):
    return prepare_alltoall(comm, call, sendbuf, recvbuf, vector).execute(comm, nonblocking)


def prepare_alltoall(comm, call: str, sendbuf: Any, recvbuf: Any,
                     vector: bool = False) -> Prepared:
    """The call parsed and checked (:class:`~minimpi.comm.collectives.common.Prepared`)."""
    comm._alive(call)
    q = comm._ep.size
    send = parse_vbuffer(sendbuf, q, writable=False, call=call, arg="sendbuf")
    recv = parse_vbuffer(recvbuf, q, writable=True, call=call, arg="recvbuf")
    if not vector:
        _equal(comm, call, send, "sendbuf", "Alltoallv")
        _equal(comm, call, recv, "recvbuf", "Alltoallv")
    sends, blocks = _blocks(send, q), _blocks(recv, q)
    return _prepared("alltoallv" if vector else "alltoall", call,
                     lambda alg, ch: alg(ch, ch.local, sends, blocks),
                     finalize=lambda _: recv.finish(), specs=((sendbuf, send), (recvbuf, recv)))


def Alltoallw(comm, sendbuf: Any, recvbuf: Any) -> None:
    """``Alltoall`` with a count, a byte displacement and a datatype per remote rank."""
    _alltoallw(comm, sendbuf, recvbuf, "Alltoallw", False)


def Ialltoallw(comm, sendbuf: Any, recvbuf: Any) -> Any:
    return _alltoallw(comm, sendbuf, recvbuf, "Ialltoallw", True)


@collective
def _alltoallw(comm, sendbuf, recvbuf, call, nonblocking):
    return prepare_alltoallw(comm, call, sendbuf, recvbuf).execute(comm, nonblocking)


def prepare_alltoallw(comm, call: str, sendbuf: Any, recvbuf: Any) -> Prepared:
    """The call parsed and checked (:class:`~minimpi.comm.collectives.common.Prepared`).
    Its blocks are packed here (a W buffer is not the user's memory as a whole: a
    persistent call prepares it anew at each Start)."""
    comm._alive(call)
    q = comm._ep.size
    send = parse_wbuffer(sendbuf, q, writable=False, call=call, arg="sendbuf")
    recv = parse_wbuffer(recvbuf, q, writable=True, call=call, arg="recvbuf")
    # (blocks of non-contiguous receive datatypes arrive in temporaries: finish scatters
    # them into their layouts)
    return _prepared("alltoallw", call,
                     lambda alg, ch: alg(ch, ch.local, send.blocks, recv.blocks),
                     finalize=lambda _: recv.finish(), specs=((sendbuf, send), (recvbuf, recv)))


def alltoall(comm, sendobj: Any) -> list:
    """Send ``sendobj[j]`` to remote rank j; return what each remote rank sent here."""
    return _alltoall_obj(comm, sendobj, "alltoall", False)


def ialltoall(comm, sendobj: Any) -> Any:
    return _alltoall_obj(comm, sendobj, "ialltoall", True)


@collective
def _alltoall_obj(comm, sendobj, call, nonblocking):
    comm._alive(call)
    items = _one_per_remote(comm, sendobj, call, "sendobj")
    return _run(comm, "alltoall", call, lambda alg, ch: alg(ch, ch.local, items, None),
                objects=True, nonblocking=nonblocking)


# -- reduce ------------------------------------------------------------------------------
def Reduce(comm, sendbuf: Any, recvbuf: Any, op: Any = SUM, root: int = 0) -> None:
    """The root's ``recvbuf`` gets the reduction (``op``, default SUM) of the other
    group's ``sendbuf``s."""
    _reduce_buf(comm, sendbuf, recvbuf, op, root, "Reduce", False)


def Ireduce(comm, sendbuf: Any, recvbuf: Any, op: Any = SUM, root: int = 0) -> Any:
    return _reduce_buf(comm, sendbuf, recvbuf, op, root, "Ireduce", True)


@collective
def _reduce_buf(comm, sendbuf, recvbuf, op, root, call, nonblocking):
    return prepare_reduce(comm, call, sendbuf, recvbuf, op, root).execute(comm, nonblocking)


def prepare_reduce(comm, call: str, sendbuf: Any, recvbuf: Any, op: Any = SUM,
                   root: int = 0) -> Prepared:
    """The call parsed and checked (:class:`~minimpi.comm.collectives.common.Prepared`)."""
    comm._alive(call)
    signed = _signed(op)
    op = check_op(comm, op, call)
    r = _check_root(comm, root, call)
    if r == ROOT:
        recv = parse_buffer(recvbuf, writable=True, call=call, arg="recvbuf")
        op.check_datatype(recv.datatype, call)
        return _prepared("reduce", call,
                         lambda alg, ch: alg(ch, ch.local, None, None, recv.array, r),
                         op=signed, finalize=lambda _: recv.finish(), specs=((recvbuf, recv),))
    if r == PROC_NULL:
        return _prepared("reduce", call, lambda alg, ch: alg(ch, ch.local, None, None, None, r),
                         op=signed)
    send = parse_buffer(sendbuf, writable=False, call=call, arg="sendbuf")
    op.check_datatype(send.datatype, call)
    return _prepared("reduce", call, lambda alg, ch: alg(
        ch, ch.local, Operand(op, False, send.datatype, ch.call).on(ch), send.array, None, r),
        op=signed, specs=((sendbuf, send),))


def reduce(comm, sendobj: Any, op: Any = SUM, root: int = 0) -> Any:
    """The root returns the reduction of the other group's objects; others None."""
    return _reduce_obj(comm, sendobj, op, root, "reduce", False)


def ireduce(comm, sendobj: Any, op: Any = SUM, root: int = 0) -> Any:
    return _reduce_obj(comm, sendobj, op, root, "ireduce", True)


@collective
def _reduce_obj(comm, sendobj, op, root, call, nonblocking):
    comm._alive(call)
    signed = _signed(op)
    r = _check_root(comm, root, call)
    checked = check_op(comm, op, call)
    return _run(comm, "reduce", call, lambda alg, ch: alg(
        ch, ch.local, Operand(checked, True, None, ch.call).on(ch), sendobj, None, r),
        objects=True, op=signed, nonblocking=nonblocking)


# -- allreduce ---------------------------------------------------------------------------
def Allreduce(comm, sendbuf: Any, recvbuf: Any, op: Any = SUM) -> None:
    """Each group's ``recvbuf`` gets the reduction of the other group's ``sendbuf``s."""
    _allreduce_buf(comm, sendbuf, recvbuf, op, "Allreduce", False)


def Iallreduce(comm, sendbuf: Any, recvbuf: Any, op: Any = SUM) -> Any:
    return _allreduce_buf(comm, sendbuf, recvbuf, op, "Iallreduce", True)


@collective
def _allreduce_buf(comm, sendbuf, recvbuf, op, call, nonblocking):
    return prepare_allreduce(comm, call, sendbuf, recvbuf, op).execute(comm, nonblocking)


def prepare_allreduce(comm, call: str, sendbuf: Any, recvbuf: Any, op: Any = SUM) -> Prepared:
    """The call parsed and checked (:class:`~minimpi.comm.collectives.common.Prepared`)."""
    comm._alive(call)
    signed = _signed(op)
    op = check_op(comm, op, call)
    recv = parse_buffer(recvbuf, writable=True, call=call, arg="recvbuf")
    send = parse_buffer(sendbuf, writable=False, call=call, arg="sendbuf")
    _same_shape(comm, call, send, recv)
    op.check_datatype(recv.datatype, call)
    return _prepared("allreduce", call, lambda alg, ch: alg(
        ch, ch.local, Operand(op, False, recv.datatype, ch.call).on(ch), send.array,
        recv.array), op=signed, finalize=lambda _: recv.finish(),
        specs=((sendbuf, send), (recvbuf, recv)))


def allreduce(comm, sendobj: Any, op: Any = SUM) -> Any:
    """The reduction of the other group's objects, on every rank."""
    return _allreduce_obj(comm, sendobj, op, "allreduce", False)


def iallreduce(comm, sendobj: Any, op: Any = SUM) -> Any:
    return _allreduce_obj(comm, sendobj, op, "iallreduce", True)


@collective
def _allreduce_obj(comm, sendobj, op, call, nonblocking):
    comm._alive(call)
    signed = _signed(op)
    checked = check_op(comm, op, call)
    return _run(comm, "allreduce", call, lambda alg, ch: alg(
        ch, ch.local, Operand(checked, True, None, ch.call).on(ch), sendobj, None),
        objects=True, op=signed, nonblocking=nonblocking)


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


@collective
def _reduce_scatter(comm, sendbuf, recvbuf, recvcounts, op, call, block, nonblocking):
    return prepare_reduce_scatter(comm, call, sendbuf, recvbuf, recvcounts, op,
                                  block).execute(comm, nonblocking)


def prepare_reduce_scatter(comm, call: str, sendbuf: Any, recvbuf: Any, recvcounts: Any = None,
                           op: Any = SUM, block: bool = False) -> Prepared:
    """The call parsed and checked (:class:`~minimpi.comm.collectives.common.Prepared`)."""
    comm._alive(call)
    p, rank = comm.size, comm.rank
    signed = _signed(op)
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
    return _prepared("reduce_scatter_block" if block else "reduce_scatter", call,
                     lambda alg, ch: alg(ch, ch.local,
                                         Operand(op, False, recv.datatype, ch.call).on(ch),
                                         send.array, out, elems),
                     op=signed, finalize=lambda _: recv.finish(),
                     specs=((sendbuf, send), (recvbuf, recv)))


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
