"""Derived datatypes: type maps, extents, blocks, pack/unpack against numpy ground truth."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

from minimpi.constants import UNDEFINED
from minimpi.data import datatypes as D
from minimpi.data.datatypes import Datatype
from minimpi.errors import ArgumentError, BufferSpecError, DatatypeError

F8 = 8


def grid(rows: int, cols: int) -> np.ndarray:
    return np.arange(rows * cols, dtype=np.float64).reshape(rows, cols) + 0.5


def roundtrip(t: Datatype, src: np.ndarray, count: int) -> np.ndarray:
    """Unpack(pack(src)) into zeros: the items' bytes copied, every other byte still 0."""
    dst = np.zeros_like(src)
    t.unpack(t.pack(src, count), dst, count)
    return dst


# ---------------------------------------------------------------- predefined / contiguous
def test_predefined_and_contiguous_are_contiguous_with_one_block():
    for t in (D.DOUBLE, D.INT, D.DOUBLE_INT, D.DOUBLE.Create_contiguous(5)):
        assert t.is_contiguous
        offs, lens = t.blocks(3)
        assert offs.tolist() == [0] and lens.tolist() == [3 * t.size]
    assert D.DOUBLE.signature == (("d", 1),)
    assert D.DOUBLE.Create_contiguous(5).signature == (("d", 5),)
    assert D.DOUBLE.element_dtype == np.float64
    a = grid(2, 3)
    packed = D.DOUBLE.pack(a, 6)
    assert np.shares_memory(packed, a)            # contiguous: zero-copy


# ---------------------------------------------------------------- vector / hvector
@pytest.mark.parametrize("count,bl,stride", [(4, 1, 5), (3, 2, 4), (2, 3, 3), (5, 2, -2)])
def test_vector_matches_numpy(count, bl, stride):
    t = D.DOUBLE.Create_vector(count, bl, stride).Commit()
    flat = np.arange(64, dtype=np.float64)
    origin = 30 if stride < 0 else 0
    picks = np.concatenate([np.arange(origin + i * stride, origin + i * stride + bl)
                            for i in range(count)])
    assert t.size == count * bl * F8
    lo = min(0, (count - 1) * stride) * F8
    hi = (max(0, (count - 1) * stride) + bl) * F8
    assert (t.lb, t.ub, t.extent) == (lo, hi, hi - lo)
    assert (t.true_lb, t.true_extent) == (lo, hi - lo)
    assert t.signature == (("d", count * bl),)
    packed = t.typemap.pack(flat.view(np.uint8), 1, origin=origin * F8)
    np.testing.assert_array_equal(packed.view(np.float64), flat[picks])
    assert not t.is_contiguous or (bl == stride)


def test_vector_column_of_a_grid_and_two_items():
    a = grid(6, 7)
    col = D.DOUBLE.Create_vector(6, 1, 7).Commit()
    np.testing.assert_array_equal(col.pack(a, 1).view("f8"), a[:, 0])
    # two items: the second starts one extent later (5 rows * 7 + 1 doubles)
    items = col.pack(np.arange(100.0), 2).view("f8")
    ext = col.extent // F8
    np.testing.assert_array_equal(items, np.r_[np.arange(0, 42, 7), np.arange(ext, ext + 42, 7)])
    back = roundtrip(col, a, 1)
    np.testing.assert_array_equal(back[:, 0], a[:, 0])
    assert not back[:, 1:].any()
    offs, lens = col.blocks(1)
    assert offs.tolist() == [i * 7 * F8 for i in range(6)] and set(lens.tolist()) == {8}


def test_hvector_byte_stride_and_merging():
    t = D.INT.Create_hvector(3, 2, 8)            # 2 ints every 8 bytes: one run
    assert t.blocks(1)[0].tolist() == [0] and t.blocks(1)[1].tolist() == [24]
    assert t.is_contiguous
    u = D.INT.Create_hvector(3, 1, 12)
    a = np.arange(12, dtype=np.intc)
    np.testing.assert_array_equal(u.pack(a, 1).view(np.intc), a[[0, 3, 6]])
    assert u.extent == 28 and u.size == 12


