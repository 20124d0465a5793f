import array
import mmap

import numpy as np
import pytest

from minimpi.constants import IN_PLACE
from minimpi.data import datatypes as D
from minimpi.data.buffers import BufSpec, VBufSpec, is_buffer, parse_buffer, parse_vbuffer
from minimpi.errors import ERR_BUFFER, ERR_COUNT, BufferSpecError, CountError, DatatypeError


def send(spec, **kw):
    return parse_buffer(spec, writable=False, **kw)


def recv(spec, **kw):
    return parse_buffer(spec, writable=True, call="Recv", **kw)


# ----------------------------------------------------------------- plain buffer objects
@pytest.mark.parametrize("dtype,name", [("i4", "INT"), ("f8", "DOUBLE"), ("?", "C_BOOL"),
                                        ("c16", "C_DOUBLE_COMPLEX"), ("i8", "LONG")])
def test_numpy_array_default_type_zero_copy(dtype, name):
    a = np.zeros(6, dtype=dtype)
    s = send(a)
    assert isinstance(s, BufSpec)
    assert s.datatype.name == name and s.count == 6 and s.nbytes == a.nbytes
    assert np.shares_memory(s.array, a)
    assert s.array.ndim == 1 and s.array.dtype == a.dtype
    assert not s.is_temporary


def test_multidim_and_0d_arrays():
    a = np.arange(12.0).reshape(3, 4)
    s = recv(a)
    assert s.count == 12 and np.shares_memory(s.array, a)
    s.array[:] = -1
    assert (a == -1).all()
    z = np.array(5, dtype="i4")
    s = recv(z)
    assert s.count == 1 and s.array.shape == (1,) and np.shares_memory(s.array, z)
    s.array[0] = 9
    assert int(z) == 9


def test_fortran_contiguous_is_used_in_memory_order_zero_copy():
    a = np.asfortranarray(np.arange(6).reshape(2, 3))
    s = send(a)
    assert np.shares_memory(s.array, a)
    assert s.array.tolist() == [0, 3, 1, 4, 2, 5]


def test_view_is_writable_byte_level_memoryview():
    a = np.arange(4, dtype="i4")
    s = recv(a)
    v = s.view
    assert isinstance(v, memoryview) and v.nbytes == 16 and not v.readonly
    assert v.format == "B"
    v[0:4] = np.array([7], "i4").tobytes()
    assert a[0] == 7
    assert send(b"abcd").view.readonly


def test_bytearray_and_bytes_default_to_byte():
    ba = bytearray(b"hello")
    s = recv(ba)
    assert s.datatype is D.BYTE and s.count == 5
    s.array[0] = ord("j")
    assert ba == bytearray(b"jello")
    s = send(b"abc")
    assert s.datatype is D.BYTE and s.count == 3 and bytes(s.view) == b"abc"


def test_array_array_uses_typecode():
    arr = array.array("d", [1.0, 2.0, 3.0])
    s = recv(arr)
    assert s.datatype is D.DOUBLE and s.count == 3
    s.array[1] = 42.0
    assert arr[1] == 42.0
    assert send(array.array("i", [1, 2])).datatype is D.INT


def test_memoryview_and_mmap():
    a = np.arange(5, dtype="f4")
    s = recv(memoryview(a))
    assert s.datatype is D.FLOAT and np.shares_memory(s.array, a)
    m = mmap.mmap(-1, 16)
    try:
        s = recv(m)
        assert s.datatype is D.BYTE and s.count == 16
        s.array[:] = 1
        assert m[:4] == b"\x01\x01\x01\x01"
        del s
    finally:
        m.close()


def test_strided_memoryview_is_refused_as_in_mpi4py():
    a = np.zeros(6, dtype="i4")
    with pytest.raises(BufferError, match="strided memoryview") as err:
        recv(memoryview(a)[::2])
    assert err.value.Get_error_class() == ERR_BUFFER
    with pytest.raises(BufferError):
        send(memoryview(bytearray(12))[::3])


# ------------------------------------------------------------------------ spec forms
def test_buf_type_list_and_tuple():
    a = np.arange(4, dtype="i4")
    for spec in ([a, D.INT], (a, D.INT), [a, "i"], [a, np.int32]):
        s = send(spec)
        assert s.count == 4 and s.datatype.size == 4 and np.shares_memory(s.array, a)


def test_explicit_type_reinterprets_bytes():
    a = np.zeros(4, dtype="f8")
    s = recv([a, D.INT])
    assert s.count == 8 and s.array.dtype == np.intc and np.shares_memory(s.array, a)
    s = send([bytearray(8), D.DOUBLE])
    assert s.count == 1 and s.array.dtype == np.float64


