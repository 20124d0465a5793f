"""Requests and statuses: the handles of point-to-point operations (mpi4py-shaped)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence, Tuple

from ..constants import ANY_SOURCE, ANY_TAG, PROC_NULL, UNDEFINED
from ..errors import SUCCESS, MinimpiError, PeerLostError

if TYPE_CHECKING:  # pragma: no cover
    from .engine import Engine


def describe(req: "Request") -> str:
    """Human-readable text of what a request is, e.g. ``recv(source=1, tag=7) on COMM_WORLD``."""
    d = req.description
    if isinstance(d, tuple):
        call, peer_name, peer, tag, comm_name = d
        if "[" in call:  # a collective's message (e.g. "Bcast[binomial]"): its tag is internal
            return f"{call}({peer_name}={peer}) on {comm_name}"
        return f"{call}({peer_name}={peer}, tag={tag}) on {comm_name}"
    return str(d)


def _base_type(datatype: Any) -> Any:
    """The predefined datatype a (contiguous derived) datatype is made of; itself otherwise."""
    return getattr(datatype, "base", datatype)


class Status:
    """What a completed receive or a probe found: source, tag, size (``MPI.Status``)."""

    __slots__ = ("source", "tag", "error", "nbytes", "cancelled")

    def __init__(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, nbytes: int = 0,
                 error: int = SUCCESS) -> None:
        self.source = source
        self.tag = tag
        self.nbytes = nbytes
        self.error = error
        self.cancelled = False

    def _assign(self, other: "Status") -> None:
        self.source, self.tag, self.nbytes = other.source, other.tag, other.nbytes
        self.error, self.cancelled = other.error, other.cancelled

    @property
    def count(self) -> int:
        """Size of the message in bytes."""
        return self.nbytes

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
        """Number of basic elements received: for a contiguous derived type, items of its
        base type (``CONTIGUOUS(3, INT)`` x 2 is 6 elements), counting a partial item too."""
        return self.Get_count(_base_type(datatype))

    def Is_cancelled(self) -> bool:
        return self.cancelled

    def Set_source(self, source: int) -> None:
        self.source = source

    def Set_tag(self, tag: int) -> None:
        self.tag = tag

    def Set_error(self, error: int) -> None:
        self.error = error

    def Set_elements(self, datatype: Any, count: int) -> None:
        """Make the status report ``count`` basic elements of ``datatype``."""
        base = _base_type(datatype)
        self.nbytes = count * (1 if base is None else int(base.Get_size()))

    def __repr__(self) -> str:
        return f"Status(source={self.source}, tag={self.tag}, count={self.nbytes} bytes)"


#: the status of requests that carry no message information (sends, collectives): one shared
#: object that nothing changes (saves an allocation per send); each receive has its own
_NO_MESSAGE = Status()


class Request:
    """A pending operation; complete it with ``wait``/``Wait`` or poll it with ``test``/``Test``.

    Lowercase methods return the received Python object (mpi4py's ``req.wait()``),
    Capitalized ones return ``True``/flags as mpi4py's ``Wait``/``Test`` do.
    """

    __slots__ = ("_engine", "done", "error", "status", "_finish", "_result", "description",
                 "_pending", "_inactive", "__weakref__")

    def __init__(self, engine: Optional["Engine"], description: str = "",
                 status: Optional[Status] = None) -> None:
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
    def wait(self, status: Optional[Status] = None) -> Any:
        """Block until complete; return the received object (None for sends and buffers)."""
        if not self.done:
            self._engine.wait_for(self)
        return self._collect(status)

    def test(self, status: Optional[Status] = None) -> Tuple[bool, Any]:
        """``(done, object)`` after one round of progress, without blocking."""
        if not self.done and self._engine is not None:
            self._engine.poll()
        if not self.done:
            return False, None
        return True, self._collect(status)

    def Wait(self, status: Optional[Status] = None) -> bool:
        """Block until complete (raising its error, if any); returns True."""
        self.wait(status)
        return True

    def Test(self, status: Optional[Status] = None) -> bool:
        """Whether the request completed (one round of progress, no blocking)."""
        return self.test(status)[0]

    def Get_status(self, status: Optional[Status] = None) -> bool:
        """Whether the request is complete, filling ``status``; unlike ``Test`` it stays active."""
        if not self.done and self._engine is not None:
            self._engine.poll()
        if self.done and status is not None:
            status._assign(self.status)
        return self.done

    def Cancel(self) -> None:
        """Cancel a receive that has not matched yet (``Status.Is_cancelled``); no effect otherwise."""
        if not self.done and self._engine is not None:
            self._engine.cancel(self)

    def Free(self) -> None:
        """Release the handle; the operation still completes in the background."""
        self._inactive = True

    def __bool__(self) -> bool:  # mpi4py: a request is truthy until it becomes REQUEST_NULL
        return not self._inactive

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if isinstance(other, Request):  # every completed/freed request equals REQUEST_NULL
            return self._inactive and other._inactive and type(self)._null_like and type(other)._null_like
        return NotImplemented

    __hash__ = object.__hash__
    _null_like = True   # persistent requests stay non-null after completion (Prequest)

    @staticmethod
    def _active(r: Optional["Request"]) -> bool:
        return r is not None and not r._inactive

    # -- groups of requests ------------------------------------------------------------
    @staticmethod
    def _engine_of(requests: Sequence["Request"]) -> Optional["Engine"]:
        for r in requests:
            if r is not None and r._engine is not None:
                return r._engine
        return None

    @classmethod
    def waitall(cls, requests: Sequence["Request"], statuses: Optional[List[Status]] = None) -> List[Any]:
        reqs = [r for r in requests]
        engine = cls._engine_of(reqs)
        if engine is not None:
            engine.wait_all([r for r in reqs if r is not None])
        results = []
        first_error = None
        if statuses is not None:   # mpi4py fills (and extends) a list of statuses
            while len(statuses) < len(reqs):
                statuses.append(Status())
        for i, r in enumerate(reqs):
            st = statuses[i] if statuses is not None else None
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
        live = [r for r in requests if cls._active(r)]
        if not live:
            if status is not None:
                status._assign(Status())
            return UNDEFINED, None
        engine = cls._engine_of(live)
        if engine is not None:
            engine.wait_any(live)
        for i, r in enumerate(requests):
            if cls._active(r) and r.done:
                return i, r._collect(status)
        raise AssertionError("wait_any returned with no completed request")  # pragma: no cover

    @classmethod
    def Waitany(cls, requests: Sequence["Request"], status: Optional[Status] = None) -> int:
        return cls.waitany(requests, status)[0]

    @classmethod
    def testall(cls, requests: Sequence["Request"], statuses: Optional[List[Status]] = None) -> Tuple[bool, Optional[List[Any]]]:
        engine = cls._engine_of(requests)
        if engine is not None:
            engine.poll()
        if all(r is None or r.done for r in requests):
            return True, cls.waitall(requests, statuses)
        return False, None

    @classmethod
    def Testall(cls, requests: Sequence["Request"], statuses: Optional[List[Status]] = None) -> bool:
        return cls.testall(requests, statuses)[0]

    @classmethod
    def testany(cls, requests: Sequence["Request"], status: Optional[Status] = None) -> Tuple[int, bool, Any]:
        engine = cls._engine_of(requests)
        if engine is not None:
            engine.poll()
        if not any(cls._active(r) for r in requests):
            return UNDEFINED, True, None   # MPI: no active request -> flag true, index UNDEFINED
        for i, r in enumerate(requests):
            if cls._active(r) and r.done:
                return i, True, r._collect(status)
        return UNDEFINED, False, None

    @classmethod
    def Testany(cls, requests: Sequence["Request"], status: Optional[Status] = None) -> Tuple[int, bool]:
        i, flag, _ = cls.testany(requests, status)
        return i, flag

    @classmethod
    def waitsome(cls, requests: Sequence["Request"], statuses: Optional[List[Status]] = None) -> Tuple[Optional[List[int]], Optional[List[Any]]]:
        live = [r for r in requests if cls._active(r)]
        if not live:
            return None, None
        engine = cls._engine_of(live)
        if engine is not None:
            engine.wait_any(live)
        return cls._collect_some(requests, statuses)

    @classmethod
    def _collect_some(cls, requests: Sequence["Request"], statuses: Optional[List[Status]]
                      ) -> Tuple[List[int], List[Any]]:
        idx = [i for i, r in enumerate(requests) if cls._active(r) and r.done]
        results = []
        for k, i in enumerate(idx):
            st = None
            if statuses is not None:
                while len(statuses) <= k:
                    statuses.append(Status())
                st = statuses[k]
            results.append(requests[i]._collect(st))
        return idx, results

    @classmethod
    def Waitsome(cls, requests: Sequence["Request"], statuses: Optional[List[Status]] = None) -> Optional[List[int]]:
        return cls.waitsome(requests, statuses)[0]

    @classmethod
    def testsome(cls, requests: Sequence["Request"], statuses: Optional[List[Status]] = None) -> Tuple[Optional[List[int]], Optional[List[Any]]]:
        engine = cls._engine_of(requests)
        if engine is not None:
            engine.poll()
        if not any(cls._active(r) for r in requests):
            return None, None
        return cls._collect_some(requests, statuses)

    @classmethod
    def Testsome(cls, requests: Sequence["Request"], statuses: Optional[List[Status]] = None) -> Optional[List[int]]:
        return cls.testsome(requests, statuses)[0]


class CompletedRequest(Request):
    """A request that is complete from the start (sends to PROC_NULL, receives from it)."""

    __slots__ = ()

    def __init__(self, status: Optional[Status] = None, result: Any = None) -> None:
        super().__init__(None, "completed", status)
        self.done = True
        self._pending = 0
        self._result = result


class SendRequest(Request):
    __slots__ = ("peer", "msg_id")

    def __init__(self, engine: "Engine", description: str, peer: int) -> None:
        super().__init__(engine, description)
        self.peer = peer
        self.msg_id = 0


class RecvRequest(Request):
    """A posted receive: where its data goes and what it matches."""

    __slots__ = ("context", "source", "tag", "target", "is_object", "buffer", "truncated",
                 "peer", "matched")

    def __init__(self, engine: "Engine", description: str, context: int, source: int, tag: int,
                 target: Optional[memoryview], is_object: bool) -> None:
        super().__init__(engine, description, Status())
        self.context = context
        self.source = source
        self.tag = tag
        self.target = target
        self.is_object = is_object
        self.buffer: Optional[bytearray] = None   # (numpy uint8 from 64 KiB on)
        self.truncated = False
        self.peer = -1
        self.matched = False


def null_status(status: Optional[Status]) -> None:
    """Fill ``status`` as a receive or probe from ``MPI.PROC_NULL`` leaves it."""
    if status is not None:
        status._assign(Status(PROC_NULL, ANY_TAG, 0))