# ---------------------------------------------------------------- indexed family
def test_indexed_and_hindexed_match_numpy():
    a = np.arange(40, dtype=np.float64)
    bl, dp = [2, 1, 3], [7, 0, 12]
    t = D.DOUBLE.Create_indexed(bl, dp).Commit()
    picks = np.r_[7, 8, 0, 12, 13, 14]
    np.testing.assert_array_equal(t.pack(a, 1).view("f8"), a[picks])
    assert (t.lb, t.ub, t.size) == (0, 15 * F8, 6 * F8)
    h = D.DOUBLE.Create_hindexed(bl, [d * F8 for d in dp])
    assert h.blocks(1)[0].tolist() == t.blocks(1)[0].tolist()
    back = roundtrip(t, a, 1)
    np.testing.assert_array_equal(back[picks], a[picks])
    assert back.sum() == a[picks].sum()


def test_indexed_block_and_hindexed_block():
    a = np.arange(30, dtype=np.int64)
    t = D.INT64_T.Create_indexed_block(2, [10, 1, 20])
    np.testing.assert_array_equal(t.pack(a, 1).view(np.int64), a[[10, 11, 1, 2, 20, 21]])
    h = D.INT64_T.Create_hindexed_block(2, [80, 8, 160])
    np.testing.assert_array_equal(h.pack(a, 1).view(np.int64), a[[10, 11, 1, 2, 20, 21]])
    assert t.extent == 22 * 8 - 8 and t.lb == 8


def test_indexed_with_unaligned_byte_displacements():
    raw = np.arange(64, dtype=np.uint8)
    t = D.INT16_T.Create_hindexed([1, 2], [3, 10])
    assert t.typemap.width == 1
    np.testing.assert_array_equal(t.pack(raw, 1), raw[[3, 4, 10, 11, 12, 13]])


# ---------------------------------------------------------------- struct
def test_struct_matches_numpy_record_and_pads_like_c():
    rec = np.dtype([("x", "f8"), ("n", "i4"), ("c", "S1")], align=True)
    t = Datatype.Create_struct([1, 1, 1], [rec.fields["x"][1], rec.fields["n"][1],
                                             rec.fields["c"][1]], [D.DOUBLE, D.INT, D.CHAR])
    assert t.extent == rec.itemsize == 16 and t.size == 13
    assert t.signature == (("d", 1), ("i", 1), ("c", 1))
    assert t.element_dtype is None and t.dtype == np.uint8
    a = np.zeros(3, rec)
    a["x"], a["n"], a["c"] = [1.5, 2.5, 3.5], [7, 8, 9], [b"a", b"b", b"c"]
    packed = t.pack(a.view(np.uint8), 3)
    expect = np.zeros(3, np.dtype([("x", "f8"), ("n", "i4"), ("c", "S1")]))  # unpadded
    for f in rec.names:
        expect[f] = a[f]
    assert packed.tobytes() == expect.tobytes()
    b = np.zeros(3, rec)
    t.unpack(packed, b.view(np.uint8), 3)
    assert b.tobytes() == a.tobytes()


def test_struct_of_one_basic_type_keeps_its_element_dtype():
    t = Datatype.Create_struct([2, 1], [0, 24], [D.DOUBLE, D.DOUBLE])
    assert t.element_dtype == np.float64 and t.base is D.DOUBLE and t.size == 24


# ---------------------------------------------------------------- subarray / darray
@pytest.mark.parametrize("order", [D.ORDER_C, D.ORDER_FORTRAN])
def test_subarray_matches_numpy_slice(order):
    sizes, sub, starts = [5, 6, 4], [2, 3, 2], [1, 2, 1]
    npo = "C" if order == D.ORDER_C else "F"
    a = np.asfortranarray(np.arange(120.0).reshape(sizes)) if npo == "F" \
        else np.arange(120.0).reshape(sizes)
    t = D.DOUBLE.Create_subarray(sizes, sub, starts, order=order).Commit()
    assert (t.lb, t.extent, t.size) == (0, 120 * F8, 12 * F8)
    want = a[1:3, 2:5, 1:3].ravel(order=npo)
    np.testing.assert_array_equal(t.pack(a.ravel(order="K"), 1).view("f8"), want)
    back = np.zeros(120)
    t.unpack(t.pack(a.ravel(order="K"), 1), back, 1)
    assert back.sum() == want.sum() and np.count_nonzero(back) == want.size


