"""Communicators: ``Comm`` (point-to-point, management) and ``Intracomm`` (plus collectives).

A communicator is a group of world ranks, this process's rank in it, and two context ids
(one for point-to-point messages, one for collectives), so that messages never cross
communicators and a collective's messages never match a user's receive. The same class
serves mpi4py code (``MPI.COMM_WORLD``) and native minimpi code.

Lowercase methods move Python objects (pickled), Capitalized ones move buffers (anything
with the buffer protocol, or mpi4py buffer specs such as ``[arr, MPI.DOUBLE]``).
"""
from __future__ import annotations

import copyreg
import itertools
import operator
import sys
import threading
import weakref
import zlib
from typing import Any, Callable, List, Optional, Sequence, Tuple

from ..coll.mismatch import check_marker, watch_of
from ..coll.plan import Plan, Settings
from ..coll.slots import SEQ_MASK
from ..constants import (
    ANY_SOURCE,
    ANY_TAG,
    CART,
    CONGRUENT,
    DIST_GRAPH,
    GRAPH,
    IDENT,
    PROC_NULL,
    SIMILAR,
    TAG_UB,
    UNDEFINED,
    UNEQUAL,
)
from ..data import serialization
from ..data.attributes import COMM_KEYVALS, AttributeStore
from ..data.buffers import byte_view, parse_buffer
from ..data.cint import INT_MAX, INT_MIN, as_int
from ..errors import (
    USER_ERRORS,
    ArgumentError,
    BufferSpecError,
    CommError,
    RankError,
    TagError,
    UnsupportedError,
)
from ..p2p.endpoint import Endpoint
from ..p2p.engine import Engine
from ..p2p.request import (
    CompletedRequest,
    PairRequest,
    Request,
    Status,
    assign_status,
    has_finish,
    null_status,
    set_finish,
)
from ..transports import signal_guard
from ..transports.frames import F_OBJECT, F_SYNC
from .collectives import CollectiveMethods
from .collectives.common import collective, note_slot
from .collectives.neighbor import NeighborMethods
from .errhandlers import route_errors
from .extras import CommExtras, dynamic_call
from .graph import DistGraphMixin, GraphMixin, TopoMixin, cart_neighbours
from .group import GroupError, create_group
from .handles import refusing
from .hints import recv_buf_error, recv_buffer_error
from .ledger import note
from .message import ProbeWait, finish_object, probe_status, recv_capacity
from .null import null_state, set_comm_null
from .persistent_coll import PersistentNeighborCollectives, PersistentScans
from .topology import CartMixin
from .ulfm import check_not_revoked, check_probe

#: context ids 0/1 belong to COMM_WORLD, 2/3 to COMM_SELF; new communicators take the next pair
FIRST_FREE_CONTEXT = 4


def _check_int(comm: "Comm", value: Any, call: str, arg: str, expected: str,
               error: type = RankError) -> int:
    """A rank or tag as an int, read as mpi4py reads it (:func:`minimpi.data.cint.as_int`:
    numpy integers, and floats truncated, as ``send(dest=1.0)`` in mpi4py). Anything else
    (``send(dest='1')``) is an error that names the call, not a TypeError from deep inside
    the engine."""
    try:
        return as_int(value)
    except (TypeError, ValueError, OverflowError):
        raise error(f"rank {comm.rank}: {call}({arg}={value!r}): {arg} must be an integer "
                    f"({expected}), not {type(value).__name__}") from None




