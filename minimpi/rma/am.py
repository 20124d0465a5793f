"""One-sided operations as active messages over the point-to-point engine.

Every window has a communicator of its own (a ``Dup`` of the one it was made on), so its
messages never meet anybody else's. On it:

* **requests** (``REQUEST_TAG``): origin -> target, one message each: a small pickled header
  (kind, reply tag, target layout, op, element type) and the origin's bytes. The target's
  :class:`Server` keeps one receive posted for them and serves them one at a time, in
  arrival order - so everything one origin sends one target happens in the order it was
  issued, and a ``FLUSH``/``UNLOCK`` request is answered only after the operations before
  it were applied (that answer is remote completion). One server applying one request at a
  time is also what makes accumulates atomic per MPI (in a window in shared memory, where
  origins apply accumulates themselves, the server takes the segment's byte-range lock too:
  :meth:`Exposed.atomic`).
* **replies** (a tag per request, from ``FIRST_REPLY_TAG``): target -> origin, a status byte
  (0, or the MPI error class of what went wrong at the target) and the data (``Get``, the old
  values of ``Get_accumulate``/``Fetch_and_op``/``Compare_and_swap``) or the error's text.
* **post notices** (``POST_TAG``): target -> origin, ``Win.Post`` telling ``Win.Start``.
* **finished notices** (a ``FINISHED`` request): a rank that reaches ``MPI.Finalize`` (or
  the end of its program) with the window not freed tells every other rank of the window
  that no request will come from it any more, then keeps serving until every other rank
  told it the same (:mod:`.finish`): so a target that ends its program first still serves
  the origins that are in ``Lock``/``Get``/``Unlock`` on it.

An origin that is gone (its process failed, or ended without finalizing) can never unlock:
when the target learns it is gone (``engine.lost_peers``: the transport saw it go, or the
launcher's failure notice under ``--fault-tolerant``) its server drops that origin's queued
lock requests and parked operations, releases the locks it held - the waiters are then
granted in order, as after an ``Unlock`` - and ignores whatever else arrives from it. The
memory that origin was updating is whatever its operations left (ULFM leaves window memory
undefined after a failure: ``Comm.Get_failed`` tells a survivor that one happened).

Progress: the server is an engine *active operation* (``Engine.add_active``): each round
of progress of any blocking or testing MPI call on the target advances it. So over TCP (or
any wire) a target serves one-sided requests only while it is inside some MPI call - a rank
that computes for a minute without calling MPI delays the operations aimed at it by a
minute. Windows in shared memory take the straight path for ``Put``/``Get`` instead
(:mod:`minimpi.rma.shared`).

Errors found at the target (an access outside a dynamic window's attached memory) come back
in the reply of the operation, or - for operations without one (``Put``, ``Accumulate``) -
in the answer to the origin's next ``Flush``/``Unlock``/``Fence``.
"""
from __future__ import annotations

import pickle
import struct
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from ..constants import ANY_SOURCE, LOCK_EXCLUSIVE
from ..data.ops import PREDEFINED_OPS
from ..errors import ERR_OTHER, MinimpiError
from ..p2p.endpoint import Endpoint
from ..p2p.request import CombinedRequest, RecvRequest, Request, collect, set_finish
from .errors import ERR_RMA_RANGE, ERR_RMA_SYNC, RmaRangeError, RmaSyncError
from .layout import Layout, byte_index, gather, scatter

REQUEST_TAG = 1
POST_TAG = 2
FIRST_REPLY_TAG = 16
_LAST_REPLY_TAG = 1 << 30

# request kinds
PUT, GET, ACC, GET_ACC, CAS, LOCK, UNLOCK, FLUSH, COMPLETE, RELEASE, FINISHED = range(11)
KIND_NAMES = ("Put", "Get", "Accumulate", "Get_accumulate", "Compare_and_swap", "Lock",
              "Unlock", "Flush", "Complete", "Unlock", "finalize")

_LEN = struct.Struct("<I")
_OK = b"\x00"


def encode(header: tuple, payload: Optional[memoryview] = None) -> Tuple[List[memoryview], int]:
    """A request's wire segments: length-prefixed pickled header, then the raw payload."""
    h = pickle.dumps(header, protocol=5)
    segments = [memoryview(_LEN.pack(len(h)) + h)]
    if payload is not None and payload.nbytes:
        segments.append(payload)
    return segments, sum(s.nbytes for s in segments)


