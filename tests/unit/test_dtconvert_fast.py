"""The fast paths of small type maps and of dtlib's conversions give what the general
paths give (the conformance suite converts tens of thousands of small structs)."""
import itertools

import numpy as np
import pytest

from minimpi import MPI
from minimpi._shim.mpi4py.util import dtlib
from minimpi.data import constructors
from minimpi.data.dtconvert import datatype_from_numpy, numpy_from_datatype

pytestmark = pytest.mark.fast


def _runs(t):
    offs, lens = t._map.blocks(3)
    return offs.tolist(), lens.tolist(), t.lb, t.ub, t.true_lb, t.true_ub, t.size


@pytest.mark.parametrize("spec", ["i,d", "b,(3,)i,h", "c,f,(2,2)d", "d,b", "(3,)b,q"])
@pytest.mark.parametrize("align", [False, True])
def test_small_struct_maps_equal_the_numpy_path(monkeypatch, spec, align):
    dt = np.dtype(spec, align=align)
    fast = datatype_from_numpy(dt)
    # the same type built again with every map through numpy
    monkeypatch.setattr(constructors, "SMALL_RUNS", -1)
    members = [datatype_from_numpy(dt.fields[n][0]) for n in dt.names]
    struct = MPI.Datatype.Create_struct([1] * len(members), [dt.fields[n][1] for n in dt.names],
                                        members).Create_resized(0, dt.itemsize)
    assert _runs(fast) == _runs(struct)
    assert fast.Get_envelope() == struct.Get_envelope()


def test_hvector_and_indexed_small_paths_match_numpy(monkeypatch):
    def build():
        return [MPI.DOUBLE.Create_hvector(3, 2, 40), MPI.INT.Create_indexed([2, 0, 3], [5, 1, 0]),
                MPI.SHORT.Create_hvector(4, 1, -6), MPI.INT.Create_resized(-4, 16).Create_contiguous(3)]
    fast = [_runs(t) for t in build()]
    monkeypatch.setattr(constructors, "SMALL_RUNS", -1)
    assert fast == [_runs(t) for t in build()]


def test_equal_dtypes_of_different_mpi_types_are_not_confused():
    long_long = datatype_from_numpy(np.dtype("q,q"))
    long = datatype_from_numpy(np.dtype("l,l"))
    assert np.dtype("q,q") == np.dtype("l,l")
    def names(t):   # resized(struct(Dup(member), Dup(member))): the members' old types
        return [m.decode()[0].name for m in t.decode()[0].decode()[2]["datatypes"]]
    assert names(long_long) == ["LONG_LONG"] * 2
    assert names(long) == ["LONG"] * 2


def test_a_repeated_conversion_is_a_new_type_with_the_same_construction():
    dt = np.dtype("i,d,b", align=True)
    first, second = datatype_from_numpy(dt), datatype_from_numpy(dt)
    assert first != second
    assert first.Get_envelope() == second.Get_envelope()
    assert numpy_from_datatype(first) == numpy_from_datatype(second) == dt
    first.Free()
    assert numpy_from_datatype(second) == dt            # freeing one leaves the other whole
    second.Free()


def test_conversion_round_trips_many_structs():
    for t1, t2, align in itertools.product("bhidF", "qfc", (False, True)):
        dt1 = np.dtype(f"{t1},(2,)i,{t2}", align=align)
        mt1 = datatype_from_numpy(dt1)
        dt2 = numpy_from_datatype(mt1)
        mt2 = datatype_from_numpy(dt2)
        assert dt2 == dt1 and numpy_from_datatype(mt2) == dt1
        assert mt1.extent == mt2.extent == dt1.itemsize
        mt1.Free()
        mt2.Free()


def test_without_numpy_dtlib_answers_specifications(monkeypatch):
    monkeypatch.setattr(dtlib, "_np_dtype", None)
    assert dtlib.to_numpy_dtype(MPI.DOUBLE) == "d"
    arr = MPI.INT.Create_contiguous(7)
    assert dtlib.to_numpy_dtype(arr) == ("i", (7,))
    rec = MPI.Datatype.Create_struct([1, 1], [0, 8], [MPI.DOUBLE, MPI.DOUBLE])
    spec = dtlib.to_numpy_dtype(rec)
    assert spec["formats"] == ["d", "d"] and spec["offsets"] == [0, 8]
    assert spec["itemsize"] == 16 and spec["aligned"]
    with pytest.raises(RuntimeError, match="numpy is not available"):
        dtlib.from_numpy_dtype("d")
