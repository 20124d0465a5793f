"""The fork server: one interpreter with numpy and minimpi imported, forking one process per rank.

Starting a rank as ``python minimpi_rank.py prog.py`` costs an interpreter and the imports of
numpy, zmq and minimpi (a few hundred ms of CPU each); 128 ranks on 2 cores spend seconds on
it before the first ``Barrier``. ``minimpi run`` (``launcher/forkserver.py``) instead starts

    python .../minimpi/_start/forkserver.py FD

once per job, with the environment every rank shares. It loads numpy and minimpi as the start
script does (:func:`minimpi._start.minimpi_rank.load_minimpi`), imports the modules a rank
needs before its first ``Barrier`` (never ``minimpi.MPI``, which would start the runtime), and
serves requests on the ``AF_UNIX`` ``SOCK_SEQPACKET`` socket ``FD`` that only the launcher
holds the other end of. Each request forks one rank that then runs the program exactly as the
start script does (:func:`~minimpi._start.minimpi_rank.run_program`: ``sys.argv``,
``__main__``, ``sys.path[0]``), at the top of this script's stack, so that an uncaught
exception, ``sys.exit`` and the interpreter's exit (atexit, MPI's finalize, thread joins)
behave as under ``python prog.py``.

Messages (JSON, one per datagram; file descriptors ride along as ``SCM_RIGHTS``):

launcher -> server
    {"op": "fork", "id": RANK, "args": [script or -m module, args...], "env": {NAME: VALUE},
     "unset": [NAME], "cwd": DIR or null, "fds": [0, 1, 2, N...]}
        with the descriptors to install in the child at the numbers of ``"fds"``
        (stdin, stdout, stderr, then the ones the rank is passed, e.g. the lifeline)
server -> launcher
    {"op": "forked", "id": RANK, "pid": PID}     with the child's pidfd where there is one
    {"op": "failed", "id": RANK, "error": TEXT}  the fork itself failed
    {"op": "exited", "pid": PID, "status": WAIT_STATUS}   a child ended (the server reaps it)

The server ends when the launcher's end closes; its children die with it (each has
``PR_SET_PDEATHSIG``), as a rank dies with the launcher when it is started directly.

What a forked rank must not inherit is undone in the child before the program runs: the
server's socket, pipes and signal handlers; its process group (the rank leads a new
session, as ``start_new_session`` makes it); the environment (replaced by the rank's own);
the seeds of ``random`` and of numpy's global generator (reseeded from the OS, as a fresh
interpreter seeds them); numpy's BLAS threads (OpenBLAS ends them before a fork; they are
started again with asynchronous signals blocked, as the start script starts them). The
server holds no threads and no zmq context while it forks. One thing a fork cannot give
each rank: its own ``PYTHONHASHSEED`` randomisation (every rank of a job hashes ``str``
alike; ``minimpi run --no-fork-server`` starts each rank as a fresh interpreter).
"""
from __future__ import annotations

import ctypes
import gc
import importlib
import json
import os
import select
import signal
import socket
import sys
from typing import Optional

if __package__ in (None, ""):
    # run as a script: this directory is sys.path[0] and holds no minimpi, so minimpi comes
    # from where it is installed (see minimpi_rank.py)
    from minimpi._start.minimpi_rank import load_minimpi, run_program
else:
    from .minimpi_rank import load_minimpi, run_program
from minimpi.transports.signal_guard import threads_started_blocked  # noqa: E402

#: what a rank imports before its first Barrier, beyond numpy and minimpi (``minimpi.MPI``
#: itself starts the runtime: it is imported by the program, in the rank)
PRELOAD = (
    "runpy", "pkgutil", "zmq", "zmq.utils.z85", "msgpack", "logging", "string", "traceback",
    "minimpi.rc",
    "minimpi.runtime.world", "minimpi.runtime.diagnose", "minimpi.runtime.leftovers",
    "minimpi.comm.communicator", "minimpi.dynamic", "minimpi.io", "minimpi.rma",
    "minimpi.transports.shm", "minimpi.transports.tcp", "minimpi.transports.router",
    "minimpi.transports.verbs", "minimpi.transports.verbs_compat",
    "minimpi.coll.registry",
)
#: largest request or reply (a rank's environment differs from the server's in a few names)
MAX_DATAGRAM = 1 << 20
#: most descriptors one request passes (stdin, stdout, stderr and a few the rank keeps)
MAX_FDS = 16
PR_SET_PDEATHSIG = 1
#: set in the launcher's environment by tests that must see a rank outlive its launcher
ENV_NO_PDEATHSIG = "MINIMPI_LAUNCHER_NO_PDEATHSIG"


def preload() -> None:
    """Import what every rank needs, then freeze the heap so that the ranks' garbage
    collections do not touch (and so copy) the pages they share with the server."""
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass     # an optional piece (e.g. a transport's library): the rank imports it itself
    from minimpi.coll.registry import algorithms
    algorithms("bcast")          # loads every collective algorithm module
    gc.collect()
    gc.freeze()


