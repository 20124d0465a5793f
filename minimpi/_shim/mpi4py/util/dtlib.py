"""mpi4py.util.dtlib shim: numpy dtypes to new MPI datatype handles and back."""
from minimpi.data.dtconvert import datatype_from_numpy as from_numpy_dtype  # noqa: F401
from minimpi.data.dtconvert import numpy_from_datatype as to_numpy_dtype  # noqa: F401

__all__ = ["from_numpy_dtype", "to_numpy_dtype"]