def blocking_recv(post: Callable[[], Request], status: Optional[Status] = None) -> Any:
    """Post a receive with ``post()``, wait for it and return what it received.

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
        req = post()
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


class Comm(CommExtras):
    """A communicator (``MPI.Comm``): point-to-point communication and management.

    ``Comm(comm)`` / ``MPI.Intracomm(comm)`` / ``MySubclass(comm)`` make another Python object
    for the *same* communicator (as in mpi4py): the objects share their state, compare equal,
    and freeing one frees both. ``Comm()`` is a null communicator (equal to ``COMM_NULL``).
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> "Comm":
        # mpi4py's subclassing idiom: ``def __new__(cls, comm=None): comm = comm.Clone();
        # return super().__new__(cls, comm)``. The handle is made from what reaches *here*:
        # Python then calls __init__ with the caller's original argument, which is ignored.
        self = super().__new__(cls)
        if len(args) == 1 and not kwargs and not isinstance(args[0], Engine):
            _share_handle(self, args[0])
        return self

    def __init__(self, engine: Any = None, group: Sequence[int] = (), rank: int = 0,
                 context: int = 0, name: str = "", settings: Optional[Settings] = None) -> None:
        if engine is None or not isinstance(engine, Engine):
            if not self.__dict__:           # (not already made by __new__)
                _share_handle(self, engine)
            return
        #: who we are to the p2p engine (shared with the collective algorithms' channels)
        self._ep = Endpoint(engine, group, rank, context, name or f"comm#{context}")
        self._freed = False
        self._attrs: dict = {}
        #: the collectives' settings: read from the environment for a world, inherited by a
        #: communicator made from another (``_derive``), changed by ``Set_info``
        self._settings = settings if settings is not None else Settings.from_environment()
        #: the collective plan (:mod:`minimpi.coll.plan`), made before the first collective
        #: call (when the ranks' hosts and wires are known) and kept: see :meth:`_make_plan`
        self._plan: Optional[Plan] = None

    def _make_plan(self) -> Plan:
        """This communicator's collective plan, made once (again only after ``Set_info``)."""
        ep = self._ep
        plan = self._plan = Plan(ep.size, ep.rank, ep.hosts, self._settings,
                                 ep.wire_within_host())
        return plan

    # -- basic properties ---------------------------------------------------------------
    @property
    def rank(self) -> int:
        return self._ep.rank

    @property
    def size(self) -> int:
        return self._ep.size

    def Get_rank(self) -> int:
        return self._ep.rank

    def Get_size(self) -> int:
        return self._ep.size

    @property
    def name(self) -> str:
        """minimpi's label of the communicator (``COMM_WORLD.split(1)``...), used in every
        message about it; assigning it is ``Set_name``."""
        return self._ep.name

    @name.setter
    def name(self, value: str) -> None:
        self.Set_name(value)

    def Get_name(self) -> str:
        """The name as MPI reports it: what Set_name set, else ``MPI_COMM_WORLD``,
        ``MPI_COMM_SELF``, ``MPI_COMM_NULL`` or ``""`` (``.name`` is minimpi's label)."""
        return self.__dict__.get("_user_name", _MPI_NAMES.get(self._ep.name, ""))

    def Set_name(self, name: str) -> None:
        if not isinstance(name, str):
            raise TypeError(f"Set_name: expected a str, got {type(name).__name__}")
        self._alive("Set_name")
        self._ep.name = self._user_name = name

    @property
    def world_ranks(self) -> Tuple[int, ...]:
        """The world rank of each member, in communicator rank order."""
        return self._ep.group

    @property
    def endpoint(self) -> Endpoint:
        """What the engine sees of this communicator (its group, rank and contexts): the
        seam that one-sided windows (minimpi.rma) send, receive and progress through."""
        return self._ep

    # A plain ``MPI.Comm(intercomm)`` handle is an intercommunicator too (its shared state
    # names the class, see _share_handle); Intercomm overrides these.
    def Is_inter(self) -> bool:
        self._alive("Is_inter")
        return "_intercomm_class" in self.__dict__

    def Is_intra(self) -> bool:
        return not self.Is_inter()

    @property
    def is_inter(self) -> bool:
        return self.Is_inter()

    @property
    def is_intra(self) -> bool:
        return not self.Is_inter()

    def __repr__(self) -> str:
        if self is COMM_NULL:
            return "MPI.COMM_NULL"
        if self.__dict__.get("_null"):
            return f"<{type(self).__name__} null (== MPI.COMM_NULL)>"
        return f"<{type(self).__name__} {self.name} rank {self.rank} of {self.size}>"

    # -- argument checks (each names rank, call, argument and what was expected) ---------
    def _alive(self, call: str) -> None:
        if self.__dict__.get("_null"):
            raise CommError(f"{call} on a null {type(self).__name__} (== MPI.COMM_NULL): "
                            f"expected a live communicator")
        if self._freed:
            raise CommError(f"rank {self._ep.engine.rank}: {call} on {self.name}, which was freed "
                            f"(Comm.Free); use a live communicator")

    # Each check returns the argument as an int (a float rank is truncated, as mpi4py's C
    # int arguments are), so callers go on with what the check returns.
    def _check_dest(self, dest: Any, call: str, arg: str = "dest") -> int:
        # the ranks a message can address: _ep.size (an intercommunicator's remote group)
        n = self._ep.size
        value = _check_int(self, dest, call, arg, f"0..{n - 1} or MPI.PROC_NULL")
        if not (0 <= value < n) and value != PROC_NULL:
            raise RankError(
                f"rank {self.rank}: {call}({arg}={dest!r}): invalid {arg} rank on {self.name}; "
                f"expected 0..{n - 1} or MPI.PROC_NULL")
        return value

    def _check_source(self, source: Any, call: str, arg: str = "source") -> int:
        n = self._ep.size
        value = _check_int(self, source, call, arg,
                           f"0..{n - 1}, MPI.ANY_SOURCE or MPI.PROC_NULL")
        if not (0 <= value < n) and value not in (ANY_SOURCE, PROC_NULL):
            raise RankError(
                f"rank {self.rank}: {call}({arg}={source!r}): invalid {arg} rank on {self.name}; "
                f"expected 0..{n - 1}, MPI.ANY_SOURCE or MPI.PROC_NULL")
        return value

    def _check_send_tag(self, tag: Any, call: str) -> int:
        value = _check_int(self, tag, call, "tag", f"0..{TAG_UB}", TagError)
        if not (0 <= value <= TAG_UB):
            raise TagError(f"rank {self.rank}: {call}(tag={tag!r}): invalid tag; expected "
                           f"0..{TAG_UB} (MPI.ANY_TAG is only for receives)")
        return value

    def _check_recv_tag(self, tag: Any, call: str) -> int:
        value = _check_int(self, tag, call, "tag", f"0..{TAG_UB} or MPI.ANY_TAG", TagError)
        if not (0 <= value <= TAG_UB) and value != ANY_TAG:
            raise TagError(f"rank {self.rank}: {call}(tag={tag!r}): invalid tag; expected "
                           f"0..{TAG_UB} or MPI.ANY_TAG")
        return value

    # -- the core operations all others use ----------------------------------------------
    # Each checks its arguments with one cheap test first (plain ints in range) and runs the
    # checks that name the problem (or accept numpy integers, or handle PROC_NULL) only when
    # that fails: a small message costs a few microseconds in all, so the checks must not
    # cost one of them.
    def _send_checks(self, dest: Any, tag: Any, call: str) -> Optional[Tuple[int, int]]:
        """(dest, tag) as ints, or None (the send goes nowhere) for PROC_NULL; raises for a
        bad argument."""
        self._alive(call)
        dest = self._check_dest(dest, call)
        tag = self._check_send_tag(tag, call)
        if dest == PROC_NULL:   # (other peers: the engine refuses a revoked context)
            check_not_revoked(self, call)
            return None
        return dest, tag

    def _recv_checks(self, source: Any, tag: Any, call: str) -> Optional[Tuple[int, int]]:
        """(source, tag) as ints, or None (nothing to receive) for PROC_NULL; raises for a
        bad argument."""
        self._alive(call)
        source = self._check_source(source, call)
        tag = self._check_recv_tag(tag, call)
        if source == PROC_NULL:
            check_not_revoked(self, call)
            return None
        return source, tag

    def _send_obj(self, obj: Any, dest: int, tag: int, call: str, flags: int = 0,
                  buffered: bool = False) -> Request:
        if (self._freed or type(dest) is not int or not 0 <= dest < self._ep.size or
                type(tag) is not int or not 0 <= tag <= TAG_UB):
            checked = self._send_checks(dest, tag, call)
            if checked is None:
                return CompletedRequest()
            dest, tag = checked
        payload, nbytes = serialization.dumps(obj, rank=self.rank, call=call)
        send = self._bsend_bytes if buffered else self._ep.isend
        return note(self._ep, send(payload, nbytes, dest, tag, flags | F_OBJECT, call), dest,
                    tag, call, True)

    def _recv_obj(self, source: int, tag: int, call: str, context: Optional[int] = None) -> Request:
        if (self._freed or type(source) is not int or type(tag) is not int or
                not 0 <= source < self._ep.size and source != ANY_SOURCE or
                not 0 <= tag <= TAG_UB and tag != ANY_TAG):
            checked = self._recv_checks(source, tag, call)
            if checked is None:
                return CompletedRequest(Status(PROC_NULL, ANY_TAG, 0))
            source, tag = checked
        req = self._ep.irecv(None, source, tag, call, context)
        set_finish(req, lambda: finish_object(req))   # status count = pickled size, as mpi4py
        return note(self._ep, req, source, tag, call, False)

    def _send_buf(self, buf: Any, dest: int, tag: int, call: str, flags: int = 0,
                  buffered: bool = False) -> Request:
        if (self._freed or type(dest) is not int or not 0 <= dest < self._ep.size or
                type(tag) is not int or not 0 <= tag <= TAG_UB):
            checked = self._send_checks(dest, tag, call)
            if checked is None:
                return CompletedRequest()
            dest, tag = checked
        view, _ = byte_view(buf, False, call)
        send = self._bsend_bytes if buffered else self._ep.isend
        return note(self._ep, send((view,), view.nbytes, dest, tag, flags, call), dest, tag,
                    call, True)

    def _recv_buf(self, buf: Any, source: int, tag: int, call: str) -> Request:
        if (self._freed or type(source) is not int or type(tag) is not int or
                not 0 <= source < self._ep.size and source != ANY_SOURCE or
                not 0 <= tag <= TAG_UB and tag != ANY_TAG):
            checked = self._recv_checks(source, tag, call)
            if checked is None:   # PROC_NULL: mpi4py does not look at the buffer then
                return CompletedRequest(Status(PROC_NULL, ANY_TAG, 0))
            source, tag = checked
        try:
            view, spec = byte_view(buf, True, call)
        except BufferSpecError as exc:       # e.g. Recv([]): say how to receive instead
            raise recv_buffer_error(self, call, buf, source, tag, exc) from None
        req = self._ep.irecv(view, source, tag, call)
        if spec is not None and spec.is_temporary:
            set_finish(req, lambda: spec.finish(req.status.nbytes))
        return note(self._ep, req, source, tag, call, False)

    # -- lowercase: Python objects -------------------------------------------------------
    def send(self, obj: Any, dest: int, tag: int = 0) -> None:
        """Send a Python object (standard mode: small ones complete without a receive)."""
        self._send_obj(obj, dest, tag, "send").wait()

    def ssend(self, obj: Any, dest: int, tag: int = 0) -> None:
        """Synchronous send: returns once the receiver has matched the message."""
        self._send_obj(obj, dest, tag, "ssend", F_SYNC).wait()

    # bsend/ibsend/Bsend/Ibsend (buffered: complete locally) are in CommExtras.
    def rsend(self, obj: Any, dest: int, tag: int = 0) -> None:
        """Ready-mode send of an object: as ``send`` (a receive need not be posted first)."""
        self.send(obj, dest, tag)

    def isend(self, obj: Any, dest: int, tag: int = 0) -> Request:
        """Start sending a Python object; complete the request with ``wait``/``test``."""
        return self._send_obj(obj, dest, tag, "isend")

    def issend(self, obj: Any, dest: int, tag: int = 0) -> Request:
        """Start a synchronous send of an object: completes once the receiver matched it."""
        return self._send_obj(obj, dest, tag, "issend", F_SYNC)

    def recv(self, buf: Any = None, source: int = ANY_SOURCE, tag: int = ANY_TAG,
             status: Optional[Status] = None) -> Any:
        """Receive a Python object (any size: no buffer needed).

        ``buf`` is deprecated, as in mpi4py: passing one warns (``UserWarning``); an int or a
        writable buffer then caps the message size (a larger one raises ``TruncationError``)
        and anything else is a ``TypeError``. A message of 0 bytes (an empty ``Send``) is
        received as ``None``; one sent with ``Send`` as plain pickle bytes is unpickled.
        """
        try:
            capacity = recv_capacity(buf, "recv", warn=True)
        except TypeError as exc:              # data = {}; comm.recv(data): say the fix
            raise recv_buf_error(self, buf, "recv", source, tag, exc) from None
        return blocking_recv(lambda: self._capped(self._recv_obj(source, tag, "recv"), capacity),
                             status)

    def irecv(self, buf: Any = None, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Request:
        """Start receiving a Python object; ``req.wait()`` returns it (``buf``: as ``recv``'s,
        without the warning)."""
        try:
            capacity = recv_capacity(buf, "irecv", warn=False)
        except TypeError as exc:
            raise recv_buf_error(self, buf, "irecv", source, tag, exc) from None
        return self._capped(self._recv_obj(source, tag, "irecv"), capacity)

    @staticmethod
    def _capped(req: Request, capacity: Optional[int]) -> Request:
        if capacity is not None and has_finish(req):
            set_finish(req, lambda: finish_object(req, capacity))
        return req

    def sendrecv(self, sendobj: Any, dest: int, sendtag: int = 0, recvbuf: Any = None,
                 source: int = ANY_SOURCE, recvtag: int = ANY_TAG,
                 status: Optional[Status] = None) -> Any:
        """Send an object to ``dest`` and receive one from ``source`` at once (no deadlock
        when two ranks exchange); returns the received object.

        Both halves are checked (and the object pickled) before anything is posted, so a
        call that raises has no effect on later messages.
        """
        call = "sendrecv"
        capacity = recv_capacity(recvbuf, call, warn=True)
        self._alive(call)
        dest = self._check_dest(dest, call)
        sendtag = self._check_send_tag(sendtag, call)
        source = self._check_source(source, call)
        recvtag = self._check_recv_tag(recvtag, call)
        payload = None
        if dest != PROC_NULL:
            payload = serialization.dumps(sendobj, rank=self.rank, call=call)
        rreq = self._capped(self._recv_obj(source, recvtag, call), capacity)
        sreq = CompletedRequest() if payload is None else \
            self._ep.isend(payload[0], payload[1], dest, sendtag, F_OBJECT, call)
        self._ep.engine.wait_all([rreq, sreq])
        sreq.wait()
        return rreq.wait(status)

    def probe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Optional[Status] = None) -> bool:
        """Wait until a matching message is available (as ``Probe``; object counts as mpi4py)."""
        return self.Probe(source, tag, status)

    def iprobe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Optional[Status] = None) -> bool:
        """Whether a matching message is available now (as ``Iprobe``)."""
        return self.Iprobe(source, tag, status)

    # -- Capitalized: buffers ----------------------------------------------------------------
    def Send(self, buf: Any, dest: int, tag: int = 0) -> None:
        """Send a buffer; above the eager limit this waits for the matching receive."""
        self._send_buf(buf, dest, tag, "Send").wait()

    def Ssend(self, buf: Any, dest: int, tag: int = 0) -> None:
        """Synchronous send of a buffer: returns once the receiver has matched the message."""
        self._send_buf(buf, dest, tag, "Ssend", F_SYNC).wait()

    def Rsend(self, buf: Any, dest: int, tag: int = 0) -> None:
        """Ready-mode send of a buffer: as ``Send`` (a receive need not be posted first)."""
        self._send_buf(buf, dest, tag, "Rsend").wait()

    def Isend(self, buf: Any, dest: int, tag: int = 0) -> Request:
        """Start sending a buffer; do not modify it until the request completes."""
        return self._send_buf(buf, dest, tag, "Isend")

    def Issend(self, buf: Any, dest: int, tag: int = 0) -> Request:
        """Start a synchronous send of a buffer: completes once the receiver matched it."""
        return self._send_buf(buf, dest, tag, "Issend", F_SYNC)

    def Irsend(self, buf: Any, dest: int, tag: int = 0) -> Request:
        """Start a ready-mode send of a buffer (as ``Isend``)."""
        return self._send_buf(buf, dest, tag, "Irsend")

    def Recv(self, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG,
             status: Optional[Status] = None) -> None:
        """Receive into a buffer; a larger message raises ``TruncationError`` (ERR_TRUNCATE)."""
        blocking_recv(lambda: self._recv_buf(buf, source, tag, "Recv"), status)

    def Irecv(self, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Request:
        """Start receiving into a buffer; it is filled once the request completes."""
        return self._recv_buf(buf, source, tag, "Irecv")

    def _sendrecv(self, sendbuf: Any, dest: int, sendtag: int, recvbuf: Any, source: int,
                  recvtag: int, call: str) -> Tuple[Request, Request]:
        """Post a buffer receive and a send, after checking **both**: a call that raises has
        posted nothing, so it cannot swallow a later message."""
        self._alive(call)
        dest = self._check_dest(dest, call)
        sendtag = self._check_send_tag(sendtag, call)
        source = self._check_source(source, call)
        recvtag = self._check_recv_tag(recvtag, call)
        sview = None if dest == PROC_NULL else byte_view(sendbuf, False, call)[0]
        rview, rspec = (None, None) if source == PROC_NULL else byte_view(recvbuf, True, call)
        rreq = CompletedRequest(Status(PROC_NULL, ANY_TAG, 0)) if rview is None else \
            self._ep.irecv(rview, source, recvtag, call)
        if rspec is not None and rspec.is_temporary:
            set_finish(rreq, lambda: rspec.finish(rreq.status.nbytes))
        sreq = CompletedRequest() if sview is None else \
            self._ep.isend((sview,), sview.nbytes, dest, sendtag, 0, call)
        return rreq, sreq

    def Sendrecv(self, sendbuf: Any, dest: int, sendtag: int = 0, recvbuf: Any = None,
                 source: int = ANY_SOURCE, recvtag: int = ANY_TAG,
                 status: Optional[Status] = None) -> None:
        """Send ``sendbuf`` to ``dest`` and receive into ``recvbuf`` from ``source`` at once
        (both buffers are checked before anything is posted)."""
        rreq, sreq = self._sendrecv(sendbuf, dest, sendtag, recvbuf, source, recvtag,
                                    "Sendrecv")
        self._ep.engine.wait_all([rreq, sreq])
        sreq.wait()
        rreq.wait(status)

    def Isendrecv(self, sendbuf: Any, dest: int, sendtag: int = 0, recvbuf: Any = None,
                  source: int = ANY_SOURCE, recvtag: int = ANY_TAG) -> Request:
        """Nonblocking ``Sendrecv``: one request, complete once both halves are (its status
        is the receive's)."""
        rreq, sreq = self._sendrecv(sendbuf, dest, sendtag, recvbuf, source, recvtag,
                                    "Isendrecv")
        return PairRequest(rreq, sreq, "Isendrecv")

    def _replace_parts(self, buf: Any, dest: int, source: int, call: str) -> Tuple[Any, Any]:
        """(outgoing copy, receive target) of a Sendrecv_replace: the data to send is copied
        first, since the receive overwrites ``buf``."""
        if dest == PROC_NULL:
            return None, buf
        if source != PROC_NULL:     # the same checks as the receive, before anything is sent
            parse_buffer(buf, writable=True, call=call, arg="buf")
        spec = parse_buffer(buf, writable=False, call=call, arg="buf")
        return spec.array.copy(), buf

    def Sendrecv_replace(self, buf: Any, dest: int, sendtag: int = 0, source: int = ANY_SOURCE,
                         recvtag: int = ANY_TAG, status: Optional[Status] = None) -> None:
        """Send the contents of ``buf`` and replace them with the message received."""
        outgoing, target = self._replace_parts(buf, dest, source, "Sendrecv_replace")
        rreq, sreq = self._sendrecv(outgoing, dest, sendtag, target, source, recvtag,
                                    "Sendrecv_replace")
        self._ep.engine.wait_all([rreq, sreq])
        sreq.wait()
        rreq.wait(status)

    def Isendrecv_replace(self, buf: Any, dest: int, sendtag: int = 0,
                          source: int = ANY_SOURCE, recvtag: int = ANY_TAG) -> Request:
        """Nonblocking ``Sendrecv_replace`` (the outgoing data is copied at the call)."""
        outgoing, target = self._replace_parts(buf, dest, source, "Isendrecv_replace")
        rreq, sreq = self._sendrecv(outgoing, dest, sendtag, target, source, recvtag,
                                    "Isendrecv_replace")
        return PairRequest(rreq, sreq, "Isendrecv_replace")

    def Probe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Optional[Status] = None) -> bool:
        """Wait until a matching message is available (without receiving it)."""
        self._alive("Probe")
        source = self._check_source(source, "Probe")
        tag = self._check_recv_tag(tag, "Probe")
        if source == PROC_NULL:
            null_status(status)
            return True
        found: List[Status] = []

        def arrived() -> bool:
            st = probe_status(self, source, tag)
            if st is not None:
                found.append(st)
            else:
                check_probe(self, source, tag, "Probe")   # (a revoke or failure ends it)
            return st is not None

        if not arrived():
            self._ep.engine.wait_until(arrived, [ProbeWait(self, "probe", source, tag)])
        if status is not None:
            assign_status(status, found[-1])
        return True

    def Iprobe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Optional[Status] = None) -> bool:
        """Whether a matching message is available now (without receiving it); never blocks."""
        self._alive("Iprobe")
        source = self._check_source(source, "Iprobe")
        tag = self._check_recv_tag(tag, "Iprobe")
        if source == PROC_NULL:
            null_status(status)
            return True
        self._ep.engine.poll()
        st = probe_status(self, source, tag)
        if st is None:
            check_probe(self, source, tag, "Iprobe")
            return False
        if status is not None:
            assign_status(status, st)
        return True

    # -- communicator management ------------------------------------------------------------
    def _allocate_context(self) -> int:
        """Agree on a fresh context id with every member (an allreduce-max of the next free id).

        The id is unused on every member, so messages can never cross into another live
        communicator that shares a process with this one.
        """
        return self._agree_context(self._exchange(self._free_context(), "context"))

    def _free_context(self) -> int:
        """The lowest context id this process has not used yet (this thread's creation is in
        flight until :meth:`_agree_context`: see :func:`free_context`)."""
        return free_context(self._ep.engine, sys._getframe(1), f"{self.name}")

    def _agree_context(self, proposals: Sequence[int]) -> int:
        """Take the largest of the members' free context ids (so it is free on all of them)."""
        context = max(proposals)
        claim_contexts(self._ep.engine, context, 2)
        return context

    def _exchange(self, value: Any, what: str, members: Optional[Sequence[int]] = None,
                  tag: Optional[int] = None) -> List[Any]:
        """All-to-all exchange of one small object (for communicator creation).

        Among ``members`` (ranks of this communicator, default all; the first one leads) on
        the collective context, so it can never be confused with user messages: a linear
        gather to the leader and a release of the list of values (in ``members`` order).
        ``tag`` defaults to the next collective tag (then every member must call it).
        """
        if tag is None:   # a slot of the communicator's collective sequence
            seq = self._ep.next_coll_tag()
            tag = seq & SEQ_MASK
            low = watch_of(self._ep).register(seq, tag, 0, "exchange", what)
            note_slot(self, seq)
            check_marker(self._ep, low)
        members = list(range(self.size)) if members is None else list(members)
        ctx, call = self._ep.coll_context, f"{what} exchange"
        leader, others = members[0], members[1:]
        if not others:
            return [value]
        if self.rank == leader:
            reqs = [self._recv_obj(src, tag, call, ctx) for src in others]
            values = [value] + [r.wait() for r in reqs]
            payload, nbytes = serialization.dumps(values)
            Request.waitall([self._ep.isend(payload, nbytes, dst, tag, F_OBJECT, call, ctx)
                             for dst in others])
            return values
        payload, nbytes = serialization.dumps(value)
        self._ep.isend(payload, nbytes, leader, tag, F_OBJECT, call, ctx).wait()
        return self._recv_obj(leader, tag, call, ctx).wait()

    def _derive(self, group: Sequence[int], rank: int, context: int, name: str) -> "Intracomm":
        new = Intracomm(self._ep.engine, group, rank, context, name, settings=self._settings)
        if "__errhandler__" in self._attrs:   # MPI: a new communicator inherits the handler
            new._attrs["__errhandler__"] = self._attrs["__errhandler__"]
        return new

    def _as_cart(self, dims: Sequence[int], periods: Sequence[bool]) -> "Cartcomm":
        """A Cartesian handle on this communicator's state (Create_cart, Cartcomm.Sub/Dup)."""
        cart = _topology_handle(Cartcomm, self)
        cart._dims = tuple(int(d) for d in dims)
        cart._periods = tuple(bool(p) for p in periods)
        if ".split" in self.name:
            cart._ep.name = self.name.replace(".split", ".cart", 1)
        return cart

    def _as_graph(self, index: Sequence[int], edges: Sequence[int]) -> "Graphcomm":
        """A graph handle on this communicator's state (Create_graph, Graphcomm.Dup)."""
        graph = _topology_handle(Graphcomm, self)
        graph._index = tuple(int(i) for i in index)
        graph._edges = tuple(int(e) for e in edges)
        if ".split" in self.name:
            graph._ep.name = self.name.replace(".split", ".graph", 1)
        return graph

    def _as_dist_graph(self, sources: Sequence[int], destinations: Sequence[int],
                       sourceweights: Optional[Sequence[int]],
                       destweights: Optional[Sequence[int]]) -> "Distgraphcomm":
        """A distributed-graph handle on this communicator's state (weights None:
        unweighted)."""
        graph = _topology_handle(Distgraphcomm, self)
        graph._sources = tuple(int(r) for r in sources)
        graph._destinations = tuple(int(r) for r in destinations)
        graph._sourceweights = None if sourceweights is None else tuple(sourceweights)
        graph._destweights = None if destweights is None else tuple(destweights)
        return graph

    @collective
    def Dup(self, info: Any = None) -> "Intracomm":
        """A new communicator with the same members whose messages never mix with this one's
        (``info``: hints, kept as the new communicator's info)."""
        self._alive("Dup")
        context = self._allocate_context()
        comm = self._derive(self._ep.group, self.rank, context, f"{self.name}.dup")
        self._inherit_into(comm)
        cls = type(self)
        if cls is not Intracomm:   # mpi4py: Dup of a user subclass (or Cartcomm) keeps its type
            same = object.__new__(cls)
            same.__dict__ = comm.__dict__
            comm = same
        if info:
            comm.Set_info(info)
        return comm

    def Idup(self, info: Any = None) -> Tuple["Intracomm", Request]:
        """``(newcomm, request)``: ``Dup`` started as a nonblocking call.

        minimpi agrees on the new communicator's context at the call, like ``Dup`` (so every
        member must reach ``Idup`` before any of them continues); the request is then
        already complete, and waiting on it returns at once.
        """
        return self.Dup(info), CompletedRequest()

    def Idup_with_info(self, info: Any) -> Tuple["Intracomm", Request]:
        """``Idup`` with hints (kept as the new communicator's info)."""
        return self.Idup(info)

    Clone = Dup

    @collective
    def Split(self, color: int = 0, key: int = 0) -> "Intracomm":
        """Partition by ``color`` (``MPI.UNDEFINED``: not a member), order by (``key``, old rank)."""
        self._alive("Split")
        try:   # as mpi4py's C int arguments: numpy integers, floats truncated
            color_i, key = as_int(color), as_int(key)
        except (TypeError, ValueError, OverflowError):
            color_i = None
        if color_i is not None and not (INT_MIN <= color_i <= INT_MAX and
                                        INT_MIN <= key <= INT_MAX):
            raise OverflowError(f"rank {self.rank}: Split(color={color!r}, key={key!r}): color "
                                f"and key must fit a C int ({INT_MIN}..{INT_MAX}), as in "
                                f"mpi4py")
        if color_i is None or (color_i < 0 and color_i != UNDEFINED):
            raise ArgumentError(f"rank {self.rank}: Split(color={color!r}, key={key!r}): color "
                                f"and key must be ints, color >= 0 or MPI.UNDEFINED")
        color = color_i
        entries = self._exchange((color, key, self._free_context()), "Split")
        context = self._agree_context([e[2] for e in entries])
        if color == UNDEFINED:
            return COMM_NULL
        members = sorted((k, r) for r, (c, k, _) in enumerate(entries) if c == color)
        ranks = [r for _, r in members]
        group = [self._ep.group[r] for r in ranks]
        return self._derive(group, ranks.index(self.rank), context, f"{self.name}.split({color})")

    def free(self) -> None:
        """``Free`` unless this is a null or predefined communicator (mpi4py 4): the
        constants stay as they are; another handle on ``COMM_WORLD``/``COMM_SELF``
        (``Intracomm(MPI.COMM_WORLD)``) becomes a null handle, the communicator stays."""
        if not self or any(self is comm for comm in _PREDEFINED.values()):
            return
        if self._ep.context < FIRST_FREE_CONTEXT:
            self.__dict__ = null_state()        # this handle only
            return
        self.Free()

    def Free(self) -> None:
        """Release the communicator; later use raises ``CommError``.

        ``COMM_WORLD`` and ``COMM_SELF`` cannot be freed (``CommError``, MPI_ERR_COMM, as in
        mpi4py), and stay usable.
        """
        self._alive("Free")
        if self._ep.context < FIRST_FREE_CONTEXT:
            raise CommError(f"rank {self.rank}: Free on {self.name}: a predefined "
                            f"communicator cannot be freed (MPI_ERR_COMM)")
        try:
            self._release_attributes()
        finally:
            self._freed = True
            self._ep.release()

    def _inherit_into(self, new: "Comm") -> None:
        """What a duplicate takes from this communicator: its error handler, and the user
        attributes whose keyval's copy_fn says so."""
        if "__errhandler__" in self._attrs:
            new._attrs["__errhandler__"] = self._attrs["__errhandler__"]
        store = self.__dict__.get("_user_attrs")
        if store:
            store.copy_into(self, new._attribute_store("Dup"))

    def _release_attributes(self) -> None:
        """Delete the user attributes (their delete_fn run) before the communicator goes."""
        store = self.__dict__.get("_user_attrs")
        if store:
            store.clear(self)

    def Compare(self, other: "Comm") -> int:
        """``IDENT`` (same communicator), ``CONGRUENT`` (same ranks in the same order), ``SIMILAR`` (same ranks) or ``UNEQUAL``."""
        for comm in (self, other):
            if not isinstance(comm, Comm) or comm.__dict__.get("_null"):
                raise CommError(f"Compare({self!r}, {other!r}): expected two communicators, "
                                f"not MPI.COMM_NULL or a non-communicator")
        if other is self or (isinstance(other, Comm) and vars(other) is vars(self)):
            return IDENT
        if isinstance(other, Comm) and other.Is_inter() != self.Is_inter():
            return UNEQUAL
        if isinstance(other, Comm) and other._ep.group == self._ep.group:
            return CONGRUENT
        if isinstance(other, Comm) and sorted(other._ep.group) == sorted(self._ep.group):
            return SIMILAR
        return UNEQUAL

    @classmethod
    def Get_parent(cls) -> "Intercomm":
        """The intercommunicator to the processes that spawned this one (``Spawn``); a
        null ``Intercomm``, equal to ``MPI.COMM_NULL``, in a process that was not spawned
        or after ``Disconnect``."""
        get_parent = dynamic_call("get_parent")
        if get_parent is not None:
            return get_parent()
        return (_INTERCOMM_BUILDER["class"] or Intercomm)()

    def Abort(self, errorcode: int = 1) -> None:
        """End the whole job at once with exit code ``errorcode`` (never returns)."""
        self._ep.engine.abort_job(int(errorcode),
                                  f"rank {self.rank} called Abort({errorcode}) on {self.name}")

    # -- attributes ---------------------------------------------------------------------------
    _keyvals = COMM_KEYVALS

    def _attribute_store(self, call: str) -> AttributeStore:
        self._alive(call)
        store = self.__dict__.get("_user_attrs")
        if store is None:
            store = self.__dict__.setdefault("_user_attrs", AttributeStore())
        return store

    def _predefined_attr(self, keyval: int) -> Tuple[bool, Any]:
        """Predefined keyvals (``MPI.TAG_UB``, ``MPI.HOST``...) answered as MPICH does."""
        self._alive("Get_attr")
        if keyval == KEYVAL_TAG_UB:
            return True, TAG_UB
        if keyval in _PREDEFINED_ATTRS:
            return True, _PREDEFINED_ATTRS[keyval](self)
        return False, None

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Comm):
            return vars(self) is vars(other) or (not self and not other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]   (handles are unhashable, as mpi4py's)

    def __reduce__(self):
        """mpi4py's rule: ``COMM_WORLD``/``COMM_SELF`` (and null handles) pickle by name and
        unpickle to this process's own; any other communicator is a ValueError - its state
        (contexts, connections) means nothing in another process."""
        if self is COMM_NULL:
            return "COMM_NULL"              # this module's global: the same object back
        if self.__dict__.get("_null"):
            return (copyreg.__newobj__, (type(self), COMM_NULL))
        for name, comm in _PREDEFINED.items():
            if comm is self:
                return (_predefined, (name,))
            if comm is not None and vars(comm) is vars(self):
                return (_predefined_handle, (name, type(self)))
        raise ValueError(f"cannot serialize {self!r}: only MPI.COMM_WORLD, MPI.COMM_SELF and "
                         f"MPI.COMM_NULL can be pickled (their name is what travels)")

    # -- handles (mpi4py's handle / fromhandle / toint / fromint / py2f / f2py) -------------
    @property
    def handle(self) -> int:
        """An integer naming this communicator in this process (0 for a null handle); give
        it to ``fromhandle`` for another handle on the same communicator."""
        if self.__dict__.get("_null"):
            return 0
        h = self.__dict__.get("_handle")
        if h is None:
            h = self.__dict__["_handle"] = next(_next_handle)
            _HANDLES[h] = self
        return h

    @classmethod
    def fromhandle(cls, handle: int) -> "Comm":
        """A handle of this class on the communicator ``handle`` names (0: a null one)."""
        handle = operator.index(handle)
        if handle == 0:
            return cls()
        comm = _HANDLES.get(handle)
        if comm is None:
            raise ValueError(f"MPI.{cls.__name__}.fromhandle({handle}): no live communicator "
                             f"has this handle in this process")
        if cls is Comm and (comm.Is_inter() or isinstance(comm, Topocomm)):   # keeps the kind
            cls = type(comm)
        return cls(comm)

    def toint(self) -> int:
        """As ``handle`` (minimpi has no separate Fortran/C integer handles)."""
        return self.handle

    py2f = toint

    @classmethod
    def fromint(cls, value: int) -> "Comm":
        return cls.fromhandle(value)

    f2py = fromint

    # -- Split_type ------------------------------------------------------------------------
    @collective
    def Split_type(self, split_type: int, key: int = 0, info: Any = None) -> "Intracomm":
        """Split by hardware locality (MPI 3/4 ``MPI_Comm_split_type``).

        ``COMM_TYPE_SHARED``: the ranks on one host (they can share memory);
        ``COMM_TYPE_HW_GUIDED`` / ``COMM_TYPE_RESOURCE_GUIDED``: as SHARED when ``info``'s
        ``mpi_hw_resource_type`` is ``mpi_shared_memory`` (the one resource type minimpi
        knows), else ``COMM_NULL``; ``COMM_TYPE_HW_UNGUIDED``: the host level when it is
        strictly smaller than this communicator (``info`` then gets
        ``mpi_hw_resource_type``), else ``COMM_NULL``; ``MPI.UNDEFINED``: ``COMM_NULL``.
        Collective: every member calls it (with any of these).
        """
        self._alive("Split_type")
        split_type = as_int(split_type)
        hosts = self._ep.hosts
        color = UNDEFINED
        if split_type in (COMM_TYPE_SHARED, COMM_TYPE_HW_GUIDED, COMM_TYPE_RESOURCE_GUIDED):
            wanted = None if split_type == COMM_TYPE_SHARED else \
                (info.Get(HW_RESOURCE_TYPE) if info else None)
            if split_type == COMM_TYPE_SHARED or wanted == SHARED_MEMORY:
                color = hosts[self.rank]
        elif split_type == COMM_TYPE_HW_UNGUIDED:
            if hosts.count(hosts[self.rank]) < self.size:
                color = hosts[self.rank]
        elif split_type != UNDEFINED:
            raise ArgumentError(f"rank {self.rank}: Split_type(split_type={split_type}): "
                                f"expected MPI.COMM_TYPE_SHARED, COMM_TYPE_HW_GUIDED, "
                                f"COMM_TYPE_HW_UNGUIDED, COMM_TYPE_RESOURCE_GUIDED or "
                                f"MPI.UNDEFINED")
        comm = self.Split(color, key)
        if comm and split_type == COMM_TYPE_HW_UNGUIDED and info is not None and info:
            info.Set(HW_RESOURCE_TYPE, SHARED_MEMORY)
        if comm:
            comm._ep.name = f"{self.name}.shared"
        return comm

    def __bool__(self) -> bool:  # mpi4py: False for COMM_NULL and after Free
        return not (self.__dict__.get("_null") or self.__dict__.get("_freed"))


KEYVAL_TAG_UB = 1
_MPI_NAMES = {"COMM_WORLD": "MPI_COMM_WORLD", "COMM_SELF": "MPI_COMM_SELF",
              "COMM_NULL": "MPI_COMM_NULL"}
#: Split_type kinds (MPICH's values) and the one hardware resource type minimpi knows
COMM_TYPE_SHARED, COMM_TYPE_HW_UNGUIDED, COMM_TYPE_HW_GUIDED, COMM_TYPE_RESOURCE_GUIDED = \
    1, 2, 3, 4
HW_RESOURCE_TYPE = "mpi_hw_resource_type"
SHARED_MEMORY = "mpi_shared_memory"
# Other predefined attribute keyvals (MPI.HOST, MPI.IO, ...), answered as MPICH does.
KEYVAL_HOST, KEYVAL_IO, KEYVAL_WTIME_IS_GLOBAL, KEYVAL_UNIVERSE_SIZE, KEYVAL_APPNUM, \
    KEYVAL_LASTUSEDCODE = 2, 3, 4, 5, 6, 7
_PREDEFINED_ATTRS = {
    KEYVAL_HOST: lambda comm: PROC_NULL,
    KEYVAL_IO: lambda comm: comm.rank,
    KEYVAL_WTIME_IS_GLOBAL: lambda comm: False,
    KEYVAL_UNIVERSE_SIZE: lambda comm: getattr(comm._ep.engine, "universe_size",
                                               comm._ep.engine.size),
    KEYVAL_APPNUM: lambda comm: 0,
    KEYVAL_LASTUSEDCODE: lambda comm: USER_ERRORS.last_used,
}


def _share_handle(target: "Comm", source: Any) -> None:
    """Make ``target`` another object for the communicator ``source`` (None: COMM_NULL)."""
    if isinstance(source, Comm) and source.__dict__.get("_null"):
        target.__dict__ = null_state()      # a null handle of its own (nothing to share)
    elif isinstance(source, Comm) and not (isinstance(target, Intercomm)
                                         and not _is_inter(source) and source) \
            and not (isinstance(target, Intracomm) and _is_inter(source)):
        if isinstance(source, Intercomm):   # what a plain Comm handle on it runs as
            source.__dict__.setdefault("_intercomm_class", type(source))
        target.__dict__ = source.__dict__
    elif source is None:
        target.__dict__ = null_state()
    else:
        raise TypeError(f"MPI.{type(target).__name__}({source!r:.60}): expected a "
                        f"communicator (e.g. MPI.COMM_WORLD) or nothing")


def _is_inter(comm: "Comm") -> bool:
    """Whether ``comm`` (live or freed) is an intercommunicator (an ``Intercomm``, or a plain
    ``Comm`` handle on one)."""
    return isinstance(comm, Intercomm) or "_intercomm_class" in comm.__dict__


#: handle number -> communicator, for ``Comm.fromhandle`` (filled when ``.handle`` is read)
_HANDLES: "weakref.WeakValueDictionary[int, Comm]" = weakref.WeakValueDictionary()
_next_handle = itertools.count(1)

#: this process's COMM_WORLD and COMM_SELF (set by the runtime), what pickles by name
_PREDEFINED: dict = {"COMM_WORLD": None, "COMM_SELF": None}


def free_context(engine: Engine, creator: Any = None, parent: str = "") -> int:
    """The lowest context id this process has not used yet (what it proposes when a new
    communicator's members, or an intercommunicator's two groups, agree on one).

    Threads: two creations in flight at once in one process (two threads each ``Dup``
    another communicator) could agree on one context id for two communicators, whose
    messages would then cross. minimpi refuses the second (``UnsupportedError``, and the
    collective's other members raise ``CollectiveAbortedError``) instead of risking it:
    ``creator`` (the creating call's frame) marks this thread's creation in flight until
    :func:`claim_contexts`; another thread's mark counts while its frame is still running."""
    with engine.lock:
        creations = engine.creations
        me = threading.get_ident()
        if creations and (len(creations) > 1 or me not in creations):
            stacks = sys._current_frames()
            for ident, (frame, where) in list(creations.items()):
                if ident != me and _running(stacks.get(ident), frame):
                    raise UnsupportedError(
                        f"rank {engine.rank}: creating a communicator from {parent or 'a communicator'} "
                        f"while another thread of this process creates one from {where}: "
                        f"concurrent communicator creation is not supported by minimpi "
                        f"(the context ids of the two could collide); create communicators "
                        f"from one thread at a time, e.g. one Dup per thread before the "
                        f"threads start")
                if ident != me:
                    del creations[ident]       # (that creation ended in an exception)
        if creator is not None:
            creations[me] = (creator, parent)
        return getattr(engine, "next_context", FIRST_FREE_CONTEXT)


def _running(stack: Any, frame: Any) -> bool:
    """Whether ``frame`` is on the stack whose innermost frame is ``stack``."""
    while stack is not None:
        if stack is frame:
            return True
        stack = stack.f_back
    return False


def claim_contexts(engine: Engine, first: int, count: int) -> None:
    """Mark the context ids ``first .. first + count - 1`` as used in this process (and
    this thread's creation as no longer in flight)."""
    with engine.lock:
        engine.next_context = max(getattr(engine, "next_context", FIRST_FREE_CONTEXT),
                                  first + count)
        engine.creations.pop(threading.get_ident(), None)


#: who builds intercommunicators (``Intracomm.Create_intercomm``): minimpi.dynamic installs
#: itself with :func:`set_intercomm_builder` (this layer cannot import the one above it)
_INTERCOMM_BUILDER: dict = {"create": None, "class": None}


def set_intercomm_builder(create: Any, cls: type) -> None:
    """Install ``create(local_comm, local_leader, peer_comm, remote_leader, tag)`` and the
    intercommunicator class (``MPI.Intercomm``, whose null handle ``Get_parent`` returns)."""
    _INTERCOMM_BUILDER["create"], _INTERCOMM_BUILDER["class"] = create, cls


#: ``MPI.COMM_NULL``: a null ``Comm`` (mpi4py's null handles are instances of their class);
#: it pickles by name to this very object (see ``Comm.__reduce__``)
COMM_NULL = Comm()
set_comm_null(COMM_NULL)


def set_predefined(world: "Comm", self_comm: "Comm") -> None:
    """Record the process's predefined communicators (the runtime calls this once)."""
    _PREDEFINED["COMM_WORLD"], _PREDEFINED["COMM_SELF"] = world, self_comm


def _predefined(name: str) -> "Comm":
    comm = _PREDEFINED.get(name)
    if comm is None:
        raise ValueError(f"cannot unpickle MPI.{name}: this process has no MPI world yet")
    return comm


def _predefined_handle(name: str, cls: type) -> "Comm":
    return cls(_predefined(name))


class Intracomm(PersistentScans, CollectiveMethods, Comm):
    """An intra-communicator: point-to-point plus every collective (``MPI.Intracomm``)."""

    def Create_intercomm(self, local_leader: int, peer_comm: "Comm", remote_leader: int,
                         tag: int = 0) -> "Intercomm":
        """An intercommunicator between this communicator's group and another, disjoint one
        (collective over this communicator; the leaders meet over ``peer_comm`` with
        ``tag``). Built by :mod:`minimpi.dynamic`."""
        create = _INTERCOMM_BUILDER["create"]
        if create is None:
            return refusing("Intercomm", "Intracomm.Create_intercomm")()
        return create(self, local_leader, peer_comm, remote_leader, tag)

    @classmethod
    def Create_from_group(cls, group: Any, stringtag: str = "org.mpi4py", info: Any = None,
                          errhandler: Any = None) -> "Intracomm":
        """A communicator of ``group``'s members, made without a parent communicator (MPI
        4): collective over the group's members, who pass the same ``stringtag``."""
        if not isinstance(stringtag, str):
            raise TypeError(f"Create_from_group: stringtag must be a str, got "
                            f"{type(stringtag).__name__}")
        group._check("Create_from_group")
        engine = group._engine
        if engine is None:
            raise GroupError("Intracomm.Create_from_group: the group was not made from a "
                             "communicator of this process (Comm.Get_group and the Group "
                             "operations on its result)")
        world = Intracomm(engine, range(engine.size), engine.rank, 0, "COMM_WORLD")
        comm = create_group(world, group, zlib.crc32(stringtag.encode()) & 0x3FFFFFFF)
        if comm:
            comm._ep.name = f"group({stringtag})"
        if comm and info:
            comm.Set_info(info)
        if comm and cls is not Intracomm:
            same = object.__new__(cls)
            same.__dict__ = comm.__dict__
            comm = same
        return comm


class Intercomm(Comm):
    """The base of ``MPI.Intercomm`` (:class:`minimpi.dynamic.intercomm.Intercomm`, which
    adds the remote group, creation, Merge and the collectives); here it only answers
    ``Is_inter`` and is what handle checks (``_share_handle``) recognize."""

    Create_intercomm = refusing("Intercomm", "Intracomm.Create_intercomm")
    Create_from_groups = staticmethod(refusing("Intercomm", "Intercomm.Create_from_groups"))
    Merge = refusing("Intercomm", "Intercomm.Merge")

    def Is_inter(self) -> bool:
        return True

    def Is_intra(self) -> bool:
        return False

    @property
    def is_inter(self) -> bool:
        return True

    @property
    def is_intra(self) -> bool:
        return False


class Topocomm(PersistentNeighborCollectives, NeighborMethods, TopoMixin, Intracomm):
    """A communicator with a process topology (``MPI.Topocomm``): neighbour lists, degrees
    and the neighbourhood collectives (see minimpi.comm.graph)."""

    #: the topology a handle of this class must have (None: any topology)
    _required_topology: Optional[int] = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if args and isinstance(args[0], Comm) and self:   # a new handle on a communicator
            kind = CommExtras.Get_topology(self)
            wanted = self._required_topology
            if kind == UNDEFINED or (wanted is not None and kind != wanted):
                self.__dict__ = null_state()
                raise TypeError(f"MPI.{type(self).__name__}({args[0].name}): that "
                                f"communicator has {_TOPOLOGY_NAMES.get(kind, 'no')} topology")


class Cartcomm(CartMixin, Topocomm):
    """A communicator with a Cartesian topology (``MPI.Cartcomm``; see minimpi.comm.topology)."""

    _required_topology = CART

    def _compute_neighbours(self):
        return cart_neighbours(self)


class Graphcomm(GraphMixin, Topocomm):
    """A communicator with a graph topology (``MPI.Graphcomm``; see minimpi.comm.graph)."""

    _required_topology = GRAPH


class Distgraphcomm(DistGraphMixin, Topocomm):
    """A communicator with a distributed-graph topology (``MPI.Distgraphcomm``)."""

    _required_topology = DIST_GRAPH


_TOPOLOGY_NAMES = {CART: "a Cartesian", GRAPH: "a graph", DIST_GRAPH: "a distributed-graph"}


def _topology_handle(cls: type, comm: "Comm") -> Any:
    """A handle of topology class ``cls`` sharing ``comm``'s state, before its topology is
    set (the class's constructor would refuse a communicator without one)."""
    handle = object.__new__(cls)
    handle.__dict__ = comm.__dict__
    return handle

#: The collectives mpi4py's ``Comm`` class itself has: ``Intracomm`` and ``Intercomm`` define
#: them, and a plain ``MPI.Comm`` handle (``MPI.Comm(MPI.COMM_WORLD)``) runs them as the kind
#: of communicator it is a handle of.
_COMM_COLLECTIVES = (
    "Barrier", "Bcast", "Gather", "Gatherv", "Scatter", "Scatterv", "Allgather", "Allgatherv",
    "Alltoall", "Alltoallv", "Alltoallw", "Reduce", "Allreduce", "Reduce_scatter_block",
    "Reduce_scatter", "Ibarrier", "Ibcast", "Igather", "Igatherv", "Iscatter", "Iscatterv",
    "Iallgather", "Iallgatherv", "Ialltoall", "Ialltoallv", "Ialltoallw", "Ireduce",
    "Iallreduce", "Ireduce_scatter_block", "Ireduce_scatter", "barrier", "bcast", "gather",
    "scatter", "allgather", "alltoall", "reduce", "allreduce")


def _as_kind(comm: Comm, call: str) -> Comm:
    """A handle on ``comm`` of the class that defines its collectives."""
    kind = comm.__dict__.get("_intercomm_class") or Intracomm
    if isinstance(comm, kind):      # that class lacks the call itself
        return refusing(call, f"{type(comm).__name__}.{call}")()
    return kind(comm)


def _run_as_kind(name: str) -> Callable[..., Any]:
    def collective_of_kind(self: Comm, *args: Any, **kwargs: Any) -> Any:
        return getattr(_as_kind(self, name), name)(*args, **kwargs)
    collective_of_kind.__name__ = collective_of_kind.__qualname__ = name
    collective_of_kind.__doc__ = (f"``{name}`` on this communicator, as the ``Intracomm`` or "
                                  f"``Intercomm`` it is.")
    return collective_of_kind


for _name in _COMM_COLLECTIVES:
    setattr(Comm, _name, _run_as_kind(_name))


def endpoint_of(obj: Any) -> Optional[Endpoint]:
    """The endpoint of communicator ``obj`` (None for anything else): how the layers above
    reach a communicator's engine without the mpi4py API exposing it."""
    return obj._ep if isinstance(obj, Comm) else None


# Every public method of the communicator classes hands its MPI.Exception to the
# communicator's error handler (minimpi.comm.errhandlers), decided once, here.
for _cls in (Comm, Intracomm, Intercomm, Topocomm, Cartcomm, Graphcomm, Distgraphcomm):
    route_errors(_cls)
