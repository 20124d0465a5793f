"""Requests and statuses: the handles of point-to-point operations (mpi4py-shaped)."""
from __future__ import annotations

import operator
from typing import Any, Callable, Iterator, List, Optional, Protocol, Sequence, Tuple

from ..constants import ANY_SOURCE, ANY_TAG, PROC_NULL, UNDEFINED
from ..data.datatypes import count_elements, elements_nbytes
from ..errors import SUCCESS, MinimpiError, PeerLostError, RequestError
from ..front import REQUEST_CALLS, Fronted
from ..handles import IntConversions, object_of, register


class RequestEngine(Protocol):
    """What a request needs of the engine that completes it (:class:`minimpi.p2p.engine.
    Engine` is one): progress without blocking, waits, cancelling, and the world's bus."""

    bus: Any

    def poll(self) -> None: ...
    def wait_for(self, req: "Request", timeout: Optional[float] = None) -> None: ...
    def wait_all(self, reqs: Sequence["Request"], timeout: Optional[float] = None) -> None: ...
    def wait_any(self, reqs: Sequence["Request"], timeout: Optional[float] = None) -> None: ...
    def cancel(self, req: "Request") -> None: ...


def describe(req: "Request") -> str:
    """Human-readable text of what a request is, e.g. ``recv(source=1, tag=7) on COMM_WORLD``."""
    d = req.description
    if isinstance(d, tuple):
        call, peer_name, peer, tag, comm_name = d
        if "[" in call:  # a collective's message (e.g. "Bcast[binomial]"): its tag is internal
            return f"{call}({peer_name}={peer}) on {comm_name}"
        return f"{call}({peer_name}={peer}, tag={tag}) on {comm_name}"
    return str(d)


def _rebuild_status(cls: type, source: int, tag: int, nbytes: int, error: int,
                    cancelled: bool) -> "Status":
    st = cls.__new__(cls)
    Status.__init__(st, source, tag, nbytes, error)
    st.cancelled = cancelled
    return st


