import functools
import pickle

import numpy as np
import pytest

from minimpi.data import datatypes as D
from minimpi.data import ops
from minimpi.data.ops import Op, reduce_local
from minimpi.errors import ERR_OP, CountError, OpError


# ---------------------------------------------------------------------- Python objects
@pytest.mark.parametrize("op,args,expected", [
    (ops.SUM, (1, 2), 3), (ops.SUM, ("a", "b"), "ab"), (ops.SUM, ([1], [2]), [1, 2]),
    (ops.PROD, (3, 4), 12), (ops.MAX, (2, 3), 3), (ops.MAX, (3, 2), 3), (ops.MIN, (2, 3), 2),
    (ops.LAND, (1, 0), False), (ops.LAND, (2, 3), True), (ops.LOR, (0, 0), False),
    (ops.LOR, (0, 5), True), (ops.LXOR, (1, 1), False), (ops.LXOR, (0, 1), True),
    (ops.BAND, (0b1100, 0b1010), 0b1000), (ops.BOR, (0b1100, 0b1010), 0b1110),
    (ops.BXOR, (0b1100, 0b1010), 0b0110), (ops.REPLACE, (1, 2), 2), (ops.NO_OP, (1, 2), 1),
])
def test_predefined_ops_on_objects(op, args, expected):
    assert op(*args) == expected


def test_logical_ops_return_bool():
    assert ops.LAND(2, 3) is True and ops.LXOR(0, 0) is False


def test_maxloc_minloc_objects_ties_go_to_lower_index():
    assert ops.MAXLOC((3, 5), (2, 1)) == (3, 5)
    assert ops.MAXLOC((2, 5), (3, 1)) == (3, 1)
    assert ops.MAXLOC((3, 5), (3, 1)) == (3, 1)
    assert ops.MAXLOC((3, 1), (3, 5)) == (3, 1)
    assert ops.MINLOC((3, 5), (2, 7)) == (2, 7)
    assert ops.MINLOC((2, 5), (2, 1)) == (2, 1)
    values = [(4, 0), (9, 1), (9, 2), (1, 3)]
    assert functools.reduce(ops.MAXLOC, values) == (9, 1)
    assert functools.reduce(ops.MINLOC, values) == (1, 3)


def test_max_min_logical_on_numpy_arrays_elementwise():
    a, b = np.array([1, 5, 0]), np.array([3, 2, 0])
    assert ops.MAX(a, b).tolist() == [3, 5, 0]
    assert ops.MIN(a, b).tolist() == [1, 2, 0]
    assert ops.LAND(a, b).tolist() == [True, True, False]
    assert ops.SUM(a, b).tolist() == [4, 7, 0]


def test_op_facts():
    assert ops.SUM.Is_commutative() and ops.SUM.is_commutative and ops.SUM.commutative
    assert ops.SUM.is_predefined and ops.SUM.name == "SUM"
    assert bool(ops.SUM) and not ops.OP_NULL and not Op()
    assert repr(ops.MAXLOC) == "MPI.MAXLOC"
    assert set(ops.PREDEFINED_OPS) == {"SUM", "PROD", "MAX", "MIN", "LAND", "LOR", "LXOR",
                                       "BAND", "BOR", "BXOR", "MAXLOC", "MINLOC", "REPLACE", "NO_OP"}
    assert pickle.loads(pickle.dumps(ops.MINLOC)) is ops.MINLOC


def test_free():
    with pytest.raises(OpError, match="predefined") as exc:
        ops.SUM.Free()
    assert exc.value.Get_error_class() == ERR_OP
    op = Op.Create(lambda a, b, dt: a + b, commute=True)
    op.Free()
    assert not op
    with pytest.raises(OpError, match="freed"):
        op(1, 2)
    with pytest.raises(OpError, match="OP_NULL"):
        ops.OP_NULL(1, 2)


# -------------------------------------------------------------------- user ops, objects
def test_user_op_called_like_mpi4py_on_objects():
    seen = []

    def fn(x, y, dt):
        seen.append(dt)
        return x + y

    op = Op.Create(fn)
    assert op("ab", "cd") == "abcd" and seen == [None]
    assert not op.Is_commutative() and not op.is_predefined
    assert Op.Create(fn, commute=True).Is_commutative()
    assert Op.Create(fn, True).commutative


