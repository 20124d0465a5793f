"""mpi4py shim: forwards to minimpi (``minimpi run`` puts this directory on PYTHONPATH)."""
from minimpi.rc import MPI4PY_VERSION as __version__  # noqa: F401
from minimpi.rc import get_config, get_include, profile, rc

__minimpi_shim__ = True
__all__ = ["MPI", "rc", "get_config", "get_include", "profile"]
