"""Process-wide runtime: bootstrap, the world communicator, abort and finalize.

``world()`` initializes on first use (importing ``minimpi.MPI`` does it, as importing
``mpi4py.MPI`` does): it bootstraps (launcher environment, or a singleton world of size 1
for a plain ``python script.py``), opens the data-plane listener, exchanges addresses
through the coordinator and builds ``COMM_WORLD`` and ``COMM_SELF``. At exit it delivers
queued sends and tells the launcher the rank finished cleanly.
"""
from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import Any, Optional

from .. import transports
from ..bus import Bus
from ..comm import ulfm
from ..comm.communicator import Intracomm, set_predefined
from ..comm.ledger import Ledger
from ..dynamic import join_parent, set_launcher_link
from ..errors import CollectiveMismatchError, JobAbortedError, MinimpiError
from ..p2p.engine import Engine, eager_limit_from_env
from ..p2p.progress import ProgressPolicy
from . import failures
from .bootstrap import BootInfo, bootstrap, host_identity
from .diagnose import install as install_diagnostics
from .diagnose import report_after
from .launcher_link import RuntimeLauncherLink, universe_size_of
from .leftovers import finalize_check, finalize_wait

_lock = threading.RLock()
_state: Optional["_Runtime"] = None
_finalized = False


class _Runtime:
    def __init__(self, info: BootInfo) -> None:
        self.info = info
        transport = None
        if info.size > 1:
            # a router: shared memory to ranks on this host, TCP to the others (by default);
            # "this host" is the identity the rendezvous gives the collectives too
            transport = transports.create(info.env.get("MINIMPI_TRANSPORT", transports.DEFAULT),
                                          info, host_identity())
        #: the world's instrumentation bus: tracing, diagnosis and the dashboard subscribe
        self.bus = Bus()
        # fault tolerance (--fault-tolerant): a failed rank is a failed process the job
        # survives; every process hears revoke notices (minimpi.comm.ulfm). The ledger: where
        # messages came from, for the check at finalize
        self.engine = Engine(info.rank, info.size, transport, eager_limit_from_env(info.env),
                             bus=self.bus, fault_tolerant=failures.fault_tolerant(info.env),
                             job_abort=abort, ledger=Ledger(),
                             block_report_after=report_after(info.env),
                             universe_size=universe_size_of(info))
        ulfm.install(self.engine)
        self.all_connected = False    # every pair connected at start-up (small jobs)
        if info.coordinator is not None:
            try:
                self._rendezvous(info, transport)
            except BaseException:
                # no launcher may be there to clean up (srun, environment rendezvous): what
                # the transport made (shared-memory segments, sockets) goes with this rank
                if transport is not None:
                    transport.close()
                raise
        if self.engine.fault_tolerant and info.coordinator is not None:
            failures.listen(self.engine, info.coordinator)
        self.world = Intracomm(self.engine, range(info.size), info.rank, 0, "COMM_WORLD")
        self.self_comm = Intracomm(self.engine, [info.rank], 0, 2, "COMM_SELF")
        set_predefined(self.world, self.self_comm)   # what pickles by name
        self.failing = False
        # deadlock diagnosis: long waits are reported to the launcher (minimpi.runtime.diagnose)
        self.reporter = install_diagnostics(self.engine, info.coordinator, info.env)
        self.observer = None   # minimpi.runtime.trace: only with --trace/--stats (no hooks otherwise)
        if info.env.get("MINIMPI_TRACE") or info.env.get("MINIMPI_STATS"):
            from .trace import attach
            self.observer = attach(self.engine, info.rank, info.size, info.env)
        # the live dashboard (minimpi run --dashboard): a sampling thread, nothing otherwise
        self.live = None
        if info.env.get("MINIMPI_LIVE"):
            from .dashboard import attach as attach_live
            self.live = attach_live(self.engine, info, self.world, self.self_comm)
        # dynamic processes (Spawn, ports): the launcher, and other jobs' processes
        self.link = RuntimeLauncherLink(info, self.engine)
        set_launcher_link(self.link)
        if self.link.parent is not None:   # started by Spawn: join the parents now
            join_parent(self.world, self.link)

    def _rendezvous(self, info: BootInfo, transport: Any) -> None:
        """Exchange addresses through the coordinator and wire the transport to every peer."""
        address = transport.listen() if transport is not None else "none"
        addresses = info.coordinator.exchange_addresses(address)
        if info.coordinator.hosts is not None:
            self.engine.set_hosts(info.coordinator.hosts)
        if transport is not None:
            transport.set_peers(addresses)
            # Small jobs connect every pair at start-up, while all ranks are in this call,
            # so that no message later waits for a handshake with a rank that is busy.
            if info.size <= int(info.env.get("MINIMPI_CONNECT_ALL_MAX", "16")):
                transport.connect_all()
                self.all_connected = True
            # spin before sleeping only while the ranks on this host have a core each (or,
            # pinned by --bind-to, the ranks pinned to this rank's CPUs: see set_binding)
            self.engine.set_progress_policy(ProgressPolicy.from_env(
                info.env, len(transport.local_ranks)))