def decode(buffer: Any) -> Tuple[tuple, memoryview]:
    view = memoryview(buffer).cast("B")
    (n,) = _LEN.unpack_from(view, 0)
    return pickle.loads(view[4:4 + n]), view[4 + n:]


def error_from(error_class: int, text: str) -> MinimpiError:
    """The exception an origin raises for an error its target reported."""
    if error_class == ERR_RMA_RANGE:
        return RmaRangeError(text)
    if error_class == ERR_RMA_SYNC:
        return RmaSyncError(text)
    return MinimpiError(text, error_class)


def _error_byte(exc: BaseException) -> int:
    cls = getattr(exc, "error_class", ERR_OTHER)
    return cls if 0 < cls < 256 else ERR_OTHER


# ----------------------------------------------------------------------------- target side
class Server:
    """Serves one window's requests on one rank (an engine active operation).

    ``target`` is the window's local side: ``memory_for(layout, origin, call)`` (the bytes a
    layout names, or :class:`RmaRangeError`), ``locks`` (a :class:`LockTable`) and
    ``completed(origin)`` (a post/start/complete epoch's ``Complete`` arrived).
    """

    def __init__(self, endpoint: Endpoint, target: Any) -> None:
        self.endpoint = endpoint
        self.target = target
        self.closed = False
        #: errors of requests without a reply, per origin, told at its next flush/unlock
        self.deferred: Dict[int, List[Tuple[int, str]]] = {}
        #: requests of origins whose lock is not granted yet (an origin does not wait for
        #: the grant before it sends its operations: they wait here, in order)
        self.parked: Dict[int, List[Any]] = {}
        #: origins (window ranks) that said they finished (``FINISHED``): none of their
        #: requests can come any more
        self.finished: Set[int] = set()
        #: origins known to be gone (failed, or ended unannounced): what comes from them
        #: is dropped, and they hold no lock here
        self.gone: Set[int] = set()
        self._lost_seen = 0
        #: what the window is called in reports, and the epochs this rank left open on it
        #: (the window's state answers both once made)
        self.names: Callable[[], Tuple[str, str]] = lambda: ("?", "?")
        self.open_epochs: Callable[[], List[str]] = lambda: []
        self._recv = self._post()
        endpoint.engine.add_active(self)

    def _post(self) -> RecvRequest:
        return self.endpoint.irecv(None, ANY_SOURCE, REQUEST_TAG, "Win (one-sided requests)")

    def advance(self) -> bool:
        """Serve every request that has arrived; True once the window is freed."""
        if self.closed:
            return True
        if len(self.endpoint.engine.lost_peers) != self._lost_seen:
            self._forget_lost()
        while self._recv.done:
            req = self._recv
            self._recv = self._post()
            if req.error is not None:    # (a revoked context refuses every receive: post
                break                    # again at the next round, never in a loop here)
            self.serve(req.status.source, req.buffer)
        return False

    def _forget_lost(self) -> None:
        """Origins that are gone can never unlock: release what they hold or wait for here,
        drop their parked operations (never granted) and whatever else comes from them."""
        lost = self.endpoint.engine.lost_peers
        self._lost_seen = len(lost)
        for origin, world in enumerate(self.endpoint.group):
            if world in lost and origin != self.endpoint.rank and origin not in self.gone:
                self.gone.add(origin)
                self.parked.pop(origin, None)
                self.deferred.pop(origin, None)
                self.target.locks.forget(origin)

    def peers(self) -> List[int]:
        """The other ranks of the window (window ranks)."""
        return [r for r in range(self.endpoint.size) if r != self.endpoint.rank]

    def announce_finished(self) -> None:
        """Tell every other rank of the window that no request will come from this rank
        any more (this rank is finalizing with the window not freed)."""
        segments, nbytes = encode((FINISHED,), None)
        for peer in self.peers():
            if peer not in self.gone and self.endpoint.group[peer] not in \
                    self.endpoint.engine.lost_peers:
                self.endpoint.isend(segments, nbytes, peer, REQUEST_TAG, 0,
                                    "MPI finalize (window not freed)")

    def unfinished(self) -> List[int]:
        """The other ranks of the window that may still send requests here: neither
        finished (``FINISHED`` came) nor gone."""
        lost = self.endpoint.engine.lost_peers
        return [r for r in self.peers() if r not in self.finished and r not in self.gone
                and self.endpoint.group[r] not in lost]

    def receives(self) -> Tuple[RecvRequest, ...]:
        """The receive this server keeps posted (not a user's communication)."""
        return () if self.closed else (self._recv,)

    def lock_report(self) -> Optional[Dict[str, Any]]:
        """Who holds and who waits for this rank's lock, in world ranks (None while the
        lock is free and nobody waits): what the deadlock report needs to name the rank a
        lock wait really waits for."""
        mode, holders = self.target.locks.holders()
        waiting = self.target.locks.waiters()
        if not holders and not waiting:
            return None
        group = self.endpoint.group
        name, comm = self.names()
        return {"label": self.target.label, "win": name, "comm": comm,
                "target": int(group[self.endpoint.rank]), "mode": mode,
                "holders": [int(group[o]) for o in holders],
                "waiting": [[int(group[o]), "exclusive" if m == LOCK_EXCLUSIVE else "shared"]
                            for o, m in waiting]}

    def close(self) -> None:
        """Stop serving (``Win.Free``, after every rank stopped sending)."""
        if self.closed:
            return
        self.closed = True
        engine = self.endpoint.engine
        engine.cancel(self._recv)
        if self in engine.active:
            engine.active.remove(self)

    # -- replies -------------------------------------------------------------------------
    def reply(self, origin: int, tag: int, data: Any = b"", error: Optional[BaseException] = None
              ) -> None:
        if error is not None:
            segments = [memoryview(bytes([_error_byte(error)]) + str(error).encode())]
        else:
            body = memoryview(data).cast("B") if not isinstance(data, memoryview) else data
            segments = [memoryview(_OK), body] if body.nbytes else [memoryview(_OK)]
        nbytes = sum(s.nbytes for s in segments)
        self.endpoint.isend(segments, nbytes, origin, tag, 0, "Win reply")

    def _ack(self, origin: int, tag: int) -> None:
        """Answer a flush/unlock: OK, or the errors of earlier requests without replies."""
        errors = self.deferred.pop(origin, None)
        if errors:
            cls, text = errors[0]
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            self.reply(origin, tag, error=error_from(cls, text + more))
        else:
            self.reply(origin, tag)

    # -- serving -------------------------------------------------------------------------
    def serve(self, origin: int, buffer: Any) -> None:
        if origin in self.gone:       # it can never unlock: its epoch ended when it went
            return
        parked = self.parked.get(origin)
        if parked is not None:        # behind a lock not granted yet: in order, later
            parked.append(buffer)
            return
        header, payload = decode(buffer)
        kind = header[0]
        try:
            if kind == PUT:
                self._put(origin, header, payload)
            elif kind == ACC:
                self._accumulate(origin, header, payload)
            elif kind == GET:
                self._get(origin, header)
            elif kind == GET_ACC:
                self._get_accumulate(origin, header, payload)
            elif kind == CAS:
                self._compare_and_swap(origin, header, payload)
            elif kind == LOCK:
                _, tag, mode = header
                self.parked[origin] = []
                self.target.locks.request(origin, mode, lambda: self._granted(origin, tag))
            elif kind == UNLOCK:
                self._unlock(origin, header[1])
            elif kind == FLUSH:
                self._ack(origin, header[1])
            elif kind == COMPLETE:
                self.target.completed(origin)
            elif kind == RELEASE:       # an Unlock with nothing left to acknowledge
                self.target.locks.release(origin)
            elif kind == FINISHED:      # it finalized: nothing more comes; it cannot unlock
                self.finished.add(origin)
                self.target.locks.forget(origin)
            else:
                raise MinimpiError(f"unknown one-sided request kind {kind}")
        except Exception as exc:   # told to the origin, never raised inside an unrelated call
            if kind in (GET, GET_ACC, CAS, UNLOCK, FLUSH):
                self.reply(origin, header[1], error=exc)
            else:
                self.deferred.setdefault(origin, []).append((_error_byte(exc), str(exc)))

    def _granted(self, origin: int, tag: int) -> None:
        """``origin``'s lock is granted: tell it, then serve what it sent meanwhile."""
        self.reply(origin, tag)
        for buffer in self.parked.pop(origin, ()):
            self.serve(origin, buffer)

    def _put(self, origin: int, header: tuple, payload: memoryview) -> None:
        layout = Layout.from_wire(header[1])
        memory, layout = self.target.memory_for(layout, origin, "Put")
        scatter(memory, layout, payload)

    def _get(self, origin: int, header: tuple) -> None:
        _, tag, wire = header
        memory, layout = self.target.memory_for(Layout.from_wire(wire), origin, "Get")
        self.reply(origin, tag, gather(memory, layout).tobytes())

    def _accumulate(self, origin: int, header: tuple, payload: memoryview) -> None:
        _, wire, opname, dtype = header
        memory, layout = self.target.memory_for(Layout.from_wire(wire), origin, "Accumulate")
        with self.target.atomic(memory, layout, opname != "NO_OP"):
            accumulate(memory, layout, opname, dtype, payload)

    def _get_accumulate(self, origin: int, header: tuple, payload: memoryview) -> None:
        _, tag, wire, opname, dtype = header
        memory, layout = self.target.memory_for(Layout.from_wire(wire), origin,
                                                "Get_accumulate")
        with self.target.atomic(memory, layout, opname != "NO_OP"):
            old = gather(memory, layout).tobytes()
            accumulate(memory, layout, opname, dtype, payload)
        self.reply(origin, tag, old)

    def _compare_and_swap(self, origin: int, header: tuple, payload: memoryview) -> None:
        _, tag, wire = header
        memory, layout = self.target.memory_for(Layout.from_wire(wire), origin,
                                                "Compare_and_swap")
        with self.target.atomic(memory, layout, True):
            old = compare_and_swap(memory, layout, payload)
        self.reply(origin, tag, old)

    def _unlock(self, origin: int, tag: int) -> None:
        if not self.target.locks.release(origin):
            self.reply(origin, tag, error=RmaSyncError(
                f"Win.Unlock: rank {origin} held no lock on this rank's window "
                f"(it is {self.target.locks.describe()}) (MPI_ERR_RMA_SYNC)"))
            return
        self._ack(origin, tag)


