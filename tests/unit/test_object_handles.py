"""mpi4py's object model for handles: MPI.Info (handle equality, pickling of the predefined
infos, the null info's mapping methods, Create_env), integer handles, Group pickling."""
import copy
import pickle
import sys

import pytest

from minimpi import MPI


def test_handles_on_one_info_share_keys_and_compare_equal():
    info = MPI.Info.Create({"a": "1"})
    other = MPI.Info(info)
    other["b"] = "2"
    assert info == other and info.items() == [("a", "1"), ("b", "2")]
    assert info.Dup() != info
    other.Free()
    assert other == MPI.INFO_NULL and not other
    assert info.Get("b") == "2"          # freeing one handle leaves the other's keys
    info.Free()


def test_predefined_infos_pickle_to_themselves():
    assert pickle.loads(pickle.dumps(MPI.INFO_NULL)) is MPI.INFO_NULL
    assert pickle.loads(pickle.dumps(MPI.INFO_ENV)) is MPI.INFO_ENV
    null = pickle.loads(pickle.dumps(MPI.Info()))
    assert null is not MPI.INFO_NULL and null == MPI.INFO_NULL
    env = pickle.loads(pickle.dumps(MPI.Info(MPI.INFO_ENV)))
    assert env is not MPI.INFO_ENV and env == MPI.INFO_ENV
    info = MPI.Info.Create([("k", "v")])
    copy = pickle.loads(pickle.dumps(info))
    assert copy != info and copy.items() == [("k", "v")]


def test_null_info_refuses_changes_with_keyerror():
    null = MPI.INFO_NULL
    with pytest.raises(KeyError):
        null["k"] = "v"
    with pytest.raises(KeyError):
        null.update([])
    with pytest.raises(KeyError):
        null.popitem()
    assert null.pop("k", None) is None and null.keys() == [] and null.copy() == null


def test_create_bad_items_is_a_typeerror():
    with pytest.raises(TypeError, match="items"):
        MPI.Info.Create(items=123)


def test_create_env_describes_the_command_line():
    env = MPI.Info.Create_env([sys.executable, "-c", "pass"])
    assert env.Get("command") == sys.executable and env.Get("argv") == "-c pass"
    assert env.Get("wdir") and env.Get("host")
    assert MPI.Info.Create_env("prog").Get("argv") == ""
    env.Free()


def test_window_and_file_integer_handles_find_the_same_object():
    import os
    win = MPI.Win.Create(MPI.BOTTOM, comm=MPI.COMM_SELF)
    assert win.handle and MPI.Win.fromhandle(win.handle) == win
    assert MPI.Win.f2py(win.py2f()) == win and MPI.Win.fromint(win.toint()) == win
    win.Free()
    assert win.handle == 0 and MPI.Win.fromhandle(0) == MPI.WIN_NULL
    f = MPI.File.Open(MPI.COMM_SELF, os.devnull, MPI.MODE_RDONLY)
    assert MPI.File.fromhandle(f.handle) == f and MPI.File.f2py(f.py2f()) == f
    f.Close()
    assert f.handle == 0 and MPI.File.fromint(0) == MPI.FILE_NULL
    with pytest.raises(ValueError, match="no live"):
        MPI.File.fromhandle(10**9)


def test_comm_null_handle_is_zero_and_names_comm_null():
    null = MPI.COMM_NULL
    assert null.handle == null.toint() == null.py2f() == 0
    assert type(null).fromhandle(0) == null and type(null).f2py(0) == null
    with pytest.raises(ValueError):
        type(null).fromhandle(10**9)


def test_comm_null_is_a_comm_as_in_mpi4py():
    null = MPI.COMM_NULL
    assert type(null) is MPI.Comm and isinstance(null, MPI.Comm) and not null
    assert MPI.Comm() == null and MPI.Intracomm(null) == null and MPI.Comm(null) is not null
    assert null != MPI.COMM_SELF and MPI.COMM_SELF != null
    assert null.Get_name() == "MPI_COMM_NULL" and repr(null) == "MPI.COMM_NULL"
    for call in ("Get_size", "Get_rank", "Is_inter", "Is_intra", "Get_group", "Get_topology",
                 "Free"):
        with pytest.raises(MPI.Exception) as info:
            getattr(null, call)()
        assert info.value.Get_error_class() == MPI.ERR_COMM, call
    with pytest.raises(MPI.Exception, match="not a member"):
        null.rank
    with pytest.raises(MPI.Exception):
        null.Get_attr(MPI.TAG_UB)
    # a subclass handle on it pickles and copies to a null of that subclass
    mine = type("MyComm", (MPI.Comm,), {})
    sys.modules[__name__].MyComm = mine
    mine.__module__ = __name__
    try:
        for copied in (pickle.loads(pickle.dumps(mine(null))), copy.copy(mine(null))):
            assert type(copied) is mine and copied == null and copied is not null
    finally:
        del sys.modules[__name__].MyComm
    assert copy.deepcopy(null) is null and pickle.loads(pickle.dumps(null)) is null


def test_split_undefined_gives_comm_null():
    assert MPI.COMM_SELF.Split(MPI.UNDEFINED) == MPI.COMM_NULL