def test_buf_count_type():
    a = np.arange(10, dtype="i4")
    s = send([a, 3, D.INT])
    assert s.count == 3 and s.array.tolist() == [0, 1, 2] and s.nbytes == 12
    assert np.shares_memory(s.array, a)
    s = send([a, 4])
    assert s.count == 4 and s.datatype is D.INT
    s = send([a, np.int64(2), "i"])
    assert s.count == 2


def test_buf_count_displ_type():
    a = np.arange(10, dtype="i4")
    s = recv([a, (3, 2), D.INT])
    assert s.count == 3 and s.array.tolist() == [2, 3, 4]
    s.array[:] = 0
    assert a.tolist() == [0, 1, 0, 0, 0, 5, 6, 7, 8, 9]
    assert send([a, (2, 8)]).array.tolist() == [8, 9]
    assert send([a, 2, 8, D.INT]).array.tolist() == [8, 9]
    assert send([a, (None, 7), D.INT]).count == 3


def test_empty_forms():
    for spec in (None, [None, D.INT], [None, 0, D.DOUBLE]):
        s = send(spec)
        assert s.count == 0 and s.nbytes == 0 and s.array.size == 0
    assert send([None, D.DOUBLE]).datatype is D.DOUBLE
    s = recv(np.zeros(0))
    assert s.count == 0 and len(s.view) == 0
    assert send([np.arange(4), 0]).count == 0


def test_pair_types():
    arr = np.array([(1.5, 3), (2.5, 4)], dtype=D.DOUBLE_INT.dtype)
    s = send(arr)
    assert s.datatype is D.DOUBLE_INT and s.count == 2 and np.shares_memory(s.array, arr)
    ints = np.array([[5, 0], [7, 1]], dtype="i4")
    s = send([ints, D.TWOINT])
    assert s.count == 2 and s.array["value"].tolist() == [5, 7] and s.array["index"].tolist() == [0, 1]


