"""Issue 12: behaviours real mpi4py code relies on (found by running mpi4py's own test suite,
tests/conformance). Each test pins one fix; ranks run as threads (in-process transport)."""
from __future__ import annotations

import gc
import pickle
import warnings
import weakref

import numpy as np
import pytest

from minimpi import MPI
from minimpi.runtime.inproc import run_threads


def run(n, fn, **kw):
    return run_threads(n, fn, timeout=20, **kw)


# -- engine: a failed Sendrecv/sendrecv has no side effect ---------------------------------
def test_failed_sendrecv_posts_nothing():
    # TRIAGE.md S1: the receive was posted before the send was built; it then swallowed
    # the next message and the real receive never completed
    def body(comm):
        me = comm.rank
        with pytest.raises(ValueError):
            comm.Sendrecv([bytearray(5), 0, 0, "i", None], me, 0, [None, 0, "B"], me, 0)
        r = np.zeros(3)
        comm.Sendrecv(np.full(3, 7.0), me, 0, r, me, 0)
        with pytest.raises(MPI.Exception):                     # unpicklable object
            comm.sendrecv(lambda: None, me, 0, None, me, 0)
        got = comm.sendrecv("next", me, 0, None, me, 0)
        return r.tolist(), got

    assert run(1, body) == [([7.0, 7.0, 7.0], "next")]


def test_failed_sendrecv_does_not_take_a_waiting_message():
    def body(comm):
        me = comm.rank
        comm.Send(np.array([42.0]), me, 5)            # waits in the unexpected queue
        with pytest.raises(ValueError):
            comm.Sendrecv([np.zeros(1), 9, MPI.DOUBLE], me, 1, np.zeros(1), me, 5)
        out = np.zeros(1)
        comm.Recv(out, me, 5)
        return float(out[0])

    assert run(1, body) == [42.0]


def test_isendrecv_and_replace():
    def body(comm):
        p, r = comm.size, comm.rank
        dest, src = (r + 1) % p, (r - 1) % p
        out = np.zeros(2)
        comm.Isendrecv(np.full(2, float(r)), dest, 3, out, src, 3).Wait()
        buf = np.full(2, float(r))
        req = comm.Isendrecv_replace(buf, dest, 4, src, 4)
        st = MPI.Status()
        req.Wait(st)
        comm.Isendrecv_replace(None, MPI.PROC_NULL, 0, MPI.PROC_NULL, 0).Wait()
        return out.tolist(), buf.tolist(), st.Get_source()

    for r, (out, buf, source) in enumerate(run(3, body)):
        assert out == [float((r - 1) % 3)] * 2 == buf and source == (r - 1) % 3


def test_request_keeps_the_exporter_of_its_memory_alive():
    class HostCAI:   # host memory exported only through __cuda_array_interface__
        def __init__(self, n):
            self.mem = np.zeros(n)
            self.__cuda_array_interface__ = {
                "version": 3, "shape": (n,), "typestr": self.mem.dtype.str,
                "data": (self.mem.ctypes.data, False), "strides": None}

    def body(comm):
        target = HostCAI(4)
        alive = weakref.ref(target)
        req = comm.Irecv(target, comm.rank, 0)
        del target
        gc.collect()
        pending_alive = alive() is not None            # the request keeps it alive
        comm.Send(np.arange(4.0), comm.rank, 0)
        req.Wait()
        return pending_alive, alive().mem.tolist() if alive() else None

    assert run(1, body) == [(True, [0.0, 1.0, 2.0, 3.0])]


# -- semantics: REPLACE / NO_OP, pickling communicators ------------------------------------
@pytest.mark.parametrize("alg", [None, "binomial"])
def test_replace_and_no_op_reduce_in_rank_order(alg):
    def body(comm):
        kw = {} if alg is None else {"algorithm": alg}
        rep = [comm.reduce(comm.rank, op=MPI.REPLACE, root=r, **kw) for r in range(comm.size)]
        nop = [comm.reduce(comm.rank, op=MPI.NO_OP, root=r, **kw) for r in range(comm.size)]
        return rep, nop

    p = 4
    assert not MPI.REPLACE.Is_commutative() and not MPI.NO_OP.Is_commutative()
    for r, (rep, nop) in enumerate(run(p, body)):
        assert rep[r] == p - 1 and nop[r] == 0