def test_fortran_status_indices_match_py2f():
    status = MPI.Status()
    status.source, status.tag, status.error = 3, 7, MPI.ERR_OTHER
    fields = status.py2f()
    assert len(fields) == MPI.F_STATUS_SIZE
    assert (fields[MPI.F_SOURCE], fields[MPI.F_TAG], fields[MPI.F_ERROR]) == (3, 7, MPI.ERR_OTHER)


def test_predefined_groups_pickle_to_themselves_and_others_are_refused():
    assert pickle.loads(pickle.dumps(MPI.GROUP_NULL)) is MPI.GROUP_NULL
    assert pickle.loads(pickle.dumps(MPI.GROUP_EMPTY)) is MPI.GROUP_EMPTY
    empty = pickle.loads(pickle.dumps(MPI.Group(MPI.GROUP_EMPTY)))
    assert empty is not MPI.GROUP_EMPTY and empty == MPI.GROUP_EMPTY
    with pytest.raises(ValueError, match="GROUP_EMPTY"):
        pickle.dumps(MPI.COMM_SELF.Get_group())


def test_translate_ranks_takes_mpi4py_keywords():
    group = MPI.COMM_SELF.Get_group()
    assert group.Translate_ranks(ranks=[0], group=group) == [0]
    assert group.Translate_ranks([0], MPI.GROUP_EMPTY) == [MPI.UNDEFINED]


def test_buffer_object_model():
    empty = MPI.buffer()
    assert empty.address == 0 and empty.obj is None and empty.nbytes == 0
    for bad in (None, 0, 0.0, [], ()):
        with pytest.raises(TypeError):
            MPI.buffer(bad)
    ro = MPI.buffer(b"abc")
    assert ro.readonly
    with pytest.raises(TypeError, match="read-only"):
        ro[:] = 0
    mem = MPI.buffer.allocate(4)
    assert isinstance(mem.obj, bytearray) and memoryview(mem.obj).nbytes == 4
    mem[1:3] = b"xy"
    assert bytes(mem.obj) == b"\0xy\0"
    with pytest.raises(IndexError):
        mem[::2]
    with pytest.raises(IndexError):
        mem[4] = 0
    with pytest.raises(TypeError):
        mem[None]
    with pytest.raises(NotImplementedError):
        del mem[0]
    mem.release()
    assert (mem.address, mem.nbytes, mem.readonly) == (0, 0, False)


def test_attach_buffer_needs_writable_memory():
    with pytest.raises(BufferError):
        MPI.Attach_buffer(MPI.buffer(b"abc"))
    with pytest.raises(TypeError):
        MPI.Attach_buffer(12)
    buf = MPI.Alloc_mem(64)
    MPI.Attach_buffer(buf)
    assert MPI.Detach_buffer() is buf
    MPI.Attach_buffer(MPI.BUFFER_AUTOMATIC)
    assert MPI.Detach_buffer() is MPI.BUFFER_AUTOMATIC


def test_get_address_of_a_null_buffer_is_zero():
    assert MPI.Get_address(MPI.buffer()) == 0
    win = MPI.Win.Create_dynamic(comm=MPI.COMM_SELF)
    assert MPI.Get_address(win.tomemory()) == 0
    win.Free()
    mem = MPI.buffer.allocate(8)
    assert MPI.Get_address(mem) == mem.address != 0


def test_info_calls_raise_mpi_errors_as_mpi4py():
    info = MPI.Info.Create({"a": "1"})
    with pytest.raises(MPI.Exception, match="no such key") as missing:
        info.Delete("zz")
    assert missing.value.Get_error_class() == MPI.ERR_INFO_NOKEY
    with pytest.raises(MPI.Exception, match="expected 0..0") as past:
        info.Get_nthkey(1)
    assert past.value.Get_error_class() == MPI.ERR_ARG
    assert info.Get_nthkey(0) == "a"
    info.Delete("a")
    assert len(info) == 0
    info.Free()
    for call, args in (("Free", ()), ("Dup", ()), ("Get", ("k",)), ("Set", ("k", "v")),
                       ("Delete", ("k",)), ("Get_nkeys", ()), ("Get_nthkey", (0,))):
        with pytest.raises(MPI.Exception, match="INFO_NULL") as null:
            getattr(MPI.INFO_NULL, call)(*args)
        assert null.value.Get_error_class() == MPI.ERR_INFO, call
    # the Python mapping methods of a null info stay KeyError / empty, as in mpi4py
    with pytest.raises(KeyError):
        del MPI.INFO_NULL["k"]
    assert len(MPI.INFO_NULL) == 0 and "k" not in MPI.INFO_NULL
    MPI.INFO_NULL.clear()
    MPI.INFO_NULL.free()


def test_freeing_the_null_errhandler_is_an_error():
    with pytest.raises(MPI.Exception) as null:
        MPI.ERRHANDLER_NULL.Free()
    assert null.value.Get_error_class() == MPI.ERR_ARG
    MPI.ERRHANDLER_NULL.free()          # the safe form leaves null handles alone
    handler = MPI.COMM_SELF.Get_errhandler()
    handler.Free()
    assert handler == MPI.ERRHANDLER_NULL


