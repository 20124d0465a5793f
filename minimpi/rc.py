"""mpi4py's package-level API (``mpi4py.rc``, ``get_config``, ``python -m mpi4py``) for the shim.

The ``mpi4py`` shim package (``minimpi/_shim/mpi4py``) only forwards to this module, so
everything mpi4py-specific that is not in ``minimpi.MPI`` lives here.
"""
from __future__ import annotations

import os
import runpy
import sys
from typing import Any, Dict, List, Optional

from .errors import UnsupportedError

#: The mpi4py version whose API minimpi.MPI follows (what ``mpi4py.__version__`` reports).
MPI4PY_VERSION = "4.0.0"


class RC:
    """``mpi4py.rc``: runtime options read when ``MPI`` is first imported.

    ``initialize=False`` delays initialization until ``MPI.Init()`` (or the first use of
    ``COMM_WORLD``); ``finalize=False`` leaves finalization to an explicit ``MPI.Finalize()``
    (minimpi still delivers queued sends at exit). The others are accepted and ignored:
    minimpi always provides ``THREAD_MULTIPLE`` (whatever ``threads``/``thread_level`` ask),
    has one error mode (exceptions) and no Mprobe-based recv.
    """

    _defaults: Dict[str, Any] = {
        "initialize": True, "threads": True, "thread_level": "multiple", "finalize": None,
        "fast_reduce": True, "recv_mprobe": True, "irecv_bufsz": 32768, "errors": "exception",
    }

    def __init__(self, **kwargs: Any) -> None:
        self.__dict__.update(self._defaults)
        self(**kwargs)

    def __call__(self, **kwargs: Any) -> None:
        for key, value in kwargs.items():
            setattr(self, key, value)

    def __setattr__(self, key: str, value: Any) -> None:
        # A misspelt option would otherwise be silently ignored.
        if key not in self._defaults:
            raise TypeError(f"mpi4py.rc: unexpected option {key!r} "
                            f"(expected one of {', '.join(self._defaults)})")
        self.__dict__[key] = value

    def __repr__(self) -> str:
        return f"<mpi4py.rc: {self.__dict__}>"


rc = RC()


def get_config() -> Dict[str, str]:
    """What mpi4py was "built" with: here, minimpi (no C compiler, no MPI library)."""
    from . import __version__
    return {"mpicc": "", "mpi_implementation": "minimpi", "minimpi_version": __version__}


def get_include() -> str:
    """mpi4py's C header directory (``mpi4py/mpi4py.h``, for C and Cython extensions that use
    ``MPI_Comm`` and friends through mpi4py's C API).

    minimpi is pure Python: there is no C MPI library, no ``MPI_Comm`` and no C API that
    such a header could declare, so this is refused (``NotImplementedError`` naming the
    feature) rather than answered with a directory a compiler would search in vain.
    """
    raise UnsupportedError("mpi4py.get_include: minimpi has no C API (no mpi4py.h header, "
                           "no C MPI library to build extensions against); C/Cython "
                           "extensions that use mpi4py's C API need a real MPI and mpi4py")


def profile(name: str = "", *, path: Any = None, logfile: Optional[str] = None) -> None:
    """Locate and load a C profiling library, as mpi4py does before ``MPI`` is imported.

    ``name`` is a file name or a short name (``"m"`` finds ``libm.so``) searched for in
    ``path`` (a directory or a list of them; the platform's library directories if omitted).
    A library that cannot be found raises ValueError; one found but not loadable warns
    (UserWarning). minimpi makes no C MPI calls, so a loaded library has nothing to intercept.
    """
    import ctypes
    import warnings
    if not name:
        raise ValueError("mpi4py.profile: expected a library name")
    found = _find_library(os.fsdecode(name), path)
    if found is None:
        raise ValueError(f"mpi4py.profile: library {name!r} not found"
                         + (f" in {path!r}" if path is not None else ""))
    try:
        ctypes.CDLL(found, mode=getattr(ctypes, "RTLD_GLOBAL", 0))
    except OSError as exc:
        warnings.warn(f"mpi4py.profile: cannot load {found!r}: {exc}", UserWarning, stacklevel=2)
    if logfile:
        os.environ["MPE_LOGFILE_PREFIX"] = os.fsdecode(logfile)


def _find_library(name: str, path: Any) -> Optional[str]:
    if path is None:
        import sysconfig
        path = [sysconfig.get_config_var("LIBDIR") or "/usr/lib", "/lib", "/usr/lib",
                "/usr/local/lib"]
    elif isinstance(path, (str, bytes, os.PathLike)):
        path = [path]
    candidates = [name] if os.sep in name else [name, f"lib{name}.so", f"{name}.so"]
    if os.sep in name and os.path.isfile(name):
        return name
    for directory in path:
        for candidate in candidates:
            full = os.path.join(os.fsdecode(directory), candidate)
            if os.path.isfile(full):
                return full
    return None


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m mpi4py [-rc key=value,...] (<pyfile> | -m <module> | -c <cmd> | -) [args]``.

    Runs the program; an uncaught exception ends the whole job (minimpi does that for every
    program started by ``minimpi run``, so this is mostly for compatibility).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    usage = "usage: python -m mpi4py [-rc key=value,...] <pyfile> | -m <mod> | -c <cmd> [args]"
    while argv and argv[0] in ("-rc", "--rc"):
        for item in argv[1].split(","):
            key, _, value = item.partition("=")
            rc(**{key.strip(): _rc_value(value.strip())})
        argv = argv[2:]
    if not argv or argv[0] in ("-h", "--help"):
        print(usage, file=sys.stderr if not argv else sys.stdout)
        return 0 if argv else 1
    if argv[0] in ("--version", "-version"):
        print(f"mpi4py {MPI4PY_VERSION} (minimpi shim)")
        return 0
    if argv[0] == "-m" and len(argv) > 1:
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    elif argv[0] == "-c" and len(argv) > 1:
        sys.argv = ["-c"] + argv[2:]
        exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})
    else:
        sys.argv = argv
        sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
        runpy.run_path(argv[0], run_name="__main__")
    return 0


def _rc_value(text: str) -> Any:
    low = text.lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    try:
        return int(text)
    except ValueError:
        return text
