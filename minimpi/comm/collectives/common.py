"""Shared mechanics of the collective API methods: argument checks, choosing, running.

Every collective method - of an intracommunicator or an intercommunicator, blocking,
nonblocking or (through its nonblocking form) persistent - follows the same three lines:
parse and check its arguments, :func:`execute` the chosen algorithm's schedule (blocking,
or as a request for the ``I`` variants), then finish (copy back temporaries, unpickle).
The algorithm choice depends only on values every rank has (size, byte count, op,
environment, which ranks share a host, the communicator's kind), so all ranks pick the
same one; :func:`collective` guards every method the same way when it fails on one rank.
"""
from __future__ import annotations

import functools
import threading
import weakref
from typing import Any, Callable, Optional, TypeVar

import numpy as np

from ...coll.compiled import CompiledCall
from ...coll.mismatch import abort_groups, abort_slot
from ...coll.registry import INTRA, Algorithm
from ...coll.schedule import Channel, Schedule
from ...coll.slots import SEQ_MASK, announced
from ...coll.twogroups import TwoGroupCall
from ...constants import IN_PLACE
from ...data.cint import as_int
from ...data.ops import Op
from ...errors import CountError, DatatypeError, OpError, RootError
from ..ulfm import check_not_revoked

F = TypeVar("F", bound=Callable[..., Any])

def collective(method: F) -> F:
    """Make a collective method safe when it fails on this rank only.

    A rank whose call raises - it rejected its own arguments (a count or buffer only it
    can check), or an error stopped it midway - still consumes the call's slot and tells
    the other members (:func:`minimpi.coll.mismatch.abort_slot`), so they raise
    ``CollectiveAbortedError`` naming this rank instead of waiting forever, and the next
    collective works on every rank. An error this rank got *because* another rank failed is
    not announced again. On an intercommunicator the slot is taken on both endpoints and
    every member of both groups is told (:func:`abort_call`).
    """
    @functools.wraps(method)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        opened: list = []          # the slot this call takes (execute appends it)
        stack = self.__dict__.setdefault("_slot_stack", [])
        stack.append(opened)
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:
            if self and announced(exc) \
                    and not getattr(exc, "_minimpi_slot_aborted", False):
                abort_call(self, exc, opened[-1] if opened else None,
                           method.__name__.strip("_"))
                try:
                    exc._minimpi_slot_aborted = True
                except AttributeError:   # an exception type without a __dict__
                    pass
            raise
        finally:
            stack.pop()
    return guarded  # type: ignore[return-value]


def abort_call(comm: Any, exc: BaseException, slot: Any, call: str) -> None:
    """``comm``'s collective call failed on this rank with ``exc``: consume its slot
    (``slot``, or the next one if the call failed before taking it) and tell the other
    members - of both groups on an intercommunicator (both slots). Never raises."""
    local = comm.__dict__.get("_local_endpoint")
    if local is None:
        abort_slot(comm._ep, exc, slot, call)
    else:
        abort_groups(comm._ep, local, exc, slot, call)


def note_slot(comm: Any, seq: int) -> None:
    """Record that the collective call now running on ``comm`` took slot ``seq``."""
    stack = comm.__dict__.get("_slot_stack")
    if stack:
        stack[-1].append(seq & SEQ_MASK)


def check_root(comm: Any, root: Any, call: str) -> int:
    """``root`` as an int, read as mpi4py reads its C int arguments (numpy integers, floats
    truncated: ``root=0.0`` is rank 0); RootError unless it is a rank of ``comm``."""
    try:
        value = as_int(root)
    except (TypeError, ValueError, OverflowError):
        value = -1
    if not 0 <= value < comm.size:
        raise RootError(f"rank {comm.rank}: {call}(root={root!r}) on {comm.name}: invalid root; "
                        f"expected 0..{comm.size - 1}")
    return value