def test_another_handle_shares_the_type_and_free_on_it_nulls_only_that_handle():
    # Datatype(t) names the same type: one Commit, one set of attributes
    vec = MPI.INT.Create_vector(2, 1, 2)
    other = MPI.Datatype(vec)
    other.Commit()
    assert vec == other and vec.Get_envelope() == other.Get_envelope()
    keyval = MPI.Datatype.Create_keyval()
    other.Set_attr(keyval, "shared")
    assert vec.Get_attr(keyval) == "shared"
    vec.Delete_attr(keyval)
    MPI.Datatype.Free_keyval(keyval)
    other.free()                    # a user type: Free through that handle (it is null now)
    assert not other and vec.Get_size() == 2 * MPI.INT.Get_size()
    # another handle on a predefined object: free() nulls that handle, the constant stays
    for constant in (MPI.INT, MPI.SUM, MPI.MESSAGE_NO_PROC, MPI.COMM_SELF, MPI.COMM_WORLD):
        clone = type(constant)(constant)
        assert clone == constant and clone
        for _ in range(2):
            clone.free()
            assert not clone, constant
        constant.free()
        assert constant
    world = MPI.Intracomm(MPI.COMM_WORLD)
    world.free()
    assert MPI.COMM_WORLD.Get_size() >= 1 and not world


def test_constructors_take_only_a_handle_of_their_class():
    for cls in (MPI.Datatype, MPI.Message, MPI.Op, MPI.Info, MPI.Group, MPI.Comm):
        for bad in (1234, "abc", MPI.Status()):
            with pytest.raises(TypeError):
                cls(bad)
    assert MPI.Message(MPI.MESSAGE_NO_PROC) == MPI.MESSAGE_NO_PROC
    for constant in (MPI.MESSAGE_NULL, MPI.MESSAGE_NO_PROC):
        assert pickle.loads(pickle.dumps(constant)) is constant
        again = pickle.loads(pickle.dumps(MPI.Message(constant)))
        assert again == constant and again is not constant


def test_null_handles_pickle_and_copy_as_mpi4py():
    nulls = [MPI.DATATYPE_NULL, MPI.REQUEST_NULL, MPI.INFO_NULL, MPI.ERRHANDLER_NULL,
             MPI.SESSION_NULL, MPI.GROUP_NULL, MPI.OP_NULL, MPI.FILE_NULL, MPI.MESSAGE_NULL,
             MPI.COMM_NULL, MPI.INT, MPI.SUM, MPI.ERRORS_RETURN, MPI.GROUP_EMPTY]
    module = sys.modules[__name__]
    for constant in nulls:
        for copier in (lambda o: pickle.loads(pickle.dumps(o)), copy.copy, copy.deepcopy):
            assert copier(constant) is constant, constant
            mine = type(f"My{type(constant).__name__}", (type(constant),), {})
            mine.__module__ = __name__
            setattr(module, mine.__name__, mine)
            try:
                again = copier(mine(constant))
            finally:
                delattr(module, mine.__name__)
            assert type(again) is mine and again == constant and again is not constant
    with pytest.raises(ValueError, match="cannot serialize"):
        pickle.dumps(MPI.COMM_SELF.Isend(b"", MPI.PROC_NULL))


def test_receiving_from_message_no_proc_leaves_the_constant():
    noproc = MPI.MESSAGE_NO_PROC
    assert noproc.recv() is None and noproc
    noproc.Irecv(None).Wait()
    assert noproc and pickle.loads(pickle.dumps(noproc)) is noproc
    handle = MPI.Message(noproc)
    handle.Recv(None)
    assert handle == MPI.MESSAGE_NULL and noproc


def test_a_handle_of_a_subclass_on_an_intercommunicator():
    from minimpi.runtime.inproc import run_threads

    class MyIntercomm(MPI.Intercomm):
        pass

    def body(world):
        local = world.Split(world.rank % 2, 0)
        inter = local.Create_intercomm(0, world, 1 - world.rank % 2, 5)
        local.Free()
        mine = MyIntercomm(inter)
        assert mine == inter and mine.Is_inter() and type(mine) is MyIntercomm
        with pytest.raises(TypeError):
            MPI.Intracomm(inter)
        size = mine.Get_remote_size()
        inter.Free()
        return size

    assert run_threads(3, body, timeout=20) == [1, 2, 1]


def test_handles_are_unhashable_as_mpi4pys():
    for handle in (MPI.COMM_WORLD, MPI.COMM_NULL, MPI.INT, MPI.DATATYPE_NULL, MPI.SUM,
                   MPI.REQUEST_NULL, MPI.GROUP_EMPTY, MPI.INFO_ENV, MPI.ERRORS_RETURN,
                   MPI.MESSAGE_NO_PROC, MPI.FILE_NULL, MPI.SESSION_NULL, MPI.Status()):
        with pytest.raises(TypeError):
            hash(handle)
    op = MPI.Op.Create(lambda a, b, t: None)      # the live-op bookkeeping needs no hash
    op.Free()