def test_replace_refuses_algorithms_that_reorder():
    def body(comm):
        with pytest.raises(MPI.Exception, match="commutative"):
            comm.Allreduce(np.zeros(8), np.zeros(8), op=MPI.REPLACE, algorithm="ring")
        return "ok"

    assert run(2, body) == ["ok", "ok"]


def test_pickling_communicators():
    world, self_comm = MPI.COMM_WORLD, MPI.COMM_SELF
    for comm in (world, self_comm):
        assert pickle.loads(pickle.dumps(comm)) is comm
        copy = pickle.loads(pickle.dumps(MPI.Intracomm(comm)))
        assert copy is not comm and copy == comm
    assert pickle.loads(pickle.dumps(MPI.COMM_NULL)) is MPI.COMM_NULL
    null = pickle.loads(pickle.dumps(MPI.Comm(MPI.COMM_NULL)))
    assert null is not MPI.COMM_NULL and null == MPI.COMM_NULL
    dup = world.Dup()
    try:
        with pytest.raises(ValueError, match="cannot serialize"):
            pickle.dumps(dup)
    finally:
        dup.Free()


# -- buffers -----------------------------------------------------------------------------
class DLPackOnly:
    """Host memory exported only through DLPack (numpy's own exporter underneath)."""

    def __init__(self, arr, legacy=False):
        self.arr = arr
        self.legacy = legacy

    def __dlpack_device__(self):
        return self.arr.__dlpack_device__()

    def __dlpack__(self, stream=None, **kwargs):
        if self.legacy and kwargs:
            raise TypeError("a DLPack 0.x exporter takes no keywords")
        return self.arr.__dlpack__(stream=stream, **kwargs)


@pytest.mark.parametrize("legacy", [False, True])
def test_dlpack_and_cai_exporters_are_buffers(legacy):
    def body(comm):
        src = DLPackOnly(np.arange(5, dtype="i4"), legacy)
        dst = DLPackOnly(np.zeros(5, dtype="i4"), legacy)
        comm.Sendrecv(src, comm.rank, 0, dst, comm.rank, 0)
        total = np.zeros(5, dtype="i4")
        comm.Allreduce(src, total)
        ro = np.arange(3.0)
        ro.flags.writeable = False
        with pytest.raises(BufferError):             # a read-only DLPack tensor
            comm.Recv(DLPackOnly(ro), comm.rank, 0)
        return dst.arr.tolist(), total.tolist(), MPI.Get_address(src) == src.arr.ctypes.data

    dst, total, addr_ok = run(2, body)[0]
    assert dst == [0, 1, 2, 3, 4] and total == [0, 2, 4, 6, 8] and addr_ok


def test_cai_checks_as_mpi4py():
    mem = np.zeros(3, dtype="u1")

    class Cai:
        def __init__(self, **over):
            self.__cuda_array_interface__ = {"data": (mem.ctypes.data, False),
                                              "typestr": "|u1", "shape": (3,), **over}

    assert MPI.Get_address(Cai()) == mem.ctypes.data
    with pytest.raises(TypeError):
        MPI.Get_address(Cai(data=None))
    with pytest.raises(ValueError):
        MPI.Get_address(Cai(data=(mem.ctypes.data,)))
    with pytest.raises(KeyError):
        c = Cai()
        del c.__cuda_array_interface__["shape"]
        MPI.Get_address(c)
    with pytest.raises(BufferError):
        MPI.Get_address(Cai(mask=True))
    with pytest.raises(BufferError):
        MPI.Get_address(Cai(shape=(3, 1), strides=(2, 1)))
    with pytest.warns(RuntimeWarning):
        MPI.Get_address(Cai(descr=[("", "<f8")]))


def test_device_memory_that_the_host_cannot_reach_is_refused():
    from minimpi.data.foreign import host_accessible
    assert host_accessible(np.zeros(8).ctypes.data, 64, True)
    assert not host_accessible(8, 64, False)          # page zero is never mapped

    class FarAway:
        __cuda_array_interface__ = {"data": (8, False), "typestr": "<f8", "shape": (4,)}

    with pytest.raises(BufferError, match="not mapped in this process"):
        MPI.COMM_SELF.Send(FarAway(), MPI.COMM_SELF.rank)