def execute(comm: Any, collective: str, call: str, nbytes: int,
            invoke: Callable[[Algorithm, Channel], Schedule], *, op: Any = None,
            algorithm: Optional[str] = None, objects: bool = False, nonblocking: bool = False,
            finalize: Optional[Callable[[Any], Any]] = None, root: Optional[int] = None,
            datatype: Any = None, fuse: Optional[Callable[[CompiledCall], None]] = None,
            fixed: Optional[Algorithm] = None) -> Any:
    """Run ``invoke(algorithm, channel)``'s schedule as the compiled call of this signature
    (an :class:`~minimpi.coll.registry.Algorithm` is called like its function).

    Blocking: returns ``finalize(result)``. Nonblocking: returns a request whose ``wait()``
    gives ``finalize(result)``. ``root`` (rooted collectives), ``op``, ``nbytes``, the
    element type of ``datatype`` (buffer calls in which every rank passes the same type) and
    the algorithm go into the call's signature (:mod:`minimpi.coll.mismatch`), so ranks that
    call different collectives fail with ``CollectiveMismatchError`` instead of hanging.

    The signature's :class:`~minimpi.coll.compiled.CompiledCall` is made on its first call
    on the communicator and kept in the communicator's plan: a repeat looks it up (``op``
    and ``datatype`` are keyed by identity; the compiled call checks they are still the
    objects it was made for) and only runs it. ``fuse(compiled)``: called after a blocking
    call whose algorithm meets in the shared segment, to keep the fused form of the next
    calls (:func:`keep_fused`).

    On an intercommunicator (its plan's kind is ``inter``) the compiled call is a
    :class:`~minimpi.coll.twogroups.TwoGroupCall`: its channel carries the local group's
    channel too (``ch.local``), which ``invoke`` passes to the algorithm; its front passes
    no byte count, root or datatype (the two groups' differ by definition). ``fixed``: an
    algorithm outside the registry (an intercommunicator's creation exchange).
    """
    compiled = compiled_call(comm, collective, call, nbytes, op, algorithm, objects, root,
                             datatype, fixed)
    return begin(comm, compiled, invoke, finalize, nonblocking, objects, fuse)


def begin(comm: Any, compiled: CompiledCall, invoke: Callable[[Algorithm, Channel], Schedule],
          finalize: Optional[Callable[[Any], Any]] = None, nonblocking: bool = False,
          objects: bool = False, fuse: Optional[Callable[[CompiledCall], None]] = None) -> Any:
    """Run one call of ``compiled`` (see :func:`execute`): take its channel and slot, sign
    it, then run it to the end (blocking) or start it (its request)."""
    ch = compiled.channel()
    stack = comm.__dict__.get("_slot_stack")
    if stack:                   # the slot this call takes, for the abort path of @collective
        stack[-1].append(ch.tag & SEQ_MASK if type(ch) is Channel else ch.slot())
    compiled.sign(ch)
    if nonblocking:
        return compiled.start(ch, invoke, finalize)
    if objects:   # as mpi4py: one thread at a time per lowercase collective and communicator
        with comm_lock(comm, compiled.collective):
            result = compiled.run(ch, invoke)
    else:
        result = compiled.run(ch, invoke)
    if fuse is not None and compiled.algorithm.segment:
        fuse(compiled)
    return finalize(result) if finalize is not None else result


