"""Matched probes (``Comm.Mprobe``/``Improbe`` -> ``MPI.Message``) and mpi4py-style counts.

``Mprobe`` removes the matching message from the unexpected queue, so no other receive can
take it; ``Message.Recv``/``Irecv``/``recv``/``irecv`` then receive exactly that message.

Counts of object messages: mpi4py pickles objects in band, so ``Status.Get_count()`` after
``recv`` (or after a ``probe``) is the size of the pickle. minimpi frames objects as
``u32 nbuffers | u64 pickle_len | u64 len(buffer_i)... | pickle | buffers`` (see
:mod:`minimpi.data.serialization`); :func:`object_count` reports pickle plus out-of-band buffer
bytes, which equals mpi4py's count whenever the object holds no large buffers.
"""
from __future__ import annotations

import warnings
from functools import partial
from typing import Any, Callable, Optional

import numpy as np

from ..constants import ANY_SOURCE, ANY_TAG, PROC_NULL
from ..data import serialization
from ..data.buffers import byte_view
from ..data.receive import finish_receive, receive_view
from ..errors import RequestError, SerializationError, TruncationError
from ..p2p.request import (
    CompletedRequest,
    Request,
    Status,
    assign_status,
    describe,
    engine_of,
    null_status,
    set_finish,
)
from ..transports.frames import F_OBJECT, F_PICKLE
from .handle_types import IntHandles
from .hints import looks_pickled, not_an_object
from .ulfm import check_probe


def object_count(total: int, payload: Any = None, flags: int = 0) -> int:
    """mpi4py's count for an object message of ``total`` bytes (``payload`` if at hand;
    ``flags``: its frame's, which say whether it is a bare pickle)."""
    if payload is None:
        return total if flags & F_PICKLE else max(total - serialization.HEAD_SIZE, 0)
    parts = serialization.layout_if_ours(payload)
    return total if parts is None else _pickled_size(parts)   # (None: plain bytes from Send)


def _pickled_size(parts: Any) -> int:
    """mpi4py's count of an object: its pickle and its out-of-band buffers."""
    plen, lengths, _ = parts
    return plen + sum(lengths)


def incoming_status(inc: Any) -> Status:
    """The status a probe reports for an unexpected message (object counts as mpi4py)."""
    n = inc.length
    if inc.flags & F_OBJECT:
        n = object_count(inc.length, inc.buffer if inc.arrived else None, inc.flags)
    return Status(inc.source, inc.tag, n)


def probe_status(comm: Any, source: int, tag: int) -> Optional[Status]:
    """Status of the message a receive on ``comm`` would match now, or None."""
    inc = comm._ep.engine.peek_message(comm._ep.context, source, tag)
    return None if inc is None else incoming_status(inc)


def finish_object(req: Request, capacity: Optional[int] = None) -> Any:
    """Decode a received object and set its status count to mpi4py's pickled size.

    Unpickling can fail at the receiver (a class it cannot import, a ``__setstate__`` that
    raises): that becomes a :class:`SerializationError` naming the rank, call and sender, so
    the request keeps it and every later wait raises it again. ``capacity``: the size the
    (deprecated) ``buf`` argument of ``recv`` allows; a larger message is a
    :class:`TruncationError`, as in mpi4py.
    """
    engine = engine_of(req)
    st = req.status
    return decode_object(req.buffer, st.source, st.tag, st, capacity,
                         engine.rank if engine is not None else -1, describe(req))


def decode_object(buf: Any, source: int, tag: int, status: Optional[Status],
                  capacity: Optional[int], rank: int, what: "str | Callable[[], str]") -> Any:
    """The object in ``buf``, a message from ``source`` with ``tag`` (``status``, if given,
    gets its source, tag and mpi4py's count: the pickled size). ``what``: the call, as errors
    name it (or a function that words it: only an error needs the words). See
    :func:`finish_object`."""
    if status is None and capacity is None:    # the common small object: one look
        try:
            obj = serialization.loads_plain(buf)
        except Exception as exc:   # unpickling can raise almost anything
            raise unpickle_error(buf, source, rank, what, exc) from exc
        if obj is not serialization.NOT_PLAIN:
            return obj
    parts = serialization.layout_if_ours(buf)
    nbytes = _pickled_size(parts) if parts is not None else len(buf)
    if status is not None:
        status.source, status.tag, status.nbytes = source, tag, nbytes
    if capacity is not None and nbytes > capacity:
        raise TruncationError(
            f"rank {rank}: {what() if callable(what) else what}: the object from rank "
            f"{source} takes {nbytes} bytes but "
            f"the buf argument allows {capacity} (mpi4py truncates there too); drop buf - "
            f"recv needs no buffer")
    try:
        return serialization.loads(buf, parts)
    except Exception as exc:   # unpickling can raise almost anything
        raise unpickle_error(buf, source, rank, what, exc) from exc