def test_mpi_buffer_alloc_mem_and_bottom():
    buf = MPI.Alloc_mem(16)
    assert isinstance(buf, MPI.buffer) and MPI.memory is MPI.buffer
    assert buf.nbytes == 16 and buf.address == MPI.Get_address(buf) and not buf.readonly
    buf[0] = 7
    assert buf[0] == 7 and isinstance(buf[0], int)
    assert buf.cast("i")[0] == 7 and len(buf.tobytes()) == 16
    view = MPI.buffer.fromaddress(buf.address, 16)
    assert view[0] == 7
    assert MPI.Get_address(MPI.BOTTOM) == 0 and not MPI.BOTTOM
    MPI.Free_mem(buf)
    with pytest.raises(ValueError):
        buf[0]

    def body(comm):
        empty = [MPI.BOTTOM, 0, MPI.BYTE]
        comm.Sendrecv(empty, comm.rank, 0, [MPI.BOTTOM, MPI.BYTE], comm.rank, 0)
        with pytest.raises(ValueError, match="MPI.BOTTOM"):
            comm.Send([MPI.BOTTOM, 4, MPI.BYTE], comm.rank)
        return "ok"

    assert run(1, body) == ["ok"]


def test_message_spec_rules_and_exception_classes():
    def body(comm):
        me, empty = comm.rank, [None, 0, "B"]

        def sr(s, r=empty):
            comm.Sendrecv(s, me, 0, r, me, 0)

        buf = MPI.Alloc_mem(5)
        for bad in ([buf, 0, 0, "i", None], [buf, -1, "i"], [buf, 0, -1, "i"],
                    [buf, 0, 2, "i"], [None, 1, 0, "i"], [buf]):
            with pytest.raises(ValueError):
                sr(bad)
        with pytest.raises(KeyError):
            sr([buf, 0, "\0"])
        for bad in ([[1, 2, 3, 4], 4, 0, "i"], object, [buf, 1.5, "B"]):
            with pytest.raises(TypeError):
                sr(bad)
        with pytest.raises(BufferError):
            sr(b"abc", b"abc")
        swapped = np.zeros(3, dtype=">i4" if np.little_endian else "<i4")
        with pytest.raises(BufferError, match="byte order"):
            sr(swapped, np.zeros(3, "i4"))
        sr([swapped, MPI.INT], [np.zeros(3, "i4"), MPI.INT])   # explicit type: fine
        with pytest.raises(ValueError):                         # reductions: one datatype
            comm.Reduce([buf, 1, MPI.INT], [MPI.Alloc_mem(4), 1, MPI.FLOAT], MPI.SUM, 0)
        return "ok"

    assert run(1, body) == ["ok"]
    assert issubclass(MPI.Exception, RuntimeError)
    exc = MPI.Exception(MPI.ERR_COUNT)
    assert isinstance(exc, RuntimeError) and exc.Get_error_class() == MPI.ERR_COUNT


def test_v_spec_pair_of_ints_and_none_as_in_place():
    def body(comm):
        p, r = comm.size, comm.rank
        out = np.full(3 * p, -1.0)
        comm.Allgatherv(np.full(2, float(r)), [out, (2, 3), MPI.DOUBLE])   # strided blocks
        g = np.full(p, float(r))
        comm.Allgather(None, g)                    # None: in place (own block already there)
        s = np.full(2, float(r))
        comm.Allreduce(None, s)
        return out.tolist(), g.tolist(), s.tolist()

    p = 3
    for out, g, s in run(p, body):
        assert out == sum(([float(i)] * 2 + [-1.0] for i in range(p)), [])
        assert g == [0.0, 1.0, 2.0] and s == [3.0, 3.0]


def test_alltoallw_with_byte_displacements_and_in_place():
    def body(comm):
        p, r = comm.size, comm.rank
        send = np.arange(p, dtype="i4") + 10 * r
        recv = np.full(p, -1, dtype="i4")
        types = [MPI.INT] * p
        comm.Alltoallw([send, [1] * p, [4 * i for i in range(p)], types],
                       [recv, ([1] * p, [4 * i for i in range(p)]), types])
        inplace = np.arange(p, dtype="i4") + 10 * r
        comm.Alltoallw(MPI.IN_PLACE, [inplace, [1] * p, [4 * i for i in range(p)], types])
        return recv.tolist(), inplace.tolist()

    p = 3
    for r, (recv, inplace) in enumerate(run(p, body)):
        assert recv == inplace == [10 * i + r for i in range(p)]


