"""Point-to-point communication: the operations behind ``Comm.Send``, ``Comm.recv``...

Every public function here is a method of ``Comm`` (``comm.Send(buf, 1)`` is
``Send(comm, buf, 1)`` through the API front, :mod:`minimpi.front`): blocking and
nonblocking sends and receives of Python objects (lowercase, pickled) and buffers
(Capitalized), combined send-receives, probes and matched probes, buffered sends, persistent
and partitioned requests. They check their arguments (each error names the rank, the call
and the argument), then hand bytes to the communicator's endpoint (:mod:`minimpi.p2p.endpoint`).

The cores all others use - ``send_object``, ``recv_object``, ``send_buffer``, ``recv_buffer`` -
check their arguments with one cheap test first (plain ints in range) and run the checks
that name the problem (or accept numpy integers, or handle ``PROC_NULL``) only when that
fails: a small message costs a few microseconds in all, so the checks must not cost one of
them.
"""
from __future__ import annotations

import pickle
from functools import partial
from typing import Any, Callable, List, Optional, Sequence, Tuple

from numpy import ndarray

from ..bus import Bus
from ..constants import ANY_SOURCE, ANY_TAG, PROC_NULL, TAG_UB
from ..data import serialization
from ..data.buffers import byte_view, parse_buffer, persistent_buffer
from ..data.memory import attachable_buffer
from ..data.receive import finish_receive, receive_view
from ..data.serialization import IN_BAND, PICKLE_PROTO
from ..errors import BufferSpecError, MinimpiError
from ..front import hand_written, route
from ..p2p.request import (
    CombinedRequest,
    CompletedRequest,
    PairRequest,
    Request,
    Status,
    assign_status,
    fill_status,
    has_finish,
    null_status,
    set_finish,
)
from ..transports import signal_guard
from ..transports.frames import F_OBJECT, F_PICKLE, F_SYNC
from .handle_types import INFO_NULL, Info
from .hints import recv_buf_error, recv_buffer_error
from .ledger import note, note_send
from .message import (
    ProbeWait,
    decode_object,
    finish_object,
    probe_status,
    recv_capacity,
    unpickle_error,
)
from .message import mprobe as _mprobe
from .partitioned import PartitionedRequest
from .persistent import Prequest
from .ulfm import check_probe

#: an object message's frame flags, by whether its payload is the bare pickle
#: (serialization.encode's third value)
_OBJECT_FLAGS = (F_OBJECT, F_OBJECT | F_PICKLE)

#: buffered sends of every communicator not yet delivered (MPI.Flush_buffer waits for them)
PENDING_BSENDS: list = []


def flush_buffered() -> Request:
    """A request complete once every buffered send of this process has been delivered."""
    pending = [r for r in PENDING_BSENDS if not r.done]
    PENDING_BSENDS[:] = []
    return CombinedRequest(pending, "Iflush_buffer") if pending else CompletedRequest()


def blocking_recv(post: Callable[..., Request], status: Optional[Status] = None,
                  *args: Any) -> Any:
    """Post a receive with ``post(*args)``, wait for it and return what it received.

    An exception that interrupts the wait (a signal handler's: ``KeyboardInterrupt``, a
    ``SIGALRM`` timeout) must not leave a receive behind that the program no longer knows
    about: one that has matched no message yet is cancelled, so the program's next receive
    gets that message; one that has matched is finished first, so its buffer is never
    written after the call has raised (mpi4py, too, raises only once ``MPI_Recv`` returned).
    The whole call runs with signal handlers held back except while the transport sleeps,
    so posting and that clean-up are never cut short.
    """
    held = signal_guard.hold()     # (a pending handler raises here: nothing is posted yet)
    try:
        req = post(*args)
        try:
            # signals get through only while the transport sleeps (signal_guard.interruptible)
            return req.wait(status)
        except BaseException:
            _settle(req)
            raise
    finally:
        signal_guard.release(held)     # handlers held back meanwhile run (and may raise) here