#: the process that initialised MPI (a forked child is another process)
_owner_pid = -1


def world_state() -> _Runtime:
    global _state
    if _state is None:
        with _lock:
            if _state is None:
                if _finalized:
                    raise JobAbortedError("MPI was finalized in this process; it cannot be used again")
                try:
                    info = bootstrap()
                    if info.source not in ("minimpi-run", "singleton"):
                        _install_summary_hook(info.rank)
                    _state = _Runtime(info)
                except MinimpiError:
                    if _launcherless(os.environ):
                        _install_summary_hook(None)
                    raise
                global _owner_pid
                _owner_pid = os.getpid()
                atexit.register(_finalize_at_exit)
                _install_excepthook()
    return _state


def initialized() -> bool:
    return _state is not None


def finalized() -> bool:
    return _finalized


def comm_world():
    return world_state().world


def comm_self():
    return world_state().self_comm


def finalize(at_exit: bool = False) -> None:
    """Serve the windows not freed until their other ranks finish too
    (:func:`minimpi.rma.finish_windows`), deliver queued sends, tell the launcher this rank
    is done, close connections.

    Threads: MPI wants every thread's calls finished before ``Finalize``. A thread still
    waiting in MPI then (an erroneous program, or a daemon thread left waiting when the
    program ends) does not stop the rest: queued sends are delivered, what it waited for is
    reported by the leftovers check ("a receive that never matched"), and its wait ends -
    with ``JobAbortedError`` after an explicit ``MPI.Finalize()``, or, at the interpreter's
    exit (``at_exit``: only daemon threads are left then), never: the thread stays parked
    until the process ends, printing nothing."""
    global _finalized
    with _lock:
        state = _state
        if state is None or _finalized:
            _finalized = True
            return
        _finalized = True
    engine = state.engine
    leftover: Optional[BaseException] = None
    if not state.failing and (_inside_a_call(engine)
                              or getattr(engine.transport, "interrupted", False)):
        # sys.exit()/exit from inside a communication call (a signal handler, a callback):
        # the peers wait for this rank's next message, not for its queued ones, so a flush
        # would only stall the exit for MINIMPI_FLUSH_TIMEOUT. Leave now; the launcher
        # names this rank as the one that ended first.
        state.failing = True
    rma = _rma()
    if state.failing or engine.aborted is not None:
        if rma is not None:
            rma.stop_serving(engine)
    else:
        # windows not freed: serve them until their other ranks finish too (one that
        # owns a window may end while the others still Lock/Get/Unlock it)
        if rma is not None:
            rma.finish_windows(engine, rma.finish_wait(state.info.env), lambda text: print(
                f"minimpi rank {state.info.rank}: warning at finalize: {text}",
                file=sys.stderr, flush=True))
        try:
            flushed = engine.flush(timeout=float(state.info.env.get("MINIMPI_FLUSH_TIMEOUT", "30")))
        except Exception:   # engine state cut mid-update by an exception from a signal handler
            flushed = None  # (sys.exit there): nothing sensible to report about queued sends
        if flushed is False:
            print(f"minimpi rank {state.info.rank}: exiting with sends that no rank received: "
                  f"{engine.pending_summary() or 'queued data'}", file=sys.stderr, flush=True)
        if state.info.coordinator is not None:
            state.info.coordinator.finalize(lost=sorted(engine.lost_peers))
        # MPI_Finalize is collective: wait for every rank's last messages, then report what
        # was never received (minimpi.runtime.leftovers). The markers go over the start-up
        # connections; a job that connects lazily (many ranks) checks what has arrived, rather
        # than open a connection to every rank at exit.
        try:
            finalize_check(engine, lambda text: print(
                f"minimpi rank {state.info.rank}: warning at finalize: {text}", file=sys.stderr,
                flush=True), finalize_wait(state.info.env) if state.all_connected else 0.0)
        except CollectiveMismatchError as exc:
            leftover = exc
            if state.reporter is not None:
                state.reporter.failed(exc)
    if state.observer is not None:   # this rank's trace/statistics, merged by the launcher
        try:
            state.observer.write()
        except OSError as exc:
            print(f"minimpi rank {state.info.rank}: could not write trace: {exc}",
                  file=sys.stderr, flush=True)
    if state.live is not None:
        state.live.stop()
    here = threading.current_thread().name
    engine.close(f"MPI was finalized (by thread {here!r}, "
                 f"{'at the end of the program' if at_exit else 'MPI.Finalize'}) while this "
                 f"thread was still in an MPI call; every thread must finish its MPI calls "
                 f"before MPI.Finalize", at_exit)
    if state.info.coordinator is not None:
        state.info.coordinator.close()
    if leftover is not None:
        raise leftover