# -- handles -------------------------------------------------------------------------------
def test_request_handles():
    null = MPI.Request()
    assert null == MPI.REQUEST_NULL and not null and null.Wait() is True
    assert null.test() == (True, None) and null.Get_status() and null.get_status()
    st = MPI.Status()
    st.source = 3
    reqs = [MPI.Request() for _ in range(3)]
    assert MPI.Request.Get_status_any(reqs, st) == (MPI.UNDEFINED, True)
    assert st.source == MPI.ANY_SOURCE
    assert MPI.Request.Get_status_all(reqs) and MPI.Request.Get_status_some(reqs) is None
    assert MPI.Request.Waitall(reqs, (MPI.Status(),)) is True       # a tuple of statuses

    def body(comm):
        preq = comm.Send_init(b"", MPI.PROC_NULL, 0)
        same = MPI.Prequest(preq)
        plain = MPI.Request(preq)
        via_handle = MPI.Prequest.fromhandle(preq.handle)
        with pytest.raises(TypeError):
            MPI.Grequest(preq)
        preq.Start()
        preq.Wait()
        before = (same == preq, type(plain) is MPI.Request and plain == preq,
                  via_handle == preq, preq != MPI.REQUEST_NULL)
        preq.Free()
        after = preq == MPI.REQUEST_NULL and not preq
        req = comm.irecv(source=comm.rank, tag=9)
        req.cancel()
        cancelled = MPI.Status()
        req.Wait(cancelled)
        return before, after, cancelled.Is_cancelled()

    assert run(1, body) == [((True, True, True, True), True, True)]


def test_status_handles():
    with pytest.raises(TypeError):
        MPI.Status(123)
    st = MPI.Status()
    st.source, st.tag, st.error = 1, 2, MPI.ERR_ARG
    copy = MPI.Status(st)
    assert (copy.source, copy.tag, copy.error) == (1, 2, MPI.ERR_ARG)
    st.count = 7
    assert st.Get_count(MPI.BYTE) == 7 and st.Get_elements(MPI.BYTE) == 7
    st.Set_cancelled(True)
    assert st.Is_cancelled() and MPI.Status(st).Is_cancelled()
    mem = st.tomemory()
    values = list(mem)
    mem[values.index(1)] = 11
    assert st.source == 11


def test_op_handles():
    assert MPI.Op() == MPI.OP_NULL and not MPI.Op() and MPI.OP_NULL.is_predefined
    assert MPI.Op(MPI.SUM)(2, 3) == 5 and MPI.Op(MPI.SUM) == MPI.SUM
    for op in (MPI.MAX, MPI.SUM, MPI.OP_NULL, MPI.NO_OP):
        assert pickle.loads(pickle.dumps(op)) is op
        copy = pickle.loads(pickle.dumps(MPI.Op(op)))
        assert copy is not op and copy == op
    with pytest.raises(TypeError):
        MPI.OP_NULL(None)
    with pytest.raises(ValueError):
        MPI.OP_NULL(None, None)
    gc.collect()                      # user ops of earlier tests that nobody holds
    room = MPI.Op.MAX_USER_OPS - len(MPI.Op._live_user)
    ops = [MPI.Op.Create(lambda a, b, t: b) for _ in range(room)]
    with pytest.raises(RuntimeError):
        MPI.Op.Create(lambda a, b, t: b)
    with pytest.raises(ValueError):
        MPI.Op.fromint(ops[0].toint()).__reduce__()
    for op in ops:
        op.Free()
    MPI.Op.Create(lambda a, b, t: b).Free()


def test_communicator_handles_and_names():
    assert MPI.COMM_NULL.Get_name() == "MPI_COMM_NULL"
    assert MPI.Comm() == MPI.COMM_NULL and MPI.Comm() is not MPI.COMM_NULL
    with pytest.raises(TypeError):
        MPI.Comm((1, 2, 3))
    assert MPI.Intercomm() == MPI.COMM_NULL
    assert isinstance(MPI.Comm.Get_parent(), MPI.Intercomm)
    world = MPI.COMM_WORLD
    again = MPI.Intracomm.fromhandle(world.handle)
    assert again == world and again is not world and world.toint() == world.handle
    assert MPI.Comm.fromhandle(0) == MPI.COMM_NULL

    class MyComm(MPI.Intracomm):       # mpi4py's subclassing demo
        def __new__(cls, comm):
            return super().__new__(cls, comm)

    mine = MyComm(MPI.COMM_SELF)
    assert mine == MPI.COMM_SELF and type(mine.Dup()) is MyComm

    def body(comm):
        d = comm.Dup()
        d.name = "mine"
        d.info = MPI.Info.Create({"k": "v"})
        new, req = d.Idup()
        req.Wait()
        grp = MPI.Intracomm.Create_from_group(d.Get_group())
        out = (d.Get_name(), d.info.Get("k"), MPI.Comm.Compare(new, d),
               MPI.Comm.Compare(grp, comm), comm.Split_type(MPI.COMM_TYPE_SHARED).size,
               comm.Split_type(MPI.UNDEFINED) == MPI.COMM_NULL)
        for c in (new, grp, d):
            c.Free()
        return out

    for name, value, cmp_new, cmp_grp, shared, undefined in run(3, body):
        assert (name, value, cmp_new, cmp_grp) == ("mine", "v", MPI.CONGRUENT, MPI.CONGRUENT)
        assert shared == 3 and undefined


