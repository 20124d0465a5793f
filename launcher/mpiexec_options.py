"""The mpirun/mpiexec options the ``mpiexec`` and ``mpirun`` commands take, and their answer
to the others (see :mod:`minimpi.launcher.mpiexec`).

:data:`OPTIONS` maps each accepted spelling (without its leading dashes) onto what it does
here, and :data:`REFUSED` gives the one-line answer to other mpirun options. Each handler
records the option in a :class:`MpiexecState`; ``mpiexec.translate`` turns that into
``minimpi run``'s arguments.
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from typing import Callable, Optional

#: Open MPI MCA parameter families that only choose or tune Open MPI's own components for
#: moving bytes (byte transfer layers, matching, one-sided, collectives, I/O): minimpi has
#: none of those components, and they change no result, so they are accepted with a note
_MCA_TUNING = re.compile(
    r"(btl|pml|mtl|osc|coll|bml|io|fs|fcoll|sharedfp|vprotocol|op|part|smsc|accelerator|"
    r"mpi_leave_pinned|opal_cuda_support|orte_base_help_aggregate)"
    r"(_.*)?")


class MpiexecUsageError(ValueError):
    """A command line the mpiexec command does not run (exit 2, the message on one line)."""


@dataclass
class Section:
    """One program of the command line (several with ``:``) and its own options."""
    n: Optional[int] = None
    env: list[tuple[str, str]] = field(default_factory=list)
    wdir: Optional[str] = None
    program: list[str] = field(default_factory=list)


class MpiexecState:
    """What the options of one command line asked for, as they are read."""

    def __init__(self, name: str, environ) -> None:
        self.name = name
        self.environ = environ
        self.sections = [Section()]
        self.run: list[str] = []            # global minimpi run options
        self.prefix = False
        self.hosts: Optional[str] = None
        self.hostfile: Optional[str] = None
        self.per_node: Optional[int] = None
        self.bind: Optional[str] = None
        self.bind_count = 1
        self.map: Optional[str] = None
        self.hwthreads = False
        self.timeout_given = False
        self.quiet = False
        self.notes: list[str] = []
        self.text: Optional[str] = None

    @property
    def section(self) -> Section:
        return self.sections[-1]

    @property
    def first(self) -> bool:
        return len(self.sections) == 1

    def refuse(self, spelled: str, why: str) -> MpiexecUsageError:
        return MpiexecUsageError(f"{self.name} option {spelled} is not supported ({why})")


def _count(state: MpiexecState, spelled: str, value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise MpiexecUsageError(f"{state.name} {spelled} {value}: expected a number of "
                                f"processes >= 1")
    return n


def _key_value(state: MpiexecState, spelled: str, value: str) -> tuple[str, str]:
    key, eq, val = value.partition("=")
    if not key:
        raise MpiexecUsageError(f"{state.name} {spelled} {value}: expected VAR or VAR=VALUE")
    if eq:
        return key, val
    if key not in state.environ:    # Open MPI exports the launcher's value; unset: nothing
        raise MpiexecUsageError(f"{state.name} {spelled} {key}: {key} is not set here "
                                f"(give {key}=VALUE)")
    return key, state.environ[key]


# ---- the accepted options: what each does (handler) --------------------------------------
def _np(state, spelled, value):
    state.section.n = _count(state, spelled, value)


def _per_node(state, spelled, value):
    state.per_node = _count(state, spelled, value)


def _pernode(state, spelled):
    state.per_node = 1


def _hosts(state, spelled, value):
    if not state.first:
        raise state.refuse(spelled, "hosts per program after ':'; give -H/--host before the "
                                    "first program, or use minimpi's --hosts")
    state.hosts = value if state.hosts is None else f"{state.hosts},{value}"


def _hostfile(state, spelled, value):
    state.hostfile = os.path.abspath(value)


def _export(state, spelled, value):                      # -x VAR / -x VAR=VALUE
    state.section.env.append(_key_value(state, spelled, value))


def env_pair(state, spelled, key, val):                 # -genv VAR VALUE (Hydra)
    if not key:
        raise MpiexecUsageError(f"{state.name} {spelled}: expected VAR VALUE")
    if state.first or spelled.lstrip("-") == "env":
        state.section.env.append((key, val))
    else:                                                # -genv after ':' is still global
        state.sections[0].env.append((key, val))


def _wdir(state, spelled, value):
    if not os.path.isdir(value):
        raise MpiexecUsageError(f"{state.name} {spelled} {value}: not a directory")
    state.section.wdir = os.path.abspath(value)


def _bind_to(state, spelled, value):
    level, _, modifier = value.partition(":")
    level = level.lower()
    if level not in ("none", "core", "hwthread", "socket", "package", "numa"):
        raise state.refuse(f"{spelled} {value}", "minimpi's --bind-to takes none, core, "
                                                 "hwthread, socket, package, numa")
    state.bind = level
    if modifier and modifier.isdigit():                  # Hydra: -bind-to core:2
        state.bind_count = int(modifier)
    elif modifier and modifier.lower() not in ("overload-allowed", "if-supported"):
        raise state.refuse(f"{spelled} {value}", f"the modifier {modifier} has no minimpi "
                                                 f"equivalent")


def _map_by(state, spelled, value):
    level, *modifiers = value.split(":")
    level = level.lower()
    if level == "ppr":                                   # ppr:N:node
        if len(modifiers) != 2 or modifiers[1].lower() != "node":
            raise state.refuse(f"{spelled} {value}", "minimpi places N processes per node "
                                                     "only: ppr:N:node, or -N N")
        state.per_node = _count(state, spelled, modifiers[0])
        return
    if level not in ("slot", "core", "hwthread", "socket", "package", "numa", "node"):
        raise state.refuse(f"{spelled} {value}", "minimpi's --map-by takes slot, core, "
                                                 "hwthread, socket, package, numa, node")
    state.map = level
    for modifier in modifiers:
        key, _, number = modifier.partition("=")
        if key.lower() == "pe" and number.isdigit() and int(number) >= 1:
            state.bind_count = int(number)
        elif key.lower() == "oversubscribe":
            state.run.append("--oversubscribe")
        elif key.lower() not in ("span", "hwtcpus", "corecpus"):
            raise state.refuse(f"{spelled} {value}", f"the modifier {modifier} has no "
                                                     f"minimpi equivalent")
        if key.lower() == "hwtcpus":
            state.hwthreads = True


def _cpus_per_proc(state, spelled, value):
    state.bind_count = _count(state, spelled, value)
    state.bind = state.bind or "core"


def _flag_to(*run_args: str) -> Callable:
    def handler(state, spelled):
        for word in run_args:
            if word not in state.run:
                state.run.append(word)
    return handler


def _set_bind(level: str) -> Callable:
    def handler(state, spelled):
        state.bind = level
    return handler


def _set_map(level: str) -> Callable:
    def handler(state, spelled):
        state.map = level
    return handler


def _prefix(state, spelled):
    state.prefix = True


def _hwthreads(state, spelled):
    state.hwthreads = True


def _output_dir(state, spelled, value):
    state.run += ["--output-dir", os.path.abspath(value)]


def _timeout(state, spelled, value):
    state.run += ["--timeout", value]
    state.timeout_given = True


def _usize(state, spelled, value):
    if not value.isdigit() or int(value) < 1:
        raise state.refuse(f"{spelled} {value}", "minimpi's --universe-size takes a number "
                                                 ">= 1")
    state.run += ["--universe-size", value]


def _launcher(state, spelled, value):
    mapping = {"ssh": "ssh", "rsh": "ssh", "slurm": "slurm", "fork": "local"}
    if value not in mapping:
        raise state.refuse(f"{spelled} {value}", "minimpi's --launcher takes ssh, slurm or "
                                                 "local (fork)")
    state.run += ["--launcher", mapping[value]]


def _rsh(state, spelled, value):
    state.run += ["--rsh", value]


def _iface(state, spelled, value):
    state.run += ["--iface", value]


def _stdin(state, spelled, value):
    if value != "0":
        raise state.refuse(f"{spelled} {value}", "stdin always goes to rank 0")


def _mca(state, spelled, key, value):
    if key == "plm_rsh_agent":
        state.run += ["--rsh", value]
    elif key == "rmaps_base_oversubscribe" and value.lower() in ("1", "true", "yes"):
        state.run.append("--oversubscribe")
    elif key == "mpi_yield_when_idle" and value.lower() in ("1", "true", "yes"):
        state.run += ["--progress", "yield"]
    elif key == "hwloc_base_binding_policy":
        _bind_to(state, spelled, value)
    elif key == "hwloc_base_report_bindings" and value.lower() in ("1", "true", "yes"):
        _flag_to("--report-bindings")(state, spelled)
    elif _MCA_TUNING.fullmatch(key):
        state.notes.append(f"{spelled} {key} {value} ignored: it chooses or tunes Open MPI's "
                           f"own components (minimpi picks its transport by itself; "
                           f"--transport and --coll set it)")
    else:
        raise state.refuse(f"{spelled} {key}", "an Open MPI parameter minimpi has no "
                                               "equivalent for")


def _quiet(state, spelled):
    state.quiet = True


def _accept(state, spelled):
    pass


def _version(state, spelled):
    from minimpi import __version__
    state.text = (f"{state.name} (minimpi {__version__}): minimpi's mpiexec, which runs "
                  f"`minimpi run`; Python {sys.version.split()[0]} at {sys.executable}")


#: what ``--help`` leaves in MpiexecState.text (mpiexec.help_text prints the table)
HELP = "\0help"


def _help(state, spelled):
    state.text = HELP


#: accepted options: (spellings without leading dashes, values, handler, what it does here)
OPTIONS: list[tuple[tuple[str, ...], int, Callable, str]] = [
    (("n", "np", "c"), 1, _np, "-n N: number of processes (per program with ':')"),
    (("N", "npernode", "ppn"), 1, _per_node,
     "processes per host: -n, or --hosts H:N,... with -H/--hostfile"),
    (("pernode",), 0, _pernode, "one process per host (-N 1)"),
    (("H", "host", "hosts", "hostlist", "machine", "machines", "machinelist"), 1, _hosts,
     "--hosts H[:N],... (a host named twice has twice the slots)"),
    (("f", "hostfile", "machinefile", "default-hostfile"), 1, _hostfile, "--hostfile FILE"),
    (("x",), 1, _export, "-x VAR=VALUE (-x VAR exports this shell's value)"),
    (("genv", "env"), 2, env_pair,
     "-x VAR=VALUE (-env after ':' for that program only)"),
    (("genvall", "envall"), 0, _accept, "(the default: ranks get this environment)"),
    (("wdir", "wd", "dir", "d"), 1, _wdir, "--wdir DIR (per program after ':')"),
    (("bind-to", "binding"), 1, _bind_to, "--bind-to none|core|hwthread|socket|numa[:N]"),
    (("bind-to-core",), 0, _set_bind("core"), "--bind-to core"),
    (("bind-to-socket",), 0, _set_bind("socket"), "--bind-to socket"),
    (("map-by",), 1, _map_by,
     "--map-by slot|core|hwthread|socket|numa|node; ppr:N:node is -N N; :PE=n binds n "
     "cores each"),
    (("bycore",), 0, _set_map("core"), "--map-by core"),
    (("byslot",), 0, _set_map("slot"), "--map-by slot"),
    (("bynode",), 0, _set_map("node"), "--map-by node"),
    (("cpus-per-proc", "cpus-per-rank"), 1, _cpus_per_proc, "--bind-to core:N"),
    (("use-hwthread-cpus",), 0, _hwthreads, "binds to hardware threads instead of cores"),
    (("report-bindings",), 0, _flag_to("--report-bindings"), "--report-bindings"),
    (("tag-output", "l", "prepend-rank"), 0, _prefix,
     "prefix each output line with [rank] (minimpi run's default)"),
    (("output-filename",), 1, _output_dir,
     "--output-dir DIR (DIR/rank.N.stdout and .stderr; still shown here)"),
    (("oversubscribe",), 0, _flag_to("--oversubscribe"), "--oversubscribe"),
    (("allow-run-as-root",), 0, _accept, "(minimpi runs as root anyway)"),
    (("mca", "gmca", "omca"), 2, _mca,
     "plm_rsh_agent is --rsh, rmaps_base_oversubscribe --oversubscribe, "
     "mpi_yield_when_idle --progress yield, hwloc_base_binding_policy --bind-to; "
     "btl/pml/coll/osc/... are Open MPI's own components: ignored with a note"),
    (("timeout",), 1, _timeout, "--timeout SECONDS (also MPIEXEC_TIMEOUT)"),
    (("usize",), 1, _usize, "--universe-size N"),
    (("launcher", "bootstrap"), 1, _launcher, "--launcher ssh|slurm|local"),
    (("launcher-exec", "bootstrap-exec"), 1, _rsh, "--rsh CMD"),
    (("iface",), 1, _iface, "--iface NAME"),
    (("stdin",), 1, _stdin, "0 only: stdin goes to rank 0"),
    (("v", "verbose"), 0, _flag_to("--verbose"), "--verbose"),
    (("q", "quiet"), 0, _quiet, "leaves out minimpi's notes"),
    (("disable-x", "noprefix"), 0, _accept, "(nothing to do)"),
    (("V", "version", "info"), 0, _version, "says which mpiexec this is"),
    (("h", "help"), 0, _help, "this list"),
]
_BY_NAME = {name: entry for entry in OPTIONS for name in entry[0]}


def by_name(option: str):
    """The :data:`OPTIONS` entry of a spelling without its dashes (None: not accepted)."""
    return _BY_NAME.get(option)

#: what other mpirun options are answered with: the minimpi option that does the job, or
#: why there is none
REFUSED: dict[str, str] = {
    "genvnone": "ranks always get this environment; -x VAR=VALUE sets more",
    "envnone": "ranks always get this environment; -x VAR=VALUE sets more",
    "genvlist": "ranks always get this whole environment; -x VAR exports one variable",
    "envlist": "ranks always get this whole environment; -x VAR exports one variable",
    "timestamp-output": "output lines are forwarded as they come, without timestamps",
    "merge-stderr-to-stdout": "stderr stays stderr; use 2>&1",
    "outfile-pattern": "use minimpi's --output-dir DIR: DIR/rank.N.stdout",
    "errfile-pattern": "use minimpi's --output-dir DIR: DIR/rank.N.stderr",
    "outfile": "use minimpi's --output-dir DIR: DIR/rank.N.stdout",
    "errfile": "use minimpi's --output-dir DIR: DIR/rank.N.stderr",
    "prepend-pattern": "-l/--tag-output prefix lines with [rank]",
    "output-from": "use minimpi's --output-dir DIR and read DIR/rank.N.stdout",
    "xml": "output is plain text", "xml-file": "output is plain text",
    "xterm": "output is forwarded to this terminal",
    "configfile": "give the programs on the command line, separated by ':'",
    "app": "give the programs on the command line, separated by ':'",
    "rankfile": "ranks are placed in order (--hosts, -N); bind with --bind-to",
    "rankmap": "ranks are placed in order (--hosts, -N)",
    "nolocal": "ranks run where --hosts/--hostfile place them, this host included",
    "skip-launch-node": "ranks run where --hosts/--hostfile place them, this host included",
    "nooversubscribe": "minimpi runs any number of ranks on this host; with --hosts, more "
                       "ranks than slots already needs --oversubscribe",
    "npersocket": "use --map-by socket to spread ranks over sockets",
    "cpu-set": "use minimpi's --bind-to core (round-robin over the CPUs mpiexec may use: "
               "restrict those with taskset)",
    "cpu-list": "use minimpi's --bind-to core (round-robin over the CPUs mpiexec may use: "
                "restrict those with taskset)",
    "membind": "memory binding is not supported",
    "prefix": "use minimpi's --remote-python PATH for the Python on other hosts",
    "path": "give the program's path",
    "preload-binary": "hosts must share the program's path",
    "preload-files": "hosts must share the program's files",
    "display-map": "use --report-bindings to see where ranks run",
    "display-allocation": "use --report-bindings to see where ranks run",
    "display-devel-map": "use --report-bindings to see where ranks run",
    "report-pid": "not supported", "report-uri": "not supported",
    "enable-recovery": "use minimpi's --fault-tolerant: survivors go on (ULFM), failed "
                       "ranks are not restarted",
    "max-restarts": "failed ranks are not restarted (see --fault-tolerant)",
    "continuous": "a job ends when its ranks end",
    "enable-x": "X forwarding is not supported",
    "gpus-per-proc": "set CUDA_VISIBLE_DEVICES per rank yourself", "g": "set "
    "CUDA_VISIBLE_DEVICES per rank yourself",
    "pmixmca": "minimpi has no PMIx", "prtemca": "minimpi has no PRRTE",
    "tune": "set variables with -x VAR=VALUE", "am": "set variables with -x VAR=VALUE",
    "personality": "not supported", "dvm": "not supported",
}


