"""One-sided RDMA over the verbs transport, on the in-memory RC fabric of fake_verbs.py.

The transport's own API (``expose``/``rdma``: RDMA_WRITE and RDMA_READ into registered memory,
a wrong key or offset failing as a device fails it), and windows whose ranks are threads
connected over that transport: contiguous Put/Get become RDMA work requests (the fabric's log
shows them), completed by Fence, Flush, Unlock and Complete; accumulates, non-contiguous
targets and dynamic windows stay requests served by the target.
"""
from __future__ import annotations

import numpy as np
import pytest
from conformance import KIND
from fake_verbs import REM_ACCESS_ERR, FakeFabric, make_transports

from minimpi import MPI
from minimpi.runtime import inproc
from minimpi.transports.verbs import (
    ACCESS_LOCAL_WRITE,
    ACCESS_REMOTE_WRITE,
    OP_READ,
    OP_WRITE,
    VerbsConfig,
    address_of,
    status_text,
)

TINY = VerbsConfig(slots=4, slot_size=256, rndv_threshold=1024)


def settle(ts, until, timeout=5.0):
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for t in ts:
            t.progress(0)
        if until():
            return
    raise AssertionError("transports did not settle")


class Lost:
    def frame_arrived(self, peer, header):
        return memoryview(bytearray(header.length))

    def payload_arrived(self, peer, header, buffer):
        pass

    def peer_lost(self, peer, reason):
        self.reason = reason


def pair():
    fabric = FakeFabric()
    ts = make_transports(2, fabric, TINY)
    sinks = [Lost(), Lost()]
    for t, s in zip(ts, sinks):
        t.attach(s)
    return fabric, ts, sinks


# -- the transport's one-sided API -------------------------------------------------------------

def test_rdma_write_and_read_move_bytes_into_and_out_of_exposed_memory():
    fabric, (a, b), _ = pair()
    window = np.zeros(64, np.uint8)
    exp = b.expose(memoryview(window))
    assert exp is not None and exp.length == 64 and a.reaches(1) and b.reaches(0)
    src = np.arange(1, 9, dtype=np.uint8)
    done = []
    assert a.rdma(1, True, memoryview(src), exp.addr + 10, exp.rkey, done.append)
    settle([a, b], lambda: done)
    assert done == [None] and window[10:18].tolist() == list(range(1, 9))
    window[40:44] = [9, 8, 7, 6]
    back = np.zeros(4, np.uint8)
    assert a.rdma(1, False, memoryview(back), exp.addr + 40, exp.rkey, done.append)
    settle([a, b], lambda: len(done) == 2)
    assert done == [None, None] and back.tolist() == [9, 8, 7, 6]
    ops = [(op, n) for _, _, op, n in fabric.log if op in (OP_WRITE, OP_READ)]
    assert ops == [(OP_WRITE, 8), (OP_READ, 4)]
    assert a.stats["rdma_writes"] == a.stats["rdma_reads"] == 1
    b.unexpose(exp)
    for t in (a, b):
        t.close()


@pytest.mark.parametrize("case", ["wrong rkey", "past the end", "read-only landing"])
def test_a_wrong_key_or_offset_fails_the_operation_and_the_connection(case):
    fabric, (a, b), sinks = pair()
    window = np.zeros(64, np.uint8)
    exp = b.expose(memoryview(window))
    src = np.ones(16, np.uint8)
    done = []
    if case == "read-only landing":
        ro = np.zeros(4, np.uint8)
        ro.flags.writeable = False
        # refused before anything is posted: the caller sends a request instead
        assert not a.rdma(1, False, memoryview(ro), exp.addr, exp.rkey, done.append)
        assert done == [] and a.reaches(1)
        return
    addr, rkey = exp.addr, exp.rkey
    if case == "wrong rkey":
        rkey += 1
    else:
        addr += 56                     # 16 bytes from offset 56 of 64
    assert a.rdma(1, True, memoryview(src), addr, rkey, done.append)
    settle([a, b], lambda: done)
    assert len(done) == 1 and "REM_ACCESS_ERR" in done[0] and "rank 1" in done[0]
    assert status_text(REM_ACCESS_ERR) in sinks[0].reason
    assert not a.reaches(1)                      # the queue pair broke, as on a device
    assert not window.any()                      # nothing was written
    # later operations to that peer are declined at once
    assert not a.rdma(1, True, memoryview(src), exp.addr, exp.rkey, done.append)


