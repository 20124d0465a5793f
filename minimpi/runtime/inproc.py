"""Run an SPMD function on N ranks as threads of this process (tests, notebooks, drawing).

    >>> from minimpi.runtime.inproc import run_threads
    >>> run_threads(4, lambda comm: comm.allreduce(comm.rank))
    [6, 6, 6, 6]

Each rank gets its own engine and communicator over the in-process transport; the same
matching and collective code runs as in a real job. Every wait is bounded: a rank that is
still blocked after ``timeout`` seconds fails the run with a message saying what each rank
was blocked on.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable, List, Optional, Sequence

from ..bus import Bus, Subscriber
from ..comm import ulfm
from ..comm.communicator import Intracomm
from ..comm.ledger import Ledger
from ..errors import MPITimeoutError
from ..p2p.engine import DEFAULT_EAGER_LIMIT, Engine
from ..p2p.request import describe
from ..transports.inproc import FrameRecorder, InprocFabric
from ..transports.router import RouterTransport
from ..transports.shm import ShmTransport
from ..transports.tcp import TcpTransport

#: the transports run_threads can connect its ranks with
TRANSPORTS = ("inproc", "tcp", "shm", "routed")


class RankFailed(Exception):
    """A rank raised; carries the rank and the original exception as ``__cause__``."""

    def __init__(self, rank: int, exc: BaseException) -> None:
        super().__init__(f"rank {rank} raised {type(exc).__name__}: {exc}")
        self.rank = rank
        self.exc = exc


def _transports(kind: str, size: int, recorder: Optional[FrameRecorder],
                hosts: Sequence[str]) -> List[Any]:
    if kind == "inproc":
        fabric = InprocFabric(size, recorder)
        return [fabric.transport(r) for r in range(size)]
    # The real transports between threads: what the p2p conformance suite runs over.
    secret, job = os.urandom(32), f"threads{os.urandom(6).hex()}"
    if kind == "tcp":   # loopback sockets
        ts = [TcpTransport(r, size, secret) for r in range(size)]
    elif kind == "shm":   # shared-memory rings (segments named after a fresh job id)
        ts = [ShmTransport(r, size, job) for r in range(size)]
    elif kind == "routed":   # shm between ranks of one (pretend) host, TCP between hosts
        ts = [RouterTransport(r, size, [ShmTransport(r, size, job), TcpTransport(r, size, secret)],
                              host=hosts[r]) for r in range(size)]
    else:
        raise ValueError(f"run_threads: unknown transport {kind!r} ({', '.join(TRANSPORTS)})")
    addresses = [t.listen() for t in ts]
    for t in ts:
        t.set_peers(addresses)
    return ts


class _BlockedNote(Subscriber):
    """Keeps ``notes[rank]`` saying what the rank's current long wait waits for (for the
    message of a run that timed out)."""

    def __init__(self, notes: List[str], rank: int) -> None:
        self.notes = notes
        self.rank = rank

    def blocked(self, waiting_on: List[Any]) -> None:
        self.notes[self.rank] = ", ".join(describe(r) for r in waiting_on)

    def unblocked(self) -> None:
        self.notes[self.rank] = ""


def run_threads(size: int, fn: Callable[..., Any], *args: Any, timeout: float = 30.0,
                eager_limit: int = DEFAULT_EAGER_LIMIT, recorder: Optional[FrameRecorder] = None,
                transport: str = "inproc", hosts: Optional[Sequence[Any]] = None,
                fault_tolerant: bool = False, ledger: bool = False, **kwargs: Any) -> List[Any]:
    """Call ``fn(comm, *args, **kwargs)`` on ``size`` ranks; return the results in rank order.

    ``transport``: ``"inproc"`` (default), ``"tcp"`` (loopback sockets between the threads),
    ``"shm"`` (shared-memory rings) or ``"routed"`` (a router per rank: shm between ranks of
    one host, TCP between hosts; hosts default to two, even and odd ranks) - one conformance
    suite runs over all. ``hosts``: a host label per rank, to pretend the ranks are spread
    over machines (topology-aware collectives, and the router's choice of wire; default: all
    on one). ``fault_tolerant``: as ``minimpi run --fault-tolerant`` (ULFM: a rank whose
    function raises is a failed process the others are told of, and the run goes on).
    ``ledger``: each rank keeps the finalize ledger of a real job (where its messages came
    from: :mod:`minimpi.runtime.leftovers`). The first exception (lowest rank) is re-raised
    as :class:`RankFailed` from the original.
    """
    if hosts is not None and len(hosts) != size:
        raise ValueError(f"run_threads: hosts has {len(hosts)} labels for {size} ranks")
    if hosts is None and transport == "routed":
        hosts = [f"host{r % 2}" for r in range(size)]
    labels = [str(h) for h in hosts] if hosts is not None else ["host"] * size
    transports = _transports(transport, size, recorder, labels)
    engines: List[Engine] = []

    def abort_all(code: int, reason: str) -> None:   # Comm.Abort ends every rank's waits
        for engine in engines:
            engine.abort(reason)

    engines += [Engine(r, size, transports[r], eager_limit, bus=Bus(),
                       fault_tolerant=fault_tolerant, job_abort=abort_all,
                       ledger=Ledger() if ledger else None, block_report_after=0.5)
                for r in range(size)]
    for engine in engines:
        if hosts is not None:   # the collectives see the hosts the router routes by
            engine.set_hosts(labels)
        ulfm.install(engine)
    results: List[Any] = [None] * size
    errors: List[Optional[BaseException]] = [None] * size
    blocked: List[str] = [""] * size

    def body(rank: int) -> None:
        engine = engines[rank]
        engine.bus.subscribe(_BlockedNote(blocked, rank))
        comm = Intracomm(engine, range(size), rank, 0, "COMM_WORLD")
        try:
            results[rank] = fn(comm, *args, **kwargs)
            engine.flush(timeout)  # as at a process's exit: deliver what is still queued
        except BaseException as exc:  # report every failure, including assertion errors
            errors[rank] = exc
            if fault_tolerant:   # as the launcher does: the survivors are told
                for other in engines:
                    if other is not engine:
                        other.notify_failed(rank, f"rank {rank} raised {type(exc).__name__}")
        finally:
            if transport == "inproc":
                transports[rank].close()

    threads = [threading.Thread(target=body, args=(r,), name=f"minimpi-rank-{r}", daemon=True)
               for r in range(size)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout   # one limit for the whole run, not one per rank
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    stuck = [r for r, t in enumerate(threads) if t.is_alive()]
    if stuck:
        # (what they wait for and who failed, read before the abort ends their waits)
        detail = "; ".join(f"rank {r}: {blocked[r] or 'running (not blocked in minimpi)'}" for r in stuck)
        # a rank that failed is usually why the others wait: say so
        detail += "".join(f"; rank {r} failed first: {type(e).__name__}: {e}"
                          for r, e in enumerate(errors) if e is not None)
        for engine in engines:
            engine.abort("in-process run timed out")
        for t in transports:
            if hasattr(t, "wake"):
                t.wake()
        # aborted ranks leave their waits within a poll interval; then their transports
        # (sockets, shared-memory segments) can be closed
        end = time.monotonic() + 2.0
        for r in stuck:
            threads[r].join(max(0.0, end - time.monotonic()))
        if transport != "inproc" and not any(t.is_alive() for t in threads):
            for t in transports:
                t.close()
        raise MPITimeoutError(f"run_threads: {len(stuck)} of {size} ranks did not finish within "
                              f"{timeout:g} s - {detail}")
    if transport != "inproc":
        for t in transports:
            t.close()
    for rank, exc in enumerate(errors):
        if exc is not None:
            raise RankFailed(rank, exc) from exc
    return results
