"""User-defined MPI-IO data representations (``MPI.Register_datarep``; issue 29: it was
refused). A byte-swapping representation written and read back through every kind of data
access, in one process and in a 3-rank thread world; the registration errors mpi4py's
test_io checks (ERR_DUP_DATAREP) and the ones minimpi adds. MPICH 5.0.2 refuses conversion
functions (ERR_UNSUPPORTED_DATAREP) and user representations in Set_view, so there is no MPICH
file to compare with: a byte swap of int32/float64 must give what external32 writes."""
from __future__ import annotations

import uuid

import numpy as np
import pytest

from minimpi import MPI
from minimpi._shim.mpi4py.util import dtlib
from minimpi.runtime.inproc import run_threads

RW = MPI.MODE_CREATE | MPI.MODE_RDWR


def register_swap(calls=None) -> str:
    """A fresh byte-swapping representation (the registry is per process: new names)."""
    name = f"swap-{uuid.uuid4().hex[:8]}"

    def convert(userbuf, datatype, count, filebuf, position, to_file):
        dt = dtlib.to_numpy_dtype(datatype)
        user = np.frombuffer(userbuf, dt, count, position * datatype.extent)
        file = np.frombuffer(filebuf, dt, count)
        if calls is not None:
            calls.append(("write" if to_file else "read", datatype.Get_name(), count))
        if to_file:
            file[...] = user.byteswap()
        else:
            user[...] = file.byteswap()

    MPI.Register_datarep(name, lambda *a: convert(*a, False), lambda *a: convert(*a, True),
                         lambda datatype: datatype.extent)
    return name


def test_byte_swapped_file_round_trips_and_matches_external32(tmp_path):
    calls: list = []
    name = register_swap(calls)
    path = tmp_path / "swap.dat"
    values = np.array([1, 2, 0x01020304], np.int32)
    doubles = np.array([1.5, -2.25])
    with MPI.File.Open(MPI.COMM_SELF, path, RW) as fh:
        fh.Set_view(0, MPI.BYTE, MPI.BYTE, name)
        assert fh.Get_view()[3] == name
        fh.Write_at(0, values)
        fh.Write_at(12, [doubles, MPI.DOUBLE])
        fh.Sync()
        raw = path.read_bytes()
        assert raw == values.astype(">i4").tobytes() + doubles.astype(">f8").tobytes()
        back, dback = np.zeros(3, np.int32), np.zeros(2)
        fh.Read_at(0, back)
        fh.Read_at(12, dback)
    assert back.tolist() == values.tolist() and dback.tolist() == doubles.tolist()
    assert ("write", "INT", 3) in calls and ("read", "DOUBLE", 2) in calls


def test_every_kind_of_access_converts_on_three_ranks(tmp_path):
    name = register_swap()
    path = str(tmp_path / "all.dat")

    def body(comm):
        r = comm.rank
        with MPI.File.Open(comm, path, RW) as fh:
            fh.Set_view(0, MPI.INT, MPI.INT, name)
            fh.Write_at_all(4 * r, np.arange(4, dtype=np.int32) + 10 * r)       # 0..47
            fh.Seek(12 + r)
            fh.Write(np.array([100 + r], np.int32))                            # 48..59
            fh.Write_ordered(np.array([200 + r], np.int32))                    # 0..11 again
            comm.Barrier()
            fh.Sync()
            whole = np.zeros(15, np.int32)
            fh.Read_at_all(0, whole)
            return whole.tolist()

    results = run_threads(3, body, timeout=30)
    want = [200, 201, 202] + [3, 10, 11, 12, 13, 20, 21, 22, 23] + [100, 101, 102]
    assert results == [want] * 3
    assert np.fromfile(path, ">i4").tolist() == want


def test_noncontiguous_and_mixed_memory_types_arrive_packed(tmp_path):
    calls: list = []
    name = register_swap(calls)
    path = tmp_path / "mixed.dat"
    a = np.arange(6.0)
    every_other = MPI.DOUBLE.Create_vector(3, 1, 2).Commit()
    with MPI.File.Open(MPI.COMM_SELF, path, RW) as fh:
        fh.Set_view(0, MPI.BYTE, MPI.BYTE, name)
        fh.Write_at(0, [a, 1, every_other])
        assert calls[-1] == ("write", "DOUBLE", 3)          # gathered: 3 doubles
        assert np.fromfile(path, ">f8").tolist() == [0.0, 2.0, 4.0]
        out = np.full(6, -1.0)
        fh.Read_at(0, [out, 1, every_other])
    assert out.tolist() == [0.0, -1.0, 2.0, -1.0, 4.0, -1.0]