def unpickle_error(buf: Any, source: int, rank: int, what: "str | Callable[[], str]",
                   exc: Exception) -> SerializationError:
    """The error of a received object that could not be unpickled (``exc``), in words."""
    what = what() if callable(what) else what
    if not looks_pickled(buf):   # a buffer sent with Send, received with recv
        return SerializationError(not_an_object(rank, what, source, len(buf)))
    return SerializationError(
        f"rank {rank}: {what}: cannot unpickle the object sent by rank "
        f"{source}: {type(exc).__name__}: {exc}")


def recv_capacity(buf: Any, call: str, warn: bool) -> Optional[int]:
    """mpi4py's rules for the ``buf`` argument of ``recv``/``irecv``/``sendrecv``.

    None: no limit. Anything else is deprecated (``recv``/``sendrecv`` warn with
    ``UserWarning``, as mpi4py 4 does): an int is a byte capacity, a writable buffer gives
    its size, any other object is a ``TypeError``.
    """
    if buf is None:
        return None
    if warn:
        warnings.warn("the 'buf' argument is deprecated", UserWarning, stacklevel=3)
    if isinstance(buf, (int, np.integer)) and not isinstance(buf, (bool, np.bool_)):
        if buf < 0:
            raise ValueError(f"{call}(buf={buf}): a capacity must be >= 0")
        return int(buf)
    return byte_view(buf, True, call)[0].nbytes


class ProbeWait:
    """Stands in for a request in 'what am I blocked on' reports while a (M)probe waits."""

    done = False

    def __init__(self, comm: Any, call: str, source: int, tag: int) -> None:
        self.description = (call, "source", source, tag, comm.name)


