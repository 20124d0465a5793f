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
from ..p2p.completion import Completion, LayeredRequest, held
from ..p2p.request import Request, Status, assign_status, collect


class Persistent(Completion):
    """The completion of a persistent request: the state of the operation its last
    ``Start`` began (``op``), or of none - an inactive request is complete, with an empty
    status."""

    kind = "persistent request (from Send_init, Recv_init...)"

    __slots__ = ("starter", "op", "freed")

    def __init__(self, starter: Optional[Callable[[], Request]], engine: Any) -> None:
        super().__init__(engine)
        #: begins the operation (a fresh request) at every ``Start``
        self.starter = starter
        #: the operation now running (None: inactive)
        self.op: Optional[Request] = None
        #: freed (or the null persistent request): equal to ``REQUEST_NULL``
        self.freed = starter is None

    @classmethod
    def null(cls) -> "Persistent":
        return cls(None, None)

    @property
    def done(self) -> bool:
        return self.op is None or self.op.done

    @property
    def error(self) -> Optional[BaseException]:
        return None if self.op is None else self.op.error

    @property
    def status(self) -> Status:
        return Status() if self.op is None else self.op.status

    @property
    def active(self) -> bool:
        return self.op is not None

    def wait(self, request: Request) -> None:
        op = self.op
        if op is not None and not op.done:
            self.engine.wait_for(op)

    def progress(self) -> None:
        op = self.op
        if op is not None and not op.done:
            self.engine.poll()

    def collect(self, status: Optional[Status]) -> Any:
        op, self.op = self.op, None
        if op is None:   # inactive: complete at once with an empty status
            if status is not None:
                assign_status(status, Status())
            return None
        return collect(op, status)      # (done already)

    def cancel(self) -> None:
        if self.op is not None:
            self.op.Cancel()

    def free(self, request: Request) -> None:
        self.freed = True           # (an operation still running completes anyway)

    def is_null(self) -> bool:
        return self.freed


class Prequest(LayeredRequest):
    """A persistent communication request (``MPI.Prequest``)."""

    __slots__ = ()

    def __init__(self, request: Optional[Request] = None) -> None:
        # Prequest(p) of another class than p's (a user subclass: MyPrequest(p)) is a
        # second handle on the same persistent request: Start, Wait, Test, Cancel and Free
        # act on that one; a null or no request gives the null persistent request
        super().__init__(request, completion_type=Persistent)

    @classmethod
    def _create(cls, starter: Callable[[], Request], engine: Any,
                description: Any = "persistent request") -> "Prequest":
        """A persistent request that runs ``starter()`` at every ``Start``."""
        return held(cls, Persistent(starter, engine), description)

    # -- mpi4py API ------------------------------------------------------------------------
    def Start(self) -> None:
        """Begin the operation (again); complete it with Wait/Test before the next Start."""
        how = self.completion
        if how.freed:
            raise RequestError(f"Prequest.Start: {self.description} was freed (or is the "
                               f"null persistent request); create a new one with Send_init, "
                               f"Recv_init...")
        if how.op is not None:
            raise RequestError(f"Prequest.Start: {self.description} is still active; complete "
                               f"it (Wait/Test) before starting it again")
        how.op = how.starter()

    start = Start

    @classmethod
    def Startall(cls, requests: Sequence["Prequest"]) -> None:
        for r in requests:
            r.Start()

    startall = Startall

    def Free(self) -> None:
        """Release the request: it becomes equal to ``MPI.REQUEST_NULL`` (falsy). An
        operation still running completes in the background."""
        self.completion.free(self)

    free = Free

    def __repr__(self) -> str:
        how = self.completion
        state = "freed" if how.freed else ("active" if how.op is not None else "inactive")
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
