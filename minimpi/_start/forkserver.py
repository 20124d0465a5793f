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
server holds no threads and no zmq context while it forks.

A rank must be what ``python [OPTIONS] prog.py`` started with that rank's environment would
be. So the template starts with the job's interpreter options (``MINIMPI_PYTHON_FLAGS``: it
replaces itself with ``python OPTIONS forkserver.py FD`` first), and a child replaces itself
(``exec``, the same process: its pid, session, descriptors and pidfd stay) with a fresh
``python OPTIONS minimpi_rank.py ...`` in its own environment wherever a fork could not be
that process:

* the interpreter ran site hooks at start-up that act per process (a ``sitecustomize``, a
  ``.pth`` file that runs code: see :mod:`minimpi._start.sitehooks`) - they ran once, in the
  template, without the rank's environment; then every rank starts fresh (say why with
  ``minimpi run --verbose`` or ``--stats``), and the template imports nothing it would fork;
* the rank's program has other interpreter options, or an environment or directory of its
  own (MPMD), or its environment differs from the template's in what the interpreter reads
  as it starts (``PYTHON*``, ``LC_*``, ``LANG``, ``HOME``), or it runs in another directory
  while ``PYTHONPATH`` has relative entries (resolved against the template's).

``TZ`` differing is applied with ``time.tzset()``. One thing a fork cannot give each rank:
its own ``PYTHONHASHSEED`` randomisation (every rank of a job hashes ``str`` alike, unlike
fresh interpreters; ``minimpi run --no-fork-server`` starts each rank as a fresh interpreter).
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
    from minimpi._start import minimpi_rank
    from minimpi._start.sitehooks import per_process_hooks
else:
    from . import minimpi_rank
    from .sitehooks import per_process_hooks

#: what a rank imports before its first ``Barrier``, beyond numpy and minimpi's root: what
#: ``from mpi4py import MPI`` imports (``minimpi.MPI`` itself starts the runtime: the
#: program imports it, in the rank), what starting the runtime imports (the control plane,
#: the transports ``auto`` tries, finalize's check, the deadlock reports) and the collective
#: algorithms (the first collective call loads them all). Nothing a program only may use:
#: windows (``minimpi.rma``), files (``minimpi.io``) and sessions load in the rank that
#: uses them, as they would in a fresh interpreter (a forked rank's ``sys.modules`` is what
#: that rank would have imported itself; tests/integration/test_startup_imports.py).
PRELOAD = (
    "runpy", "pkgutil", "zmq", "zmq.utils.z85", "msgpack",
    "minimpi.rc", "minimpi.comm.communicator", "minimpi.comm.grequest",
    "minimpi.dynamic", "minimpi.runtime.world", "minimpi.runtime.diagnose",
    "minimpi.runtime.leftovers", "minimpi.runtime.launcher_link",
    "minimpi.transports.shm", "minimpi.transports.tcp", "minimpi.transports.router",
    "minimpi.transports.verbs", "minimpi.transports.verbs_compat",
    "minimpi.coll.registry", "minimpi._start.binding",
)
#: largest request or reply (a rank's environment differs from the server's in a few names)
MAX_DATAGRAM = 1 << 20
#: most descriptors one request passes (stdin, stdout, stderr and a few the rank keeps)
MAX_FDS = 16
PR_SET_PDEATHSIG = 1
#: set in the launcher's environment by tests that must see a rank outlive its launcher
ENV_NO_PDEATHSIG = "MINIMPI_LAUNCHER_NO_PDEATHSIG"
#: ``minimpi run --verbose`` / ``--stats``: the template says how the ranks start
ENV_VERBOSE = minimpi_rank.ENV_VERBOSE
ENV_STATS = "MINIMPI_STATS"      # minimpi.runtime.observe_env.ENV_STATS
SERVER_SCRIPT = os.path.abspath(__file__)


def _startup_variable(name: str) -> bool:
    """Whether the interpreter reads variable ``name`` as it starts (so a rank whose value
    differs from the template's cannot be a fork of it)."""
    return name.startswith(("PYTHON", "LC_")) or name in ("LANG", "HOME")


def preload() -> None:
    """Import what every rank needs, then freeze the heap so that the ranks' garbage
    collections do not touch (and so copy) the pages they share with the server.

    The collector is off from the template's start (:func:`main`) to here: imports make
    tens of thousands of objects, and the collections they set off cost ~50 ms of the
    template's start, which every job waits for; the little garbage they leave is frozen
    with the rest (shared by the ranks, never collected) rather than collected for another
    ~20 ms. Each rank turns the collector back on (:func:`start_rank`)."""
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass     # an optional piece (e.g. a transport's library): the rank imports it itself
    from minimpi.coll.registry import algorithms
    algorithms("bcast")          # loads every collective algorithm module
    gc.freeze()


# ---------------------------------------------------------------------------------------
# The server
# ---------------------------------------------------------------------------------------
class _Server:
    def __init__(self, fd: int, environ: dict, fresh_reason: Optional[str]) -> None:
        """``environ``: the environment the template was started with; ``fresh_reason``:
        why every rank must start as a fresh interpreter (None: ranks are forks)."""
        self.environ = environ
        self.fresh_reason = fresh_reason
        self.cwd = os.getcwd()
        #: in a child: the environment it was started with, and why it must start fresh
        self.child_env: dict = {}
        self.child_reason: Optional[str] = None
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
            from minimpi.transports.signal_guard import threads_started_blocked
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
    """Everything between the fork and the start of the rank (in the child): its session,
    environment, descriptors and directory; what else it needs is decided by
    :func:`start_rank` once it knows the rank's program."""
    os.setsid()                          # its own session and process group, as today
    unset, changed = request.get("unset", []), request.get("env", {})
    for name in unset:                        # the rank's environment: the server's, and
        os.environ.pop(name, None)            # what the request says differs (the rank,
    os.environ.update(changed)                # the job secret)
    server.child_env = {k: v for k, v in server.environ.items() if k not in unset}
    server.child_env.update(changed)
    if not os.environ.get(ENV_NO_PDEATHSIG):
        server.libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != server.pid:   # the server died before prctl took effect
            os._exit(1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)
    install_fds(fds, [int(n) for n in request["fds"]], server)
    if request.get("cwd"):
        os.chdir(request["cwd"])
    server.child_reason = fresh_reason(server, list(unset) + list(changed))
    if "TZ" in changed or "TZ" in unset:
        import time
        time.tzset()                     # what a fresh interpreter read at start-up


def fresh_reason(server: _Server, names: list[str]) -> Optional[str]:
    """Why this child cannot be a fork of the template (None: it can): ``names`` are the
    variables its environment sets or unsets differently."""
    startup = sorted(n for n in names if _startup_variable(n))
    if startup:
        return f"its environment differs from the template's in {', '.join(startup)}"
    if os.getcwd() != server.cwd:
        relative = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                    if p and not os.path.isabs(p)]
        if relative:
            return (f"it runs in another directory and PYTHONPATH has relative entries "
                    f"({', '.join(relative)})")
    return None