def test_user_op_two_argument_function_is_accepted():
    op = Op.Create(lambda x, y: x * 10 + y)
    assert op(1, 2) == 12
    buf = np.array([1, 2]); acc = np.array([3, 4])
    op.reduce_into(buf, acc)
    assert acc.tolist() == [13, 24]


def test_create_rejects_non_callable():
    with pytest.raises(OpError, match="callable"):
        Op.Create(42)


# ----------------------------------------------------------------------- buffer reduction
def _reduce(op, a, b, datatype=None):
    b = np.array(b)
    op.reduce_into(np.array(a, dtype=b.dtype), b, datatype)
    return b


@pytest.mark.parametrize("dtype", ["i4", "f8"])
def test_arith_and_order_ops_on_buffers(dtype):
    a = np.array([1, 5, -2, 7], dtype=dtype)
    b = np.array([3, 2, -4, 7], dtype=dtype)
    assert _reduce(ops.SUM, a, b).tolist() == [4, 7, -6, 14]
    assert _reduce(ops.PROD, a, b).tolist() == [3, 10, 8, 49]
    assert _reduce(ops.MAX, a, b).tolist() == [3, 5, -2, 7]
    assert _reduce(ops.MIN, a, b).tolist() == [1, 2, -4, 7]
    assert _reduce(ops.SUM, a, b).dtype == np.dtype(dtype)


def test_reduce_into_is_in_place_and_keeps_inbuf():
    a = np.array([1, 2, 3], "i4"); b = np.array([10, 20, 30], "i4")
    ptr = b.__array_interface__["data"][0]
    ops.SUM.reduce_into(a, b, D.INT)
    assert b.tolist() == [11, 22, 33] and a.tolist() == [1, 2, 3]
    assert b.__array_interface__["data"][0] == ptr


@pytest.mark.parametrize("dtype", ["i4", "i8", "u1", "?"])
def test_logical_ops_give_0_1_in_buffer_dtype(dtype):
    a = np.array([0, 3, 0, 5], dtype=dtype) if dtype != "?" else np.array([0, 1, 0, 1], "?")
    b = np.array([0, 0, 7, 2], dtype=dtype) if dtype != "?" else np.array([0, 0, 1, 1], "?")
    land = _reduce(ops.LAND, a, b)
    lor = _reduce(ops.LOR, a, b)
    lxor = _reduce(ops.LXOR, a, b)
    assert land.dtype == np.dtype(dtype)
    assert land.astype(int).tolist() == [0, 0, 0, 1]
    assert lor.astype(int).tolist() == [0, 1, 1, 1]
    assert lxor.astype(int).tolist() == [0, 1, 1, 0]


@pytest.mark.parametrize("dtype", ["i4", "u8", "?"])
def test_bitwise_ops_on_ints_and_bools(dtype):
    if dtype == "?":
        a, b = np.array([0, 1, 1], "?"), np.array([1, 1, 0], "?")
        assert _reduce(ops.BAND, a, b).tolist() == [False, True, False]
        assert _reduce(ops.BXOR, a, b).tolist() == [True, False, True]
        return
    a = np.array([0b1100, 0b1111], dtype)
    b = np.array([0b1010, 0b0001], dtype)
    assert _reduce(ops.BAND, a, b).tolist() == [0b1000, 0b0001]
    assert _reduce(ops.BOR, a, b).tolist() == [0b1110, 0b1111]
    assert _reduce(ops.BXOR, a, b).tolist() == [0b0110, 0b1110]


@pytest.mark.parametrize("op", [ops.BAND, ops.BOR, ops.BXOR])
@pytest.mark.parametrize("dtype,name", [("f8", "DOUBLE"), ("f4", "FLOAT"), ("c16", "C_DOUBLE_COMPLEX")])
def test_bitwise_ops_refuse_floats(op, dtype, name):
    b = np.ones(2, dtype)
    with pytest.raises(OpError) as exc:
        op.reduce_into(np.ones(2, dtype), b, D.from_numpy_dtype(dtype), call="Allreduce")
    msg = str(exc.value)
    assert msg.startswith(f"Allreduce: MPI.{op.name} cannot reduce {np.dtype(dtype)} data (datatype {name})")
    assert "integer, bool or BYTE" in msg
    assert exc.value.Get_error_class() == ERR_OP
    with pytest.raises(OpError, match=f"MPI.{op.name}"):
        op.check_datatype(D.from_numpy_dtype(dtype))