def test_subarray_column_is_strided_no_index_array():
    t = D.DOUBLE.Create_subarray([4096, 4096], [4096, 1], [0, 4095])
    assert t.typemap.pattern == (4096, 8, 4096 * 8)
    assert t.true_lb == 4095 * 8 and t.extent == 4096 * 4096 * 8


@pytest.mark.parametrize("distrib", ["block", "cyclic", "cyclic2"])
def test_darray_partitions_the_array(distrib):
    gs, ps = [7, 5], [3, 1]
    kind = {"block": D.DISTRIBUTE_BLOCK, "cyclic": D.DISTRIBUTE_CYCLIC,
            "cyclic2": D.DISTRIBUTE_CYCLIC}[distrib]
    darg = 2 if distrib == "cyclic2" else D.DISTRIBUTE_DFLT_DARG
    a = np.arange(35.0)
    seen = []
    for rank in range(3):
        t = D.DOUBLE.Create_darray(3, rank, gs, [kind, D.DISTRIBUTE_NONE],
                                   [darg, D.DISTRIBUTE_DFLT_DARG], ps)
        assert t.extent == 35 * F8
        rows = [i for i in range(7) if (
            i // 3 == rank if distrib == "block" else
            i % 3 == rank if distrib == "cyclic" else (i // 2) % 3 == rank)]
        want = a.reshape(7, 5)[rows].ravel()
        got = t.pack(a, 1).view("f8")
        np.testing.assert_array_equal(got, want)
        seen.extend(got.tolist())
    assert sorted(seen) == a.tolist()


# ---------------------------------------------------------------- resized / dup
def test_resized_column_type_walks_columns():
    a = grid(5, 4)
    col = D.DOUBLE.Create_vector(5, 1, 4).Create_resized(0, F8).Commit()
    assert (col.lb, col.extent, col.true_extent) == (0, 8, 4 * 4 * 8 + 8)
    two = col.pack(a, 2).view("f8")
    np.testing.assert_array_equal(two, np.r_[a[:, 0], a[:, 1]])
    r = D.INT.Create_resized(-4, 12)
    assert (r.lb, r.ub, r.true_lb, r.true_extent, r.size) == (-4, 8, 0, 4, 4)
    assert not r.is_contiguous


def test_dup_envelope_contents_decode_and_pickle():
    v = D.DOUBLE.Create_vector(3, 2, 5)
    assert v.Get_envelope() == (3, 0, 0, 1, D.COMBINER_VECTOR)
    assert v.Get_contents() == ([3, 2, 5], [], [], [D.DOUBLE])
    assert v.decode() == (D.DOUBLE, "VECTOR", {"count": 3, "blocklength": 2, "stride": 5})
    d = v.Dup()
    assert d.decode()[1] == "DUP" and d.blocks(2)[0].tolist() == v.blocks(2)[0].tolist()
    assert D.DOUBLE.Get_envelope()[-1] == D.COMBINER_NAMED and D.DOUBLE.decode()[1] == "NAMED"
    s = Datatype.Create_struct([1, 2], [0, 8], [D.DOUBLE, D.INT])
    base, name, params = s.decode()
    assert base == D.DATATYPE_NULL and name == "STRUCT"
    assert params == {"blocklengths": [1, 2], "displacements": [0, 8],
                      "datatypes": [D.DOUBLE, D.INT]}
    sub = D.FLOAT.Create_subarray([4, 5], [2, 2], [1, 3], order=D.ORDER_FORTRAN)
    assert sub.decode()[2] == {"sizes": [4, 5], "subsizes": [2, 2], "starts": [1, 3],
                               "order": D.ORDER_FORTRAN}
    for t in (v, s, sub, v.Create_resized(-8, 100), d):
        again = pickle.loads(pickle.dumps(t))
        assert again.signature == t.signature and again.Get_extent() == t.Get_extent()
        assert [x.tolist() for x in again.blocks(2)] == [x.tolist() for x in t.blocks(2)]


def test_free_commit_and_errors():
    t = D.DOUBLE.Create_vector(2, 1, 2).Commit()
    t.Free()
    with pytest.raises(DatatypeError):
        t.size
    with pytest.raises(DatatypeError):
        D.DOUBLE.Free()
    with pytest.raises(DatatypeError, match="count must be >= 0"):
        D.DOUBLE.Create_vector(-1, 1, 1)
    with pytest.raises(ArgumentError, match="does not fit"):
        D.DOUBLE.Create_subarray([4], [3], [2])
    with pytest.raises(BufferSpecError, match="buffer has 80 bytes"):
        D.DOUBLE.Create_vector(3, 1, 5).pack(np.zeros(10), 1)


# ---------------------------------------------------------------- Pack / Unpack / external32
def test_pack_unpack_positions_and_sizes():
    a = grid(4, 4)
    col = D.DOUBLE.Create_vector(4, 1, 4).Commit()
    out = bytearray(col.Pack_size(1) + D.INT.Pack_size(2))
    pos = col.Pack(a, out, 0)
    assert pos == 32
    pos = D.INT.Pack(np.array([5, 6], np.intc), out, pos)
    assert pos == 40
    b = np.zeros((4, 4))
    ints = np.zeros(2, np.intc)
    pos = col.Unpack(out, 0, b)
    pos = D.INT.Unpack(out, pos, ints)
    assert pos == 40 and ints.tolist() == [5, 6]
    np.testing.assert_array_equal(b[:, 0], a[:, 0])
    with pytest.raises(BufferSpecError):
        col.Pack(a, bytearray(16), 0)


def test_external32_is_big_endian():
    a = np.array([1.25, -2.0, 3.5, 4.0])
    t = D.DOUBLE.Create_vector(2, 1, 2)
    n = t.Pack_external_size("external32", 1)
    out = bytearray(n)
    assert t.Pack_external("external32", a, out, 0) == n == 16
    assert bytes(out) == a[[0, 2]].astype(">f8").tobytes()
    back = np.zeros(4)
    t.Unpack_external("external32", out, 0, back)
    np.testing.assert_array_equal(back, [1.25, 0, 3.5, 0])
    assert D.DOUBLE_INT.Pack_external_size("external32", 2) == 24   # no padding
    with pytest.raises(NotImplementedError):
        t.Pack_external("native", a, out, 0)


def test_status_counts_elements_by_signature():
    from minimpi.p2p.request import Status
    s = Datatype.Create_struct([1, 2], [0, 8], [D.DOUBLE, D.INT])     # 16 bytes, 3 elements
    st = Status()
    st.Set_elements(s, 7)                                             # 2 items + 1 double
    assert st.nbytes == 2 * 16 + 8
    assert st.Get_elements(s) == 7 and st.Get_count(s) == UNDEFINED
    st.nbytes = 2 * 16 + 12
    assert st.Get_elements(s) == 8
    st.nbytes = 3
    assert st.Get_elements(s) == UNDEFINED


def test_match_size_and_f90():
    # the Fortran sized types, as MPICH answers (tests/unit/test_fortran_sized_types.py)
    assert Datatype.Match_size(D.TYPECLASS_REAL, 8) is D.PREDEFINED["REAL8"]
    assert Datatype.Match_size(D.TYPECLASS_INTEGER, 4) is D.PREDEFINED["INTEGER4"]
    assert Datatype.Create_f90_integer(9).size == 4
    assert Datatype.Create_f90_real(12, 100).size == 8
    assert Datatype.Create_f90_complex(5, 30).size == 8


# ---------------------------------------------------------------- mpi4py.util.dtlib
@pytest.mark.parametrize("spec,align", [("i,d", False), ("i,d", True), ("(3,4)f", False),
                                        ("c,(3,5)d,i", True), ("b,(2,)h", False)])
def test_dtlib_round_trips_numpy_dtypes(spec, align):
    from minimpi.data.dtconvert import datatype_from_numpy, numpy_from_datatype
    dt = np.dtype(spec, align=align)
    mt = datatype_from_numpy(dt)
    assert mt.extent == dt.itemsize and not mt.is_predefined
    back = numpy_from_datatype(mt)
    assert back == dt and back.isalignedstruct == dt.isalignedstruct
    if dt.names is None:
        return
    a = np.zeros(3, dt)
    raw = a.view(np.uint8)
    raw[:] = np.arange(raw.size) % 251 + 1
    b = np.zeros_like(a)
    mt.unpack(mt.pack(raw, 3), b.view(np.uint8), 3)
    for name in dt.names:             # every field copied (padding bytes need not be)
        np.testing.assert_array_equal(b[name], a[name])


def test_dtlib_vector_and_indexed_to_numpy():
    from minimpi.data.dtconvert import numpy_from_datatype
    v = numpy_from_datatype(D.DOUBLE.Create_vector(3, 2, 4))
    assert v.names == ("f0", "f1", "f2") and [v.fields[n][1] for n in v.names] == [0, 32, 64]
    assert v.itemsize == D.DOUBLE.Create_vector(3, 2, 4).extent
    i = numpy_from_datatype(D.INT.Create_indexed([1, 2], [3, 0]))
    assert [i.fields[n][1] for n in i.names] == [12, 0]
    with pytest.raises(ValueError):
        numpy_from_datatype(D.DOUBLE.Create_subarray([4], [2], [1]))


def test_buffer_specs_with_derived_types_check_counts_and_bounds():
    from minimpi.data.buffers import parse_buffer
    from minimpi.errors import CountError
    neg = D.INT.Create_resized(0, -4).Commit()
    buf = np.zeros(8, np.intc)
    with pytest.raises(ValueError, match="infer a count"):
        parse_buffer([buf, neg], writable=False)
    with pytest.raises(ValueError, match="displacement"):
        parse_buffer([buf, 0, 1, neg], writable=False)
    col = D.DOUBLE.Create_vector(4, 1, 4).Commit()
    grid = np.arange(16.0).reshape(4, 4)
    with pytest.raises(CountError, match="touch bytes"):
        parse_buffer([grid, 2, col], writable=False)       # the 2nd column item runs off
    spec = parse_buffer([grid[0, 3:], 1, col], writable=False)   # reaches past the view
    np.testing.assert_array_equal(spec.array, grid[:, 3])
    assert parse_buffer([grid, col], writable=False).count == 1  # 128 // 104 items


def test_vbuffer_of_negative_extent_needs_counts():
    from minimpi.data.buffers import parse_vbuffer
    neg = D.INT.Create_resized(0, -4).Commit()
    with pytest.raises(ValueError, match="give the counts"):
        parse_vbuffer([np.zeros(4, np.intc), None, [0], neg], 1, writable=False)


def test_blocks_of_a_contiguous_type_is_one_run_without_a_per_item_array():
    """RMA target layouts and file views ask for the runs of count items on every call: a
    contiguous type answers with one run, never an array as long as the count (a 64 KiB
    Put of BYTE used to build and merge 65,536 runs)."""
    import tracemalloc
    contiguous = D.DOUBLE.Create_contiguous(3).Commit()
    for dt, count in ((D.BYTE, 1 << 20), (contiguous, 1 << 18)):
        tracemalloc.start()
        offsets, lengths = dt.blocks(count)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert offsets.tolist() == [0] and lengths.tolist() == [count * dt.size]
        assert peak < 64 * 1024, f"{dt.name}: blocks({count}) allocated {peak} bytes"