def test_memory_registered_without_remote_read_cannot_be_read():
    fabric, (a, b), sinks = pair()
    window = np.zeros(64, np.uint8)
    reg = b.ops.register(address_of(memoryview(window)), 64,
                         ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE)
    done = []
    assert a.rdma(1, False, memoryview(np.zeros(8, np.uint8)), reg.addr, reg.rkey, done.append)
    settle([a, b], lambda: done)
    assert "REM_ACCESS_ERR" in done[0]


# -- windows over it (ranks as threads) ---------------------------------------------------------

@pytest.fixture
def fabric(monkeypatch):
    fabric = FakeFabric()
    built = inproc._transports
    made = []

    def transports(kind, size, *rest):
        if kind == KIND:
            made.extend(make_transports(size, fabric, TINY))
            return made[-size:]
        return built(kind, size, *rest)

    monkeypatch.setattr(inproc, "_transports", transports)
    yield fabric
    for t in made:
        t.close()


def run(n, fn, hosts=None):
    return inproc.run_threads(n, fn, transport=KIND, timeout=60, hosts=hosts)


def rdma_ops(fabric):
    return [(op, n) for _, _, op, n in fabric.log if op in (OP_WRITE, OP_READ)]


@pytest.mark.parametrize("n", [2, 3])
def test_put_get_with_fence_lock_flush_and_pscw_are_rdma(fabric, n):
    def body(comm):
        r, size = comm.rank, comm.size
        mem = np.full(8, -1, "i")
        win = MPI.Win.Create(mem, 4, None, comm)
        right, left = (r + 1) % size, (r - 1) % size
        # fence epoch: write to the right neighbour, read it back after the fence
        win.Fence()
        win.Put(np.array([r, 10 * r], "i"), right, 1)
        win.Fence()
        got = np.zeros(2, "i")
        win.Get([got, 2, MPI.INT], right, 1)
        win.Fence()
        # passive target: lock, put, flush, get, unlock
        win.Lock(left, MPI.LOCK_EXCLUSIVE)
        win.Put(np.array([100 + r], "i"), left, 5)
        win.Flush(left)
        seen = np.zeros(1, "i")
        win.Get(seen, left, 5)
        win.Unlock(left)
        comm.Barrier()
        # post/start/complete/wait: rank 0 writes to every other rank
        group = comm.Get_group()
        if r == 0:
            others = group.Excl([0])
            win.Start(others)
            for t in range(1, size):
                win.Put(np.array([7000 + t], "i"), t, 7)
            win.Complete()
            others.Free()
        else:
            zero = group.Incl([0])
            win.Post(zero)
            win.Wait()
            zero.Free()
        group.Free()
        comm.Barrier()
        win.Free()
        return mem.tolist(), got.tolist(), int(seen[0])

    results = run(n, body)
    for r, (mem, got, seen) in enumerate(results):
        left, right = (r - 1) % n, (r + 1) % n
        assert mem[1:3] == [left, 10 * left]
        assert mem[5] == 100 + right          # the right neighbour locked us
        assert mem[7] == (7000 + r if r else -1)
        assert got == [r, 10 * r] and seen == 100 + r
    ops = rdma_ops(fabric)
    writes = [x for x in ops if x[0] == OP_WRITE]
    reads = [x for x in ops if x[0] == OP_READ]
    assert len(writes) == 2 * n + (n - 1) and len(reads) == 2 * n
    assert set(writes) == {(OP_WRITE, 8), (OP_WRITE, 4)}


def test_accumulates_noncontiguous_targets_and_dynamic_windows_stay_served(fabric):
    def body(comm):
        r = comm.rank
        mem = np.zeros(8, "i")
        win = MPI.Win.Create(mem, 4, None, comm)
        vec = MPI.INT.Create_vector(2, 1, 2).Commit()
        win.Fence()
        if r == 0:
            win.Accumulate(np.array([5, 6], "i"), 1, 0, MPI.SUM)
            win.Put(np.array([8, 9], "i"), 1, [4, 1, vec])      # elements 4 and 6
        win.Fence()
        vec.Free()
        dyn = MPI.Win.Create_dynamic(None, comm)
        area = np.zeros(2, "i")
        dyn.Attach(area)
        where = comm.allgather(MPI.Get_address(area))
        dyn.Fence()
        if r == 0:
            dyn.Put(np.array([3, 4], "i"), 1, where[1])
        dyn.Fence()
        dyn.Detach(area)
        dyn.Free()
        win.Free()
        return mem.tolist(), area.tolist()

    (m0, a0), (m1, a1) = run(2, body)
    assert m1 == [5, 6, 0, 0, 8, 0, 9, 0] and a1 == [3, 4]
    assert rdma_ops(fabric) == []


