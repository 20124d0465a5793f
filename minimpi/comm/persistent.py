"""Persistent requests (``Send_init``/``Recv_init``/... -> ``MPI.Prequest``).

A :class:`Prequest` remembers how to start one operation. ``Start()`` begins it (a fresh
engine request underneath); waiting or testing completes it and leaves the prequest
*inactive* but still usable (truthy, not ``REQUEST_NULL``) until ``Free()``, after which it
equals ``REQUEST_NULL``. The buffer is read (sends) or written (receives) anew at every
start, as in MPI. ``MPI.Prequest()`` is a null persistent request; ``MPI.Prequest(p)`` is
``p`` itself (another handle on the same request, as in mpi4py).
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from ..errors import RequestError
from ..p2p.request import Request, Status, assign_status


class Prequest(Request):
    """A persistent communication request (``MPI.Prequest``)."""

    __slots__ = ("_starter", "_op", "_freed_p")

    def __init__(self, request: Optional[Request] = None) -> None:
        if request is self:                 # Prequest(p): p itself (Request.__new__)
            return
        if isinstance(request, Prequest) and not request._is_null():
            # a handle of another class (a user subclass: MyPrequest(p)) on the same
            # persistent request: Start, Wait, Test, Cancel and Free act on that one
            target = request._request_named()
            self._init_persistent(None, None, target.description)
            self._orig = target
            return
        if request is not None and not (isinstance(request, Request) and request._is_null()):
            raise TypeError(f"MPI.{type(self).__name__}({request!r:.60}): expected a "
                            f"persistent request (from Send_init, Recv_init...) or nothing")
        self._init_persistent(None, None, "null persistent request")

    def _request_named(self) -> "Prequest":
        """The persistent request this handle names (itself, unless a second handle)."""
        return self._target()

    @classmethod
    def _create(cls, starter: Callable[[], Request], engine: Any,
                description: Any = "persistent request") -> "Prequest":
        """A persistent request that runs ``starter()`` at every ``Start``."""
        preq = cls.__new__(cls)
        preq._init_persistent(starter, engine, description)
        return preq

    def _init_persistent(self, starter: Optional[Callable[[], Request]], engine: Any,
                         description: Any) -> None:
        self._engine = engine
        self._finish = None
        self._result = None
        self.description = description
        self._pending = 0
        self._orig = None
        self._handle = 0
        self._starter = starter
        self._op: Optional[Request] = None
        self._freed_p = starter is None

    # The state of the operation now running (or of none: an inactive request is complete).
    @property
    def done(self) -> bool:
        if self._orig is not None:
            return self._orig.done
        return self._op is None or self._op.done

    @done.setter
    def done(self, value: bool) -> None:  # only the base class' setup would set it
        pass

    @property
    def error(self) -> Optional[BaseException]:
        if self._orig is not None:
            return self._orig.error
        return None if self._op is None else self._op.error

    @error.setter
    def error(self, value: Any) -> None:
        pass

    @property
    def status(self) -> Status:
        if self._orig is not None:
            return self._orig.status
        return Status() if self._op is None else self._op.status

    @status.setter
    def status(self, value: Any) -> None:
        pass

    @property
    def _inactive(self) -> bool:
        return self._target()._op is None

    @_inactive.setter
    def _inactive(self, value: bool) -> None:
        pass

    def _is_null(self) -> bool:
        return self._target()._freed_p

    # -- mpi4py API ------------------------------------------------------------------------
    def Start(self) -> None:
        """Begin the operation (again); complete it with Wait/Test before the next Start."""
        if self._orig is not None:
            return self._orig.Start()
        if self._freed_p:
            raise RequestError(f"Prequest.Start: {self.description} was freed (or is the "
                               f"null persistent request); create a new one with Send_init, "
                               f"Recv_init...")
        if self._op is not None:
            raise RequestError(f"Prequest.Start: {self.description} is still active; complete "
                               f"it (Wait/Test) before starting it again")
        self._op = self._starter()

    start = Start

    @classmethod
    def Startall(cls, requests: Sequence["Prequest"]) -> None:
        for r in requests:
            r.Start()

    startall = Startall

    def _collect(self, status: Optional[Status]) -> Any:
        if self._orig is not None:
            return self._orig._collect(status)
        op, self._op = self._op, None
        if op is None:   # inactive: complete at once with an empty status
            if status is not None:
                assign_status(status, Status())
            return None
        return op._collect(status)

    def _wait(self, status: Optional[Status] = None) -> Any:
        if self._orig is not None:
            return self._orig._wait(status)
        if self._op is not None and not self._op.done:
            self._engine.wait_for(self._op)
        return self._collect(status)

    def _test(self, status: Optional[Status] = None):
        if self._orig is not None:
            return self._orig._test(status)
        if self._op is not None and not self._op.done:
            self._engine.poll()
            if not self._op.done:
                return False, None
        return True, self._collect(status)

    def Get_status(self, status: Optional[Status] = None) -> bool:
        if self._orig is not None:
            return self._orig.Get_status(status)
        if self._op is None:
            if status is not None:
                assign_status(status, Status())
            return True
        return self._op.Get_status(status)

    get_status = Get_status

    def Cancel(self) -> None:
        if self._orig is not None:
            return self._orig.Cancel()
        if self._op is not None:
            self._op.Cancel()

    cancel = Cancel

    def Free(self) -> None:
        """Release the request: it becomes equal to ``MPI.REQUEST_NULL`` (falsy). An
        operation still running completes in the background."""
        self._target()._freed_p = True

    free = Free

    def __repr__(self) -> str:
        if self._orig is not None:
            return f"<{type(self).__name__} handle on {self._orig!r}>"
        state = "freed" if self._freed_p else ("active" if self._op is not None else "inactive")
        return f"<Prequest {self.description} ({state})>"

    # MPI-4 partitioned communication: the requests of Psend_init/Precv_init
    # (minimpi.comm.partitioned) have these; any other persistent request refuses them.
    def _not_partitioned(self, call: str) -> RequestError:
        return RequestError(f"Prequest.{call}: {self.description} is not a partitioned "
                            f"request (make one with Comm.Psend_init/Precv_init)")

    def Pready(self, partition: int) -> None:
        raise self._not_partitioned("Pready")

    def Pready_range(self, partition_low: int, partition_high: int) -> None:
        raise self._not_partitioned("Pready_range")

    def Pready_list(self, partitions: Sequence[int]) -> None:
        raise self._not_partitioned("Pready_list")

    def Parrived(self, partition: int) -> bool:
        raise self._not_partitioned("Parrived")