def test_a_filetype_view_with_holes(tmp_path):
    name = register_swap()
    path = tmp_path / "holes.dat"
    with MPI.File.Open(MPI.COMM_SELF, path, RW) as fh:
        fh.Write_at(0, np.full(8, -1, np.int32))
        fh.Set_view(0, MPI.INT, MPI.INT.Create_vector(2, 1, 2).Commit(), name)
        fh.Write(np.array([1, 2, 3, 4], np.int32))
    raw = np.fromfile(path, np.int32)      # tiles of 3 ints, data at ints 0 and 2 of each
    assert raw[[1, 4, 6, 7]].tolist() == [-1] * 4
    assert raw[[0, 2, 3, 5]].byteswap().tolist() == [1, 2, 3, 4]


def test_registration_errors():
    name = register_swap()
    with pytest.raises(MPI.Exception) as err:
        MPI.Register_datarep(name, None, None, lambda t: t.extent)
    assert err.value.Get_error_class() == MPI.ERR_DUP_DATAREP       # (mpi4py's test_io)
    for taken in ("native", "external32", "internal"):
        with pytest.raises(MPI.Exception) as err:
            MPI.Register_datarep(taken, None, None, lambda t: t.extent)
        assert err.value.Get_error_class() == MPI.ERR_DUP_DATAREP
    with pytest.raises(TypeError, match="extent_fn"):
        MPI.Register_datarep(f"x{uuid.uuid4().hex}", None, None, None)
    with pytest.raises(TypeError, match="read_fn"):
        MPI.Register_datarep(f"x{uuid.uuid4().hex}", 3, None, lambda t: t.extent)


def test_no_conversion_functions_move_bytes_as_they_are(tmp_path):
    name = f"plain-{uuid.uuid4().hex[:8]}"
    MPI.Register_datarep(name, None, None, lambda t: t.extent)
    path = tmp_path / "plain.dat"
    with MPI.File.Open(MPI.COMM_SELF, path, RW) as fh:
        fh.Set_view(0, MPI.INT, MPI.INT, name)
        fh.Write(np.array([7, 8], np.int32))
        assert fh.Get_type_extent(MPI.DOUBLE) == 8
    assert np.fromfile(path, np.int32).tolist() == [7, 8]


def test_what_is_refused_and_how_failures_end(tmp_path):
    path = str(tmp_path / "bad.dat")
    wide = f"wide-{uuid.uuid4().hex[:8]}"
    MPI.Register_datarep(wide, None, None, lambda t: t.extent * (2 if t.extent > 1 else 1))
    broken = f"broken-{uuid.uuid4().hex[:8]}"

    def fail(*args):
        raise ValueError("cannot convert")
    MPI.Register_datarep(broken, fail, fail, lambda t: t.extent)

    def body(comm):
        out = []
        with MPI.File.Open(comm, path, RW) as fh:
            for rep in (f"never-{comm.rank}", wide):    # unknown, or sizes that change
                with pytest.raises(MPI.Exception) as err:
                    fh.Set_view(0, MPI.INT, MPI.INT, rep)
                out.append(err.value.Get_error_class())
            fh.Set_view(0, MPI.BYTE, MPI.BYTE, broken)
            with pytest.raises(MPI.Exception) as err:     # a collective fails everywhere
                fh.Write_at_all(4 * comm.rank, np.zeros(1, np.int32))
            out.append(err.value.Get_error_class())
            fh.Set_view(0, MPI.INT, MPI.INT, "native")
            fh.Set_view(0, MPI.BYTE, MPI.BYTE, wide)      # BYTE keeps its size
            assert fh.Get_type_extent(MPI.INT) == 8       # what its extent_fn says
        return out

    for out in run_threads(3, body, timeout=30):
        assert out == [MPI.ERR_UNSUPPORTED_DATAREP, MPI.ERR_UNSUPPORTED_DATAREP,
                       MPI.ERR_CONVERSION]