class Status:
    """What a completed receive or a probe found: source, tag, size (``MPI.Status``).

    ``MPI.Status()`` is an empty status (``ANY_SOURCE``, ``ANY_TAG``, ``SUCCESS``, 0 bytes);
    ``MPI.Status(st)`` is a copy of ``st``; anything else is a TypeError, as in mpi4py.
    (minimpi itself builds filled ones as ``Status(source, tag, nbytes[, error])``.)
    """

    __slots__ = ("source", "tag", "error", "nbytes", "cancelled", "__weakref__")

    def __init__(self, status: "Optional[Status | int]" = None, tag: Optional[int] = None,
                 nbytes: int = 0, error: int = SUCCESS) -> None:
        if tag is not None:                       # minimpi's own form: the fields themselves
            self.source, self.tag, self.nbytes, self.error = status, tag, nbytes, error
            self.cancelled = False
        elif status is None:
            self.source, self.tag, self.nbytes, self.error = ANY_SOURCE, ANY_TAG, 0, SUCCESS
            self.cancelled = False
        elif isinstance(status, Status):
            self._assign(status)
        else:
            raise TypeError(f"MPI.Status({status!r:.40}): expected an MPI.Status to copy or "
                            f"nothing, got {type(status).__name__}")

    def _assign(self, other: "Status") -> None:
        self.source, self.tag, self.nbytes = other.source, other.tag, other.nbytes
        self.error, self.cancelled = other.error, other.cancelled

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Status):
            return NotImplemented
        return (self.source, self.tag, self.error, self.nbytes, self.cancelled) == \
            (other.source, other.tag, other.error, other.nbytes, other.cancelled)

    __hash__ = None  # type: ignore[assignment]   (mutable, as mpi4py's)

    def __reduce__(self):
        """A status pickles by value with every protocol (its class, subclasses included,
        and its fields)."""
        return (_rebuild_status, (type(self), self.source, self.tag, self.nbytes, self.error,
                                  self.cancelled))

    @property
    def count(self) -> int:
        """Size of the message in bytes (settable, as ``Set_elements(MPI.BYTE, n)``)."""
        return self.nbytes

    @count.setter
    def count(self, value: int) -> None:
        self.nbytes = _nonnegative(value, "Status.count")

    def Get_source(self) -> int:
        return self.source

    def Get_tag(self) -> int:
        return self.tag

    def Get_error(self) -> int:
        return self.error

    def Get_count(self, datatype: Any = None) -> int:
        """Number of ``datatype`` elements received (bytes when no datatype is given)."""
        size = 1 if datatype is None else int(datatype.Get_size())
        if size <= 0:
            return 0
        if self.nbytes % size:
            return UNDEFINED
        return self.nbytes // size

    def Get_elements(self, datatype: Any) -> int:
        """Number of basic elements received (``VECTOR(3, 2, 4, INT)`` x 2 is 12), counting
        a partial item too; ``UNDEFINED`` when the data ends inside an element."""
        if datatype is None:
            return self.nbytes
        found = count_elements(datatype, self.nbytes)
        return UNDEFINED if found is None else found

    def Is_cancelled(self) -> bool:
        return bool(self.cancelled)

    def Set_source(self, source: int) -> None:
        self.source = source

    def Set_tag(self, tag: int) -> None:
        self.tag = tag

    def Set_error(self, error: int) -> None:
        self.error = error

    def Set_elements(self, datatype: Any, count: int) -> None:
        """Make the status report ``count`` basic elements of ``datatype``."""
        count = _nonnegative(count, "Status.Set_elements")
        self.nbytes = count if datatype is None else elements_nbytes(datatype, count)

    def Set_cancelled(self, flag: bool) -> None:
        """Mark the status as (not) cancelled: what ``Is_cancelled`` then answers."""
        self.cancelled = bool(flag)

    def tomemory(self) -> "StatusMemory":
        """The status fields as a mutable sequence of ints, in the order source, tag, error,
        count (bytes), cancelled: writing an item writes the field (as mpi4py's
        ``tomemory()`` exposes the C ``MPI_Status``)."""
        return StatusMemory(self)

    def py2f(self) -> List[int]:
        """The fields as a list of ints (``tomemory`` order)."""
        return list(self.tomemory())

    @classmethod
    def f2py(cls, fields: Sequence[int]) -> "Status":
        """A status from ``py2f``'s list."""
        st = cls()
        mem = st.tomemory()
        for i, v in enumerate(fields):
            mem[i] = v
        return st

    def __repr__(self) -> str:
        return f"Status(source={self.source}, tag={self.tag}, count={self.nbytes} bytes)"


def _nonnegative(value: Any, what: str) -> int:
    n = operator.index(value)
    if n < 0:
        raise ValueError(f"{what}: expected a count >= 0, got {n}")
    return n


class StatusMemory:
    """A live, writable view of a :class:`Status`'s fields as ints (``Status.tomemory``)."""

    __slots__ = ("_status",)
    _FIELDS = ("source", "tag", "error", "nbytes", "cancelled")

    def __init__(self, status: Status) -> None:
        self._status = status

    def __len__(self) -> int:
        return len(self._FIELDS)

    def __getitem__(self, i: int) -> int:
        return int(getattr(self._status, self._FIELDS[i]))

    def __setitem__(self, i: int, value: int) -> None:
        name = self._FIELDS[i]
        value = operator.index(value)
        setattr(self._status, name, bool(value) if name == "cancelled" else value)

    def __iter__(self) -> Iterator[int]:
        return (self[i] for i in range(len(self._FIELDS)))

    def tolist(self) -> List[int]:
        return list(self)


#: handle number -> request, for ``Request.fromhandle`` (filled only when ``.handle`` is read)


#: the status of requests that carry no message information (sends, collectives): one shared
#: object that nothing changes (saves an allocation per send); each receive has its own
_NO_MESSAGE = Status()