# ---------------------------------------------------------------------------------------
# The server
# ---------------------------------------------------------------------------------------
class _Server:
    def __init__(self, fd: int) -> None:
        self.sock = socket.socket(fileno=fd)
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.children: set[int] = set()
        self.pid = os.getpid()
        self.blas_starters = blas_thread_starters()

    def restart_blas_threads(self) -> None:
        """OpenBLAS ends its threads before a fork and starts them again at its next
        threaded call - with whatever signal mask that thread has then. In the child, start
        them now, with asynchronous signals blocked, as the start script does (see
        minimpi.transports.signal_guard)."""
        if self.blas_starters:
            with threads_started_blocked():
                for start in self.blas_starters:
                    start()

    def send(self, message: dict, fds: tuple[int, ...] = ()) -> None:
        data = json.dumps(message).encode()
        try:
            if fds:
                socket.send_fds(self.sock, [data], list(fds))
            else:
                self.sock.send(data)
        except OSError:
            pass     # the launcher is gone: the loop sees EOF next

    def reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.children.discard(pid)
            self.send({"op": "exited", "pid": pid, "status": status})

    def serve(self) -> Optional[list]:
        """Answer requests until the launcher's end closes (returns None: the server exits),
        or, in a forked child, return the program's arguments for the caller to run."""
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLIN)
        poller.register(self.wake_r, select.POLLIN)
        while True:
            ready = {fd for fd, _ in poller.poll()}
            if self.wake_r in ready:
                try:
                    os.read(self.wake_r, 512)
                except OSError:
                    pass
            self.reap()
            if self.sock.fileno() not in ready:
                continue
            try:
                data, fds, _flags, _addr = socket.recv_fds(self.sock, MAX_DATAGRAM, MAX_FDS)
            except InterruptedError:
                continue
            if not data:
                return None
            request = json.loads(data)
            args = self.fork(request, fds)
            if args is not None:
                return args       # the child: run the program

    def fork(self, request: dict, fds: list[int]) -> Optional[list]:
        try:
            pid = os.fork()
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            self.send({"op": "failed", "id": request.get("id"), "error": str(exc)})
            return None
        if pid == 0:
            become_rank(self, request, fds)
            return list(request["args"])
        self.children.add(pid)
        for fd in fds:
            os.close(fd)
        # the reply does not wait for the child to lead its own session: until it does, the
        # launcher signals it through its pidfd (RankProcess.signal_group)
        pidfd = None
        if hasattr(os, "pidfd_open"):
            try:
                pidfd = os.pidfd_open(pid)     # not reaped yet: it is this very child
            except OSError:
                pidfd = None
        self.send({"op": "forked", "id": request.get("id"), "pid": pid},
                  (pidfd,) if pidfd is not None else ())
        if pidfd is not None:
            os.close(pidfd)
        return None


# ---------------------------------------------------------------------------------------
# The child: from a copy of the server to a rank
# ---------------------------------------------------------------------------------------
def become_rank(server: _Server, request: dict, fds: list[int]) -> None:
    """Everything between the fork and the program (in the child)."""
    os.setsid()                          # its own session and process group, as today
    for name in request.get("unset", []):     # the rank's environment: the server's, and
        os.environ.pop(name, None)            # what the request says differs (the rank,
    os.environ.update(request.get("env", {}))  # the job secret)
    if not os.environ.get(ENV_NO_PDEATHSIG):
        server.libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != server.pid:   # the server died before prctl took effect
            os._exit(1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)
    install_fds(fds, [int(n) for n in request["fds"]], server)
    if request.get("cwd"):
        os.chdir(request["cwd"])
    reseed()
    server.restart_blas_threads()


def install_fds(received: list[int], targets: list[int], server: _Server) -> None:
    """Put each received descriptor at its number (stdin, stdout, stderr, passed ones) and
    close every other descriptor the server had (as ``close_fds`` does)."""
    server.sock.detach()                 # its number is closed below, not by the object later
    high = max([*received, *targets, 2]) + 1
    moved = [_dup_above(fd, high) for fd in received]
    for fd in received:
        os.close(fd)
    for fd, target in zip(moved, targets):
        os.dup2(fd, target)              # inheritable, as stdio and pass_fds are
    keep = sorted(set(targets) | {0, 1, 2})
    start = 0
    for fd in keep:
        if fd > start:
            os.closerange(start, fd)
        start = fd + 1
    os.closerange(start, _max_fd())


def _dup_above(fd: int, low: int) -> int:
    import fcntl
    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, low)


def _max_fd() -> int:
    try:
        return os.sysconf("SC_OPEN_MAX")
    except (ValueError, OSError):
        return 65536


def reseed() -> None:
    """Seed the generators a fresh interpreter seeds from the OS, so that ranks differ."""
    random = sys.modules.get("random")
    if random is not None:
        random.seed()
    np_random = sys.modules.get("numpy.random")
    if np_random is not None:
        np_random.seed()


def blas_thread_starters() -> list:
    """``blas_thread_init`` of every OpenBLAS loaded here (numpy's): looked up once, in
    the server, and called in each child (:meth:`_Server.restart_blas_threads`)."""
    return [lib.blas_thread_init for lib in _loaded_openblas()
            if hasattr(lib, "blas_thread_init")]


def _loaded_openblas() -> list:
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "openblas" in line and "/" in line}
    except OSError:
        return []
    libs = []
    for path in sorted(paths):
        try:
            libs.append(ctypes.CDLL(path))
        except OSError:
            pass
    return libs


def main() -> None:
    fd = int(sys.argv[1])
    load_minimpi()
    preload()
    args = _Server(fd).serve()
    if args is None:
        # the launcher is done (its ranks are reaped): nothing here to flush or finalize,
        # and tearing down a heap this size would only keep the launcher waiting
        os._exit(0)
    run_program(args)


if __name__ == "__main__":
    main()
