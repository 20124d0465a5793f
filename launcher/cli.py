"""The ``minimpi`` command: a tiny registry of subcommands, each imported only when used.

To add a subcommand, add one line to :data:`SUBCOMMANDS`. The named module must define

    add_arguments(parser: argparse.ArgumentParser) -> None
    main(args: argparse.Namespace) -> int          # the exit code

and may define ``split_argv(argv) -> (own_argv, passthrough)`` when it takes a program's
arguments verbatim (as ``run`` does).
"""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import Optional

#: (name, module path, one-line help). Modules are imported lazily.
SUBCOMMANDS: list[tuple[str, str, str]] = [
    ("run", "minimpi.launcher.run", "start N ranks of a Python program (like mpirun)"),
    ("draw", "minimpi.launcher.draw_cmd", "draw a collective algorithm's schedule or one-sided epochs (text, SVG, PNG)"),
    ("explain", "minimpi.launcher.explain_cmd", "which collective algorithm auto picks, and why"),
    ("view", "minimpi.launcher.dashboard.view_cmd", "serve the dashboard's page over a trace recorded with --trace"),
    ("keygen", "minimpi.launcher.keygen", "write ~/.minimpi/secret, the key of jobs started by srun"),
    ("clean", "minimpi.launcher.clean",
     "remove shared memory and directories left by killed jobs (this user's, ended jobs only)"),
]


def _top_help() -> str:
    width = max(len(n) for n, _, _ in SUBCOMMANDS)
    lines = ["usage: minimpi <command> [options] ...", "", "commands:"]
    lines += [f"  {name.ljust(width)}  {text}" for name, _, text in SUBCOMMANDS]
    lines += ["", "`minimpi <command> --help` shows a command's options."]
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    if argv is None:                 # the minimpi command itself (not a caller's function call)
        end_without_collections()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_top_help())
        return 0 if argv else 2
    name = argv[0]
    entry = next((e for e in SUBCOMMANDS if e[0] == name), None)
    if entry is None:
        print(f"minimpi: unknown command {name!r}\n\n{_top_help()}", file=sys.stderr)
        return 2
    module = importlib.import_module(entry[1])
    parser = argparse.ArgumentParser(prog=f"minimpi {name}", description=entry[2],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    module.add_arguments(parser)
    rest = argv[1:]
    if hasattr(module, "split_argv"):
        own, passthrough = module.split_argv(parser, rest)
        args = parser.parse_args(own)
        args.passthrough = passthrough
    else:
        args = parser.parse_args(rest)
    return int(module.main(args) or 0)


def end_without_collections() -> None:
    """Freeze the heap once the exit handlers ran, so that the interpreter's exit does not
    run garbage collections over it (~25 ms, a tenth of a small job's whole command): for
    the ``minimpi`` (and ``mpiexec``) command's own process only, whose objects need no
    finalizer at exit (what they hold is closed by then)."""
    import atexit
    import gc
    atexit.register(gc.freeze)     # registered first: runs after every other exit handler


def entry_point() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry_point()