class Request(IntConversions, metaclass=Fronted):
    """A pending operation; complete it with ``wait``/``Wait`` or poll it with ``test``/``Test``.

    Lowercase methods return the received Python object (mpi4py's ``req.wait()``),
    Capitalized ones return ``True``/flags as mpi4py's ``Wait``/``Test`` do.

    ``MPI.Request()`` is a null request (equal to ``MPI.REQUEST_NULL``: waiting on it returns
    at once with an empty status). ``MPI.Request(req)`` is a second handle on ``req``: it
    compares equal to it and waiting, testing, cancelling or freeing through either acts on
    the one operation (as two mpi4py handles of one ``MPI_Request``).
    """

    __slots__ = ("_engine", "done", "error", "status", "_finish", "_result", "description",
                 "_pending", "_inactive", "_orig", "_handle", "__weakref__")

    # The API front (minimpi.front): waits and tests are published as calls; a request has
    # no error handler of its own, so its errors are only raised.
    _front_calls = REQUEST_CALLS
    _front_routed = False

    def _front_bus(self) -> Any:
        """The bus of the world this request's engine belongs to (None: a null request)."""
        engine = self._target()._engine
        return engine.bus if engine is not None else None

    def __new__(cls, *args: Any, **kwargs: Any) -> "Request":
        # mpi4py: Request(req) of the request's own type is another handle on the same
        # request; here that is the object itself (equal, same type, same state).
        # A null one gives a new null handle (``Request(REQUEST_NULL) is not REQUEST_NULL``).
        if len(args) == 1 and not kwargs and type(args[0]) is cls and not args[0]._is_null():
            return args[0]
        return super().__new__(cls)

    def __init__(self, request: "Optional[Request]" = None) -> None:
        if request is self:                      # Request(req) of req's own type (__new__)
            return
        self._setup(None, "REQUEST_NULL")
        if request is None or (isinstance(request, Request) and request._is_null()):
            # a null request converts to a null handle of any request class (mpi4py:
            # ``MPI.Grequest(MPI.REQUEST_NULL)``)
            self._make_null()
        elif isinstance(request, Request):
            self._orig = request._target()
        else:
            raise TypeError(f"MPI.{type(self).__name__}({request!r:.40}): expected a request "
                            f"to make another handle of, or nothing (the null request)")

    def _setup(self, engine: Optional["RequestEngine"], description: Any = "",
               status: Optional[Status] = None) -> None:
        """Initialize a real request (what the engine and the subclasses call)."""
        self._engine = engine
        self.done = False
        self.error: Optional[BaseException] = None
        self.status = _NO_MESSAGE if status is None else status
        self._finish: Optional[Callable[[], Any]] = None  # runs once, at completion by the waiter
        self._result: Any = None
        self.description = description
        self._pending = 1
        # mpi4py: once completed by a wait/test (or freed) a request is REQUEST_NULL: falsy,
        # equal to MPI.REQUEST_NULL, skipped by Waitany/Waitsome. A repeated wait() still
        # returns the cached result (the collectives rely on that).
        self._inactive = False
        self._orig: Optional[Request] = None   # set on a second handle (Request(req))
        self._handle = 0

    def _make_null(self) -> None:
        self.done, self._pending, self._inactive = True, 0, True

    def _target(self) -> "Request":
        """The request this handle names (itself, unless it is a second handle)."""
        return self if self._orig is None else self._orig

    # -- engine side -------------------------------------------------------------------
    def _complete(self, error: Optional[BaseException] = None) -> None:
        if error is not None and self.error is None:
            self.error = error
        self._pending -= 1
        if self._pending <= 0:
            self.done = True

    def _sent(self, failure: Optional[str] = None) -> None:
        """Transport callback: the frame was handed off (or could not be, for ``failure``)."""
        if failure is None:
            self._complete()
        else:
            self._fail(PeerLostError(f"{describe(self)}: {failure}"))

    def _fail(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error
        self._pending = 0
        self.done = True

    def _collect(self, status: Optional[Status]) -> Any:
        """Called once the request is done: raise its error or return its result."""
        if self._finish is not None:
            finish, self._finish = self._finish, None
            # a failed or cancelled receive has nothing to decode: its error is what counts
            if not self.status.cancelled and self.error is None:
                try:
                    self._result = finish()   # may refine self.status (object counts)
                except MinimpiError as exc:
                    self.error = exc
        if status is not None:
            status._assign(self.status)
        self._inactive = True
        if self.error is not None:
            raise self.error
        return self._result

    # -- mpi4py API ----------------------------------------------------------------------
    # ``wait``/``test``/``Wait``/``Test`` all run ``_wait``/``_test`` (which a request
    # holding a Completion redefines: minimpi.p2p.completion), so a user subclass may
    # redefine ``test()``/``wait()`` with other signatures on top of ``Test``/``Wait``, as
    # mpi4py's test_subclass does.
    def wait(self, status: Optional[Status] = None) -> Any:
        """Block until complete; return the received object (None for sends and buffers)."""
        return self._wait(status)

    def test(self, status: Optional[Status] = None) -> Tuple[bool, Any]:
        """``(done, object)`` after one round of progress, without blocking."""
        return self._test(status)

    def _wait(self, status: Optional[Status] = None) -> Any:
        if self._orig is not None:
            return self._orig._wait(status)
        if not self.done:
            self._engine.wait_for(self)
        return self._collect(status)

    def _test(self, status: Optional[Status] = None) -> Tuple[bool, Any]:
        if self._orig is not None:
            return self._orig._test(status)
        if self._inactive:
            # already completed by a wait/test: REQUEST_NULL, whose test gives (True, None)
            if status is not None:
                status._assign(Status())
            return True, None
        if not self.done and self._engine is not None:
            self._engine.poll()
        if not self.done:
            return False, None
        return True, self._collect(status)

    def Wait(self, status: Optional[Status] = None) -> bool:
        """Block until complete (raising its error, if any); returns True."""
        self._wait(status)
        return True

    def Test(self, status: Optional[Status] = None) -> bool:
        """Whether the request completed (one round of progress, no blocking)."""
        return self._test(status)[0]

    def Get_status(self, status: Optional[Status] = None) -> bool:
        """Whether the request is complete, filling ``status``; unlike ``Test`` it stays active."""
        if self._orig is not None:
            return self._orig.Get_status(status)
        if not self.done and self._engine is not None:
            self._engine.poll()
        if self.done and status is not None:
            status._assign(Status() if self._inactive else self.status)
        return self.done

    get_status = Get_status

    def Cancel(self) -> None:
        """Cancel a receive that has not matched yet (``Status.Is_cancelled`` then tells);
        a send, or a receive that already matched, completes normally (MPI allows that)."""
        if self._is_null():
            raise RequestError("Request.Cancel on MPI.REQUEST_NULL (or a request already "
                               "completed by a wait/test, or freed): nothing to cancel")
        if self._orig is not None:
            self._orig.Cancel()
            return
        if not self.done and self._engine is not None:
            self._engine.cancel(self)

    cancel = Cancel

    def Free(self) -> None:
        """Release the handle; the operation still completes in the background."""
        if self._is_null():
            raise RequestError("Request.Free on MPI.REQUEST_NULL (or a request already "
                               "completed by a wait/test, or freed): nothing to free")
        if self._orig is not None:
            self._orig.Free()
            return
        self._inactive = True

    def free(self) -> None:
        """``Free`` unless the request is already null (mpi4py 4 leaves those alone)."""
        if not self._is_null():
            self.Free()

    def _is_null(self) -> bool:
        return self._target()._inactive

    def __bool__(self) -> bool:  # mpi4py: a request is truthy until it becomes REQUEST_NULL
        return not self._is_null()

    def __reduce__(self) -> Any:
        """mpi4py's rule: ``REQUEST_NULL`` pickles by name (to this process's own), a null
        request of any request class to a null handle of that class; a live request
        belongs to this process and cannot be pickled."""
        if self is REQUEST_NULL:
            return (_request_null, ())
        if self._is_null():
            return (type(self), (REQUEST_NULL,))
        raise ValueError(f"cannot serialize {self!r}: a pending request belongs to this "
                         f"process")

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if isinstance(other, Request):   # two handles of one request, or both null
            return (self._target() is other._target()
                    or (self._is_null() and other._is_null()))
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None  # type: ignore[assignment]   (handles are unhashable, as mpi4py's)

    # -- handles (mpi4py's handle / fromhandle / toint / fromint / py2f / f2py) ----------
    @property
    def handle(self) -> int:
        """An integer naming this request in this process (0 for a null request); give it
        to ``fromhandle`` to get another handle on the same request."""
        target = self._target()
        if target._is_null():
            return 0
        if not target._handle:
            target._handle = register(target)
        return target._handle

    @classmethod
    def fromhandle(cls, handle: int) -> "Request":
        """A handle of this class on the request ``handle`` names (0: a null request)."""
        handle = operator.index(handle)
        if handle == 0:
            return cls()
        target = object_of(handle)
        if not isinstance(target, Request):
            raise ValueError(f"MPI.{cls.__name__}.fromhandle({handle}): no live request has "
                             f"this handle in this process")
        return cls(target)

    def __repr__(self) -> str:
        if self._orig is not None:
            return f"<{type(self).__name__} handle on {self._orig!r}>"
        if self._is_null() and self._engine is None:
            return "MPI.REQUEST_NULL" if self.description == "REQUEST_NULL" else \
                f"<{type(self).__name__} null>"
        return f"<{type(self).__name__} {describe(self)}>"

    @staticmethod
    def _active(r: Optional["Request"]) -> bool:
        """Whether ``r`` takes part in Waitany/Waitsome/...: started and not yet completed
        by a wait or test (an inactive persistent request does not, though it is not null)."""
        return r is not None and not r._target()._inactive

    # -- groups of requests ------------------------------------------------------------
    @staticmethod
    def _targets(requests: Sequence[Optional["Request"]]) -> List[Optional["Request"]]:
        """The requests the handles name (second handles resolved), in order."""
        return [r if r is None or r._orig is None else r._orig for r in requests]

    @staticmethod
    def _engine_of(requests: Sequence["Request"]) -> Optional["RequestEngine"]:
        for r in requests:
            if r is not None and r._engine is not None:
                return r._engine
        return None

    @staticmethod
    def _status_slots(statuses: Any, n: int) -> List[Optional[Status]]:
        """Where each of ``n`` results' statuses goes: a list is extended to ``n`` entries
        (as mpi4py does); a tuple or shorter sequence fills what it has."""
        if statuses is None:
            return [None] * n
        if isinstance(statuses, list):
            while len(statuses) < n:
                statuses.append(Status())
        slots = list(statuses[:n])
        return slots + [None] * (n - len(slots))

    @classmethod
    def waitall(cls, requests: Sequence["Request"], statuses: Optional[List[Status]] = None) -> List[Any]:
        reqs = cls._targets(requests)
        engine = cls._engine_of(reqs)
        if engine is not None:
            engine.wait_all([r for r in reqs if r is not None])
        results = []
        first_error = None
        slots = cls._status_slots(statuses, len(reqs))
        for r, st in zip(reqs, slots):
            if r is None:
                results.append(None)
                continue
            try:
                results.append(r._collect(st))
            except MinimpiError as exc:
                results.append(None)
                first_error = first_error or exc
        if first_error is not None:
            raise first_error
        return results

    @classmethod
    def Waitall(cls, requests: Sequence["Request"], statuses: Optional[List[Status]] = None) -> bool:
        cls.waitall(requests, statuses)
        return True

    @classmethod
    def waitany(cls, requests: Sequence["Request"], status: Optional[Status] = None) -> Tuple[int, Any]:
        reqs = cls._targets(requests)
        live = [r for r in reqs if cls._active(r)]
        if not live:
            if status is not None:
                status._assign(Status())
            return UNDEFINED, None
        engine = cls._engine_of(live)
        if engine is not None:
            engine.wait_any(live)
        for i, r in enumerate(reqs):
            if cls._active(r) and r.done:
                return i, r._collect(status)
        raise AssertionError("wait_any returned with no completed request")  # pragma: no cover

    @classmethod
    def Waitany(cls, requests: Sequence["Request"], status: Optional[Status] = None) -> int:
        return cls.waitany(requests, status)[0]

    @classmethod
    def testall(cls, requests: Sequence["Request"], statuses: Optional[List[Status]] = None) -> Tuple[bool, Optional[List[Any]]]:
        reqs = cls._targets(requests)
        engine = cls._engine_of(reqs)
        if engine is not None:
            engine.poll()
        if all(r is None or r.done for r in reqs):
            return True, cls.waitall(reqs, statuses)
        return False, None

    @classmethod
    def Testall(cls, requests: Sequence["Request"], statuses: Optional[List[Status]] = None) -> bool:
        return cls.testall(requests, statuses)[0]

    @classmethod
    def testany(cls, requests: Sequence["Request"], status: Optional[Status] = None) -> Tuple[int, bool, Any]:
        reqs = cls._targets(requests)
        engine = cls._engine_of(reqs)
        if engine is not None:
            engine.poll()
        if not any(cls._active(r) for r in reqs):
            if status is not None:
                status._assign(Status())
            return UNDEFINED, True, None   # MPI: no active request -> flag true, index UNDEFINED
        for i, r in enumerate(reqs):
            if cls._active(r) and r.done:
                return i, True, r._collect(status)
        return UNDEFINED, False, None

    @classmethod
    def Testany(cls, requests: Sequence["Request"], status: Optional[Status] = None) -> Tuple[int, bool]:
        i, flag, _ = cls.testany(requests, status)
        return i, flag

    @classmethod
    def waitsome(cls, requests: Sequence["Request"], statuses: Optional[List[Status]] = None) -> Tuple[Optional[List[int]], Optional[List[Any]]]:
        reqs = cls._targets(requests)
        live = [r for r in reqs if cls._active(r)]
        if not live:
            return None, None
        engine = cls._engine_of(live)
        if engine is not None:
            engine.wait_any(live)
        return cls._collect_some(reqs, statuses)

    @classmethod
    def _collect_some(cls, requests: Sequence["Request"], statuses: Optional[List[Status]]
                      ) -> Tuple[List[int], List[Any]]:
        idx = [i for i, r in enumerate(requests) if cls._active(r) and r.done]
        slots = cls._status_slots(statuses, len(idx))
        results = [requests[i]._collect(st) for i, st in zip(idx, slots)]
        return idx, results

    @classmethod
    def Waitsome(cls, requests: Sequence["Request"], statuses: Optional[List[Status]] = None) -> Optional[List[int]]:
        return cls.waitsome(requests, statuses)[0]

    @classmethod
    def testsome(cls, requests: Sequence["Request"], statuses: Optional[List[Status]] = None) -> Tuple[Optional[List[int]], Optional[List[Any]]]:
        reqs = cls._targets(requests)
        engine = cls._engine_of(reqs)
        if engine is not None:
            engine.poll()
        if not any(cls._active(r) for r in reqs):
            return None, None
        return cls._collect_some(reqs, statuses)

    @classmethod
    def Testsome(cls, requests: Sequence["Request"], statuses: Optional[List[Status]] = None) -> Optional[List[int]]:
        return cls.testsome(requests, statuses)[0]

    # -- status without completing (MPI 4.1 MPI_Request_get_status_any/all/some) ---------
    @classmethod
    def Get_status_any(cls, requests: Sequence["Request"], status: Optional[Status] = None
                       ) -> Tuple[int, bool]:
        """``(index, flag)`` of a complete request, which stays active; ``(UNDEFINED, True)``
        when no request is active."""
        reqs = cls._targets(requests)
        engine = cls._engine_of(reqs)
        if engine is not None:
            engine.poll()
        if not any(cls._active(r) for r in reqs):
            if status is not None:
                status._assign(Status())
            return UNDEFINED, True
        for i, r in enumerate(reqs):
            if cls._active(r) and r.done:
                if status is not None:
                    status._assign(r.status)
                return i, True
        return UNDEFINED, False

    get_status_any = Get_status_any

    @classmethod
    def Get_status_all(cls, requests: Sequence["Request"], statuses: Optional[List[Status]] = None
                       ) -> bool:
        """Whether every request is complete (they stay active); fills ``statuses`` if so
        (an empty status for a null request)."""
        reqs = cls._targets(requests)
        engine = cls._engine_of(reqs)
        if engine is not None:
            engine.poll()
        if not all(r is None or not cls._active(r) or r.done for r in reqs):
            return False
        for r, st in zip(reqs, cls._status_slots(statuses, len(reqs))):
            if st is not None:
                st._assign(r.status if cls._active(r) else Status())
        return True

    get_status_all = Get_status_all

    @classmethod
    def Get_status_some(cls, requests: Sequence["Request"],
                        statuses: Optional[List[Status]] = None) -> Optional[List[int]]:
        """Indices of the complete active requests (they stay active); None when no request
        is active."""
        reqs = cls._targets(requests)
        engine = cls._engine_of(reqs)
        if engine is not None:
            engine.poll()
        if not any(cls._active(r) for r in reqs):
            return None
        idx = [i for i, r in enumerate(reqs) if cls._active(r) and r.done]
        for i, st in zip(idx, cls._status_slots(statuses, len(idx))):
            if st is not None:
                st._assign(reqs[i].status)
        return idx

    get_status_some = Get_status_some


#: ``MPI.REQUEST_NULL``: the null request; every completed (non-persistent) request equals it.
REQUEST_NULL = Request()


def _request_null() -> Request:
    return REQUEST_NULL


class CompletedRequest(Request):
    """A request that is complete from the start (sends to PROC_NULL, receives from it)."""

    __slots__ = ()

    def __init__(self, status: Optional[Status] = None, result: Any = None) -> None:
        self._setup(None, "completed", status)
        self.done = True
        self._pending = 0
        self._result = result


class CombinedRequest(Request):
    """One request over several (``Isendrecv``: a receive and a send; ``Iflush_buffer``:
    pending buffered sends): complete when all are; its status is the first one's, its
    error the first error."""

    __slots__ = ("_parts",)

    def __init__(self, parts: Sequence[Request], description: str = "combined") -> None:
        self._setup(next((r._engine for r in parts if r._engine is not None), None),
                    description)
        self._parts = tuple(parts)
        self._pending = 0

    @property
    def done(self) -> bool:
        return all(r.done for r in self._parts)

    @done.setter
    def done(self, value: bool) -> None:   # set only by _setup
        pass

    @property
    def status(self) -> Status:
        return self._parts[0].status if self._parts else Status()

    @status.setter
    def status(self, value: Status) -> None:   # set only by _setup
        pass

    def _collect(self, status: Optional[Status]) -> Any:
        self._inactive = True
        first: Optional[BaseException] = None
        for i, r in enumerate(self._parts):
            try:
                r._collect(status if i == 0 else None)
            except MinimpiError as exc:
                first = first or exc
        if first is not None:
            raise first
        if self._finish is not None:       # (set_finish: one-sided results, for one)
            finish, self._finish = self._finish, None
            self._result = finish()
        return self._result

    def Cancel(self) -> None:
        for r in self._parts:
            r.Cancel()

    cancel = Cancel

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.description}: {list(self._parts)!r}>"


