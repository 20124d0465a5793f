"""Point-to-point semantics on the in-process transport: matching, ordering, protocols, errors."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

from minimpi import MPI, errors
from minimpi.constants import ANY_SOURCE, ANY_TAG, PROC_NULL, UNDEFINED
from minimpi.data import serialization
from minimpi.p2p.request import Request, Status
from minimpi.runtime.inproc import RankFailed, run_threads
from minimpi.transports import frames


@pytest.fixture(params=["inproc", "tcp", "shm", "routed"])
def run(request):
    """The conformance suite: every test runs over the in-process, TCP and shared-memory
    transports, and over a router that uses shm within and TCP between two pretend hosts."""
    def runner(*args, **kwargs):
        return run_threads(*args, transport=request.param, **kwargs)
    return runner


def test_header_roundtrip_and_64bit_length():
    h = frames.Header(frames.EAGER, frames.F_OBJECT, 0, 7, 3, 42, 2**40 + 5, 3 * 2**31)
    raw = h.pack()
    assert len(raw) == frames.HEADER_SIZE == 32
    assert frames.unpack(raw) == h


def test_serialization_out_of_band_buffers_are_views():
    arr = np.arange(1000, dtype="f8")
    segments, total = serialization.dumps({"a": arr, "s": "text"})
    assert any(seg.nbytes == arr.nbytes for seg in segments)  # not copied into the pickle
    payload = bytearray(b"".join(bytes(s) for s in segments))
    assert len(payload) == total
    out = serialization.loads(payload)
    assert out["s"] == "text" and np.array_equal(out["a"], arr)
    assert np.shares_memory(out["a"], np.frombuffer(payload, np.uint8))
    base = np.frombuffer(payload, np.uint8).ctypes.data
    assert (out["a"].ctypes.data - base) % 16 == 0  # aligned within the receive buffer


def test_unpicklable_object_raises_at_sender_before_sending(run):
    def body(comm):
        if comm.rank == 0:
            with pytest.raises(errors.SerializationError, match="rank 0: send: cannot pickle"):
                comm.send(lambda x: x, dest=1)
            comm.send("after", dest=1)
        else:
            return comm.recv(source=0)

    assert run(2, body)[1] == "after"


@pytest.mark.parametrize("eager_limit", [0, 1024, 65536])
def test_non_overtaking_same_tag_and_any_tag(run, eager_limit):
    # Mixed sizes straddle the eager limit: rendezvous and eager messages keep their order.
    sizes = [10, 5000, 0, 70000, 3, 2048, 100000, 1]

    def body(comm):
        if comm.rank == 0:
            for i, n in enumerate(sizes):
                comm.Send(np.full(n, i, dtype="u1"), dest=1, tag=5)
            for i in range(4):
                comm.send(i, dest=1, tag=i)
            return None
        got = []
        for n in sizes:
            buf = np.zeros(max(n, 1), dtype="u1")
            st = Status()
            comm.Recv(buf, source=0, tag=5, status=st)
            got.append((st.Get_count(), int(buf[0]) if n else None))
        tags = [comm.recv(source=0, tag=ANY_TAG) for _ in range(4)]
        return got, tags

    got, tags = run(2, body, eager_limit=eager_limit)[1]
    assert [g[0] for g in got] == sizes
    assert [g[1] for g in got if g[1] is not None] == [i for i, n in enumerate(sizes) if n]
    assert tags == [0, 1, 2, 3]


def test_tag_selects_message_out_of_arrival_order(run):
    def body(comm):
        if comm.rank == 0:
            comm.send("first", 1, tag=1)
            comm.send("second", 1, tag=2)
        else:
            b = comm.recv(source=0, tag=2)
            a = comm.recv(source=0, tag=1)
            return a, b

    assert run(2, body)[1] == ("first", "second")


def test_any_source_receives_every_sender_once(run):
    def body(comm):
        if comm.rank == 0:
            st = Status()
            seen = []
            for _ in range(comm.size - 1):
                msg = comm.recv(source=ANY_SOURCE, tag=ANY_TAG, status=st)
                assert msg == ("from", st.source) and st.tag == st.source * 10
                seen.append(st.source)
            return sorted(seen)
        comm.send(("from", comm.rank), dest=0, tag=comm.rank * 10)

    assert run(7, body)[0] == list(range(1, 7))


def test_zero_size_messages_and_proc_null(run):
    def body(comm):
        other = 1 - comm.rank
        st = Status()
        comm.Sendrecv(np.empty(0), other, 3, np.empty(0), other, 3, status=st)
        assert st.source == other and st.Get_count() == 0
        comm.Send(np.ones(4), PROC_NULL)
        buf = np.full(4, 7.0)
        comm.Recv(buf, PROC_NULL, status=st)
        assert st.source == PROC_NULL and (buf == 7).all()
        assert comm.recv(source=PROC_NULL) is None
        return True

    assert run(2, body) == [True, True]


def test_truncation_raises_and_never_writes_past_the_buffer(run):
    def body(comm):
        if comm.rank == 0:
            comm.Send(np.arange(10, dtype="i4"), 1)
            comm.Send(np.arange(100000, dtype="i4"), 1)  # rendezvous
            return None
        backing = np.full(8, -1, dtype="i4")
        errs = []
        for _ in range(2):
            with pytest.raises(errors.TruncationError) as info:
                comm.Recv(backing[:4], source=0)
            errs.append(info.value)
        assert (backing[4:] == -1).all()
        return [e.Get_error_class() for e in errs], str(errs[0])

    classes, text = run(2, body)[1]
    assert classes == [errors.ERR_TRUNCATE] * 2
    assert "40 bytes" in text and "16 bytes" in text and "rank 1" in text


def test_small_sends_complete_without_receive_large_wait_for_it(run):
    def body(comm):
        other = 1 - comm.rank
        # Both send a small message before receiving: safe (eager).
        comm.Send(np.full(100, comm.rank, "f8"), other)
        buf = np.empty(100)
        comm.Recv(buf, other)
        assert (buf == other).all()
        if comm.rank == 0:
            req = comm.Isend(np.ones(1 << 18), 1, tag=9)  # 2 MiB: rendezvous
            flags = [req.Test() for _ in range(20)]
            comm.send("now receive", 1, tag=1)
            req.Wait()
            return any(flags)
        assert comm.recv(source=0, tag=1) == "now receive"
        big = np.empty(1 << 18)
        comm.Recv(big, 0, tag=9)
        assert (big == 1).all()

    assert run(2, body)[0] is False  # the large send could not complete unmatched


def test_ssend_completes_only_once_matched(run):
    def body(comm):
        if comm.rank == 0:
            req = comm.issend("sync", 1, tag=4)
            before = [req.Test() for _ in range(10)]
            comm.send("go", 1, tag=1)
            req.wait()
            return any(before)
        comm.recv(source=0, tag=1)
        return comm.recv(source=0, tag=4)

    res = run(2, body)
    assert res == [False, "sync"]


def test_probe_then_receive_unknown_size_and_iprobe(run):
    def body(comm):
        if comm.rank == 0:
            comm.Send(np.arange(12345, dtype="i8"), 1, tag=77)
            return None
        st = Status()
        comm.Probe(source=ANY_SOURCE, tag=ANY_TAG, status=st)
        assert (st.source, st.tag) == (0, 77)
        from minimpi.data.datatypes import INT64_T
        n = st.Get_count(INT64_T)
        buf = np.empty(n, dtype="i8")
        comm.Recv(buf, st.source, st.tag)
        assert comm.Iprobe(source=0) is False
        return n, int(buf[-1])

    assert run(2, body)[1] == (12345, 12344)


def test_irecv_needs_no_size_and_waitany_testall(run):
    def body(comm):
        if comm.rank == 0:
            big = {"blob": np.arange(300000)}
            reqs = [comm.isend(big, 1, tag=1), comm.isend("small", 1, tag=2)]
            Request.waitall(reqs)
            return None
        reqs = [comm.irecv(source=0, tag=2), comm.irecv(source=0, tag=1)]
        idx, first = Request.waitany(reqs)
        results = Request.waitall(reqs)
        flag, again = Request.testall(reqs)
        return idx, results[0], int(results[1]["blob"][-1]), flag

    idx, small, last, flag = run(2, body)[1]
    assert idx in (0, 1) and small == "small" and last == 299999 and flag


def test_self_messages_and_sendrecv_with_self(run):
    def body(comm):
        comm.send({"me": comm.rank}, dest=comm.rank, tag=3)
        got = comm.recv(source=comm.rank, tag=3)
        a = np.arange(200000, dtype="f4")
        b = np.empty_like(a)
        comm.Sendrecv(a, comm.rank, 0, b, comm.rank, 0)
        return got["me"] == comm.rank and np.array_equal(a, b)

    assert run(3, body) == [True] * 3


def test_invalid_arguments_name_rank_call_and_expectation(run):
    def body(comm):
        with pytest.raises(errors.RankError, match=r"rank 0: send\(dest=5\).*expected 0..2"):
            comm.send(1, dest=5)
        with pytest.raises(errors.TagError, match=r"Send\(tag=-3\)"):
            comm.Send(np.ones(1), dest=1, tag=-3)
        with pytest.raises(errors.RankError, match=r"Recv\(source=9\)"):
            comm.Recv(np.ones(1), source=9)
        with pytest.raises(errors.BufferSpecError, match="Recv"):
            comm.Recv(b"read-only", source=1)
        return True

    def wrapper(comm):
        return body(comm) if comm.rank == 0 else True

    assert run(3, wrapper) == [True] * 3


def test_dup_and_split_isolate_messages(run):
    def body(comm):
        dup = comm.Dup()
        if comm.rank == 0:
            comm.send("world", 1, tag=0)
            dup.send("dup", 1, tag=0)
        elif comm.rank == 1:
            # Receive on dup first: the world message must not match it.
            assert dup.recv(source=0, tag=0) == "dup"
            assert comm.recv(source=0, tag=0) == "world"
        row = comm.Split(color=comm.rank % 2, key=-comm.rank)
        # key=-rank reverses the order inside each color
        none = comm.Split(color=UNDEFINED if comm.rank == 2 else 0, key=0)
        dup.Free()
        with pytest.raises(errors.CommError, match="freed"):
            dup.send(1, dest=0)
        return row.rank, row.size, row.world_ranks, bool(none)

    res = run(5, body)
    assert res[0][2] == (4, 2, 0) and res[0][0] == 2
    assert res[1][2] == (3, 1) and res[1][0] == 1
    assert [r[3] for r in res] == [True, True, False, True, True]


def test_rank_exception_is_reported_not_hung(run):
    def body(comm):
        if comm.rank == 1:
            raise ValueError("boom")
        return comm.rank

    with pytest.raises(RankFailed, match="rank 1 raised ValueError: boom"):
        run(3, body)


def test_blocked_forever_fails_with_what_each_rank_waits_for(run):
    def body(comm):
        comm.recv(source=(comm.rank + 1) % comm.size, tag=7)

    with pytest.raises(errors.MPITimeoutError, match=r"recv\(source=1, tag=7\) on COMM_WORLD"):
        run(2, body, timeout=1.5)


def test_non_contiguous_arrays_are_refused_and_columns_go_by_datatype(run):
    # issue 29: a column view is refused as mpi4py refuses it (BufferError); a copy or a
    # vector datatype over the whole matrix is how a column travels
    def body(comm):
        m = np.arange(36, dtype="f8").reshape(6, 6)
        target = np.zeros((6, 6))
        peer = 1 - comm.rank
        with pytest.raises(BufferError, match="not contiguous"):
            comm.Send(m[:, 1], peer)
        with pytest.raises(BufferError, match="not contiguous"):
            comm.Recv(target[:, 2], peer)
        column = MPI.DOUBLE.Create_vector(6, 1, 6).Commit()
        if comm.rank == 0:
            comm.Send(np.ascontiguousarray(m[:, 1]), 1)
            comm.Send([m.reshape(-1)[3:], 1, column], 1)
            return None
        got = np.zeros(6)
        comm.Recv(got, 0)
        comm.Recv([target.reshape(-1)[2:], 1, column], 0)
        return got.tolist(), target[:, 2].tolist(), float(target.sum())

    col, into_column, total = run(2, body)[1]
    assert col == [1.0, 7.0, 13.0, 19.0, 25.0, 31.0]
    assert into_column == [3.0, 9.0, 15.0, 21.0, 27.0, 33.0] and total == sum(into_column)


def test_status_count_of_object_is_pickled_size(run):
    def body(comm):
        if comm.rank == 0:
            comm.send([1, 2, 3], 1)
            return None
        st = Status()
        comm.recv(source=0, status=st)
        return st.Get_count()

    n = run(2, body)[1]
    assert n == len(pickle.dumps([1, 2, 3], protocol=5))  # as mpi4py reports it


@pytest.mark.parametrize("eager_limit", [0, 65536])
def test_probe_counts_an_object_before_and_after_its_payload_arrives(run, eager_limit):
    # eager_limit 0: every message waits for its receive (rendezvous), so the probe sees only
    # the frame's length; a small object travels as its bare pickle, a numpy array out of
    # band (minimpi's layout): both are counted as mpi4py counts them, the pickled size
    small = {"k": [1, 2.5, "three"]}
    arr = np.arange(4.0)

    def body(comm):
        if comm.rank == 0:
            comm.send(small, 1, tag=1)
            comm.send(arr, 1, tag=2)
            comm.send(b"", 1, tag=3)
            return None
        counts, got = [], []
        for tag in (1, 2, 3):
            st = Status()
            comm.probe(source=0, tag=tag, status=st)
            counts.append(st.Get_count())
            st = Status()
            got.append(comm.recv(source=0, tag=tag, status=st))
            counts.append(st.Get_count())
        return counts, got

    counts, got = run(2, body, eager_limit=eager_limit)[1]
    bufs = []
    pickled = len(pickle.dumps(arr, 5, buffer_callback=bufs.append))
    bare = len(pickle.dumps(small, 5))
    assert counts[:2] == [bare, bare]
    assert counts[3] == pickled + arr.nbytes
    if eager_limit:          # (before its payload, an out-of-band object's count is only
        assert counts[2] == counts[3]     # estimated: the head of its layout is not there)
    assert counts[4:] == [len(pickle.dumps(b"", 5))] * 2
    assert got[0] == small and np.array_equal(got[1], arr) and got[2] == b""


def test_object_decode_errors_name_rank_call_and_sender(run):
    class Broken:
        def __reduce__(self):
            return (_refuse, ())

    def body(comm):
        if comm.rank == 0:
            comm.send(Broken(), 1, tag=4)           # a bare pickle that fails to load
            comm.send("after", 1, tag=5)
            return None
        with pytest.raises(errors.SerializationError,
                           match=r"rank 1: recv\(source=0, tag=4\).*cannot unpickle the "
                                 r"object sent by rank 0: ValueError: refused"):
            comm.recv(source=0, tag=4)
        return comm.recv(source=0, tag=5)

    assert run(2, body)[1] == "after"


def _refuse():
    raise ValueError("refused")


class _NullTransport:
    """Accepts frames and moves nothing: the test plays the peer by calling the engine."""

    def attach(self, sink):
        pass

    def send(self, peer, header, payload, on_sent):
        if on_sent is not None:
            on_sent(None)

    def progress(self, timeout):
        return False


def _engine_with_lost_peer(kind):
    """An engine of rank 0 in a world of 2 whose peer (rank 1) sent the start of a message
    to tag 5 and then vanished: a request-to-send, or an eager message cut off mid-payload."""
    from minimpi.p2p.engine import Engine
    eng = Engine(0, 2, _NullTransport(), eager_limit=16)
    eng.register_context(0, (0, 1))
    eng.frame_arrived(1, frames.Header(kind, 0, 0, 0, 1, 5, 1, 1000))
    eng.peer_lost(1, "exited (connection closed)")
    return eng


@pytest.mark.parametrize("kind", [frames.RTS, frames.EAGER])
def test_message_cut_off_by_a_lost_peer_fails_its_receive_instead_of_hanging(kind):
    eng = _engine_with_lost_peer(kind)
    assert eng.iprobe(0, ANY_SOURCE, 5) is None          # nothing deliverable is left
    for source in (1, ANY_SOURCE):
        req = eng.irecv(0, source, 5, memoryview(bytearray(1000)), False, ("Recv", "source", source, 5, "COMM_WORLD"))
        if source == ANY_SOURCE:
            assert not req.done                            # another rank could still send
            continue
        assert req.done
        with pytest.raises(errors.PeerLostError, match=r"rank 0: Recv\(source=1, tag=5\).*world rank 1 is gone"):
            req.wait()


def test_receive_that_matched_a_message_before_its_sender_died_fails():
    from minimpi.p2p.engine import Engine
    eng = Engine(0, 2, _NullTransport())
    eng.register_context(0, (0, 1))
    eng.frame_arrived(1, frames.Header(frames.EAGER, 0, 0, 0, 1, 5, 1, 1000))   # payload pending
    req = eng.irecv(0, ANY_SOURCE, 5, memoryview(bytearray(1000)), False, "Recv(tag=5)")
    assert not req.done
    eng.peer_lost(1, "exited (connection closed)")
    with pytest.raises(errors.PeerLostError, match="world rank 1 is gone"):
        req.wait()


def test_run_threads_timeout_bounds_the_whole_run_not_each_rank():
    import time

    def body(comm):
        comm.recv(source=(comm.rank + 1) % comm.size, tag=3)   # every rank blocks forever

    start = time.monotonic()
    with pytest.raises(errors.MPITimeoutError, match="4 of 4 ranks did not finish within 0.5 s"):
        run_threads(4, body, timeout=0.5)
    assert time.monotonic() - start < 1.5    # not 4 x 0.5 s


def test_tcp_send_to_an_unresolvable_address_fails_the_frame_not_the_caller():
    from minimpi.transports.tcp import TcpTransport
    t = TcpTransport(0, 2, b"s" * 32)
    try:
        t.listen()
        t.set_peers(["127.0.0.1:1", "256.1.1.1:5"])
        failures = []
        t.send(1, frames.pack(frames.EAGER, 0, 0, 0, 0, 1, 0), (), failures.append)
        assert len(failures) == 1 and "cannot connect to rank 1 at 256.1.1.1:5" in failures[0]
        assert len(t._handlers) == 1   # only the listener: no half-made connection is left
    finally:
        t.close()


def _refuse_to_unpickle():
    raise ImportError("no module named 'only_on_the_sender'")


class _SenderOnly:
    def __reduce__(self):
        return (_refuse_to_unpickle, ())


def test_object_that_cannot_be_unpickled_raises_a_named_error_on_every_wait(run):
    def body(comm):
        if comm.rank == 0:
            comm.send(_SenderOnly(), 1, tag=4)
            return None
        req = comm.irecv(source=0, tag=4)
        errs = []
        for _ in range(2):          # a second wait must not return None silently
            try:
                req.wait()
            except errors.SerializationError as exc:
                errs.append(str(exc))
        return errs

    errs = run(2, body)[1]
    assert len(errs) == 2
    assert "rank 1: irecv(source=0, tag=4) on COMM_WORLD: cannot unpickle the object sent by rank 0" in errs[0]
    assert "ImportError" in errs[0]


def test_hosts_reach_every_communicator():
    """Which ranks share a machine (from the rendezvous; here, given to run_threads) is
    known to every communicator's endpoint, in its own rank order."""
    def body(comm):
        sub = comm.Split(comm.rank % 2, -comm.rank)      # reversed order within each half
        return comm._ep.hosts, sub._ep.hosts

    world, subs = zip(*run_threads(4, body, hosts=["a", "a", "b", "b"]))
    assert all(h == (0, 0, 1, 1) for h in world)
    assert subs[0] == (1, 0) and subs[1] == (1, 0)         # even ranks: world 2, 0
    assert run_threads(2, lambda comm: comm._ep.hosts) == [(0, 0), (0, 0)]


