"""``minimpi run``: options -> :class:`~minimpi.launcher.job.JobSpec` -> exit code.

Adding an option that only sets an environment variable for every rank is two lines:
an ``add_argument`` in :func:`add_arguments` and an entry in :func:`extra_env`.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from dataclasses import dataclass, field
from functools import partial
from typing import Optional

from minimpi import _shim
from minimpi._start import ENV_TEMPLATE_FLAGS, ENV_VERBOSE
from minimpi._start.binding import (
    ENV_BIND,
    ENV_MAP,
    ENV_REPORT,
    default_bind_for_map,
)

from .argtypes import (
    bind_level,
    byte_size,
    key_value,
    map_level,
    positive_int,
    seconds,
    seconds_or_off,
)
from .job import JobSpec, run_job
from .pycmd import PythonArgsError, PythonCommand, needs_fresh_interpreter, split_program

EPILOG = """\
examples:
  minimpi run -n 4 script.py arg1 arg2
  minimpi run -n 3 --timeout 30 -m mypackage.tool --flag
  minimpi run -n 5 --coll bcast=ring --eager-limit 64KiB -x OMP_NUM_THREADS=1 app.py
  minimpi run -n 8 --hosts node1:4,node2:4 app.py   (one agent per host over ssh)
  minimpi run -n 4 python -m mpi4py lab.py   (a leading `python` is accepted, as with mpiexec;
                                            ranks run under the Python that runs minimpi)
  minimpi run -n 3 python -O -X dev -c "from mpi4py import MPI; print(MPI.COMM_WORLD.rank)"
  minimpi run -n 1 manager.py : -n 4 worker.py   (MPMD: ranks 0 and 1-4, MPI.APPNUM 0 and 1)
  minimpi run -n 4 --bind-to core --report-bindings app.py

python:
  `python [OPTIONS] (script | -m MODULE | -c CODE) ARGS` runs as `python` would run it, in
  each rank: sys.argv, sys.path[0], __main__, and the interpreter options (-O, -OO, -B, -b,
  -d, -s, -v, -P, -W ARG, -X OPT, --check-hash-based-pycs; -u changes nothing, every rank
  is unbuffered). -i, -E, -I, -S, -x and reading the program from stdin are refused.

several programs (MPMD):
  PROGRAM1 ARGS : -n N2 [-x KEY=VALUE]... [--wdir DIR] PROGRAM2 ARGS : ...  Ranks are
  numbered in order (the first program's -n is run's own); each program's ranks have
  MPI.APPNUM 0, 1, ...; -x and --wdir after a ':' apply to that program only. A ':' word is
  always a separator.

binding:
  --bind-to core pins each rank to one core (round-robin over the CPUs minimpi run may use,
  wrapping when ranks outnumber cores), hwthread to one hardware thread, socket/package or
  numa to one of those; core:2 gives each rank two. --map-by socket spreads consecutive
  ranks over the sockets (default: core after core); --map-by alone binds to what it maps
  by. Each rank pins itself before it starts any thread; Spawn's processes are not bound.

output:
  Every line a rank prints is forwarded with a "[rank] " prefix (stderr to stderr).
  With --output-dir DIR, rank N's raw stdout/stderr also go to DIR/rank.N.stdout and
  DIR/rank.N.stderr. stdin goes to rank 0; the other ranks read /dev/null.
  Lines over 64 KiB are cut into lines of 64 KiB. A slow reader of minimpi's output makes
  the ranks wait (never the launcher); a reader that goes away (| head) ends the job, 141.

mpi4py programs:
  In the ranks, `from mpi4py import MPI` is minimpi.MPI (a forwarding `mpi4py` package goes
  first on PYTHONPATH), even where the real mpi4py is installed; --no-mpi4py-shim turns it off.

exit status:
  0 when every rank exits 0; otherwise the first failing rank's code (128+signal when
  killed by a signal, the Abort code when it called Abort), 124 on --timeout or a startup
  timeout, 3 when a deadlock was detected (--deadlock-timeout), 130/143 when the launcher
  gets SIGINT/SIGTERM, 141 when the reader of its stdout went away (| head), 2 for usage
  errors, 255 when a host was lost (its agent, or the ssh or srun connection to it, ended
  before its ranks).