class PairRequest(CombinedRequest):
    """``Isendrecv``'s request: complete once its receive and its send are; the status is
    the receive's."""

    __slots__ = ()

    def __init__(self, recv: Request, send: Request, description: str = "sendrecv") -> None:
        super().__init__((recv, send), description)


class TransportRequest(Request):
    """A request the transport completes itself (an RDMA write or read): it calls
    :meth:`transport_done` once the operation is over."""

    __slots__ = ()

    def __init__(self, engine: "RequestEngine", description: Any) -> None:
        self._setup(engine, description)

    def transport_done(self, failure: Optional[str] = None) -> None:
        """The operation completed, or failed with ``failure`` (the transport's words)."""
        self._sent(failure)


class SendRequest(Request):
    __slots__ = ("peer", "msg_id", "bulk")

    def __init__(self, engine: "RequestEngine", description: str, peer: int) -> None:
        self._setup(engine, description)
        self.peer = peer
        self.msg_id = 0
        #: a rendezvous: the receiver pulls the data (a wait on it is a wait on a large
        #: transfer, from the offer until the data is read)
        self.bulk = False


class RecvRequest(Request):
    """A posted receive: where its data goes and what it matches."""

    __slots__ = ("context", "source", "tag", "target", "is_object", "buffer", "truncated",
                 "peer", "matched")

    def __init__(self, engine: "RequestEngine", description: str, context: int, source: int, tag: int,
                 target: Optional[memoryview], is_object: bool) -> None:
        self._setup(engine, description, Status())
        self.context = context
        self.source = source
        self.tag = tag
        self.target = target
        self.is_object = is_object
        self.buffer: Optional[bytearray] = None   # (numpy uint8 from 64 KiB on)
        self.truncated = False
        self.peer = -1
        self.matched = False