def start_rank(server: _Server, args: list) -> None:
    """In a child: become the rank ``args`` (the start script's arguments) describe - as a
    fork of the template, or by replacing this process with a fresh interpreter (see the
    module docstring) - then run its program."""
    plan = minimpi_rank.plan_for(args, os.environ)
    minimpi_rank.become(plan, args, context_applied=False, start_env=server.child_env,
                        fresh_reason=server.fresh_reason or server.child_reason)
    gc.enable()                          # as in a fresh interpreter (off in the template)
    minimpi_rank.bind_cpus()             # before numpy's threads start again
    reseed()
    server.restart_blas_threads()
    minimpi_rank.run_program(plan.program, plan.flags)


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


def start_with_job_flags(fd: int) -> None:
    """Replace this process with ``python OPTIONS forkserver.py FD`` when the job's
    interpreter options (``MINIMPI_PYTHON_FLAGS``) are not this interpreter's."""
    wanted = json.loads(os.environ.get(minimpi_rank.ENV_TEMPLATE_FLAGS) or "[]")
    if wanted == minimpi_rank.INTERPRETER_FLAGS:
        return
    env = dict(os.environ)
    env[minimpi_rank.ENV_STARTED] = json.dumps(wanted)
    os.execve(sys.executable, [sys.executable, *wanted, SERVER_SCRIPT, str(fd)], env)


def started_environ() -> dict:
    """The environment this process was started with (``/proc/self/environ``: what
    start-up code may have changed in ``os.environ`` since is not in it)."""
    try:
        with open("/proc/self/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return dict(os.environ)
    env = {}
    for item in raw.split(b"\0"):
        name, eq, value = item.partition(b"=")
        if eq and name:
            env[os.fsdecode(name)] = os.fsdecode(value)
    env.pop(minimpi_rank.ENV_STARTED, None)
    return env


def say(text: str) -> None:
    try:
        os.write(2, f"minimpi: {text}\n".encode("utf-8", "replace"))
    except OSError:
        pass


def main() -> None:
    fd = int(sys.argv[1])
    start_with_job_flags(fd)
    gc.disable()       # while the template imports (see preload); each rank turns it on
    environ = started_environ()
    hooks = per_process_hooks()
    reason = None
    if hooks:
        reason = (f"the site hook {hooks[0]} runs in each process (a fork of one template "
                  f"would not run it with the rank's environment)")
        if os.environ.get(ENV_VERBOSE) == "1" or os.environ.get(ENV_STATS) == "1":
            say(f"ranks start as fresh interpreters: {reason}")
    else:
        if os.environ.get(ENV_VERBOSE) == "1":
            say("ranks fork from one template process (numpy and minimpi imported once)")
        minimpi_rank.load_minimpi()
        preload()
    server = _Server(fd, environ, reason)
    args = server.serve()
    if args is None:
        # the launcher is done (its ranks are reaped): nothing here to flush or finalize,
        # and tearing down a heap this size would only keep the launcher waiting
        os._exit(0)
    start_rank(server, args)


if __name__ == "__main__":
    main()
