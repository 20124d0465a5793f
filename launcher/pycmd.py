"""A ``python ...`` command line as mpiexec users type it: interpreter options, then a script,
``-m module`` or ``-c code``, then the program's arguments.

    parse_python_command(["-u", "-X", "dev", "-c", "print(1)", "a"])
        -> PythonCommand(flags=("-X", "dev"), kind="code", target="print(1)", args=("a",))

The ranks run under the Python that runs minimpi (``sys.executable``), with these options on
its command line, so ``sys.flags``, ``sys.warnoptions`` and ``sys._xoptions`` are what
``python OPTIONS prog.py`` gives. Options are normalized one per word (``-OO`` is ``-O -O``,
``-Xdev`` is ``-X dev``); ``-u`` is dropped, since every rank already runs with
``PYTHONUNBUFFERED=1``, which is the same thing. The options a rank cannot honour are refused
with the reason (:class:`PythonArgsError`).
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from typing import Optional, Sequence

#: interpreter options without a value (-? is -h)
_NO_VALUE = set("bBdEhiIOPqRsSuvVx?")
#: interpreter options that take a value (attached, -Wignore, or the next word)
_WITH_VALUE = set("cmWX")
#: long options that take a value
_LONG_WITH_VALUE = {"--check-hash-based-pycs"}
#: what a rank cannot do, by option
REFUSED = {
    "-i": "it opens an interactive prompt after the program, and ranks have no terminal",
    "-E": "it ignores PYTHONPATH, through which the ranks find minimpi's mpi4py",
    "-I": "isolated mode ignores PYTHONPATH, through which the ranks find minimpi's mpi4py",
    "-S": "without the site module the ranks cannot import minimpi and numpy",
    "-x": "skipping the program's first line is not supported",
    "-h": "it prints help instead of running a program",
    "-?": "it prints help instead of running a program",
    "-V": "it prints the version instead of running a program",
    "--help": "it prints help instead of running a program",
    "--help-env": "it prints help instead of running a program",
    "--help-xoptions": "it prints help instead of running a program",
    "--help-all": "it prints help instead of running a program",
    "--version": "it prints the version instead of running a program",
}
#: options that change nothing for a rank: -u (every rank has PYTHONUNBUFFERED=1), -q (the
#: interactive banner), -R (hash randomization is always on)
_REDUNDANT = {"-u", "-q", "-R"}
#: options whose output comes from every process as it starts: a rank must start as a fresh
#: interpreter for it to say anything about that rank (see :func:`needs_fresh_interpreter`)
_PER_PROCESS_OUTPUT = {("-v",), ("-X", "importtime")}

_PYTHON_NAME = re.compile(r"python[\d.]*")


class PythonArgsError(ValueError):
    """A ``python ...`` command line a rank cannot run (the message says why)."""


@dataclass(frozen=True)
class PythonCommand:
    """What one program of a job runs: interpreter options and a script, module or code."""
    flags: tuple[str, ...]
    kind: str               # "script" | "module" | "code"
    target: str             # the script's path, the module's name or the code
    args: tuple[str, ...] = ()

    def program_args(self) -> list[str]:
        """The program part of the rank start script's command line (what follows
        ``python [options]``): ``script args``, ``-m module args`` or ``-c code args``."""
        if self.kind == "module":
            return ["-m", self.target, *self.args]
        if self.kind == "code":
            return ["-c", self.target, *self.args]
        return [self.target, *self.args]

    @property
    def shown(self) -> str:
        """How the program is named in messages: the script, ``-m module`` or ``-c``."""
        return {"module": f"-m {self.target}", "code": "-c"}.get(self.kind, self.target)


def is_interpreter(word: str) -> bool:
    """Whether ``word`` names a Python interpreter (``python``, ``python3.11``, a path to one,
    or this interpreter) rather than a script - a non-executable file named ``python`` in
    the current directory is a script."""
    if os.path.exists(word) and not os.access(word, os.X_OK):
        return False
    if _PYTHON_NAME.fullmatch(os.path.basename(word)):
        return True
    return os.sep in word and os.path.realpath(word) == os.path.realpath(sys.executable)


def parse_python_command(argv: Sequence[str]) -> PythonCommand:
    """``argv`` after the interpreter's name: ``[options] (script | -m mod | -c code) args``."""
    flags: list[str] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            i += 1
            break
        if not word.startswith("-") or word == "-":
            break
        if word.startswith("--"):
            name, eq, value = word.partition("=")
            if name in REFUSED:
                raise PythonArgsError(f"python {name} is not supported: {REFUSED[name]}")
            if name not in _LONG_WITH_VALUE:
                raise PythonArgsError(f"python {name}: unknown interpreter option")
            if not eq:
                i += 1
                value = _value_of(argv, i, name)
            flags += [name, value]
            i += 1
            continue
        j = 1
        while j < len(word):
            letter = word[j]
            option = "-" + letter
            if letter in _WITH_VALUE:
                value = word[j + 1:]
                if not value:
                    i += 1
                    value = _value_of(argv, i, option)
                rest = tuple(argv[i + 1:])
                if letter == "c":
                    return PythonCommand(tuple(flags), "code", value, rest)
                if letter == "m":
                    return PythonCommand(tuple(flags), "module", value, rest)
                flags += [option, value]
                break
            if letter not in _NO_VALUE:
                raise PythonArgsError(f"python {option}: unknown interpreter option")
            if option in REFUSED:
                raise PythonArgsError(f"python {option} is not supported: {REFUSED[option]}")
            if option not in _REDUNDANT:
                flags.append(option)
            j += 1
        i += 1
    if i >= len(argv):
        raise PythonArgsError("python: no program to run (expected a script, -m MODULE or "
                              "-c CODE)")
    if argv[i] == "-":
        raise PythonArgsError("python -: reading the program from stdin is not supported "
                              "(stdin goes to rank 0 only); give a script, -m MODULE or -c CODE")
    return PythonCommand(tuple(flags), "script", argv[i], tuple(argv[i + 1:]))


def _value_of(argv: Sequence[str], i: int, option: str) -> str:
    if i >= len(argv):
        raise PythonArgsError(f"python {option}: the option needs a value")
    return argv[i]


def split_program(argv: Sequence[str]) -> Optional[PythonCommand]:
    """mpiexec habit: ``python [options] ...`` as the program. The command it runs, or None
    when ``argv`` does not start with an interpreter (it is ``script args`` then)."""
    if not argv or not is_interpreter(argv[0]):
        return None
    return parse_python_command(argv[1:])


def needs_fresh_interpreter(flags: Sequence[str]) -> Optional[str]:
    """Why ranks with these interpreter options must each start as a fresh interpreter
    (None: they may fork from a template started with the same options)."""
    words = list(flags)
    for option in _PER_PROCESS_OUTPUT:
        n = len(option)
        if any(tuple(words[k:k + n]) == option for k in range(len(words) - n + 1)):
            return (f"python {' '.join(option)} reports on each process as it starts "
                    f"(a forked rank would not)")
    return None
