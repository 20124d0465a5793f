"""Fortran's sized datatypes are the ones MPICH 5 gives on x86-64 Linux (issue 29: they were
null handles, and programs of a course that send ``MPI.INTEGER4`` failed on that alone).
What MPICH defines is checked against mpi4py 4.1.2 + MPICH 5.0.2: INTEGER1/2/4/8, REAL4/8/16
and COMPLEX8/16/32 are named types of their own; LOGICALn, INTEGER16, REAL2 and COMPLEX4
stay null; ``Match_size`` answers with the sized types."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

from minimpi import MPI
from minimpi.data import datatypes as D
from minimpi.runtime.inproc import run_threads

DEFINED = {"INTEGER1": np.int8, "INTEGER2": np.int16, "INTEGER4": np.int32,
           "INTEGER8": np.int64, "REAL4": np.float32, "REAL8": np.float64,
           "REAL16": np.longdouble, "COMPLEX8": np.complex64, "COMPLEX16": np.complex128,
           "COMPLEX32": np.clongdouble}
NULL = ["LOGICAL1", "LOGICAL2", "LOGICAL4", "LOGICAL8", "LOGICAL16", "INTEGER16", "REAL2",
        "COMPLEX4"]
#: mpi4py's tocode() of each, under MPICH
CODES = {"INTEGER1": "i1", "INTEGER2": "i2", "INTEGER4": "i4", "INTEGER8": "i8",
         "REAL4": "f4", "REAL8": "f8", "REAL16": "f16", "COMPLEX8": "c8", "COMPLEX16": "c16",
         "COMPLEX32": "c32"}

pytestmark = pytest.mark.skipif(np.dtype(np.longdouble).itemsize != 16,
                                reason="REAL16/COMPLEX32 are defined where long double has 16 bytes")


@pytest.mark.parametrize("name", sorted(DEFINED))
def test_a_sized_fortran_type_is_a_named_type_of_its_size(name):
    t = getattr(MPI, name)
    size = np.dtype(DEFINED[name]).itemsize
    assert t != MPI.DATATYPE_NULL and t
    assert (t.Get_size(), t.Get_extent(), t.Get_true_extent()) == (size, (0, size), (0, size))
    assert t.Get_envelope() == (0, 0, 0, 0, MPI.COMBINER_NAMED)
    assert t.is_named and t.is_predefined and t.Get_name() == name
    assert t.tocode() == CODES[name] and MPI.Datatype.fromcode(t.tocode()).size == size
    c_type = MPI.Datatype.fromcode(t.tocode())     # (mpi4py's test_datatype compares these)
    assert (t.typechar, t.typestr) == (c_type.typechar, c_type.typestr)
    assert pickle.loads(pickle.dumps(t)) is t
    from minimpi._shim.mpi4py.util import dtlib
    assert dtlib.to_numpy_dtype(t) == np.dtype(DEFINED[name])
    with pytest.raises(MPI.Exception):
        t.Free()


def test_sized_types_are_handles_of_their_own():
    assert MPI.INTEGER4 != MPI.INTEGER and MPI.INTEGER4 != MPI.INT32_T
    assert MPI.REAL8 != MPI.DOUBLE_PRECISION and MPI.REAL8 != MPI.DOUBLE
    assert MPI.FLOAT32_T == MPI.FLOAT and MPI.FLOAT64_T == MPI.DOUBLE    # as in MPICH


@pytest.mark.parametrize("name", NULL)
def test_the_kinds_mpich_leaves_out_stay_null(name):
    assert getattr(MPI, name) == MPI.DATATYPE_NULL


def test_match_size_answers_with_the_sized_types():
    for cls, kind, sizes in ((MPI.TYPECLASS_INTEGER, "INTEGER", (1, 2, 4, 8)),
                             (MPI.TYPECLASS_REAL, "REAL", (4, 8, 16)),
                             (MPI.TYPECLASS_COMPLEX, "COMPLEX", (8, 16, 32))):
        for size in sizes:
            assert MPI.Datatype.Match_size(cls, size) is getattr(MPI, f"{kind}{size}")
    for cls, size in ((MPI.TYPECLASS_INTEGER, 16), (MPI.TYPECLASS_REAL, 32),
                      (MPI.TYPECLASS_COMPLEX, 2)):
        with pytest.raises(MPI.Exception) as err:
            MPI.Datatype.Match_size(cls, size)
        assert err.value.Get_error_class() == MPI.ERR_ARG       # MPICH's class
    assert D.Datatype.Create_f90_integer(9).size == 4


def test_sized_types_carry_data_and_reduce():
    def body(comm):
        out = {}
        for name, dtype in DEFINED.items():
            t = getattr(MPI, name)
            send = (np.arange(5) + comm.rank).astype(dtype)
            recv = np.zeros(5, dtype)
            comm.Sendrecv([send, t], (comm.rank + 1) % comm.size, 0,
                          [recv, t], (comm.rank - 1) % comm.size, 0)
            total = np.zeros(5, dtype)
            comm.Allreduce([send, t], [total, t], op=MPI.SUM)
            out[name] = (recv.real.astype(int).tolist(), total.real.astype(int).tolist())
        biggest = np.zeros(1, np.int32)
        comm.Allreduce([np.array([comm.rank + 1], np.int32), MPI.INTEGER4],
                       [biggest, MPI.INTEGER4], op=MPI.MAX)
        return out, int(biggest[0])

    for rank, (out, biggest) in enumerate(run_threads(3, body, timeout=30)):
        left = (rank - 1) % 3
        for name, (recv, total) in out.items():
            assert recv == [i + left for i in range(5)], name
            assert total == [3 * i + 3 for i in range(5)], name
        assert biggest == 3

