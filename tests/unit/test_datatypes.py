import ctypes
import pickle

import numpy as np
import pytest

from minimpi.data import datatypes as D
from minimpi.errors import ERR_TYPE, DatatypeError

C_SIZES = {
    "CHAR": ctypes.sizeof(ctypes.c_char), "SIGNED_CHAR": 1, "UNSIGNED_CHAR": 1, "BYTE": 1,
    "PACKED": 1, "SHORT": ctypes.sizeof(ctypes.c_short), "UNSIGNED_SHORT": ctypes.sizeof(ctypes.c_ushort),
    "INT": ctypes.sizeof(ctypes.c_int), "UNSIGNED": ctypes.sizeof(ctypes.c_uint),
    "UNSIGNED_INT": ctypes.sizeof(ctypes.c_uint), "LONG": ctypes.sizeof(ctypes.c_long),
    "UNSIGNED_LONG": ctypes.sizeof(ctypes.c_ulong), "LONG_LONG": ctypes.sizeof(ctypes.c_longlong),
    "UNSIGNED_LONG_LONG": ctypes.sizeof(ctypes.c_ulonglong), "FLOAT": 4, "DOUBLE": 8,
    "LONG_DOUBLE": ctypes.sizeof(ctypes.c_longdouble), "C_BOOL": ctypes.sizeof(ctypes.c_bool),
    "BOOL": 1, "INT8_T": 1, "INT16_T": 2, "INT32_T": 4, "INT64_T": 8, "UINT8_T": 1,
    "UINT16_T": 2, "UINT32_T": 4, "UINT64_T": 8, "WCHAR": ctypes.sizeof(ctypes.c_wchar),
    "C_FLOAT_COMPLEX": 8, "C_DOUBLE_COMPLEX": 16,
    "C_LONG_DOUBLE_COMPLEX": 2 * ctypes.sizeof(ctypes.c_longdouble),
    "COMPLEX": 8, "DOUBLE_COMPLEX": 16, "AINT": ctypes.sizeof(ctypes.c_void_p), "OFFSET": 8,
    "COUNT": 8,
}


def _c_pair_size(ctype):
    class Pair(ctypes.Structure):
        _fields_ = [("value", ctype), ("index", ctypes.c_int)]
    return ctypes.sizeof(Pair), Pair.index.offset


@pytest.mark.parametrize("name,size", sorted(C_SIZES.items()))
def test_predefined_sizes_match_c(name, size):
    dt = D.PREDEFINED[name]
    assert dt.Get_size() == dt.size == size
    assert dt.Get_extent() == (0, size)
    assert dt.extent == size
    assert dt.is_predefined
    assert dt.Commit() is dt


@pytest.mark.parametrize("name,ctype", [
    ("FLOAT_INT", ctypes.c_float), ("DOUBLE_INT", ctypes.c_double), ("LONG_INT", ctypes.c_long),
    ("2INT", ctypes.c_int), ("SHORT_INT", ctypes.c_short), ("LONG_DOUBLE_INT", ctypes.c_longdouble),
])
def test_pair_types_have_c_struct_layout(name, ctype):
    dt = D.PREDEFINED[name]
    size, index_offset = _c_pair_size(ctype)
    assert dt.size == size
    assert dt.dtype.names == ("value", "index")
    assert dt.dtype.fields["index"][1] == index_offset
    assert dt.dtype.isalignedstruct


def test_aliases_are_the_same_handle_and_distinct_types_are_not_equal():
    assert D.PREDEFINED["UNSIGNED_INT"] is D.UNSIGNED
    assert D.PREDEFINED["TWOINT"] is D.TWOINT is D.PREDEFINED["2INT"]
    assert D.INT != D.INT32_T  # same layout, different handles (as in MPI)
    assert D.INT == D.INT
    with pytest.raises(TypeError):   # handles are unhashable, as mpi4py's
        hash(D.INT)