def accumulate(memory: np.ndarray, layout: Layout, opname: str, dtype: np.dtype,
               payload: Any) -> None:
    """``target = origin (op) target`` element-wise over the layout's bytes."""
    if opname == "NO_OP":
        return
    n = layout.nbytes
    src = np.frombuffer(payload, np.uint8)
    if src.nbytes != n:
        raise MinimpiError(f"Accumulate: {src.nbytes} origin bytes for a target of {n} bytes")
    if not n:
        return
    op = PREDEFINED_OPS[opname]
    with np.errstate(all="ignore"):    # wrap-around and NaN are C MPI's results too, silently
        if layout.single:
            target = memory[layout.start:layout.start + n].view(dtype)
            op.reduce_into(src.view(dtype), target, call="Accumulate")
            return
        index = byte_index(layout)
        values = memory[index].view(dtype)
        op.reduce_into(src.view(dtype), values, call="Accumulate")
        memory[index] = values.view(np.uint8)


def compare_and_swap(memory: np.ndarray, layout: Layout, payload: Any) -> bytes:
    """Replace the layout's bytes with ``payload[:n]`` if they equal ``payload[n:2n]``;
    the old bytes."""
    n = layout.nbytes
    payload = memoryview(payload).cast("B")
    old = gather(memory, layout).tobytes()
    if old == payload[n:2 * n].tobytes():
        scatter(memory, layout, payload[:n])
    return old