deadlocks:
  When every rank still running is blocked in a minimpi call and nothing has moved for
  --deadlock-timeout seconds, the job ends with exit code 3 and one report: for each rank
  the call it is blocked in (peer, tag, communicator, or the collective and its step), the
  line of the script it was called from, and the wait-for cycle, e.g.
    rank 0 waits for rank 1 in recv(tag=7) at ring.py:12 -> rank 1 waits for rank 0 ...
  A rank that computes for a long time, or data still in flight, is never taken for a
  deadlock.
"""

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.usage = ("minimpi run -n N [options] program.py [args...]\n"
               "       minimpi run -n N [options] -m module [args...]\n"
               "       minimpi run -n N [options] python [options] (program.py | -m module | "
               "-c code) [args...]\n"
               "       minimpi run -n N [options] program1 [args] : -n N2 program2 [args] ...")
    p.epilog = EPILOG
    p.add_argument("-n", "-np", dest="nprocs", type=positive_int, required=True, metavar="N",
                   help="number of ranks")
    p.add_argument("-m", dest="module", metavar="MODULE",
                   help="run a module (like python -m); everything after it goes to the ranks")
    p.add_argument("--timeout", type=seconds, metavar="SECONDS",
                   help="end the whole job after SECONDS, print what each rank was doing, exit 124")
    p.add_argument("--deadlock-timeout", type=seconds_or_off, default=5.0, metavar="SECONDS",
                   help="report a deadlock and end the job (exit code 3) when every running rank "
                        "has been blocked in minimpi with nothing moving for SECONDS "
                        "(default 5; 0 disables)")
    p.add_argument("--startup-timeout", type=seconds, default=60.0, metavar="SECONDS",
                   help="how long ranks may take to register with the coordinator, counted from "
                        "the first rank's registration (default 60); the ranks that never did "
                        "are named, exit 124")
    p.add_argument("--heartbeat-timeout", type=seconds_or_off, default=30.0, metavar="SECONDS",
                   help="end the job, naming the rank, when a rank sends no heartbeat for "
                        "SECONDS and is stopped or not running (hung holding the GIL); a rank "
                        "that computes in one long call is left alone (default 30; 0 disables)")
    p.add_argument("--fault-tolerant", action="store_true",
                   help="a rank that fails does not end the job: the others are told "
                        "(MPI.ERR_PROC_FAILED) and may go on (Comm.Revoke, Shrink, Agree: "
                        "ULFM); the exit code is the survivors'. Local jobs only")
    p.add_argument("--no-prefix", action="store_true",
                   help='do not prefix output lines with "[rank] "')
    p.add_argument("--output-dir", metavar="DIR",
                   help="also write rank N's stdout/stderr to DIR/rank.N.stdout and DIR/rank.N.stderr")
    p.add_argument("--eager-limit", type=byte_size, metavar="BYTES",
                   help="largest message sent eagerly (e.g. 65536, 64KiB, 1MiB); "
                        "env MINIMPI_EAGER_LIMIT")
    p.add_argument("--transport", choices=("auto", "shm", "tcp", "verbs"),
                   metavar="{auto,shm,tcp,verbs}",
                   help="how ranks exchange messages: auto (default) uses shared memory between "
                        "ranks on one host and, between hosts, RDMA verbs where both have a "
                        "usable device, else TCP; shm, tcp or verbs use that one for every pair; "
                        "env MINIMPI_TRANSPORT")
    p.add_argument("--progress", choices=("auto", "spin", "yield", "block"),
                   metavar="{auto,spin,yield,block}",
                   help="how a waiting rank waits: spin (poll up to 3 ms, then sleep), yield "
                        "(the same, giving the core away between polls), block (sleep at "
                        "once); auto (default): spin while ranks on a host <= its cores, "
                        "yield up to 8 times that, block beyond; env MINIMPI_PROGRESS")
    p.add_argument("--coll", action="append", type=key_value, default=[], metavar="NAME=ALG",
                   help="collective algorithm, e.g. bcast=ring (sets MINIMPI_BCAST=ring); repeatable")
    p.add_argument("-x", "--env", action="append", type=key_value, default=[], metavar="KEY=VALUE",
                   help="set an environment variable for every rank; repeatable")
    p.add_argument("--oversubscribe", action="store_true",
                   help="place more ranks than --hosts/--hostfile/Slurm slots (in proportion "
                        "to the slots); minimpi never limits ranks per core")
    p.add_argument("--universe-size", type=positive_int, default=None, metavar="U",
                   help="what MPI.UNIVERSE_SIZE says (default: -n); given, it also limits how "
                        "many processes the job and those it spawns (Spawn) may run at once")
    p.add_argument("--bind", default=None, metavar="HOST",
                   help="address the ranks' data plane listens on (default 127.0.0.1; on "
                        "several hosts see --iface)")
    from . import tracing
    tracing.add_arguments(p)   # --trace FILE, --stats
    from . import multihost
    multihost.add_arguments(p)   # --hosts, --hostfile, --launcher, --rsh, --remote-python, --iface
    from . import dashboard
    dashboard.add_arguments(p)   # --dashboard[=PORT], --dashboard-bind
    p.add_argument("--no-fork-server", dest="fork_server", action="store_false",
                   help="start every rank as a fresh interpreter (by default the ranks on this "
                        "host are forked from one process that has numpy and minimpi imported, "
                        "which starts large jobs several times faster; a fork shares the "
                        "parent's str hash seed and inherited state); env MINIMPI_FORK_SERVER=0")
    p.add_argument("--no-mpi4py-shim", dest="mpi4py_shim", action="store_false",
                   help="do not make `import mpi4py` resolve to minimpi in the ranks (by default "
                        "it does, even where the real mpi4py is installed)")
    p.add_argument("--wdir", metavar="DIR",
                   help="run the ranks in DIR (the program's path is then relative to DIR, as "
                        "with mpiexec -wdir; other paths given to run stay relative to here)")
    p.add_argument("--bind-to", type=bind_level, metavar="LEVEL[:N]",
                   help="pin each rank to a core, hwthread, socket (package) or numa node, "
                        "round-robin over the CPUs this command may use (core:2: two cores "
                        "each); none (default) pins nothing")
    p.add_argument("--map-by", type=map_level, metavar="LEVEL",
                   help="how consecutive ranks of a host are spread: slot/core/node (core "
                        "after core, the default), hwthread, socket (package), numa; given "
                        "alone it also binds to that level")
    p.add_argument("--report-bindings", action="store_true",
                   help="each rank says on its stderr which CPUs it is bound to")
    p.add_argument("--verbose", action="store_true",
                   help="say how the ranks start: forked from one template process, or as "
                        "fresh interpreters and why")


def extra_env(args: argparse.Namespace) -> dict[str, str]:
    """Environment derived from options, set for every rank (the hook for new options)."""
    env: dict[str, str] = {}
    if args.eager_limit is not None:
        env["MINIMPI_EAGER_LIMIT"] = str(args.eager_limit)
    if getattr(args, "transport", None):
        env["MINIMPI_TRANSPORT"] = args.transport
    if getattr(args, "progress", None):
        env["MINIMPI_PROGRESS"] = args.progress
    for name, alg in args.coll:
        env[f"MINIMPI_{name.upper().replace('-', '_')}"] = alg
    if getattr(args, "transport", None) in (None, "auto", "shm") and \
            "MINIMPI_SHM_RING" not in os.environ:
        # rings small enough that this host's ranks fit in /dev/shm (decided once, for all)
        from minimpi.transports.shm import ring_for_space
        ring = ring_for_space(args.nprocs) if getattr(args, "nprocs", None) else None
        if ring is not None:
            env["MINIMPI_SHM_RING"] = str(ring)
    env.update(binding_env(args))
    if getattr(args, "verbose", False):
        env[ENV_VERBOSE] = "1"
    flags = getattr(args, "template_flags", ())
    if flags:
        env[ENV_TEMPLATE_FLAGS] = json.dumps(list(flags))
    for key, value in args.env:   # explicit -x wins
        env[key] = value
    env.update(cost_model_env(env))
    if getattr(args, "mpi4py_shim", True):
        # `from mpi4py import MPI` -> minimpi.MPI: the shim directory goes first on the path
        # (after the script's own directory), ahead of any installed mpi4py.
        rest = env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
        env["PYTHONPATH"] = SHIM_DIR + (os.pathsep + rest if rest else "")
    return env


def binding_env(args: argparse.Namespace) -> dict[str, str]:
    """``--bind-to``, ``--map-by``, ``--report-bindings`` as the variables each rank reads
    (minimpi/_start/binding.py)."""
    env: dict[str, str] = {}
    bind, mapping = getattr(args, "bind_to", None), getattr(args, "map_by", None)
    if mapping and not bind:
        bind = default_bind_for_map(mapping)
    if bind:
        env[ENV_BIND] = bind
    if mapping:
        env[ENV_MAP] = mapping
    if getattr(args, "report_bindings", False):
        env[ENV_REPORT] = "1"
    return env


def cost_model_env(env: dict) -> dict:
    """The launcher's cost model as ``MINIMPI_COST_*`` variables, for every rank, so that all
    ranks (on any host, with any calibration file or core count) choose alike; variables
    already set here or by ``-x`` are left to them."""
    from minimpi.coll import cost
    missing = [(name, var) for name, (var, _) in cost.FIELDS.items()
               if var not in env and var not in os.environ]
    if not missing:
        return {}
    try:
        model, _ = cost.model_sources({**os.environ, **env})   # -x MINIMPI_COST_FILE too
    except ValueError:            # a malformed MINIMPI_COST_*: each rank reports it
        return {}
    return {var: repr(getattr(model, name)) for name, var in missing}


#: Directory holding the ``mpi4py`` package that forwards to minimpi (see minimpi/rc.py).
#: (found through minimpi._shim, not the package root: the root's lazy ``minimpi.launch``
#: imports the launcher, which must not import the root back)
SHIM_DIR = os.path.dirname(os.path.abspath(_shim.__file__))
#: The installed minimpi package, and the script every rank starts through.
PACKAGE_DIR = os.path.dirname(SHIM_DIR)
START_SCRIPT = os.path.join(PACKAGE_DIR, "_start", "minimpi_rank.py")


def rank_start(program: Optional[str], module: Optional[str],
               args: list[str]) -> tuple[Optional[str], Optional[str], list[str]]:
    """(program, module, args) to start each rank with: always through
    :data:`START_SCRIPT`, which loads minimpi and numpy with signals held back from their
    threads and cannot be shadowed by a ``minimpi`` folder beside the program; it then
    runs the program as ``python`` would."""
    return START_SCRIPT, None, (["-m", module] if module is not None else [program]) + args


def check_coll(pairs: list[tuple[str, str]]) -> Optional[str]:
    """What is wrong with ``--coll NAME=ALG`` settings (None: nothing), said with the valid
    names - checked before any rank starts, since a rank never reads a misspelt variable."""
    if not pairs:
        return None
    from minimpi.coll.registry import REGISTRY, algorithms
    algorithms("bcast")                      # loads every algorithm module
    for name, alg in pairs:
        key = name.lower().replace("-", "_")
        table = REGISTRY.get(key)
        if table is None:
            base = key[:-1] if key.endswith("v") and key[:-1] in REGISTRY else None
            hint = (f" ({name} uses the {base} algorithms: --coll {base}={alg})" if base else "")
            return (f"--coll {name}={alg}: unknown collective {name!r}{hint}; the collectives "
                    f"are: {', '.join(sorted(REGISTRY))}")
        if alg != "auto" and alg not in table:
            return (f"--coll {name}={alg}: {key} has no algorithm {alg!r}; it has: "
                    f"{', '.join(table)}, auto")
    return None


def split_argv(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[list[str], list[str]]:
    """Split ``run``'s own options from the program and its arguments.

    The first token that is not one of run's options (or its value) is the program; with
    ``-m MODULE`` everything after MODULE belongs to the module. ``--`` ends run's options.
    """
    takes_value: dict[str, bool] = {}
    for action in parser._actions:
        for opt in action.option_strings:
            # an optional value (nargs "?": --dashboard[=PORT]) is only taken with "="
            takes_value[opt] = action.nargs not in (0, "?")
    own: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok == "--":
            return own, argv[i + 1:]
        if not tok.startswith("-") or tok == "-":
            return own, argv[i:]
        own.append(tok)
        name = tok.split("=", 1)[0]
        if name in takes_value and takes_value[name] and "=" not in tok:
            if i + 1 < len(argv):
                own.append(argv[i + 1])
            i += 2
            if name == "-m":
                return own, argv[i:]
            continue
        i += 1
    return own, []


def _usage_error(msg: str) -> int:
    print(f"minimpi run: {msg}", file=sys.stderr)
    return 2


def _module_exists(name: str, shim: bool = False, cwd: Optional[str] = None) -> bool:
    extra = [cwd or os.getcwd()] + ([SHIM_DIR] if shim and name.split(".")[0] == "mpi4py"
                                    else [])
    sys.path[:0] = extra
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
    finally:
        del sys.path[:len(extra)]


@dataclass
class App:
    """One program of a job: how many ranks run it, what it runs, and (MPMD) its own
    environment and working directory."""
    n: int
    command: PythonCommand
    env: dict[str, str] = field(default_factory=dict)
    wdir: Optional[str] = None

    def start_entry(self) -> dict:
        return {"n": self.n, "flags": list(self.command.flags),
                "program": self.command.program_args(), "env": self.env, "wdir": self.wdir}


class UsageError(ValueError):
    """A command line ``minimpi run`` cannot run (exit 2 with the message)."""


def command_of(words: list[str]) -> PythonCommand:
    """The program of one section: ``python [options] ...``, or ``script args``."""
    try:
        command = split_program(words)
    except PythonArgsError as exc:
        raise UsageError(str(exc)) from None
    if command is not None:
        return command
    if not words:
        raise UsageError("no program given (usage: minimpi run -n N program.py [args...])")
    return PythonCommand((), "script", words[0], tuple(words[1:]))


def parse_apps(nprocs: int, module: Optional[str], passthrough: list[str]) -> list[App]:
    """The job's programs: the first from run's own ``-n`` and ``-m`` (or the program
    words), one more after each ``:`` with its own ``-n N``, ``-x KEY=VALUE``, ``--wdir DIR``
    and ``-m MODULE``."""
    sections: list[list[str]] = [[]]
    for word in passthrough:
        if word == ":":
            sections.append([])
        else:
            sections[-1].append(word)
    first = sections[0]
    if module is not None:
        apps = [App(nprocs, PythonCommand((), "module", module, tuple(first)))]
    else:
        apps = [App(nprocs, command_of(first))]
    for number, words in enumerate(sections[1:], 2):
        apps.append(_section_app(number, words))
    return apps


def _section_app(number: int, words: list[str]) -> App:
    where = f"program {number} (after ':')"
    n: Optional[int] = None
    env: dict[str, str] = {}
    wdir: Optional[str] = None
    i = 0
    while i < len(words) and words[i].startswith("-") and words[i] != "-":
        option, eq, value = words[i].partition("=")
        if option not in ("-n", "-np", "-x", "--env", "--wdir", "-m"):
            raise UsageError(f"{where}: unknown option {option} (a program after ':' takes "
                             f"-n N, -x KEY=VALUE, --wdir DIR and -m MODULE)")
        if not eq:
            if i + 1 >= len(words):
                raise UsageError(f"{where}: {option} needs a value")
            i += 1
            value = words[i]
        i += 1
        if option == "-m":
            command = PythonCommand((), "module", value, tuple(words[i:]))
            break
        if option in ("-n", "-np"):
            try:
                n = positive_int(value)
            except argparse.ArgumentTypeError as exc:
                raise UsageError(f"{where}: -n {value}: {exc}") from None
        elif option in ("-x", "--env"):
            try:
                key, val = key_value(value)
            except argparse.ArgumentTypeError as exc:
                raise UsageError(f"{where}: -x: {exc}") from None
            env[key] = val
        else:
            wdir = os.path.abspath(value)
    else:
        command = command_of(words[i:])
    if n is None:
        raise UsageError(f"{where}: give its number of processes (-n N before the program)")
    return App(n, command, env, wdir)


def check_app(app: App, shim: bool) -> None:
    """Raise UsageError when the app's script or module cannot be found."""
    command = app.command
    if command.kind == "module":
        if not _module_exists(command.target, shim, app.wdir):
            raise UsageError(f"no module named {command.target!r}")
    elif command.kind == "script":
        program = command.target
        path = program if app.wdir is None else os.path.join(app.wdir, program)
        if not os.path.exists(path):
            raise UsageError(f"program {program!r} not found")
        if os.path.isdir(path) and not os.path.exists(os.path.join(path, "__main__.py")):
            raise UsageError(f"{program!r} is a directory without __main__.py")
    if app.wdir is not None and not os.path.isdir(app.wdir):
        raise UsageError(f"--wdir {app.wdir}: not a directory")