class Prepared:
    """A buffer collective's call with its arguments parsed and checked, nothing run yet.

    Each buffer collective has a ``prepare_<collective>`` function making one: its blocking
    and nonblocking methods :meth:`execute` it at once; a persistent collective
    (``*_init``, :mod:`minimpi.comm.persistent_coll`) keeps it, with its compiled call,
    for every ``Start``. So ``invoke`` - not the prepare function - does whatever reads
    the buffers' contents or keeps state for one call (the input copied into ``recvbuf``,
    the root's own block, a reduction's operand): MPI reads the buffers at ``Start``.

    ``specs``: (the user's buffer argument, its parsed spec) pairs, for
    :meth:`in_user_memory`.
    """

    __slots__ = ("collective", "call", "nbytes", "invoke", "finalize", "op", "algorithm",
                 "root", "datatype", "fuse", "specs")

    def __init__(self, collective: str, call: str, nbytes: int,
                 invoke: Callable[[Algorithm, Channel], Schedule], *,
                 finalize: Optional[Callable[[Any], Any]] = None, op: Any = None,
                 algorithm: Optional[str] = None, root: Optional[int] = None,
                 datatype: Any = None, fuse: Optional[Callable[[CompiledCall], None]] = None,
                 specs: tuple = ()) -> None:
        self.collective, self.call, self.nbytes, self.invoke = collective, call, nbytes, invoke
        self.finalize, self.op, self.algorithm, self.root = finalize, op, algorithm, root
        self.datatype, self.fuse, self.specs = datatype, fuse, specs

    def execute(self, comm: Any, nonblocking: bool) -> Any:
        """Run the call now (blocking) or start it (nonblocking: its request)."""
        # (compiled()'s lookup, inline: every blocking call runs this, one Python call fewer)
        compiled = compiled_call(comm, self.collective, self.call, self.nbytes, self.op,
                                 self.algorithm, False, self.root, self.datatype)
        return begin(comm, compiled, self.invoke, self.finalize, nonblocking, False,
                     None if nonblocking else self.fuse)

    def compiled(self, comm: Any) -> CompiledCall:
        """The compiled call this call runs (made now if it is the signature's first)."""
        return compiled_call(comm, self.collective, self.call, self.nbytes, self.op,
                             self.algorithm, False, self.root, self.datatype)

    def in_user_memory(self) -> bool:
        """Whether every buffer the call reads or writes is the user's own memory: no
        temporary (the packed items of a non-contiguous datatype, a copy from a device or
        from ``MPI.BOTTOM`` addresses) that would hold the contents of the first call."""
        return all(user_memory(arg, spec) for arg, spec in self.specs)


def user_memory(arg: Any, spec: Any) -> bool:
    """Whether the parsed buffer ``spec`` of the argument ``arg`` is ``arg``'s own memory."""
    if spec is None or spec is IN_PLACE:
        return True
    if getattr(spec, "is_temporary", True):   # (a copy back to do; or a kind not known here)
        return False
    buf = arg[0] if type(arg) in (list, tuple) and arg else arg
    try:
        own = np.asarray(memoryview(buf)) if not isinstance(buf, np.ndarray) else buf
    except (TypeError, ValueError):
        return False
    array = spec.array
    return array.size == 0 or bool(np.may_share_memory(array, own))


def compiled_call(comm: Any, collective: str, call: str, nbytes: int, op: Any = None,
                  algorithm: Optional[str] = None, objects: bool = False,
                  root: Optional[int] = None, datatype: Any = None,
                  fixed: Optional[Algorithm] = None) -> CompiledCall:
    """The :class:`~minimpi.coll.compiled.CompiledCall` of this call signature on ``comm``:
    made on its first call (checking the communicator first), then looked up."""
    ep = comm._ep
    if comm._freed or ep.engine.revoked:
        check_usable(comm, call)
    plan = comm._plan or comm._make_plan()
    compiled = plan.calls.get((collective, call, nbytes, id(op), algorithm, objects, root,
                               id(datatype)))
    # (ids are keys: the weak references say whether they still name these very objects)
    if (compiled is None or (op is not None and compiled.op_ref() is not op)
            or (datatype is not None and compiled.datatype_ref() is not datatype)):
        if plan.kind == INTRA:
            made = CompiledCall(ep, plan, collective, call, nbytes, op, algorithm, objects,
                                root, datatype)
        else:
            made = TwoGroupCall(ep, comm._local_endpoint, plan, collective, call, op,
                                algorithm, objects, fixed)
        compiled = plan.prepare((collective, call, nbytes, id(op), algorithm, objects, root,
                                 id(datatype)), made)
    return compiled


def check_usable(comm: Any, call: str) -> None:
    """Raise, naming ``call``, if ``comm`` was freed or revoked."""
    if comm._freed:
        comm._alive(call)
    if comm._ep.engine.revoked:   # (a call of one rank sends nothing: the engine cannot tell)
        check_not_revoked(comm, call)