def test_a_get_into_a_noncontiguous_origin_is_scattered_after_the_read(fabric):
    def body(comm):
        mem = np.arange(10, 18, dtype="i") * (comm.rank + 1)
        win = MPI.Win.Create(mem, 4, None, comm)
        out = np.zeros(6, "i")
        vec = MPI.INT.Create_vector(3, 1, 2).Commit()
        win.Lock(1 - comm.rank, MPI.LOCK_SHARED)
        win.Get([out, 1, vec], 1 - comm.rank, [2, 3, MPI.INT])
        win.Unlock(1 - comm.rank)
        vec.Free()
        comm.Barrier()
        win.Free()
        return out.tolist()

    out0, out1 = run(2, body)
    assert out0 == [24, 0, 26, 0, 28, 0] and out1 == [12, 0, 13, 0, 14, 0]
    assert [op for op, _ in rdma_ops(fabric)] == [OP_READ, OP_READ]


def test_out_of_window_is_caught_at_the_origin_before_any_rdma(fabric):
    def body(comm):
        win = MPI.Win.Create(np.zeros(4 + comm.rank, "i"), 4, None, comm)
        caught = None
        if comm.rank == 0:
            win.Lock(1)
            try:
                win.Put(np.zeros(3, "i"), 1, 3)           # ints 3..5 of 5
            except MPI.Exception as exc:
                caught = (exc.Get_error_class(), str(exc))
            win.Unlock(1)
        comm.Barrier()
        win.Free()
        return caught

    cls, text = run(2, body)[0]
    assert cls == MPI.ERR_RMA_RANGE and "12 bytes at offset 12" in text and "20 bytes" in text
    assert rdma_ops(fabric) == []


def test_windows_find_the_verbs_member_of_a_router():
    """A router of verbs alone is also named "verbs": the window must take its member."""
    from types import SimpleNamespace

    from minimpi.rma.rdma import transport_of
    from minimpi.transports.router import RouterTransport
    from minimpi.transports.tcp import TcpTransport

    fabric, (a, b), _ = pair()
    router = RouterTransport(0, 2, [a], "h0")
    assert router.name == "verbs"
    assert transport_of(SimpleNamespace(engine=SimpleNamespace(transport=router))) is a
    assert transport_of(SimpleNamespace(engine=SimpleNamespace(transport=a))) is a
    tcp = TcpTransport(0, 2, b"secret")
    try:
        assert transport_of(SimpleNamespace(engine=SimpleNamespace(transport=tcp))) is None
        assert transport_of(SimpleNamespace(engine=SimpleNamespace(
            transport=RouterTransport(0, 2, [tcp], "h0")))) is None
    finally:
        tcp.close()
    assert transport_of(SimpleNamespace(engine=SimpleNamespace(transport=None))) is None
    for t in (a, b):
        t.close()


def test_rput_and_rget_return_requests_completed_by_the_device(fabric):
    def body(comm):
        mem = np.zeros(4, "d")
        win = MPI.Win.Create(mem, 8, None, comm)
        peer = 1 - comm.rank
        win.Lock_all()
        req = win.Rput(np.array([comm.rank + 0.5, 2.5]), peer, 1)
        done_early = req.Test()           # posted; complete once its completion is polled
        req.Wait()
        win.Flush(peer)
        comm.Barrier()
        out = np.zeros(2, "d")
        win.Rget(out, peer, 1).Wait()
        win.Unlock_all()
        comm.Barrier()
        win.Free()
        return mem.tolist(), out.tolist(), isinstance(done_early, bool)

    (m0, o0, ok0), (m1, o1, ok1) = run(2, body)
    assert m0 == [0, 1.5, 2.5, 0] and m1 == [0, 0.5, 2.5, 0]
    assert o0 == [0.5, 2.5] and o1 == [1.5, 2.5] and ok0 and ok1
    assert sorted(op for op, _ in rdma_ops(fabric)) == [OP_WRITE, OP_WRITE, OP_READ, OP_READ]
