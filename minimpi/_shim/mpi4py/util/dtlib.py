"""mpi4py.util.dtlib shim."""
from minimpi.data.datatypes import from_numpy_dtype, to_numpy_dtype  # noqa: F401

__all__ = ["from_numpy_dtype", "to_numpy_dtype"]