def keep_fused(comm: Any, key: tuple, fused: Any) -> None:
    """Keep ``fused`` for the next calls of its kind on ``comm`` (replacing another)."""
    comm._plan.fused[key] = fused


def comm_lock(comm: Any, key: str) -> threading.Lock:
    """The lock of ``comm``'s lock table (mpi4py's ``MPI._comm_lock_table``) under ``key``."""
    table = comm.__dict__.setdefault("_lock_table", {})
    lock = table.get(key)
    if lock is None:
        lock = table.setdefault(key, threading.Lock())
    return lock


def in_place(buf: Any) -> Any:
    """mpi4py's rule: where MPI allows ``MPI.IN_PLACE``, ``None`` means it too."""
    return IN_PLACE if buf is None else buf


def nothing(_result: Any) -> None:
    """The ``finalize`` of buffer collectives: the call returns None, as in mpi4py."""
    return None


def same_datatype(a: Any, b: Any) -> bool:
    """Whether two datatypes match as a reduction needs: one handle, or two derived types
    with one type signature (MPI's type matching rule)."""
    if a is b:
        return True
    return not a.is_predefined and not b.is_predefined and a.signature == b.signature


def send_as_recv(comm: Any, call: str, send: Any, recv: Any) -> np.ndarray:
    """The input of a reduction (``Allreduce``, ``Reduce``, ``Scan``...): ``sendbuf``'s data.

    A reduction has one datatype and one count (mpi4py checks both): a different datatype
    or count in ``sendbuf`` and ``recvbuf`` is a ValueError (``DatatypeError`` /
    ``CountError``) before anything is sent.
    """
    if not same_datatype(send.datatype, recv.datatype):
        raise DatatypeError(
            f"rank {comm.rank}: {call}: sendbuf has datatype {send.datatype.name} but recvbuf "
            f"has {recv.datatype.name}; a reduction needs the same datatype on both sides")
    if send.count != recv.count:
        raise CountError(
            f"rank {comm.rank}: {call}: sendbuf holds {send.count} x {send.datatype.name} "
            f"but recvbuf holds {recv.count} x {recv.datatype.name}; they must match")
    return send.array


def check_reduction(comm: Any, call: str, op: Any, send: Any, recv: Any) -> Any:
    """The checks of a buffer reduction before anything is sent - ``op`` can reduce
    ``recv``'s datatype, ``send`` has the same datatype and count (:func:`send_as_recv`) -
    and its input: ``send``'s array, or None for ``IN_PLACE``. What depends only on the op
    and the datatypes is checked on the first call with them on ``comm`` (its plan keeps
    them, so their identities stay theirs); the counts on every call."""
    in_place = send is IN_PLACE
    plan = comm._plan or comm._make_plan()
    key = ("reduction", call, id(op), id(recv.datatype), 0 if in_place else id(send.datatype))
    refs = plan.calls.get(key)          # weak references: the objects may go, ids be reused
    if refs is None or refs[0]() is not op or refs[1]() is not recv.datatype or (
            not in_place and refs[2]() is not send.datatype):
        op.check_datatype(recv.datatype, call)
        if not in_place:
            send_as_recv(comm, call, send, recv)
        plan.prepare(key, (weakref.ref(op), weakref.ref(recv.datatype),
                           None if in_place else weakref.ref(send.datatype)))
    if in_place:
        return None
    if send.count != recv.count:
        return send_as_recv(comm, call, send, recv)     # raises, naming both counts
    return send.array


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
    """The op to use, or an error before anything is sent (mpi4py's default is ``SUM``;
    ``None`` is not an op: it would silently sum where the program meant something else)."""
    if op is None:
        raise OpError(f"rank {comm.rank}: {call}: op=None is not an MPI.Op; pass one such as "
                      f"MPI.SUM (the default when op is left out) or MPI.Op.Create(fn)")
    if not isinstance(op, Op):
        raise OpError(f"rank {comm.rank}: {call}: op must be an MPI.Op such as MPI.SUM "
                      f"(or MPI.Op.Create(fn)), got {type(op).__name__} {op!r:.40}")
    op.check_usable(f"rank {comm.rank}: {call}")
    return op
