"""The start script of every rank: ``python .../minimpi/_start/minimpi_rank.py START...``.

It runs the rank's program exactly as ``python [OPTIONS] PROGRAM`` would (``sys.argv``,
``sys.path[0]``, ``__main__``, ``sys.flags``), after loading numpy and minimpi the way every
rank must:

* from where minimpi is installed: ``python script.py`` puts the script's directory first on
  ``sys.path``, ``python -m``/``-c`` the current directory; a folder named ``minimpi`` there
  (typically a clone of minimpi itself) would otherwise be imported instead. This
  directory is first on ``sys.path`` while minimpi loads (it holds nothing else to import);
* with the threads numpy and minimpi start on import holding asynchronous signals back (see
  minimpi.transports.signal_guard).

``START`` is (``launcher/run.py`` builds it)::

    [--python-flags=JSON] PROGRAM ARGS...     PROGRAM: script | -m MODULE | -c CODE
    --apps=JSON                               several programs (mpiexec's ``a : b``)

``--python-flags`` lists the interpreter options (``["-O", "-X", "dev"]``). ``--apps`` lists
the programs of an MPMD job, ``[{"n": N, "flags": [...], "program": [...], "env": {...},
"wdir": DIR}, ...]``, in rank order; a rank runs the one its world rank falls in, with
``MINIMPI_APPNUM`` (``MPI.APPNUM``) set to its index.

A rank whose interpreter was not started with its options - or whose program has its own
environment or directory - replaces itself (``exec``, the same process) with
``python OPTIONS minimpi_rank.py START...`` in that environment and directory: it is then
what ``python OPTIONS PROGRAM`` started there would be. The fork server's template does the
same for its children (``minimpi/_start/forkserver.py``).
"""
import builtins
import contextlib
import json
import os
import sys
import types

# (imports minimpi's package root only: constants and errors, no threads)
from minimpi._start import ENV_APPNUM, ENV_STARTED, ENV_TEMPLATE_FLAGS, ENV_VERBOSE  # noqa: F401

#: minimpi.runtime.bootstrap.ENV_RANK and ENV_PARENT (not imported: minimpi.runtime loads
#: under load_minimpi's signal guard, after the decision to replace this process)
ENV_RANK = "MINIMPI_RANK"
ENV_PARENT = "MINIMPI_PARENT"
THIS_SCRIPT = os.path.abspath(__file__)


def _take_started_marker():
    text = os.environ.pop(ENV_STARTED, None)
    return None if text is None else json.loads(text)


#: how this interpreter was started: None by the launcher (or the fork server, with no
#: options), else the interpreter options a start script re-executed it with
_STARTED = _take_started_marker()
#: the interpreter options this process runs with
INTERPRETER_FLAGS = list(_STARTED or [])


class RankPlan:
    """What one rank runs: interpreter options, program, its own environment and directory
    (MPMD), and its appnum (None outside MPMD jobs and spawned processes)."""

    def __init__(self, flags: list, program: list, env: dict, wdir, appnum) -> None:
        self.flags = list(flags)
        self.program = list(program)
        self.env = dict(env)
        self.wdir = wdir
        self.appnum = appnum


def plan_for(start: list, environ) -> RankPlan:
    """The rank's plan from the start script's arguments (``START``, see above)."""
    if start and start[0].startswith("--apps="):
        apps = json.loads(start[0][len("--apps="):])
        rank = int(environ[ENV_RANK])
        first = 0
        for appnum, app in enumerate(apps):
            if rank < first + int(app["n"]):
                return RankPlan(app.get("flags", []), app["program"], app.get("env") or {},
                                app.get("wdir"), appnum)
            first += int(app["n"])
        raise SystemExit(f"minimpi: rank {rank} is beyond the {first} processes of the job's "
                         f"programs")
    flags: list = []
    if start and start[0].startswith("--python-flags="):
        flags = json.loads(start[0][len("--python-flags="):])
        start = start[1:]
    appnum = None
    parent = environ.get(ENV_PARENT)
    if parent:                    # a spawned process: its command's index in Spawn_multiple
        try:
            appnum = int(json.loads(parent).get("appnum", 0))
        except (ValueError, TypeError, AttributeError):
            appnum = None
    return RankPlan(flags, start, {}, None, appnum)


def become(plan: RankPlan, start: list, *, context_applied: bool, start_env: dict,
           fresh_reason=None) -> None:
    """Make this process the rank ``plan`` describes. When its interpreter options differ
    from this interpreter's, when its program has an environment or directory of its own
    not yet applied, or when ``fresh_reason`` says so (the fork server's child), the process
    replaces itself with ``python OPTIONS minimpi_rank.py START`` started in
    ``start_env`` (the environment it was given) plus the program's own; this never returns
    then. Otherwise it only sets ``MINIMPI_APPNUM`` when the rank has one."""
    own_context = bool(plan.env or plan.wdir) and not context_applied
    if plan.flags != INTERPRETER_FLAGS or own_context or fresh_reason:
        env = dict(start_env)
        env.pop(ENV_STARTED, None)
        env.update(plan.env)
        env[ENV_STARTED] = json.dumps(plan.flags)
        if plan.wdir:
            os.chdir(plan.wdir)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):
                pass
        os.execve(sys.executable, [sys.executable, *plan.flags, THIS_SCRIPT, *start], env)
    os.environ.pop(ENV_TEMPLATE_FLAGS, None)
    if plan.appnum is not None:
        os.environ[ENV_APPNUM] = str(plan.appnum)


