"""mpi4py shim: forwards to minimpi (``minimpi run`` puts this directory on PYTHONPATH)."""
import sys

from minimpi.rc import MPI4PY_VERSION as __version__  # noqa: F401
from minimpi.rc import get_config, get_include, profile, rc

__minimpi_shim__ = True
# mpi4py lets programs write ``import mpi4py.rc`` (then ``mpi4py.rc.thread_level = ...``):
# the options object doubles as a submodule.
sys.modules[f"{__name__}.rc"] = rc
__all__ = ["MPI", "rc", "get_config", "get_include", "profile"]