def _finalize_at_exit() -> None:
    """finalize() at interpreter exit, where an exception would not change the exit code: a
    collective mismatch found there is printed and the process exits 1.

    Only the process that initialised MPI finalizes: a child it forked (``os.fork()``,
    ``multiprocessing`` with fork) inherits this exit hook, and must not close the
    parent's connections or tell the launcher that the rank is done."""
    if os.getpid() != _owner_pid:
        return
    try:
        finalize(at_exit=True)
    except CollectiveMismatchError as exc:
        sys.stdout.flush()
        print(f"{type(exc).__module__}.{type(exc).__name__}: {exc}", file=sys.stderr,
              flush=True)
        os._exit(1)


def _rma():
    """The one-sided layer, if this process loaded it (``MPI.Win``): without it there is no
    window to serve or stop at finalize, and a program without windows never loads it."""
    return sys.modules.get("minimpi.rma")


def _inside_a_call(engine: Engine) -> bool:
    """Whether receives are still posted or operations still running: the process is
    exiting from the middle of communication rather than after its last call. The
    receives and servers of windows not freed are not the program's communication. (Not
    when another thread is still in a wait: those are its receives, and finalize goes on.)"""
    me = threading.get_ident()
    if any(ident != me for ident in engine.waiting_threads()):
        return False
    stats = engine.match_stats()
    if not stats.communicating():
        return False
    rma = _rma()
    own = {id(req) for req in rma.serving_receives(engine)} if rma is not None else set()
    if stats.rendezvous_receives or stats.active > len(own):
        return True
    return any(id(req) not in own for context in engine.contexts()
               for req in engine.posted_receives(context))


def abort(code: int, message: str) -> None:
    """End the whole job: the launcher terminates every rank; this process exits with ``code``."""
    state = _state
    print(f"minimpi: {message}", file=sys.stderr, flush=True)
    if state is not None:
        state.failing = True
        state.engine.abort(message)
        if state.info.coordinator is not None:
            try:
                state.info.coordinator.abort(code, message)
            except Exception:  # the launcher may already be gone; exit regardless
                pass
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


# ---- one summary line where no launcher sums up (srun, environment rendezvous) ----------
def _not_the_program() -> tuple:
    """Where frames that are not the program's live: minimpi, Python's standard library."""
    import sysconfig
    paths = sysconfig.get_paths()
    dirs = {os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    dirs.update(os.path.abspath(paths[k]) + os.sep for k in ("stdlib", "platstdlib") if k in paths)
    return tuple(dirs)


_NOT_THE_PROGRAM = _not_the_program()
_summary_hook_installed = False


def _launcherless(environ) -> bool:
    """Whether this process was started without ``minimpi run`` as a rank of a bigger job."""
    if "MINIMPI_COORD" in environ:
        return False
    from . import sources
    try:
        return sources.find(environ) is not None
    except MinimpiError:
        return True        # a rendezvous set up wrongly: still not a launcher's rank


def _install_summary_hook(rank: Optional[int]) -> None:
    """Under ``minimpi run`` the launcher shows one summary for the job (the culprit's own
    frames, one line for the ranks that stopped because of it). Started by srun or through
    an environment rendezvous, each rank prints its own uncaught minimpi error, so there
    it is one line (where the program was, then the error) instead of a traceback full of
    minimpi's frames (a missing secret under a 29-line import traceback). Other exceptions
    keep Python's traceback."""
    global _summary_hook_installed
    if _summary_hook_installed:
        return
    _summary_hook_installed = True
    previous = sys.excepthook

    def hook(exc_type, exc, tb):
        if not isinstance(exc, MinimpiError):
            return previous(exc_type, exc, tb)
        import traceback
        user = [f for f in traceback.extract_tb(tb)
                if not os.path.abspath(f.filename).startswith(_NOT_THE_PROGRAM)
                and not f.filename.startswith("<frozen")]
        at = ""
        if user:
            where = user[-1]
            at = f" (at {where.filename}:{where.lineno}" + (
                f" in {where.name}()" if where.name != "<module>" else "") + ")"
        who = f"minimpi rank {rank}" if rank is not None else "minimpi"
        text = str(exc)
        if text.startswith("minimpi bootstrap: "):
            text = text[len("minimpi bootstrap: "):]
        kind = "" if type(exc) is MinimpiError else f"{exc_type.__name__}: "
        print(f"{who}: {kind}{text}{at}", file=sys.stderr, flush=True)

    sys.excepthook = hook


def _install_excepthook() -> None:
    previous = sys.excepthook

    def hook(exc_type, exc, tb):
        # An uncaught exception ends the job (as `python -m mpi4py` does): don't wait at exit
        # for sends that no one will receive.
        if _state is not None:
            _state.failing = True
        # the traceback first: once the launcher has the report it may end the job at any
        # moment, and a rank it reports as failed must have left its traceback behind
        previous(exc_type, exc, tb)
        if _state is not None and getattr(_state, "reporter", None) is not None:
            _state.reporter.failed(exc)   # lets the launcher name the first real failure

    sys.excepthook = hook