def test_max_refuses_complex_and_arith_refuses_pairs():
    with pytest.raises(OpError, match="complex numbers have no order"):
        ops.MAX.check_datatype(D.C_DOUBLE_COMPLEX)
    ops.SUM.check_datatype(D.C_DOUBLE_COMPLEX)
    with pytest.raises(OpError, match="pair datatypes only reduce with MPI.MAXLOC"):
        ops.SUM.check_datatype(D.DOUBLE_INT)
    with pytest.raises(OpError, match="numeric data"):
        ops.SUM.reduce_into(np.array([b"a"], "S1"), np.array([b"b"], "S1"), D.CHAR)


@pytest.mark.parametrize("pair", [D.DOUBLE_INT, D.FLOAT_INT, D.TWOINT, D.LONG_INT, D.SHORT_INT])
def test_maxloc_minloc_buffers_ties_to_lower_index(pair):
    a = np.array([(5, 3), (1, 0), (4, 7), (2, 2)], dtype=pair.dtype)
    b = np.array([(4, 1), (2, 1), (4, 2), (2, 9)], dtype=pair.dtype)
    mx = b.copy(); ops.MAXLOC.reduce_into(a, mx, pair)
    mn = b.copy(); ops.MINLOC.reduce_into(a, mn, pair)
    assert [tuple(map(int, x)) for x in mx.tolist()] == [(5, 3), (2, 1), (4, 2), (2, 2)]
    assert [tuple(map(int, x)) for x in mn.tolist()] == [(4, 1), (1, 0), (4, 2), (2, 2)]


def test_maxloc_on_ranks_in_rank_order():
    # Four "ranks" each contribute (value, rank); tie between ranks 1 and 3.
    vals = [3.0, 9.0, 1.0, 9.0]
    contributions = [np.array([(v, r)], dtype=D.DOUBLE_INT.dtype) for r, v in enumerate(vals)]
    acc = contributions[-1].copy()
    for c in reversed(contributions[:-1]):  # inbuf is always the lower rank
        ops.MAXLOC.reduce_into(c, acc, D.DOUBLE_INT)
    assert acc[0]["value"] == 9.0 and acc[0]["index"] == 1


def test_maxloc_refuses_non_pair():
    with pytest.raises(OpError, match="MPI.MAXLOC needs \\(value, index\\) pairs, got float64 data"):
        ops.MAXLOC.reduce_into(np.ones(2), np.ones(2), D.DOUBLE)


def test_replace_and_no_op_buffers():
    a = np.array([1, 2]); b = np.array([3, 4])
    ops.REPLACE.reduce_into(a, b)
    assert b.tolist() == [1, 2]
    b = np.array([3, 4])
    ops.NO_OP.reduce_into(a, b)
    assert b.tolist() == [3, 4]


def test_reduce_into_accepts_bytes_from_the_wire():
    acc = np.array([1.0, 2.0])
    ops.SUM.reduce_into(np.array([10.0, 20.0]).tobytes(), acc, D.DOUBLE)
    assert acc.tolist() == [11.0, 22.0]
    acc = np.array([1, 2], "i4")
    ops.SUM.reduce_into(np.array([5, 6], "i4").view(np.uint8), acc, D.INT)
    assert acc.tolist() == [6, 8]


def test_reduce_into_length_mismatch():
    with pytest.raises(CountError, match="differ in length"):
        ops.SUM.reduce_into(np.ones(3), np.ones(2))
    with pytest.raises(OpError, match="differ in dtype"):
        ops.SUM.reduce_into(np.ones(2, "f4"), np.ones(2, "f8"))


def test_contiguous_derived_type_reduces_elementwise():
    t = D.INT.Create_contiguous(2).Commit()
    a = np.array([1, 2, 3, 4], "i4"); b = np.array([10, 20, 30, 40], "i4")
    ops.MAX.reduce_into(a, b, t)
    assert b.tolist() == [10, 20, 30, 40]
    ops.SUM.reduce_into(a, b, t)
    assert b.tolist() == [11, 22, 33, 44]


# ------------------------------------------------------------ user ops on buffers, order
def _matmul_op():
    def matmul(inbuf, inoutbuf, datatype):
        # written mpi4py style, against raw buffers
        a = np.frombuffer(inbuf, dtype="f8").reshape(-1, 2, 2)
        b = np.frombuffer(inoutbuf, dtype="f8").reshape(-1, 2, 2)
        b[...] = a @ b
    return Op.Create(matmul, commute=False)


