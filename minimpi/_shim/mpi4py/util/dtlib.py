"""mpi4py.util.dtlib shim: numpy dtypes to new MPI datatype handles and back.

``_np_dtype`` is the hook mpi4py's own dtlib has: where it is None (numpy missing, or a test
pretending so), ``to_numpy_dtype`` answers the specification numpy would take (a type code,
``(spec, shape)`` or a record dict) and ``from_numpy_dtype`` raises ``RuntimeError``.
"""
from typing import Any

import numpy

from minimpi.data.dtconvert import datatype_from_numpy, numpy_from_datatype

from .. import MPI  # noqa: F401  (binds mpi4py.MPI, as mpi4py's own import does)

__all__ = ["from_numpy_dtype", "to_numpy_dtype"]

_np_dtype = numpy.dtype


def from_numpy_dtype(dtype: Any):
    """A new MPI datatype handle (the caller frees it) for a numpy dtype-like."""
    if _np_dtype is None:
        raise RuntimeError("mpi4py.util.dtlib.from_numpy_dtype: numpy is not available")
    return datatype_from_numpy(dtype)


def to_numpy_dtype(datatype) -> Any:
    """The numpy dtype of one item of an MPI datatype (without numpy: its specification)."""
    return numpy_from_datatype(datatype, _np_dtype)
