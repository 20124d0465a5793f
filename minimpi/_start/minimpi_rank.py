"""Start a rank's program so that its directory cannot shadow the installed minimpi.

``python script.py`` puts the script's directory first on ``sys.path``, ``python -m module``
the current directory. When that directory holds a folder (or module) named ``minimpi`` -
typically a clone of minimpi itself - ``import minimpi`` in the program would find that one
instead of the package ``minimpi run`` belongs to: another version, or a source tree without
``minimpi.launcher``. ``minimpi run`` then starts the rank as
``python .../minimpi/_start/minimpi_rank.py (-m module | script) args...``: this directory
is first on ``sys.path`` (it holds nothing else to import), so minimpi is imported from where
it is installed; then the path is set as Python would have set it and the program runs as
``__main__``, exactly as ``python -m module`` / ``python script.py`` would run it.

Every rank starts this way, also where nothing would shadow minimpi: the threads that
numpy and minimpi start on import must start with asynchronous signals blocked.
"""
import os
import runpy
import sys


def main() -> None:
    load_minimpi()
    run_program(sys.argv[1:])


def load_minimpi() -> None:
    """Import numpy and minimpi the way every rank must: before the program, from where
    minimpi is installed, with the threads they start holding asynchronous signals back."""
    # Threads started while minimpi and numpy load (numpy's BLAS pool, minimpi's own) start
    # with asynchronous signals blocked, so the kernel hands a signal to the main thread
    # only, and a handler never runs half-way through a frame's delivery (see
    # minimpi.transports.signal_guard).
    from minimpi.transports.signal_guard import threads_started_blocked
    with threads_started_blocked():
        import numpy  # noqa: F401

        import minimpi  # noqa: F401  (imported first: the program's directory cannot shadow it)


def run_program(args: list) -> None:
    """Run ``script args...`` or ``-m module args...`` as ``__main__``, exactly as
    ``python script args...`` / ``python -m module args...`` would (``sys.argv``,
    ``sys.path[0]``), after taking the job secret out of the environment."""
    # the job secret leaves the environment before the program can start a subprocess
    from minimpi.runtime.bootstrap import take_secret
    take_secret()

    if args[:1] == ["-m"] and len(args) >= 2:
        module = args[1]
        sys.path[0] = os.getcwd()                       # as `python -m` does
        sys.argv = [module] + args[2:]                  # run_module puts the file in argv[0]
        _program_globals.append(runpy.run_module(module, run_name="__main__", alter_sys=True))
    else:
        program = args[0]
        sys.path[0] = os.path.dirname(os.path.realpath(program))   # as `python script` does
        sys.argv = args
        _program_globals.append(runpy.run_path(program, run_name="__main__"))


#: the program's globals, kept until the interpreter exits as ``python prog.py`` keeps them:
#: MPI's finalize runs at exit and must still see what the program holds (a request left
#: open is reported; runpy would otherwise drop the namespace as soon as the program ends)
_program_globals: list = []


if __name__ == "__main__":
    main()