class Message(IntHandles):
    """A message taken by a matched probe (``MPI.Message``); receive it exactly once."""

    __slots__ = ("_comm", "_inc", "_no_proc", "_int_handle", "__weakref__")

    def __init__(self, message: Optional["Message"] = None) -> None:
        if message is not None and not isinstance(message, Message):
            raise TypeError(f"MPI.{type(self).__name__}({message!r:.40}): expected an "
                            f"MPI.Message to make another handle of, or nothing")
        self._comm = message._comm if message is not None else None
        self._inc = message._inc if message is not None else None
        self._no_proc = message._no_proc if message is not None else False

    @classmethod
    def _make(cls, comm: Optional[Any], inc: Any, no_proc: bool = False) -> "Message":
        m = cls.__new__(cls)
        m._comm, m._inc, m._no_proc = comm, inc, no_proc
        return m

    def __bool__(self) -> bool:
        return self._inc is not None or self._no_proc

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        if self is other:
            return True
        if not self and not other:
            return True
        if self._inc is not None:
            # Two Message objects for the same matched message are the same handle.
            return self._inc is other._inc
        return self._no_proc and other._no_proc

    __hash__ = None  # type: ignore[assignment]   (handles are unhashable, as mpi4py's)

    def __repr__(self) -> str:
        if self._no_proc:
            return "MPI.MESSAGE_NO_PROC"
        if self._inc is None:
            return "MPI.MESSAGE_NULL"
        return f"<Message from {self._inc.source} tag {self._inc.tag} on {self._comm.name}>"

    # -- probing (classmethods, as in mpi4py) --------------------------------------------
    @classmethod
    def Probe(cls, comm: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG,
              status: Optional[Status] = None) -> "Message":
        return comm.Mprobe(source, tag, status)

    @classmethod
    def Iprobe(cls, comm: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG,
               status: Optional[Status] = None) -> Optional["Message"]:
        return comm.Improbe(source, tag, status)

    probe = Probe
    iprobe = Iprobe

    # -- receiving ------------------------------------------------------------------------
    def _take(self, call: str) -> Any:
        if self._inc is None and not self._no_proc:
            raise RequestError(f"Message.{call}: the message is MPI.MESSAGE_NULL (already "
                               f"received, or no message was matched)")
        inc = self._inc
        self._inc = None
        return inc

    def Irecv(self, buf: Any) -> Request:
        no_proc = self._no_proc
        inc = self._take("Irecv")
        if no_proc:
            self._received_no_proc()
            return CompletedRequest(Status(PROC_NULL, ANY_TAG, 0))
        view, check = receive_view(buf, "Message.Recv")
        comm = self._comm
        req = comm._ep.engine.irecv_message(inc, view, False,
                                         ("Message.Recv", "source", inc.source, inc.tag, comm.name))
        if check is not None:      # (data.receive: the type signature check, scattering)
            set_finish(req, partial(finish_receive, req.status, comm, check, "Message.Recv"))
        return req

    def Recv(self, buf: Any, status: Optional[Status] = None) -> None:
        self.Irecv(buf).wait(status)

    def irecv(self) -> Request:
        no_proc = self._no_proc
        inc = self._take("irecv")
        if no_proc:
            self._received_no_proc()
            return CompletedRequest(Status(PROC_NULL, ANY_TAG, 0))
        comm = self._comm
        req = comm._ep.engine.irecv_message(inc, None, True,
                                         ("Message.recv", "source", inc.source, inc.tag, comm.name))
        set_finish(req, lambda: finish_object(req))
        return req

    def recv(self, status: Optional[Status] = None) -> Any:
        return self.irecv().wait(status)

    def _received_no_proc(self) -> None:
        """A handle on ``MESSAGE_NO_PROC`` was received from: it is ``MESSAGE_NULL`` now, as
        any received message; the constant itself stays (mpi4py's constants never change)."""
        if self is not MESSAGE_NO_PROC:
            self._no_proc = False

    def free(self) -> None:
        """As in mpi4py: the constants stay; another handle on ``MESSAGE_NO_PROC`` becomes a
        null handle; a matched message is left to be received."""
        if self._no_proc and self is not MESSAGE_NO_PROC:
            self._no_proc = False

    def __reduce__(self) -> Any:
        """mpi4py's rule: the constants pickle by name (to this process's own), another
        handle on one to a handle of its class on it; a matched message cannot be."""
        if self is MESSAGE_NULL:
            return (_constant, ("MESSAGE_NULL",))
        if self is MESSAGE_NO_PROC:
            return (_constant, ("MESSAGE_NO_PROC",))
        if self._inc is None:
            return (type(self), (MESSAGE_NO_PROC if self._no_proc else MESSAGE_NULL,))
        raise ValueError(f"cannot serialize {self!r}: a matched message belongs to this "
                         f"process")


MESSAGE_NULL = Message()
MESSAGE_NO_PROC = Message._make(None, None, no_proc=True)


def _constant(name: str) -> Message:
    """``MESSAGE_NULL`` or ``MESSAGE_NO_PROC`` (what they unpickle to)."""
    return {"MESSAGE_NULL": MESSAGE_NULL, "MESSAGE_NO_PROC": MESSAGE_NO_PROC}[name]


def mprobe(comm: Any, source: int, tag: int, status: Optional[Status], blocking: bool,
           call: str) -> Optional[Message]:
    """``Comm.Mprobe`` (blocking) and ``Comm.Improbe`` over the engine's unexpected queue."""
    comm._alive(call)
    source = comm._check_source(source, call)
    tag = comm._check_recv_tag(tag, call)
    if source == PROC_NULL:
        null_status(status)
        return Message._make(None, None, no_proc=True)   # equal to MPI.MESSAGE_NO_PROC
    engine = comm._ep.engine
    found: list = []

    def take() -> bool:
        inc = engine.take_message(comm._ep.context, source, tag)
        if inc is not None:
            found.append(inc)
        else:
            check_probe(comm, source, tag, call)   # (a revoke or failure: it never comes)
        return inc is not None

    if blocking:
        if not take():
            engine.wait_until(take, [ProbeWait(comm, call, source, tag)])
    else:
        engine.poll()
        if not take():
            return None
    inc = found[0]
    if status is not None:
        assign_status(status, incoming_status(inc))
    return Message._make(comm, inc)