def test_contiguous_derived_type():
    t = D.DOUBLE.Create_contiguous(3).Commit()
    a = np.arange(12.0)
    s = recv([a, t])
    assert s.count == 4 and s.array.size == 12 and s.nbytes == 96
    s = recv([a, (2, 1), t])
    assert s.count == 2 and s.array.tolist() == [3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    assert np.shares_memory(s.array, a)


def test_structured_non_pair_array_goes_as_records():
    d = np.dtype([("x", "f8"), ("tag", "S3")])
    a = np.zeros(3, dtype=d)
    s = recv(a)
    assert s.count == 3 and s.nbytes == a.nbytes and np.shares_memory(s.array, a)


def test_in_place():
    assert parse_buffer(IN_PLACE, writable=True, allow_in_place=True) is IN_PLACE
    with pytest.raises(BufferSpecError, match="Reduce: MPI.IN_PLACE is not allowed as recvbuf"):
        parse_buffer(IN_PLACE, writable=True, call="Reduce", arg="recvbuf")


# --------------------------------------------------------------------- non-contiguous
# Issue 29: a buffer that is not contiguous is refused where mpi4py refuses it (BufferError;
# these used to be copied), with a message that says what to pass instead.
@pytest.mark.parametrize("make", [lambda a: a[:, ::2], lambda a: a[:, 1], lambda a: a[::-1],
                                  lambda a: a[::2, ::2]],
                         ids=["columns", "one column", "reversed", "every other"])
def test_a_noncontiguous_array_is_refused_for_sending_and_receiving(make):
    a = np.arange(12).reshape(3, 4)
    for parse in (send, recv):
        with pytest.raises(BufferError, match=r"not contiguous.*np\.ascontiguousarray") as err:
            parse(make(a))
        assert err.value.Get_error_class() == ERR_BUFFER
        with pytest.raises(BufferError):       # with a datatype and count too
            parse([make(a), 1, D.LONG])
    assert (a == np.arange(12).reshape(3, 4)).all()


def test_contiguous_views_stay_zero_copy():
    a = np.arange(12).reshape(3, 4)
    t = send(a.T)  # F-contiguous view of a C array: memory order, zero copy
    assert np.shares_memory(t.array, a)
    row = recv(a[1])
    assert np.shares_memory(row.array, a) and not row.is_temporary
    one = send(a[:1, 2])     # a strided view of one element is contiguous (numpy and mpi4py)
    assert one.count == 1 and one.array.tolist() == [2]
    assert send(a[:0, 1]).count == 0


def test_a_derived_datatype_over_the_whole_array_is_how_to_pass_a_column():
    a = np.zeros((3, 4), dtype="i4")
    column = D.INT.Create_vector(3, 1, 4).Commit()
    s = recv([a.reshape(-1)[1:], 1, column])
    assert s.is_temporary and s.count == 1
    s.array[:] = [1, 2, 3]
    assert (a == 0).all()  # nothing written before finish()
    s.finish()
    assert a[:, 1].tolist() == [1, 2, 3] and a.sum() == 6
    s.finish()  # idempotent


def test_contiguous_receive_finish_is_noop():
    a = np.zeros(3)
    s = recv(a)
    s.array[:] = 1
    s.finish()
    assert a.tolist() == [1, 1, 1]


# --------------------------------------------------------------------------- errors
def test_readonly_receive_buffer():
    with pytest.raises(BufferSpecError) as exc:
        recv(b"abc")
    assert str(exc.value) == ("Recv: buf is read-only (bytes); a receive needs a writable "
                              "buffer such as bytearray or a numpy array")
    assert exc.value.Get_error_class() == ERR_BUFFER
    ro = np.zeros(3)
    ro.flags.writeable = False
    with pytest.raises(BufferSpecError, match=r"Recv: buf is read-only \(numpy array of dtype float64\)"):
        recv(ro)
    with pytest.raises(BufferSpecError, match="read-only"):
        parse_buffer([memoryview(b"xy"), D.BYTE], writable=True, call="Irecv", arg="buf")
    send(b"abc")  # fine for sending


def test_count_larger_than_buffer():
    with pytest.raises(CountError) as exc:
        recv([np.zeros(4), 5, D.DOUBLE])
    msg = str(exc.value)
    assert msg.startswith("Recv: buf count 5 needs 40 bytes")
    assert "only 32 bytes" in msg and "float64" in msg
    assert exc.value.Get_error_class() == ERR_COUNT
    with pytest.raises(CountError, match="at displacement 3"):
        send([np.zeros(4), (2, 3), D.DOUBLE])
    with pytest.raises(CountError, match="past the end"):
        send([np.zeros(4), (None, 5), D.DOUBLE])


def test_negative_or_non_integer_count():
    with pytest.raises(CountError, match="count must be >= 0"):
        send([np.zeros(4), -1, D.DOUBLE])
    with pytest.raises(CountError, match="displacement must be >= 0"):
        send([np.zeros(4), (1, -1), D.DOUBLE])
    # mpi4py reads counts with operator.index: a float is a TypeError
    with pytest.raises(TypeError, match="count must be an integer, got float"):
        send([np.zeros(4), 2.0, D.DOUBLE])
    assert send([np.zeros(4), np.int16(2), D.DOUBLE]).count == 2
    assert send([np.zeros(4), np.array(3), D.DOUBLE]).count == 3


def test_datatype_size_does_not_divide_buffer():
    with pytest.raises(DatatypeError) as exc:
        send([bytearray(10), D.INT], call="Bcast")
    assert str(exc.value).startswith("Bcast: buf is 10 bytes (bytearray), not a whole number of INT items")
    send([bytearray(10), 2, D.INT])  # explicit count that fits: fine


def test_non_buffer_objects():
    with pytest.raises(BufferSpecError) as exc:
        send(5)
    assert "Send: buf is int 5, not a buffer" in str(exc.value)
    assert "lowercase send()" in str(exc.value)
    with pytest.raises(BufferSpecError, match="Send: buf is a list/tuple whose first item"):
        send([1.0, 2.0])
    with pytest.raises(BufferSpecError, match="not a buffer"):
        send("text")
    with pytest.raises(BufferSpecError, match="of 5 items"):
        send([np.zeros(2), 1, 0, D.DOUBLE, 9])
    with pytest.raises(BufferSpecError, match="list of 0 items; expected 2 to 4 items"):
        send([])
    with pytest.raises(BufferSpecError, match="list of 1 items"):
        send([np.zeros(2)])
    with pytest.raises(BufferSpecError, match="dtype object"):
        send(np.array([{}, []], dtype=object))


def test_bad_datatype_in_spec():
    with pytest.raises(DatatypeError, match="Send: buf datatype is float 1.5, not a datatype"):
        send([np.zeros(2), 1, 1.5])
    with pytest.raises(DatatypeError, match="unknown typecode"):
        send([np.zeros(2), "zz"])
    with pytest.raises(DatatypeError, match="DATATYPE_NULL"):
        send([np.zeros(2), D.DATATYPE_NULL])
    t = D.INT.Dup()
    t.Free()
    with pytest.raises(DatatypeError, match="freed"):
        send([np.zeros(2), t])


def test_none_with_count_is_an_error():
    with pytest.raises(BufferSpecError, match="is None"):
        send([None, 3, D.INT])


def test_is_buffer():
    assert is_buffer(np.zeros(1)) and is_buffer(b"") and is_buffer(bytearray())
    assert not is_buffer([1]) and not is_buffer(3)


# ------------------------------------------------------------------------ v-buffers
def test_vbuffer_counts_displs_type():
    a = np.arange(10, dtype="i4")
    v = parse_vbuffer([a, ([1, 2, 3], [0, 2, 5]), D.INT], 3, writable=False)
    assert isinstance(v, VBufSpec)
    assert v.counts == [1, 2, 3] and v.displs == [0, 2, 5]
    assert [v.block(i).tolist() for i in range(3)] == [[0], [2, 3], [5, 6, 7]]
    assert all(np.shares_memory(v.block(i), a) for i in range(3))
    assert v.block_nbytes(2) == 12 and v.block_view(1).nbytes == 8
    assert v.total_count == 6 and v.nbytes == 40


def test_vbuffer_displs_none_is_running_sum():
    a = np.arange(6.0)
    v = parse_vbuffer([a, ([1, 2, 3], None), D.DOUBLE], 3, writable=False)
    assert v.displs == [0, 1, 3]
    v = parse_vbuffer([a, [3, 0, 3], D.DOUBLE], 3, writable=False)
    assert v.displs == [0, 3, 3] and v.block(1).size == 0
    v = parse_vbuffer([a, (2, 2)], 2, writable=False)  # counts sequence of 2 ints
    assert v.counts == [2, 2] and v.displs == [0, 2]
    v = parse_vbuffer([a, [1, 2, 3]], 3, writable=False)
    assert v.counts == [1, 2, 3] and v.datatype is D.DOUBLE
    v = parse_vbuffer([a, [1, 1], [4, 0], D.DOUBLE], 2, writable=False)
    assert v.block(0).tolist() == [4.0]
    v = parse_vbuffer([a, 2, D.DOUBLE], 3, writable=False)  # one int: same count for all
    assert v.counts == [2, 2, 2]


def test_vbuffer_counts_omitted_split_evenly_extras_first():
    a = np.arange(10)
    v = parse_vbuffer(a, 4, writable=False)
    assert v.counts == [3, 3, 2, 2] and v.displs == [0, 3, 6, 8]
    v = parse_vbuffer([a, D.LONG], 5, writable=False)
    assert v.counts == [2] * 5
    v = parse_vbuffer(np.arange(2), 4, writable=False)
    assert v.counts == [1, 1, 0, 0]


def test_vbuffer_of_a_noncontiguous_array_is_refused():
    a = np.zeros(8, dtype="i4")
    with pytest.raises(BufferError, match="not contiguous"):
        parse_vbuffer([a[::2], [1, 3]], 2, writable=True, call="Gatherv", arg="recvbuf")
    with pytest.raises(BufferError, match="Scatterv: sendbuf"):
        parse_vbuffer(a[::2], 2, writable=False, call="Scatterv", arg="sendbuf")


def test_vbuffer_in_place_and_none():
    assert parse_vbuffer(IN_PLACE, 3, writable=True, allow_in_place=True) is IN_PLACE
    with pytest.raises(BufferSpecError, match="IN_PLACE"):
        parse_vbuffer(IN_PLACE, 3, writable=True)
    v = parse_vbuffer(None, 3, writable=False)
    assert v.counts == [0, 0, 0]


def test_vbuffer_errors():
    a = np.arange(10, dtype="i4")
    with pytest.raises(CountError, match="Scatterv: sendbuf has 2 counts but the communicator has 3 ranks"):
        parse_vbuffer([a, [1, 2], D.INT], 3, writable=False)
    with pytest.raises(CountError, match="has 2 displs"):
        parse_vbuffer([a, ([1, 2, 3], [0, 1]), D.INT], 3, writable=False)
    with pytest.raises(CountError, match=r"block for rank 2 \(displ 8, count 3\) ends at item 11"):
        parse_vbuffer([a, ([1, 2, 3], [0, 1, 8]), D.INT], 3, writable=False)
    with pytest.raises(CountError, match=r"counts\[1\] is -1"):
        parse_vbuffer([a, [1, -1, 3], D.INT], 3, writable=False)
    with pytest.raises(BufferSpecError, match="read-only"):
        parse_vbuffer(b"abcdef", 2, writable=True, call="Gatherv", arg="recvbuf")
    with pytest.raises(DatatypeError, match="not a whole number"):
        parse_vbuffer([bytearray(10), D.INT], 2, writable=False)
    with pytest.raises(BufferSpecError, match="not a buffer"):
        parse_vbuffer([[1, 2], [1, 1]], 2, writable=False)


def test_fast_path_distinguishes_long_and_long_long_and_byte_order():
    assert send(np.zeros(2, dtype="l")).datatype is D.LONG
    assert send(np.zeros(2, dtype="q")).datatype is D.LONG_LONG
    swapped = ">f8" if np.little_endian else "<f8"
    with pytest.raises(BufferError, match="Send: buf has dtype .*, not in native byte order"):
        send(np.zeros(2, dtype=swapped))
    assert send([np.zeros(2, dtype=swapped), D.DOUBLE]).count == 2   # explicit type: bytes as they are
    ro = np.zeros(2)
    ro.flags.writeable = False
    assert send(ro).count == 2