# -- what the layers above may do to a request (beyond the mpi4py API) -----------------------
def fail(req: Request, error: BaseException) -> None:
    """Complete ``req`` with ``error`` (its wait raises it), unless it already has one."""
    req._fail(error)


def failed_request(error: BaseException) -> Request:
    """A request that is complete from the start and raises ``error`` when waited on."""
    req = CompletedRequest()
    req._fail(error)
    return req


def set_finish(req: Request, finish: Optional[Callable[[], Any]]) -> None:
    """Run ``finish()`` once, when the waiter completes ``req`` (not inside progress): its
    result becomes the request's result (a received object), and a :class:`MinimpiError`
    it raises becomes the request's error."""
    req._finish = finish


def collect(req: Request, status: Optional[Status] = None) -> Any:
    """Complete ``req``, which is done (``req.done``): fill ``status``, raise its error or
    return its result, as its wait would - without the API front (a request of another
    layer collecting the operations it is made of)."""
    return req._collect(status)


def has_finish(req: Request) -> bool:
    """Whether ``req`` still has finishing work (see :func:`set_finish`) to run."""
    return req._finish is not None


def engine_of(req: Request) -> Optional[RequestEngine]:
    """The engine that progresses ``req`` (None for a null or completed request)."""
    return req._target()._engine


def assign_status(status: Status, source: Status) -> None:
    """Copy every field of ``source`` into ``status`` (filling a caller's status)."""
    status._assign(source)


def fill_status(status: Status, source: int, tag: int, nbytes: int) -> None:
    """Fill a caller's ``status`` as a receive that got ``nbytes`` from ``source`` with
    ``tag`` leaves it (no error, not cancelled)."""
    status.source, status.tag, status.nbytes = source, tag, nbytes
    status.error, status.cancelled = SUCCESS, False


def null_status(status: Optional[Status]) -> None:
    """Fill ``status`` as a receive or probe from ``MPI.PROC_NULL`` leaves it."""
    if status is not None:
        status._assign(Status(PROC_NULL, ANY_TAG, 0))