def test_names():
    assert D.INT.Get_name() == D.INT.name == "INT"
    assert D.TWOINT.name == "2INT"
    assert repr(D.DOUBLE) == "MPI.DOUBLE"
    import pickle
    D.INT.Set_name("my int")          # MPI lets predefined types be named too
    try:
        assert D.INT.Get_name() == "my int"
        assert pickle.loads(pickle.dumps(D.INT)) is D.INT
    finally:
        D.INT.Set_name("INT")
    assert D.Datatype(D.INT) == D.INT and D.Datatype(D.INT) is not D.INT
    assert D.Datatype() == D.DATATYPE_NULL and D.PREDEFINED["REAL2"] == D.DATATYPE_NULL


def test_null_datatype():
    assert not D.DATATYPE_NULL
    assert not D.Datatype()
    assert D.INT
    with pytest.raises(DatatypeError, match="DATATYPE_NULL"):
        D.DATATYPE_NULL.Get_size()


def test_create_contiguous():
    t = D.DOUBLE.Create_contiguous(3)
    assert not t.is_predefined
    assert t.Commit() is t
    assert t.size == 24 and t.Get_extent() == (0, 24)
    assert t.dtype == np.float64 and t.base is D.DOUBLE and t.base_count == 3
    assert D.to_numpy_dtype(t) == np.dtype(("f8", (3,)))
    tt = t.Create_contiguous(2)
    assert tt.size == 48 and tt.base is D.DOUBLE and tt.base_count == 6
    t.Set_name("vec3")
    assert t.Get_name() == "vec3"
    with pytest.raises(DatatypeError, match="count must be >= 0"):
        D.INT.Create_contiguous(-1)


def test_dup_and_free():
    t = D.INT.Dup()
    assert t is not D.INT and t != D.INT
    assert t.size == 4 and not t.is_predefined
    t.Free()
    assert not t
    with pytest.raises(DatatypeError, match="freed"):
        t.Get_size()
    with pytest.raises(DatatypeError, match="predefined") as exc:
        D.INT.Free()
    assert exc.value.Get_error_class() == ERR_TYPE


def test_pickle_predefined_is_singleton_and_derived_round_trips():
    assert pickle.loads(pickle.dumps(D.DOUBLE_INT)) is D.DOUBLE_INT
    assert pickle.loads(pickle.dumps(D.DATATYPE_NULL)) is D.DATATYPE_NULL
    t = pickle.loads(pickle.dumps(D.INT.Create_contiguous(5)))
    assert t.size == 20 and t.base is D.INT


@pytest.mark.parametrize("np_type,expected", [
    (np.int8, "SIGNED_CHAR"), (np.uint8, "UNSIGNED_CHAR"), (np.int16, "SHORT"),
    (np.uint16, "UNSIGNED_SHORT"), (np.int32, "INT"), (np.uint32, "UNSIGNED"),
    (np.dtype("l"), "LONG"), (np.dtype("L"), "UNSIGNED_LONG"), (np.longlong, "LONG_LONG"),
    (np.float32, "FLOAT"), (np.float64, "DOUBLE"), (np.longdouble, "LONG_DOUBLE"),
    (np.complex64, "C_FLOAT_COMPLEX"), (np.complex128, "C_DOUBLE_COMPLEX"),
    (np.clongdouble, "C_LONG_DOUBLE_COMPLEX"), (np.bool_, "C_BOOL"), ("c", "CHAR"),
    ("U1", "WCHAR"),
])
def test_from_numpy_dtype(np_type, expected):
    dt = D.from_numpy_dtype(np_type)
    assert dt.name == expected
    assert dt.size == np.dtype(np_type).itemsize
    assert D.to_numpy_dtype(dt) == np.dtype(np_type)


def test_from_numpy_dtype_pairs_by_layout_not_field_names():
    d = np.dtype([("val", "f8"), ("loc", "i4")], align=True)
    assert D.from_numpy_dtype(d) is D.DOUBLE_INT
    assert D.from_numpy_dtype(np.dtype([("a", "i4"), ("b", "i4")])) is D.TWOINT
    packed = np.dtype([("val", "f8"), ("loc", "i4")])  # 12 bytes: not a C pair
    t = D.from_numpy_dtype(packed)
    assert t.size == 12 and t.base is D.BYTE


