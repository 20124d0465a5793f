"""MPI.File in one process (COMM_SELF) and on in-process thread worlds: modes, views,
datareps, pointers, partial reads, and collective error agreement."""
from __future__ import annotations

import os

import numpy as np
import pytest

from minimpi import MPI
from minimpi.runtime.inproc import run_threads

RW = MPI.MODE_CREATE | MPI.MODE_RDWR


def test_modes_sizes_and_handle(tmp_path):
    path = tmp_path / "f.dat"
    fh = MPI.File.Open(MPI.COMM_SELF, path, RW | MPI.MODE_DELETE_ON_CLOSE)
    assert fh and fh != MPI.FILE_NULL and fh.amode == RW | MPI.MODE_DELETE_ON_CLOSE
    fh.Preallocate(100)
    fh.Preallocate(10)
    assert fh.Get_size() == 100
    fh.Set_size(7)
    assert fh.size == 7 and fh.group_size == 1 and fh.group_rank == 0
    assert MPI.Group.Compare(fh.Get_group(), MPI.COMM_SELF.Get_group()) == MPI.IDENT
    fh.Set_info(MPI.Info.Create({"cb_nodes": "1"}))
    assert fh.Get_info().Get("cb_nodes") == "1"
    fh.atomicity = True
    assert fh.Get_atomicity() is True
    with pytest.raises(ValueError):
        import pickle
        pickle.dumps(fh)
    fh.Close()
    assert not path.exists() and not fh
    with pytest.raises(MPI.Exception) as e:
        fh.Get_size()
    assert e.value.Get_error_class() == MPI.ERR_FILE


def test_excl_amode_missing_and_delete(tmp_path):
    path = tmp_path / "g.dat"
    MPI.File.Open(MPI.COMM_SELF, path, RW | MPI.MODE_EXCL).Close()
    with pytest.raises(MPI.Exception) as e:
        MPI.File.Open(MPI.COMM_SELF, path, RW | MPI.MODE_EXCL)
    assert e.value.Get_error_class() == MPI.ERR_FILE_EXISTS and "EEXIST" in str(e.value)
    with pytest.raises(MPI.Exception) as e:
        MPI.File.Open(MPI.COMM_SELF, path, MPI.MODE_RDWR | MPI.MODE_WRONLY)
    assert e.value.Get_error_class() == MPI.ERR_AMODE
    MPI.File.Delete(path)
    with pytest.raises(MPI.Exception) as e:
        MPI.File.Delete(path)
    assert e.value.Get_error_class() == MPI.ERR_NO_SUCH_FILE and str(path) in str(e.value)


def test_append_and_sequential(tmp_path):
    path = tmp_path / "a.dat"
    path.write_bytes(b"0123456789")
    fh = MPI.File.Open(MPI.COMM_SELF, path, MPI.MODE_WRONLY | MPI.MODE_APPEND)
    assert fh.Get_position() == 10 and fh.Get_position_shared() == 10
    fh.Write(bytearray(b"ab"))
    fh.Write_shared(bytearray(b"cd"))    # the shared pointer also began at 10: overwrites
    fh.Close()
    assert path.read_bytes() == b"0123456789cd"
    fh = MPI.File.Open(MPI.COMM_SELF, path, MPI.MODE_WRONLY | MPI.MODE_SEQUENTIAL)
    with pytest.raises(MPI.Exception) as e:
        fh.Write_at(0, bytearray(b"x"))
    assert e.value.Get_error_class() == MPI.ERR_UNSUPPORTED_OPERATION
    fh.Write_shared(bytearray(b"XY"))
    fh.Set_view(MPI.DISPLACEMENT_CURRENT, MPI.BYTE, MPI.BYTE)
    assert fh.Get_view()[0] == 2 and fh.Get_position_shared() == 0
    fh.Write_shared(bytearray(b"Z"))
    fh.Close()
    assert path.read_bytes()[:3] == b"XYZ"