def test_user_buffer_op_receives_numpy_arrays_and_datatype():
    seen = {}

    def fn(inbuf, inoutbuf, datatype):
        seen["types"] = (type(inbuf), type(inoutbuf), datatype)
        seen["ro"] = inbuf.flags.writeable
        inoutbuf += inbuf  # direct numpy use works too

    op = Op.Create(fn, commute=True)
    b = np.array([1, 2], "i4")
    op.reduce_into(np.array([3, 4], "i4"), b, D.INT)
    assert b.tolist() == [4, 6]
    assert seen["types"] == (np.ndarray, np.ndarray, D.INT)
    assert seen["ro"] is False


def test_non_commutative_user_op_rank_order_matrix_product():
    op = _matmul_op()
    rng = np.random.default_rng(0)
    mats = [rng.integers(-3, 4, size=(2, 2)).astype("f8") for _ in range(5)]
    expected = functools.reduce(np.matmul, mats)
    assert not np.allclose(expected, functools.reduce(np.matmul, mats[::-1]))

    # MPI convention, folding from the highest rank down: acc = x_r (op) acc.
    acc = mats[-1].ravel().copy()
    for m in reversed(mats[:-1]):
        op.reduce_into(m.ravel(), acc, D.DOUBLE)
    assert np.allclose(acc.reshape(2, 2), expected)

    # Accumulator holding the lower ranks, folding upwards: acc = acc (op) x_r.
    acc = mats[0].ravel().copy()
    for m in mats[1:]:
        op.reduce_into_lower(acc, m.ravel(), D.DOUBLE)
    assert np.allclose(acc.reshape(2, 2), expected)


def test_non_commutative_string_concat_objects():
    concat = Op.Create(lambda x, y, dt: x + y, commute=False)
    assert functools.reduce(concat, ["r0", "r1", "r2"]) == "r0r1r2"


def test_reduce_into_lower_commutative_path():
    acc = np.array([1, 2], "i4")
    ops.SUM.reduce_into_lower(acc, np.array([10, 20], "i4"), D.INT)
    assert acc.tolist() == [11, 22]


def test_user_buffer_op_returning_result_is_copied():
    op = Op.Create(lambda a, b, dt: a * 2 + b, commute=True)
    b = np.array([1, 1])
    op.reduce_into(np.array([5, 6]), b)
    assert b.tolist() == [11, 13]


def test_user_op_errors_are_explained():
    def bad(a, b, dt):
        raise ValueError("boom")

    with pytest.raises(OpError, match="Reduce: user operation bad raised ValueError: boom"):
        Op.Create(bad).reduce_into(np.ones(2), np.ones(2))


# ------------------------------------------------------------------------- reduce_local
def test_reduce_local_and_op_method():
    inout = np.array([1.0, 2.0, 3.0])
    reduce_local(np.array([10.0, 20.0, 30.0]), inout, ops.SUM)
    assert inout.tolist() == [11.0, 22.0, 33.0]
    ops.MAX.Reduce_local([np.array([50, 0], "i4"), D.INT], inout2 := np.array([1, 2], "i4"))
    assert inout2.tolist() == [50, 2]


def test_reduce_local_refuses_noncontiguous_buffers():
    # issue 29: as mpi4py (BufferError); the buffers are left as they were
    base = np.zeros(6, "i4")
    with pytest.raises(BufferError, match="not contiguous"):
        reduce_local(np.array([1, 2, 3], "i4"), base[::2], ops.SUM)
    with pytest.raises(BufferError, match="not contiguous"):
        reduce_local(base[::2], np.zeros(3, "i4"), ops.SUM)
    assert base.tolist() == [0] * 6


def test_reduce_local_errors():
    with pytest.raises(CountError, match="Reduce_local: inbuf has 3 x DOUBLE but inoutbuf has 2 x DOUBLE"):
        reduce_local(np.ones(3), np.ones(2), ops.SUM)
    with pytest.raises(OpError, match="BAND"):
        reduce_local(np.ones(2), np.ones(2), ops.BAND)
    with pytest.raises(OpError, match="op must be an MPI.Op"):
        reduce_local(np.ones(2), np.ones(2), "sum")