# ----------------------------------------------------------------------------- origin side
class RmaRequest(CombinedRequest):
    """The request of one one-sided operation (what ``Rput``/``Rget``... return).

    Complete when its message is sent and - for operations that fetch - its reply is in;
    completing it (``Wait``, ``Test``, or a flush of the window) puts the fetched data into
    the origin's buffer, or raises the error the target reported.
    """

    __slots__ = ("_reply", "_on_reply", "_applied", "world")

    def __init__(self, parts: Sequence[Request], reply: Optional[RecvRequest],
                 on_reply: Optional[Callable[[memoryview], None]], description: str,
                 world: Optional[int] = None) -> None:
        super().__init__(parts, description)
        self._reply = reply
        self._on_reply = on_reply
        self._applied = False
        #: the target's world rank: whom a wait on this request waits for (deadlock report)
        self.world = world
        if reply is not None:           # completing it delivers the reply
            set_finish(self, self.apply)

    def apply(self) -> None:
        """Deliver the reply (once); raise what the target reported."""
        if self._applied:
            return
        self._applied = True
        reply = self._reply
        if reply is None or reply.error is not None:
            return
        body = memoryview(reply.buffer).cast("B")
        if body[0]:
            raise error_from(body[0], bytes(body[1:]).decode(errors="replace"))
        if self._on_reply is not None:
            self._on_reply(body[1:])