def _settle(req: Request) -> None:
    """Cancel ``req``, or finish it if it has matched, whatever signal handlers raise
    meanwhile (the exception that interrupted the call is the one the program gets)."""
    while not req.done:
        try:
            held = signal_guard.hold()
            try:
                req.Cancel()
                if not req.done:     # matched: its data is already on the way
                    req.wait()
            finally:
                signal_guard.release(held)
        except BaseException:   # another interrupt, or the request's own error: it is done
            pass


def send_object(comm, obj: Any, dest: int, tag: int, call: str, flags: int = 0,
              buffered: bool = False) -> Request:
    if (comm._freed or type(dest) is not int or not 0 <= dest < comm._ep.size or
            type(tag) is not int or not 0 <= tag <= TAG_UB):
        checked = comm._send_checks(dest, tag, call)
        if checked is None:
            return CompletedRequest()
        dest, tag = checked
    payload, nbytes, bare = serialization.encode(obj, comm.rank, call)
    flags |= _OBJECT_FLAGS[bare]
    send = (lambda *args: _bsend_bytes(comm, *args)) if buffered else comm._ep.isend
    return note(comm._ep, send(payload, nbytes, dest, tag, flags, call), dest, tag, call,
                True)


def recv_object(comm, source: int, tag: int, call: str, context: Optional[int] = None) -> Request:
    if (comm._freed or type(source) is not int or type(tag) is not int or
            not 0 <= source < comm._ep.size and source != ANY_SOURCE or
            not 0 <= tag <= TAG_UB and tag != ANY_TAG):
        checked = comm._recv_checks(source, tag, call)
        if checked is None:
            return CompletedRequest(Status(PROC_NULL, ANY_TAG, 0))
        source, tag = checked
    req = comm._ep.irecv(None, source, tag, call, context)
    set_finish(req, lambda: finish_object(req))   # status count = pickled size, as mpi4py
    return note(comm._ep, req, source, tag, call, False)


def send_buffer(comm, buf: Any, dest: int, tag: int, call: str, flags: int = 0,
              buffered: bool = False) -> Request:
    if (comm._freed or type(dest) is not int or not 0 <= dest < comm._ep.size or
            type(tag) is not int or not 0 <= tag <= TAG_UB):
        checked = comm._send_checks(dest, tag, call)
        if checked is None:
            return CompletedRequest()
        dest, tag = checked
    view, _ = byte_view(buf, False, call)
    send = (lambda *args: _bsend_bytes(comm, *args)) if buffered else comm._ep.isend
    return note(comm._ep, send((view,), view.nbytes, dest, tag, flags, call), dest, tag,
                call, True)


def recv_buffer(comm, buf: Any, source: int, tag: int, call: str) -> Request:
    if (comm._freed or type(source) is not int or type(tag) is not int or
            not 0 <= source < comm._ep.size and source != ANY_SOURCE or
            not 0 <= tag <= TAG_UB and tag != ANY_TAG):
        checked = comm._recv_checks(source, tag, call)
        if checked is None:   # PROC_NULL: mpi4py does not look at the buffer then
            return CompletedRequest(Status(PROC_NULL, ANY_TAG, 0))
        source, tag = checked
    try:
        view, check = receive_view(buf, call)
    except BufferSpecError as exc:       # e.g. Recv([]): say how to receive instead
        raise recv_buffer_error(comm, call, buf, source, tag, exc) from None
    req = comm._ep.irecv(view, source, tag, call)
    if check is not None:      # (data.receive: the type signature check, scattering)
        set_finish(req, partial(finish_receive, req.status, comm, check, call))
    return note(comm._ep, req, source, tag, call, False)


# -- lowercase: Python objects -------------------------------------------------------
# send, recv, Send and Recv are hand-written front methods (front.hand_written): on their
# express lane the API front's frame would cost as much as a quarter of the call.
def _send(comm, obj: Any, dest: int, tag: int = 0) -> None:
    send_object(comm, obj, dest, tag, "send").wait()


_send_front, _own_front = hand_written(_send, "send")


