"""minimpi: a from-scratch, pure-Python MPI-style runtime.

    from minimpi import MPI          # mpi4py's names and behaviour
    comm = MPI.COMM_WORLD
    comm.send({"hello": comm.rank}, dest=(comm.rank + 1) % comm.size)

Run with ``minimpi run -n 4 script.py``; a plain ``python script.py`` is a world of size 1.
``minimpi.launch(fn, n=4, args=(...))`` starts a job from inside a program (launcher/embed.py).
Importing ``minimpi`` alone does not start anything; ``minimpi.MPI`` (or ``minimpi.COMM_WORLD``)
initializes the runtime, as importing ``mpi4py.MPI`` does.
"""
from __future__ import annotations

__version__ = "0.1.0"

from .constants import ANY_SOURCE, ANY_TAG, IN_PLACE, PROC_NULL, UNDEFINED  # noqa: E402,F401
from .errors import MinimpiError  # noqa: E402,F401


def __getattr__(name: str):
    if name == "COMM_WORLD":
        from .runtime.world import comm_world
        return comm_world()
    if name == "COMM_SELF":
        from .runtime.world import comm_self
        return comm_self()
    if name == "MPI":
        import importlib
        return importlib.import_module(".MPI", __name__)
    if name == "launch":   # start a job from a program (launcher/embed.py)
        from .launcher.embed import launch
        return launch
    raise AttributeError(f"module 'minimpi' has no attribute {name!r}")