def test_from_numpy_dtype_other_fixed_size_types():
    assert D.from_numpy_dtype("S5").size == 5
    assert D.from_numpy_dtype("S5").base is D.CHAR
    assert D.from_numpy_dtype("U3").size == 12
    assert D.from_numpy_dtype("M8[s]").size == 8
    sub = D.from_numpy_dtype(("i4", (2, 3)))
    assert sub.base is D.INT and sub.base_count == 6


def test_from_numpy_dtype_errors():
    with pytest.raises(DatatypeError, match="lowercase"):
        D.from_numpy_dtype(object)
    with pytest.raises(DatatypeError, match="byte order"):
        D.from_numpy_dtype(">f8" if np.little_endian else "<f8")


@pytest.mark.parametrize("code,expected", [
    ("b", "SIGNED_CHAR"), ("B", "UNSIGNED_CHAR"), ("h", "SHORT"), ("H", "UNSIGNED_SHORT"),
    ("i", "INT"), ("I", "UNSIGNED"), ("l", "LONG"), ("L", "UNSIGNED_LONG"), ("q", "LONG_LONG"),
    ("Q", "UNSIGNED_LONG_LONG"), ("f", "FLOAT"), ("d", "DOUBLE"), ("g", "LONG_DOUBLE"),
    ("F", "C_FLOAT_COMPLEX"), ("D", "C_DOUBLE_COMPLEX"), ("G", "C_LONG_DOUBLE_COMPLEX"),
    ("?", "C_BOOL"), ("c", "CHAR"), ("i4", "INT32_T"), ("i8", "INT64_T"), ("u1", "UINT8_T"),
    ("f8", "DOUBLE"), ("f4", "FLOAT"), ("<f8", "DOUBLE"), ("c16", "C_DOUBLE_COMPLEX"),
])
def test_typecodes(code, expected):
    assert D.from_typecode(code).name == expected
    assert D.Datatype.fromcode(code).name == expected


def test_tocode():
    assert D.INT.tocode() == "i"
    assert D.DOUBLE.tocode() == "d"
    assert D.INT32_T.tocode() == "i4"


def test_unknown_typecode():
    with pytest.raises(DatatypeError, match="unknown typecode 'zz'"):
        D.from_typecode("zz")


def test_resolve_datatype():
    assert D.resolve_datatype(D.INT) is D.INT
    assert D.resolve_datatype("d") is D.DOUBLE
    assert D.resolve_datatype(np.float32) is D.FLOAT
    assert D.resolve_datatype(np.dtype("i4")) is D.INT
    with pytest.raises(DatatypeError, match="Send: buf datatype is int 3, not a datatype"):
        D.resolve_datatype(3, call="Send", arg="buf datatype")
    with pytest.raises(DatatypeError, match="DATATYPE_NULL"):
        D.resolve_datatype(D.DATATYPE_NULL)


def test_every_required_name_is_exported():
    required = """CHAR SIGNED_CHAR UNSIGNED_CHAR BYTE PACKED SHORT UNSIGNED_SHORT INT UNSIGNED
    UNSIGNED_INT LONG UNSIGNED_LONG LONG_LONG UNSIGNED_LONG_LONG FLOAT DOUBLE LONG_DOUBLE C_BOOL
    BOOL INT8_T INT16_T INT32_T INT64_T UINT8_T UINT16_T UINT32_T UINT64_T WCHAR C_FLOAT_COMPLEX
    C_DOUBLE_COMPLEX C_LONG_DOUBLE_COMPLEX COMPLEX DOUBLE_COMPLEX AINT OFFSET COUNT FLOAT_INT
    DOUBLE_INT LONG_INT 2INT TWOINT SHORT_INT LONG_DOUBLE_INT""".split()
    for name in required:
        assert name in D.PREDEFINED, name
        assert D.PREDEFINED[name].is_predefined


def test_get_value_index_finds_the_pair_type_without_hashing_handles():
    assert D.Datatype.Get_value_index(D.DOUBLE, D.INT) is D.DOUBLE_INT
    assert D.Datatype.Get_value_index(D.INT, D.INT) is D.TWOINT
    assert D.Datatype.Get_value_index(D.DOUBLE, D.DOUBLE) == D.DATATYPE_NULL