@_own_front
def send(comm, obj: Any, dest: int, tag: int = 0) -> None:
    """Send a Python object (standard mode: small ones complete without a receive)."""
    if (type(dest) is int and type(tag) is int and dest >= 0 and 0 <= tag <= TAG_UB
            and not Bus.call_listeners and not comm._freed):             # the express lane
        engine, group, context, rank = comm._ep.lane_facts
        if dest < len(group):
            try:
                if type(obj) in IN_BAND:    # (serialization.encode's first case, one call fewer)
                    data = pickle.dumps(obj, 5)
                    # (the bytes themselves: a transport's express send takes any bytes-like
                    # segment)
                    payload, nbytes, flags = (data,), len(data), _OBJECT_FLAGS[True]
                else:
                    payload, nbytes, bare = serialization.encode(obj, rank, "send")
                    flags = _OBJECT_FLAGS[bare]
                world_dest = group[dest]
                if engine.send_now(context, world_dest, rank, tag, payload, nbytes, flags):
                    ledger = engine.ledger
                    if ledger is not None:
                        note_send(ledger, world_dest, context, tag, "send")
                    return
            except MinimpiError as exc:
                route(comm, exc)
                raise
    _send_front(comm, obj, dest, tag)


def ssend(comm, obj: Any, dest: int, tag: int = 0) -> None:
    """Synchronous send: returns once the receiver has matched the message."""
    send_object(comm, obj, dest, tag, "ssend", F_SYNC).wait()


def rsend(comm, obj: Any, dest: int, tag: int = 0) -> None:
    """Ready-mode send of an object: as ``send`` (a receive need not be posted first)."""
    send(comm, obj, dest, tag)


def isend(comm, obj: Any, dest: int, tag: int = 0) -> Request:
    """Start sending a Python object; complete the request with ``wait``/``test``."""
    return send_object(comm, obj, dest, tag, "isend")


def issend(comm, obj: Any, dest: int, tag: int = 0) -> Request:
    """Start a synchronous send of an object: completes once the receiver matched it."""
    return send_object(comm, obj, dest, tag, "issend", F_SYNC)


def _recv(comm, buf: Any = None, source: int = ANY_SOURCE, tag: int = ANY_TAG,
          status: Optional[Status] = None) -> Any:
    try:
        capacity = recv_capacity(buf, "recv", warn=True)
    except TypeError as exc:              # data = {}; comm.recv(data): say the fix
        raise recv_buf_error(comm, buf, "recv", source, tag, exc) from None
    return blocking_recv(lambda: _capped(recv_object(comm, source, tag, "recv"), capacity),
                         status)


_recv_front, _own_front = hand_written(_recv, "recv")


@_own_front
def recv(comm, buf: Any = None, source: int = ANY_SOURCE, tag: int = ANY_TAG,
         status: Optional[Status] = None) -> Any:
    """Receive a Python object (any size: no buffer needed).

    ``buf`` is deprecated, as in mpi4py: passing one warns (``UserWarning``); an int or a
    writable buffer then caps the message size (a larger one raises ``TruncationError``)
    and anything else is a ``TypeError``. A message of 0 bytes (an empty ``Send``) is
    received as ``None``; one sent with ``Send`` as plain pickle bytes is unpickled.
    """
    if (buf is None and type(source) is int and type(tag) is int and not comm._freed
            and (0 <= source < comm._ep.size or source == ANY_SOURCE)
            and (0 <= tag <= TAG_UB or tag == ANY_TAG)
            and not Bus.call_listeners):                                # the express lane
        ep = comm._ep
        try:
            got = ep.engine.receive_now(ep.context, source, tag, None)
            if got is not None:
                data = got[3]
                if status is None and data and data[0] == PICKLE_PROTO:   # a bare pickle
                    try:
                        return pickle.loads(data)
                    except Exception as exc:   # unpickling can raise almost anything
                        raise unpickle_error(data, got[0], ep.rank, f"recv(source={source}, "
                                             f"tag={tag}) on {comm.name}", exc) from exc
                return decode_object(data, got[0], got[1], status, None, ep.rank,
                                     lambda: f"recv(source={source}, tag={tag}) on "
                                             f"{comm.name}")
        except MinimpiError as exc:
            route(comm, exc)
            raise
    return _recv_front(comm, buf, source, tag, status)