class Origin:
    """Sends one window's requests from this rank and tracks what is not complete yet."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.engine = endpoint.engine
        self._tag = FIRST_REPLY_TAG
        #: per target: requests not yet completed by a flush
        self.pending: Dict[int, List[RmaRequest]] = {}
        #: targets with writes (Put/Accumulate/Complete) not yet acknowledged
        self.dirty: set = set()
        #: lock requests whose grant has not come back yet, per target
        self.grants: Dict[int, RmaRequest] = {}

    def _next_tag(self) -> int:
        tag = self._tag
        self._tag = tag + 1 if tag < _LAST_REPLY_TAG else FIRST_REPLY_TAG
        return tag

    def track(self, target: int, req: Any) -> Any:
        """Count ``req`` among the operations to ``target`` a flush completes."""
        waiting = self.pending.setdefault(target, [])
        if len(waiting) >= 64:   # long epochs: forget sends already out
            waiting[:] = [r for r in waiting if not (r.done and r._reply is None)]
        waiting.append(req)
        return req

    def send(self, target: int, header: tuple, payload: Optional[memoryview], call: str
             ) -> RmaRequest:
        """A request without a reply (Put, Accumulate, Complete)."""
        segments, nbytes = encode(header, payload)
        sreq = self.endpoint.isend(segments, nbytes, target, REQUEST_TAG, 0, call)
        self.dirty.add(target)
        return self.track(target, RmaRequest((sreq,), None, None, call,
                                             self.endpoint.group[target]))

    def lock(self, target: int, lock_type: int, call: str) -> None:
        """Ask ``target`` for its lock without waiting: operations sent after it wait at
        the target until it is granted; :meth:`granted` waits for it (straight memory
        access needs it)."""
        self.grants[target] = self.ask(target, (LOCK, lock_type), None, call)

    def granted(self, target: int) -> None:
        """Wait until the lock asked of ``target`` is granted."""
        req = self.grants.pop(target, None)
        if req is not None and not req.done:
            self.wait([req])

    def release_lock(self, target: int, call: str) -> None:
        """Give a lock back without waiting: nothing is left to acknowledge (the origin
        checked it holds the lock; a later request of ours queues behind this one)."""
        segments, nbytes = encode((RELEASE,), None)
        self.endpoint.isend(segments, nbytes, target, REQUEST_TAG, 0, call)

    def ask(self, target: int, header: tuple, payload: Optional[memoryview], call: str,
            on_reply: Optional[Callable[[memoryview], None]] = None) -> RmaRequest:
        """A request with a reply: ``header`` without its tag; the tag goes second."""
        tag = self._next_tag()
        rreq = self.endpoint.irecv(None, target, tag, call)   # posted before the request
        segments, nbytes = encode((header[0], tag) + tuple(header[1:]), payload)
        sreq = self.endpoint.isend(segments, nbytes, target, REQUEST_TAG, 0, call)
        return self.track(target, RmaRequest((rreq, sreq), rreq, on_reply, call,
                                             self.endpoint.group[target]))

    def wait(self, reqs: Sequence[RmaRequest]) -> None:
        """Complete ``reqs`` (serving this rank's own window meanwhile); raise the first
        error any of them reports, after all are complete."""
        self.engine.wait_all(list(reqs))
        first: Optional[BaseException] = None
        for r in reqs:
            try:
                collect(r)
            except MinimpiError as exc:
                first = first or exc
        if first is not None:
            raise first

    def complete_local(self, targets: Sequence[int]) -> None:
        """Wait for every pending operation to ``targets`` (local completion; fetched data
        delivered)."""
        reqs: List[RmaRequest] = []
        for t in targets:
            reqs.extend(self.pending.pop(t, ()))
        self.wait(reqs)

    def complete_remote(self, targets: Sequence[int], call: str) -> None:
        """Local completion plus an acknowledged flush of every target written to."""
        for t in targets:
            if t in self.dirty:
                self.dirty.discard(t)
                self.ask(t, (FLUSH,), None, call)     # tracked with the target's others
        reqs: List[RmaRequest] = []
        for t in targets:
            reqs.extend(self.pending.pop(t, ()))
        self.wait(reqs)

    def idle(self, target: int) -> bool:
        """Nothing to complete towards ``target`` (no request pending, no write
        unacknowledged): a flush of it has nothing to do."""
        return target not in self.dirty and not self.pending.get(target)

    def targets(self) -> List[int]:
        return sorted(set(self.pending) | self.dirty)