def test_waits_on_large_transfers_tell_the_progress_policy_so():
    """A receive into a buffer above the eager limit and a send whose receiver has yet to
    pull it (a rendezvous) are waits on a large transfer (the progress policy gives them a
    short spin: progress.BULK_SPIN); small messages' waits are not."""
    from minimpi.p2p.progress import ProgressPolicy

    class Recording(ProgressPolicy):
        __slots__ = ("seen",)

        def wait(self, transport, timeout, ready=None, bulk=False):
            self.seen.append(bulk)
            return super().wait(transport, timeout, ready, bulk)

    def body(comm):
        import time
        policy = Recording("yield", max_spin=1e-3)
        policy.seen = []
        comm.endpoint.engine.set_progress_policy(policy)
        big = np.arange(1 << 16, dtype=np.float64)           # 512 KiB: a rendezvous
        got = np.empty_like(big)
        small = np.empty(1)
        seen = {}
        if comm.rank == 0:
            time.sleep(0.05)                                  # the receives wait
            comm.Send(big, dest=1, tag=1)
            comm.Send(big[:1], dest=1, tag=2)
            policy.seen.clear()
            comm.Send(big, dest=1, tag=3)                     # the receiver is late to pull it
            seen["send"] = policy.seen[:]
        else:
            comm.Recv(got, source=0, tag=1)
            seen["large"] = policy.seen[:]
            policy.seen.clear()
            comm.Recv(small, source=0, tag=2)
            seen["small"] = policy.seen[:]
            time.sleep(0.05)
            comm.Recv(got, source=0, tag=3)
            assert np.array_equal(got, big) and small[0] == 0.0
        return seen

    sender, receiver = run_threads(2, body, timeout=20)
    assert receiver["large"] and all(receiver["large"])
    assert sender["send"] and all(sender["send"])
    assert not any(receiver["small"])


def test_a_daemon_threads_call_after_close_at_exit_parks_and_the_main_threads_raises():
    """At the interpreter's exit, close(at_exit=True) ends MPI: a daemon thread that posts a
    send or receive afterwards (a listener loop) is parked, with the engine's lock released,
    instead of dying with a traceback at the end of a correct run; the main thread's call
    still raises, naming why."""
    import threading

    from minimpi.p2p.engine import Engine
    engine = Engine(0, 1, None)
    engine.close("MPI was finalized at the end of the program", at_exit=True)
    outcome = []

    def listener(call):
        try:
            call()
        except BaseException as exc:     # (what the thread would have printed)
            outcome.append(exc)

    calls = (lambda: engine.irecv(7, 0, 9, None, True),
             lambda: engine.isend(7, 0, 0, 9, (memoryview(b"x"),), 1))
    threads = [threading.Thread(target=listener, args=(c,), daemon=True) for c in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join(0.3)
    assert all(t.is_alive() for t in threads) and not outcome, outcome
    assert engine.lock.acquire(timeout=1.0)      # parked without holding it
    engine.lock.release()
    for call in calls:
        with pytest.raises(errors.JobAbortedError, match="at the end of the program"):
            call()