def irecv(comm, buf: Any = None, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Request:
    """Start receiving a Python object; ``req.wait()`` returns it (``buf``: as ``recv``'s,
    without the warning)."""
    try:
        capacity = recv_capacity(buf, "irecv", warn=False)
    except TypeError as exc:
        raise recv_buf_error(comm, buf, "irecv", source, tag, exc) from None
    return _capped(recv_object(comm, source, tag, "irecv"), capacity)


def _capped(req: Request, capacity: Optional[int]) -> Request:
    if capacity is not None and has_finish(req):
        set_finish(req, lambda: finish_object(req, capacity))
    return req


def sendrecv(comm, sendobj: Any, dest: int, sendtag: int = 0, recvbuf: Any = None,
             source: int = ANY_SOURCE, recvtag: int = ANY_TAG,
             status: Optional[Status] = None) -> Any:
    """Send an object to ``dest`` and receive one from ``source`` at once (no deadlock
    when two ranks exchange); returns the received object.

    Both halves are checked (and the object pickled) before anything is posted, so a
    call that raises has no effect on later messages.
    """
    call = "sendrecv"
    capacity = recv_capacity(recvbuf, call, warn=True)
    comm._alive(call)
    dest = comm._check_dest(dest, call)
    sendtag = comm._check_send_tag(sendtag, call)
    source = comm._check_source(source, call)
    recvtag = comm._check_recv_tag(recvtag, call)
    payload = None
    if dest != PROC_NULL:
        payload = serialization.encode(sendobj, comm.rank, call)
    rreq = _capped(recv_object(comm, source, recvtag, call), capacity)
    sreq = CompletedRequest() if payload is None else \
        comm._ep.isend(payload[0], payload[1], dest, sendtag,
                       _OBJECT_FLAGS[payload[2]], call)
    comm._ep.engine.wait_all([rreq, sreq])
    sreq.wait()
    return rreq.wait(status)


def probe(comm, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Optional[Status] = None) -> bool:
    """Wait until a matching message is available (as ``Probe``; object counts as mpi4py)."""
    return Probe(comm, source, tag, status)


def iprobe(comm, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Optional[Status] = None) -> bool:
    """Whether a matching message is available now (as ``Iprobe``)."""
    return Iprobe(comm, source, tag, status)


# -- Capitalized: buffers ----------------------------------------------------------------
def _Send(comm, buf: Any, dest: int, tag: int = 0) -> None:
    send_buffer(comm, buf, dest, tag, "Send").wait()


_Send_front, _own_front = hand_written(_Send, "Send")


@_own_front
def Send(comm, buf: Any, dest: int, tag: int = 0) -> None:
    """Send a buffer; above the eager limit this waits for the matching receive."""
    if (type(buf) is ndarray and type(dest) is int and type(tag) is int and dest >= 0
            and 0 <= tag <= TAG_UB and not Bus.call_listeners
            and not comm._freed):                                       # the express lane
        engine, group, context, rank = comm._ep.lane_facts
        if dest < len(group):
            try:
                # (the array itself: a transport's express send takes any C-contiguous
                # buffer; one that is not, the writer declines after its copy failed)
                world_dest = group[dest]
                writer = engine.lane.get(world_dest)
                if (writer.send_express(engine.gate, context, rank, tag, buf, buf.nbytes)
                        if writer is not None and not engine.bus.sent else
                        buf.flags.c_contiguous
                        and engine.send_now(context, world_dest, rank, tag, (buf,),
                                            buf.nbytes)):
                    ledger = engine.ledger
                    if ledger is not None:
                        note_send(ledger, world_dest, context, tag, "Send")
                    return
            except MinimpiError as exc:
                route(comm, exc)
                raise
    _Send_front(comm, buf, dest, tag)


def Ssend(comm, buf: Any, dest: int, tag: int = 0) -> None:
    """Synchronous send of a buffer: returns once the receiver has matched the message."""
    send_buffer(comm, buf, dest, tag, "Ssend", F_SYNC).wait()


def Rsend(comm, buf: Any, dest: int, tag: int = 0) -> None:
    """Ready-mode send of a buffer: as ``Send`` (a receive need not be posted first)."""
    send_buffer(comm, buf, dest, tag, "Rsend").wait()


def Isend(comm, buf: Any, dest: int, tag: int = 0) -> Request:
    """Start sending a buffer; do not modify it until the request completes."""
    return send_buffer(comm, buf, dest, tag, "Isend")


def Issend(comm, buf: Any, dest: int, tag: int = 0) -> Request:
    """Start a synchronous send of a buffer: completes once the receiver matched it."""
    return send_buffer(comm, buf, dest, tag, "Issend", F_SYNC)


def Irsend(comm, buf: Any, dest: int, tag: int = 0) -> Request:
    """Start a ready-mode send of a buffer (as ``Isend``)."""
    return send_buffer(comm, buf, dest, tag, "Irsend")


def _Recv(comm, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG,
          status: Optional[Status] = None) -> None:
    # (the function and its arguments, not a lambda: one Python call fewer)
    blocking_recv(recv_buffer, status, comm, buf, source, tag, "Recv")


_Recv_front, _own_front = hand_written(_Recv, "Recv")


@_own_front
def Recv(comm, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG,
         status: Optional[Status] = None) -> None:
    """Receive into a buffer; a larger message raises ``TruncationError`` (ERR_TRUNCATE)."""
    if (type(buf) is ndarray and type(source) is int and type(tag) is int
            and (0 <= tag <= TAG_UB or tag == ANY_TAG) and not Bus.call_listeners
            and not comm._freed):                                       # the express lane
        flags = buf.flags
        engine, group, context, _ = comm._ep.lane_facts
        if (flags.c_contiguous and flags.writeable
                and (0 <= source < len(group) or source == ANY_SOURCE)):
            itemsize = buf.itemsize     # (read now: the receive may wait, the message not)
            try:
                # (the array itself: the express lane copies into any writable C-contiguous
                # buffer, and a memoryview made of an array costs more than an 8 B copy)
                got = engine.receive_now(context, source, tag, buf)
                if got is not None:
                    n = got[2]
                    if n % itemsize:                    # ends inside an element: says so
                        _express_mismatch(comm, buf, got)
                    if status is not None:
                        fill_status(status, got[0], got[1], n)
                    return
            except MinimpiError as exc:
                route(comm, exc)
                raise
    _Recv_front(comm, buf, source, tag, status)


def _express_mismatch(comm, buf, got) -> None:
    """The type-signature check of a receive the express lane completed (``got``: its
    source, tag and length; :func:`~minimpi.data.receive.finish_receive`: raises when it
    does not match)."""
    _, check = receive_view(buf, "Recv")
    if check is not None:
        status = Status()
        fill_status(status, got[0], got[1], got[2])
        finish_receive(status, comm, check, "Recv")


def Irecv(comm, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Request:
    """Start receiving into a buffer; it is filled once the request completes."""
    return recv_buffer(comm, buf, source, tag, "Irecv")


def _sendrecv(comm, sendbuf: Any, dest: int, sendtag: int, recvbuf: Any, source: int,
              recvtag: int, call: str) -> Tuple[Request, Request]:
    """Post a buffer receive and a send, after checking **both**: a call that raises has
    posted nothing, so it cannot swallow a later message."""
    comm._alive(call)
    dest = comm._check_dest(dest, call)
    sendtag = comm._check_send_tag(sendtag, call)
    source = comm._check_source(source, call)
    recvtag = comm._check_recv_tag(recvtag, call)
    sview = None if dest == PROC_NULL else byte_view(sendbuf, False, call)[0]
    rview, check = (None, None) if source == PROC_NULL else receive_view(recvbuf, call)
    rreq = CompletedRequest(Status(PROC_NULL, ANY_TAG, 0)) if rview is None else \
        comm._ep.irecv(rview, source, recvtag, call)
    if check is not None:
        set_finish(rreq, partial(finish_receive, rreq.status, comm, check, call))
    sreq = CompletedRequest() if sview is None else \
        comm._ep.isend((sview,), sview.nbytes, dest, sendtag, 0, call)
    return rreq, sreq


def Sendrecv(comm, sendbuf: Any, dest: int, sendtag: int = 0, recvbuf: Any = None,
             source: int = ANY_SOURCE, recvtag: int = ANY_TAG,
             status: Optional[Status] = None) -> None:
    """Send ``sendbuf`` to ``dest`` and receive into ``recvbuf`` from ``source`` at once
    (both buffers are checked before anything is posted)."""
    rreq, sreq = _sendrecv(comm, sendbuf, dest, sendtag, recvbuf, source, recvtag,
                                "Sendrecv")
    comm._ep.engine.wait_all([rreq, sreq])
    sreq.wait()
    rreq.wait(status)


def Isendrecv(comm, sendbuf: Any, dest: int, sendtag: int = 0, recvbuf: Any = None,
              source: int = ANY_SOURCE, recvtag: int = ANY_TAG) -> Request:
    """Nonblocking ``Sendrecv``: one request, complete once both halves are (its status
    is the receive's)."""
    rreq, sreq = _sendrecv(comm, sendbuf, dest, sendtag, recvbuf, source, recvtag,
                                "Isendrecv")
    return PairRequest(rreq, sreq, "Isendrecv")


def _replace_parts(comm, buf: Any, dest: int, source: int, call: str) -> Tuple[Any, Any]:
    """(outgoing copy, receive target) of a Sendrecv_replace: the data to send is copied
    first, since the receive overwrites ``buf``."""
    if dest == PROC_NULL:
        return None, buf
    if source != PROC_NULL:     # the same checks as the receive, before anything is sent
        parse_buffer(buf, writable=True, call=call, arg="buf")
    spec = parse_buffer(buf, writable=False, call=call, arg="buf")
    return spec.array.copy(), buf


def Sendrecv_replace(comm, buf: Any, dest: int, sendtag: int = 0, source: int = ANY_SOURCE,
                     recvtag: int = ANY_TAG, status: Optional[Status] = None) -> None:
    """Send the contents of ``buf`` and replace them with the message received."""
    outgoing, target = _replace_parts(comm, buf, dest, source, "Sendrecv_replace")
    rreq, sreq = _sendrecv(comm, outgoing, dest, sendtag, target, source, recvtag,
                                "Sendrecv_replace")
    comm._ep.engine.wait_all([rreq, sreq])
    sreq.wait()
    rreq.wait(status)


def Isendrecv_replace(comm, buf: Any, dest: int, sendtag: int = 0,
                      source: int = ANY_SOURCE, recvtag: int = ANY_TAG) -> Request:
    """Nonblocking ``Sendrecv_replace`` (the outgoing data is copied at the call)."""
    outgoing, target = _replace_parts(comm, buf, dest, source, "Isendrecv_replace")
    rreq, sreq = _sendrecv(comm, outgoing, dest, sendtag, target, source, recvtag,
                                "Isendrecv_replace")
    return PairRequest(rreq, sreq, "Isendrecv_replace")


def Probe(comm, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Optional[Status] = None) -> bool:
    """Wait until a matching message is available (without receiving it)."""
    comm._alive("Probe")
    source = comm._check_source(source, "Probe")
    tag = comm._check_recv_tag(tag, "Probe")
    if source == PROC_NULL:
        null_status(status)
        return True
    found: List[Status] = []

    def arrived() -> bool:
        st = probe_status(comm, source, tag)
        if st is not None:
            found.append(st)
        else:
            check_probe(comm, source, tag, "Probe")   # (a revoke or failure ends it)
        return st is not None

    if not arrived():
        comm._ep.engine.wait_until(arrived, [ProbeWait(comm, "probe", source, tag)])
    if status is not None:
        assign_status(status, found[-1])
    return True


def Iprobe(comm, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Optional[Status] = None) -> bool:
    """Whether a matching message is available now (without receiving it); never blocks."""
    comm._alive("Iprobe")
    source = comm._check_source(source, "Iprobe")
    tag = comm._check_recv_tag(tag, "Iprobe")
    if source == PROC_NULL:
        null_status(status)
        return True
    comm._ep.engine.poll()
    st = probe_status(comm, source, tag)
    if st is None:
        check_probe(comm, source, tag, "Iprobe")
        return False
    if status is not None:
        assign_status(status, st)
    return True


# -- persistent requests ---------------------------------------------------------------
# (each *_init keeps its buffer argument through persistent_buffer: a Start after the
# program freed the datatype still uses it, as MPI binds the datatype at *_init)
def _persistent(comm, start, call: str, peer_name: str, peer: int, tag: int) -> Request:
    comm._alive(call)
    return Prequest._create(start, comm._ep.engine, (call, peer_name, peer, tag, comm.name))


def Send_init(comm, buf: Any, dest: int, tag: int = 0) -> Request:
    dest = comm._check_dest(dest, "Send_init")
    tag = comm._check_send_tag(tag, "Send_init")
    buf = persistent_buffer(buf, "Send_init")
    return _persistent(comm, lambda: send_buffer(comm, buf, dest, tag, "Send_init"),
                            "Send_init", "dest", dest, tag)


def Ssend_init(comm, buf: Any, dest: int, tag: int = 0) -> Request:
    dest = comm._check_dest(dest, "Ssend_init")
    tag = comm._check_send_tag(tag, "Ssend_init")
    buf = persistent_buffer(buf, "Ssend_init")
    return _persistent(comm, lambda: send_buffer(comm, buf, dest, tag, "Ssend_init", F_SYNC),
                            "Ssend_init", "dest", dest, tag)


def Bsend_init(comm, buf: Any, dest: int, tag: int = 0) -> Request:
    dest = comm._check_dest(dest, "Bsend_init")
    tag = comm._check_send_tag(tag, "Bsend_init")
    buf = persistent_buffer(buf, "Bsend_init")
    return _persistent(comm, lambda: Ibsend(comm, buf, dest, tag), "Bsend_init", "dest", dest, tag)


def Rsend_init(comm, buf: Any, dest: int, tag: int = 0) -> Request:
    dest = comm._check_dest(dest, "Rsend_init")
    tag = comm._check_send_tag(tag, "Rsend_init")
    buf = persistent_buffer(buf, "Rsend_init")
    return _persistent(comm, lambda: send_buffer(comm, buf, dest, tag, "Rsend_init"),
                            "Rsend_init", "dest", dest, tag)


def Recv_init(comm, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Request:
    source = comm._check_source(source, "Recv_init")
    tag = comm._check_recv_tag(tag, "Recv_init")
    buf = persistent_buffer(buf, "Recv_init")
    return _persistent(comm, lambda: recv_buffer(comm, buf, source, tag, "Recv_init"),
                            "Recv_init", "source", source, tag)


# -- partitioned point-to-point (MPI-4; minimpi.comm.partitioned) -----------------------
def Psend_init(comm, buf: Any, partitions: int, dest: int, tag: int = 0,
               info: Info = INFO_NULL) -> Prequest:
    """A partitioned send of ``buf`` cut into ``partitions`` equal parts: ``Start``,
    then ``Pready(k)`` for each part, then ``Wait``."""
    comm._alive("Psend_init")
    return PartitionedRequest.make(comm, buf, partitions, dest, tag, info, True)


def Precv_init(comm, buf: Any, partitions: int, source: int = ANY_SOURCE,
               tag: int = ANY_TAG, info: Info = INFO_NULL) -> Prequest:
    """A partitioned receive into ``buf`` (``partitions`` equal parts; ``Parrived(k)``
    tells whether part k is in). ``source`` and ``tag`` must be named (no wildcards)."""
    comm._alive("Precv_init")
    return PartitionedRequest.make(comm, buf, partitions, source, tag, info, False)


# -- buffered sends: the data is copied at once, the call completes locally -------------
def _bsend_bytes(comm, payload: Sequence[memoryview], nbytes: int, dest: int, tag: int,
                 flags: int, call: str) -> Request:
    data = bytearray().join(payload)   # one copy of every segment
    # The engine delivers it in the background (and before exit); the caller's request is
    # complete now, as a buffered send's is once the data sits in the attached buffer.
    req = comm._ep.isend((memoryview(data),), nbytes, dest, tag, flags, call)
    if not req.done:   # Flush_buffer waits for these
        for pending in (comm._attrs.setdefault("__bsends__", []), PENDING_BSENDS):
            pending[:] = [r for r in pending if not r.done]
            pending.append(req)
    return CompletedRequest()


# The buffer for buffered sends (MPI 4.1 per-communicator form; MPI.Attach_buffer is the
# process-wide one). minimpi's buffered sends copy their data themselves, so any buffer -
# or MPI.BUFFER_AUTOMATIC - is accepted and handed back by Detach_buffer.
def Attach_buffer(comm, buf: Any) -> None:
    """Attach ``buf`` (a buffer, ``MPI.BUFFER_AUTOMATIC`` or None) for buffered sends."""
    comm._alive("Attach_buffer")
    comm._attrs["__bsend_buffer__"] = attachable_buffer(buf, "Comm.Attach_buffer")


def Detach_buffer(comm) -> Any:
    """Wait until the buffered sends of this communicator are delivered, then return
    the buffer ``Attach_buffer`` attached (None if none)."""
    Flush_buffer(comm)
    return comm._attrs.pop("__bsend_buffer__", None)


def Flush_buffer(comm) -> None:
    """Wait until the buffered sends of this communicator have been delivered."""
    Iflush_buffer(comm).Wait()


def Iflush_buffer(comm) -> Request:
    """A request that completes once this communicator's buffered sends are delivered."""
    comm._alive("Iflush_buffer")
    pending = [r for r in comm._attrs.pop("__bsends__", []) if not r.done]
    if not pending:
        return CompletedRequest()
    return CombinedRequest(pending, "Iflush_buffer")


def Bsend(comm, buf: Any, dest: int, tag: int = 0) -> None:
    send_buffer(comm, buf, dest, tag, "Bsend", buffered=True)


def Ibsend(comm, buf: Any, dest: int, tag: int = 0) -> Request:
    return send_buffer(comm, buf, dest, tag, "Ibsend", buffered=True)


def bsend(comm, obj: Any, dest: int, tag: int = 0) -> None:
    send_object(comm, obj, dest, tag, "bsend", buffered=True)


def ibsend(comm, obj: Any, dest: int, tag: int = 0) -> Request:
    return send_object(comm, obj, dest, tag, "ibsend", buffered=True)


# -- matched probes ----------------------------------------------------------------------
def Mprobe(comm, source: int = ANY_SOURCE, tag: int = ANY_TAG,
           status: Optional[Status] = None) -> Any:
    return _mprobe(comm, source, tag, status, True, "Mprobe")


def Improbe(comm, source: int = ANY_SOURCE, tag: int = ANY_TAG,
            status: Optional[Status] = None) -> Any:
    return _mprobe(comm, source, tag, status, False, "Improbe")


def mprobe(comm, source: int = ANY_SOURCE, tag: int = ANY_TAG,
           status: Optional[Status] = None) -> Any:
    return _mprobe(comm, source, tag, status, True, "mprobe")


def improbe(comm, source: int = ANY_SOURCE, tag: int = ANY_TAG,
            status: Optional[Status] = None) -> Any:
    return _mprobe(comm, source, tag, status, False, "improbe")