def bind_cpus() -> None:
    """``--bind-to``: pin this process (before it starts threads) and report it if asked."""
    from minimpi._start.binding import ENV_BIND, ENV_REPORT
    if not (os.environ.get(ENV_BIND) or os.environ.get(ENV_REPORT)):
        return
    from minimpi._start.binding import bind_this_process
    line = bind_this_process(os.environ)
    if line:
        print(line, file=sys.stderr, flush=True)


def main() -> None:
    start = sys.argv[1:]
    start_env = dict(os.environ)
    plan = plan_for(start, os.environ)
    become(plan, start, context_applied=_STARTED is not None, start_env=start_env)
    bind_cpus()
    load_minimpi()
    run_program(plan.program, plan.flags)


def load_minimpi() -> None:
    """Import numpy and minimpi the way every rank must: before the program, from where
    minimpi is installed, with the threads they start holding asynchronous signals back."""
    # Threads started while minimpi and numpy load (numpy's BLAS pool, minimpi's own) start
    # with asynchronous signals blocked, so the kernel hands a signal to the main thread
    # only, and a handler never runs half-way through a frame's delivery (see
    # minimpi.transports.signal_guard).
    from minimpi.transports.signal_guard import threads_started_blocked
    with threads_started_blocked(), short_blas_spin():
        import numpy  # noqa: F401

        import minimpi  # noqa: F401  (imported first: the program's directory cannot shadow it)


#: how long (2**N CPU cycles) an idle OpenBLAS thread of a rank polls for work before it
#: sleeps; OpenBLAS's own default, 2**28 (~0.1 s), has every BLAS thread of every rank
#: spin for that long when it starts, and after each BLAS call, on cores the other ranks
#: need: with 4 ranks on 2 cores a rank's start took 3x the CPU (~60 ms instead of ~20);
#: 2**20 (~0.4 ms) keeps the threads hot through back-to-back calls
BLAS_SPIN = 20
#: the variables OpenBLAS reads it from (once, when the library loads); a value the user
#: set is kept
_BLAS_TIMEOUT_VARS = ("OPENBLAS_THREAD_TIMEOUT", "GOTO_THREAD_TIMEOUT")


@contextlib.contextmanager
def short_blas_spin():
    """While numpy loads OpenBLAS: a short idle spin for its threads (:data:`BLAS_SPIN`),
    unless the environment sets one. The variable is gone again afterwards, so the program
    sees the environment it was given (a fork of the template has the same library state as
    a fresh rank: the template loads numpy through here too)."""
    if any(os.environ.get(name) for name in _BLAS_TIMEOUT_VARS):
        yield
        return
    os.environ[_BLAS_TIMEOUT_VARS[0]] = str(BLAS_SPIN)
    try:
        yield
    finally:
        os.environ.pop(_BLAS_TIMEOUT_VARS[0], None)


def run_program(args: list, flags: list = ()) -> None:
    """Run ``script args...``, ``-m module args...`` or ``-c code args...`` as ``__main__``,
    exactly as ``python [flags] script args...`` / ``-m module`` / ``-c code`` would
    (``sys.argv``, ``sys.path[0]``, ``sys.orig_argv``), after taking the job secret out of
    the environment."""
    # the job secret leaves the environment before the program can start a subprocess
    from minimpi.runtime.bootstrap import take_secret
    take_secret()

    if hasattr(sys, "orig_argv"):
        sys.orig_argv = [sys.executable, *flags, *args]
    # -P / PYTHONSAFEPATH: python puts nothing in front of sys.path (nor did it for us)
    set_path0 = not getattr(sys.flags, "safe_path", False)
    if args[:1] == ["-m"] and len(args) >= 2:
        import runpy
        module = args[1]
        if set_path0:
            sys.path[0] = os.getcwd()                   # as `python -m` does
        sys.argv = [module] + args[2:]                  # run_module puts the file in argv[0]
        _program_globals.append(runpy.run_module(module, run_name="__main__", alter_sys=True))
    elif args[:1] == ["-c"] and len(args) >= 2:
        if set_path0:
            sys.path[0] = ""                            # as `python -c` does
        sys.argv = ["-c"] + args[2:]
        main = types.ModuleType("__main__")
        main.__dict__["__builtins__"] = builtins
        sys.modules["__main__"] = main
        _program_globals.append(main.__dict__)
        exec(compile(args[1], "<string>", "exec"), main.__dict__)
    else:
        import runpy
        program = args[0]
        if set_path0:
            sys.path[0] = os.path.dirname(os.path.realpath(program))   # as `python script`
        sys.argv = args
        _program_globals.append(runpy.run_path(program, run_name="__main__"))


#: the program's globals, kept until the interpreter exits as ``python prog.py`` keeps them:
#: MPI's finalize runs at exit and must still see what the program holds (a request left
#: open is reported; runpy would otherwise drop the namespace as soon as the program ends)
_program_globals: list = []


if __name__ == "__main__":
    main()