def test_views_datareps_and_partial_reads(tmp_path):
    path = tmp_path / "v.dat"
    fh = MPI.File.Open(MPI.COMM_SELF, path, RW)
    fh.Set_view(4, MPI.INT, MPI.INT, "external32")
    disp, et, ft, rep = fh.Get_view()
    assert (disp, rep) == (4, "external32") and et == MPI.INT and ft == MPI.INT
    values = np.array([1, 2, 0x01020304], np.int32)
    fh.Write_at(0, values)
    raw = path.read_bytes()
    assert raw[4:] == values.astype(">i4").tobytes()       # big-endian on disk
    back = np.zeros(3, np.int32)
    fh.Read_at(0, back)
    assert np.array_equal(back, values)
    with pytest.raises(MPI.Exception) as e:
        fh.Set_view(0, MPI.LONG, MPI.LONG, "external32")     # 8 bytes natively, 4 in ext32
    assert e.value.Get_error_class() == MPI.ERR_UNSUPPORTED_DATAREP
    fh.Set_view(0, MPI.BYTE, MPI.BYTE, "native")
    assert fh.Get_byte_offset(5) == 5 and fh.Get_type_extent(MPI.DOUBLE) == 8
    big = np.full(20, 7, np.uint8)
    st = MPI.Status()
    fh.Read_at(10, big, st)                                  # only 6 bytes exist there
    assert st.Get_count(MPI.BYTE) == 6 and (big[6:] == 7).all()
    req = fh.Iread_at(0, back2 := np.zeros(4, np.uint8))
    assert req.Test() and np.array_equal(back2, np.frombuffer(raw[:4], np.uint8))
    with pytest.raises(MPI.Exception, match="whole number of the view's etype"):
        fh.Set_view(0, MPI.DOUBLE)
        fh.Write_at(0, np.zeros(3, np.int32))
    fh.Close()


def test_split_collectives_in_pairs(tmp_path):
    fh = MPI.File.Open(MPI.COMM_SELF, tmp_path / "s.dat", RW | MPI.MODE_DELETE_ON_CLOSE)
    data = np.arange(5, dtype=np.int64)
    fh.Write_at_all_begin(0, data)
    with pytest.raises(MPI.Exception, match="still open"):
        fh.Write_all_begin(data)
    st = MPI.Status()
    fh.Write_at_all_end(data, st)
    assert st.Get_count(MPI.INT64_T) == 5
    with pytest.raises(MPI.Exception, match="no Read_all_begin"):
        fh.Read_all_end(data)
    fh.Close()


def test_file_null_errhandler():
    saved = MPI.FILE_NULL.Get_errhandler()
    assert saved == MPI.ERRORS_RETURN
    MPI.FILE_NULL.Set_errhandler(MPI.ERRORS_ARE_FATAL)
    assert MPI.FILE_NULL.Get_errhandler() == MPI.ERRORS_ARE_FATAL
    MPI.FILE_NULL.Set_errhandler(saved)


@pytest.mark.parametrize("hints", [{"romio_cb_write": "enable", "romio_cb_read": "enable"},
                                   {"romio_cb_write": "disable", "romio_cb_read": "disable"},
                                   {"romio_cb_write": "enable", "romio_cb_read": "enable",
                                    "cb_buffer_size": "4096"}])     # two rounds
def test_collective_on_three_threads(tmp_path, hints):
    path = str(tmp_path / "c.dat")

    def body(comm):
        rank, size = comm.Get_rank(), comm.Get_size()
        info = MPI.Info.Create(hints)
        fh = MPI.File.Open(comm, path, RW, info)
        mine = size - 1 - rank                          # reversed: aggregators reorder
        fh.Write_at_all(mine * 5000, np.full(5000, mine, np.uint8))
        whole = np.zeros(5000 * size, np.uint8)
        fh.Read_at_all(0, whole)
        fh.Close()
        return whole

    for whole in run_threads(3, body, timeout=30):
        assert np.array_equal(whole, np.repeat(np.arange(3, dtype=np.uint8), 5000))


def test_collective_argument_error_raises_everywhere(tmp_path):
    path = str(tmp_path / "e.dat")

    def body(comm):
        fh = MPI.File.Open(comm, path, RW)
        buf = np.zeros(4, np.int32)
        if comm.Get_rank() == 1:
            buf = "not a buffer"
        try:
            fh.Write_at_all(0, buf)
        except (MPI.Exception, TypeError) as e:
            outcome = str(e)
        else:
            outcome = "no error"
        fh.Close()
        return outcome

    outcomes = run_threads(3, body, timeout=30)
    assert "no error" not in outcomes
    assert all("rank 1" in o for o in outcomes), outcomes
    assert not [n for n in os.listdir(os.path.dirname(path)) if n.endswith(".shfp")]


def test_shared_pointer_serialises_threads_too(tmp_path):
    """Write_shared from 3 ranks (threads here: the lock file's fcntl lock alone would not
    exclude them) never lets two records land on the same bytes."""
    path = str(tmp_path / "sh.dat")

    def body(comm):
        fh = MPI.File.Open(comm, path, RW | MPI.MODE_DELETE_ON_CLOSE)
        fh.Set_view(0, MPI.INT)
        for i in range(50):
            fh.Write_shared(np.array([comm.Get_rank(), i], np.int32))
        comm.Barrier()
        everything = np.empty(2 * 50 * comm.Get_size(), np.int32)
        fh.Read_at(0, everything)
        fh.Close()
        return everything

    records = run_threads(3, body, timeout=30)[0].reshape(-1, 2)
    assert sorted(map(tuple, records.tolist())) == [(r, i) for r in range(3) for i in range(50)]