def test_split_type_follows_hosts():
    def body(comm):
        info = MPI.Info.Create({"mpi_hw_resource_type": "mpi_shared_memory"})
        guided = comm.Split_type(MPI.COMM_TYPE_HW_GUIDED, info=info)
        nothing = comm.Split_type(MPI.COMM_TYPE_HW_GUIDED)
        probe = MPI.Info.Create()
        unguided = comm.Split_type(MPI.COMM_TYPE_HW_UNGUIDED, info=probe)
        return guided.size, nothing == MPI.COMM_NULL, unguided.size, probe.Get(
            "mpi_hw_resource_type")

    out = run(4, body, hosts=["a", "a", "b", "b"])
    assert out == [(2, True, 2, "mpi_shared_memory")] * 4


def test_buffer_attach_family():
    def body(comm):
        buf = MPI.Alloc_mem(1 << 12)
        comm.Attach_buffer(buf)
        comm.bsend("x", comm.rank, 1)
        comm.Flush_buffer()
        comm.Iflush_buffer().Wait()
        old = comm.Detach_buffer()
        comm.Attach_buffer(MPI.BUFFER_AUTOMATIC)
        auto = comm.Detach_buffer()
        return old.address == buf.address, auto == MPI.BUFFER_AUTOMATIC, comm.recv(None,
                                                                                    comm.rank, 1)

    assert run(2, body) == [(True, True, "x")] * 2
    MPI.Attach_buffer(MPI.BUFFER_AUTOMATIC)
    MPI.Flush_buffer()
    assert MPI.Detach_buffer() == MPI.BUFFER_AUTOMATIC


# -- lowercase receive rules ---------------------------------------------------------------
def test_recv_buf_argument_and_raw_bytes():
    def body(comm):
        me = comm.rank
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(UserWarning, match="'buf' argument is deprecated"):
                comm.recv(bytearray(0), MPI.PROC_NULL)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            comm.send("42", me)
            first = comm.recv(128, me)
            comm.send([42], me)
            second = comm.recv(bytearray(128), me)
            comm.send("x" * 100, me)
            with pytest.raises(MPI.Exception) as trunc:        # the buf caps the size
                comm.recv(8, me)
            with pytest.raises(TypeError):
                comm.recv([1, 2], MPI.PROC_NULL)
        comm.Send([None, 0, "B"], me)
        empty = comm.recv(None, me)
        comm.Send([MPI.pickle.dumps({"a": 1}), "B"], me)
        raw = comm.recv(None, me)
        return first, second, trunc.value.Get_error_class(), empty, raw

    assert run(1, body) == [("42", [42], MPI.ERR_TRUNCATE, None, {"a": 1})]


def test_new_names():
    assert MPI.get_vendor()[0] == "minimpi" and len(MPI.get_vendor()[1]) == 3
    assert MPI.Get_version() == (4, 1)
    assert isinstance(MPI.Get_hw_resource_info(), MPI.Info)
    assert MPI.pickle.loads(MPI.pickle.dumps([1, 2])) == [1, 2]
    assert not MPI.WIN_NULL and MPI.Win() == MPI.WIN_NULL
    for call in (lambda: MPI.WIN_NULL.Fence(),
                 lambda: MPI.WIN_NULL.Put([None, 0, "B"], 0, (0, 0, MPI.BYTE))):
        with pytest.raises(MPI.Exception) as info:       # a null window is ERR_WIN
            call()
        assert info.value.Get_error_class() == MPI.ERR_WIN
    table = MPI._comm_lock_table(MPI.COMM_SELF)
    MPI.COMM_SELF.bcast(None)
    assert "bcast" in table