def start_args(apps: list[App]) -> list[str]:
    """The rank start script's arguments for these programs (minimpi/_start/minimpi_rank.py)."""
    if len(apps) > 1:
        return ["--apps=" + json.dumps([app.start_entry() for app in apps])]
    command = apps[0].command
    flags = ["--python-flags=" + json.dumps(list(command.flags))] if command.flags else []
    return flags + command.program_args()


def _absolute_paths(args: argparse.Namespace) -> None:
    """Paths given to run stay relative to where it was started, also with --wdir."""
    for name in ("output_dir", "trace", "hostfile"):
        value = getattr(args, name, None)
        if value:
            setattr(args, name, os.path.abspath(value))


def main(args: argparse.Namespace) -> int:
    problem = check_coll(args.coll)
    if problem:
        return _usage_error(problem)
    shim = getattr(args, "mpi4py_shim", True)
    try:
        apps = parse_apps(args.nprocs, args.module, list(getattr(args, "passthrough", [])))
        if getattr(args, "wdir", None):
            if not os.path.isdir(args.wdir):
                raise UsageError(f"--wdir {args.wdir}: not a directory")
            _absolute_paths(args)
            os.chdir(args.wdir)     # the template and every rank start there (and the program
        for app in apps:            # is found there), as under mpiexec -wdir
            check_app(app, shim)
    except UsageError as exc:
        return _usage_error(str(exc))
    args.nprocs = sum(app.n for app in apps)
    args.template_flags = apps[0].command.flags
    fork_server = getattr(args, "fork_server", True) and \
        os.environ.get("MINIMPI_FORK_SERVER", "1") != "0"
    why_fresh = "--no-fork-server" if not fork_server else \
        needs_fresh_interpreter(apps[0].command.flags)
    if why_fresh and getattr(args, "verbose", False):
        print(f"minimpi: ranks start as fresh interpreters: {why_fresh}", file=sys.stderr,
              flush=True)
    from .clean import sweep
    sweep()   # what jobs killed with kill -9 left on this host (launcher/clean.py)
    spec = JobSpec(
        nprocs=args.nprocs,
        program=START_SCRIPT,
        module=None,
        args=start_args(apps),
        env=extra_env(args),
        timeout=args.timeout,
        startup_timeout=args.startup_timeout,
        deadlock_timeout=args.deadlock_timeout,
        heartbeat_timeout=args.heartbeat_timeout,
        prefix=not args.no_prefix,
        output_dir=args.output_dir,
        bind=args.bind or "127.0.0.1",
        fork_server=not why_fresh,
        universe_size=getattr(args, "universe_size", None),
        rank_start=rank_start,
        fault_tolerant=getattr(args, "fault_tolerant", False),
    )
    from . import multihost
    try:   # ranks on other hosts, or on Slurm nodes: through agents (launcher/multihost.py)
        plan = multihost.plan_from_args(args, args.nprocs)
    except ValueError as exc:
        return _usage_error(str(exc))
    if plan is not None and spec.fault_tolerant:
        return _usage_error("--fault-tolerant runs local jobs only (not with --hosts, "
                            "--hostfile or Slurm yet)")
    def runner(spec: JobSpec) -> int:
        return run_job(spec) if plan is None else multihost.run_multihost(spec, plan)
    from . import dashboard
    try:
        board = dashboard.start(args, " : ".join(app.command.shown for app in apps))
    except OSError as exc:
        return _usage_error(f"--dashboard: cannot listen on {args.dashboard_bind} port "
                            f"{args.dashboard}: {exc.strerror or exc}")
    if board is not None:
        runner = partial(board.run, runner)
    from . import tracing
    session = tracing.prepare(args, " : ".join(app.command.shown for app in apps))
    if session is None:
        return runner(spec)
    spec.env = {**session.env(), **spec.env}
    try:
        return runner(spec)
    finally:
        session.finish()
