"""The express lane of point-to-point (Engine.send_now / receive_now, the shm transport's
send_now and eager_arrived): the same results and order as the general path, the general
path wherever the lane declines, and few Python calls per Send and Recv.

Ranks are threads over the real shared-memory transport (``run_threads(transport="shm")``);
the progress policy is set to yield so that a receive waits in the lane (as a rank with a
core of its own does in a job) instead of sleeping at once.
"""
from __future__ import annotations

import sys
import time

import numpy as np
import pytest

from minimpi.bus import Subscriber
from minimpi.constants import ANY_SOURCE, ANY_TAG
from minimpi.errors import TruncationError, TypeMismatchError
from minimpi.p2p.progress import ProgressPolicy
from minimpi.p2p.request import Status
from minimpi.runtime.inproc import run_threads


def spinning(comm) -> None:
    comm.endpoint.engine.set_progress_policy(ProgressPolicy("yield", max_spin=0.05))


def calls_of(fn, repeats: int = 100) -> float:
    """Python calls (profile 'call' events) per ``fn()`` on this thread."""
    count = [0]

    def profile(frame, event, arg):
        if event == "call":
            count[0] += 1

    sys.setprofile(profile)
    try:
        for _ in range(repeats):
            fn()
    finally:
        sys.setprofile(None)
    return count[0] / repeats


def count_general_sends(engine) -> list:
    """Count the sends that take the engine's general path (``isend``) from now on, in the
    returned one-item list; ``del engine.isend`` ends it."""
    general = [0]
    isend = engine.isend

    def counted_isend(*args, **kwargs):
        general[0] += 1
        return isend(*args, **kwargs)

    engine.isend = counted_isend
    return general


class Counts(Subscriber):
    """Counts the messages sent (a listener of ``message_sent``, as the live view's counter:
    the lane publishes the event itself rather than step aside)."""

    def __init__(self):
        self.sent = 0

    def message_sent(self, *args):
        self.sent += 1


@pytest.mark.parametrize("transport", ["shm", "tcp"])
@pytest.mark.parametrize("p", [2, 3])
def test_lane_and_general_path_keep_one_order(p, transport):
    """Sends through the lane (blocking Send of a small array) and through the general path
    (Isend, a large Send, ssend) to one peer with one tag arrive in program order, whatever
    each receive takes (Recv through the lane, Irecv/ANY_SOURCE through the general path)."""
    def body(comm):
        spinning(comm)
        n = 40
        if comm.rank == 0:
            for dest in range(1, comm.size):
                reqs = []
                for i in range(n):
                    kind = i % 4
                    if kind == 0:
                        comm.Send(np.array([i], dtype=np.int64), dest, tag=5)
                    elif kind == 1:
                        reqs.append(comm.Isend(np.array([i], dtype=np.int64), dest, tag=5))
                    elif kind == 2:
                        big = np.full(20000, i, dtype=np.int64)       # rendezvous
                        comm.Send(big, dest, tag=5)
                    else:
                        comm.ssend(i, dest, tag=6)                      # synchronous
                for r in reqs:
                    r.Wait()
            return None
        got = []
        for i in range(n):
            kind = i % 4
            if kind == 3:
                got.append(comm.recv(source=0, tag=6))
            elif kind == 2:
                big = np.empty(20000, dtype=np.int64)
                comm.Recv(big, source=ANY_SOURCE, tag=ANY_TAG)
                got.append(int(big[0]) if (big == big[0]).all() else -1)
            elif i % 8 == 1:
                one = np.empty(1, dtype=np.int64)
                comm.Irecv(one, source=0, tag=5).Wait()
                got.append(int(one[0]))
            else:
                one = np.empty(1, dtype=np.int64)
                st = Status()
                comm.Recv(one, source=ANY_SOURCE, tag=5, status=st)
                assert (st.Get_source(), st.Get_tag(), st.Get_count()) == (0, 5, 8)
                got.append(int(one[0]))
        return got

    for got in run_threads(p, body, timeout=120, transport=transport)[1:]:
        assert got == list(range(40))


def test_objects_take_the_lane_with_mpi4py_counts():
    def body(comm):
        spinning(comm)
        if comm.rank == 0:
            comm.send({"a": [1, 2, 3]}, 1, tag=3)
            comm.send(None, 1, tag=3)
            return comm.recv(source=1, tag=4)
        st = Status()
        first = comm.recv(source=0, tag=3, status=st)
        count = st.Get_count()
        second = comm.recv(source=ANY_SOURCE, tag=ANY_TAG, status=st)
        comm.send((first, second, count, st.Get_source(), st.Get_tag()), 0, tag=4)
        return None

    first, second, count, source, tag = run_threads(2, body, timeout=60, transport="shm")[0]
    assert first == {"a": [1, 2, 3]} and second is None and (source, tag) == (0, 3)
    import pickle
    assert count == len(pickle.dumps({"a": [1, 2, 3]}, protocol=5))


def test_a_message_larger_than_the_receive_buffer_still_raises_truncation():
    def body(comm):
        spinning(comm)
        if comm.rank == 0:
            comm.Send(np.arange(4, dtype=np.float64), 1, tag=1)
            comm.Send(np.arange(2, dtype=np.float64), 1, tag=2)
            return None
        small = np.zeros(2)
        with pytest.raises(TruncationError):
            comm.Recv(small, source=0, tag=1)
        comm.Recv(small, source=0, tag=2)       # the next message is not lost
        return small.tolist()

    assert run_threads(2, body, timeout=60, transport="shm")[1] == [0.0, 1.0]


def test_messages_that_arrive_while_a_receive_polls():
    """A blocking receive already polling when its message arrives takes it straight from
    the ring into its buffer; what it does not match (another tag, a message larger than
    its buffer, a synchronous send) stays for the receives it belongs to, in order."""
    def body(comm):
        spinning(comm)
        if comm.rank == 0:
            time.sleep(0.01)                    # rank 1 is polling by now
            comm.Send(np.array([1.0]), 1, tag=1)
            comm.Send(np.array([2.0]), 1, tag=2)
            comm.Send(np.array([3.0]), 1, tag=1)
            time.sleep(0.01)
            comm.Send(np.arange(4, dtype=np.float64), 1, tag=3)    # larger than its buffer
            comm.Send(np.array([5.0]), 1, tag=3)
            time.sleep(0.01)
            comm.Ssend(np.array([6.0]), 1, tag=4)
            return None
        got = []
        one = np.zeros(1)
        for tag in (2, 1, 1):
            comm.Recv(one, source=0, tag=tag)
            got.append(float(one[0]))
        small = np.zeros(2)
        with pytest.raises(TruncationError):
            comm.Recv(small, source=0, tag=3)
        comm.Recv(one, source=ANY_SOURCE, tag=3)
        got.append(float(one[0]))
        st = Status()
        comm.Recv(one, source=ANY_SOURCE, tag=ANY_TAG, status=st)
        got.append((float(one[0]), st.Get_source(), st.Get_tag(), st.Get_count()))
        return got

    assert run_threads(2, body, timeout=60, transport="shm")[1] == \
        [2.0, 1.0, 3.0, 5.0, (6.0, 0, 4, 8)]


@pytest.mark.parametrize("first", ["synchronous", "rendezvous"])
def test_a_message_the_lane_cannot_take_is_not_overtaken_while_a_receive_polls(first):
    """A synchronous or rendezvous message, then an eager one with the same tag, both
    arriving while the receive polls: the receive gets the first (MPI's non-overtaking)."""
    n = 1 if first == "synchronous" else 20000          # 160 KB: above the eager limit

    def body(comm):
        spinning(comm)
        if comm.rank == 0:
            time.sleep(0.01)
            req = comm.Issend(np.full(n, 6.0), 1, tag=4) if first == "synchronous" else \
                comm.Isend(np.full(n, 6.0), 1, tag=4)
            comm.Send(np.full(n, 7.0), 1, tag=4)
            req.Wait()
            return None
        a, b = np.zeros(n), np.zeros(n)
        comm.Recv(a, source=0, tag=4)
        comm.Recv(b, source=0, tag=4)
        return float(a.min()), float(a.max()), float(b.min()), float(b.max())

    assert run_threads(2, body, timeout=60, transport="shm")[1] == (6.0, 6.0, 7.0, 7.0)


def test_objects_that_arrive_while_a_receive_polls():
    def body(comm):
        spinning(comm)
        if comm.rank == 0:
            time.sleep(0.01)
            comm.send("other tag", 1, tag=8)
            comm.send({"x": 1}, 1, tag=7)
            return None
        return comm.recv(source=0, tag=7), comm.recv(source=ANY_SOURCE, tag=ANY_TAG)

    assert run_threads(2, body, timeout=60, transport="shm")[1] == ({"x": 1}, "other tag")


def test_a_message_that_ends_inside_an_element_raises_type_mismatch_on_the_lane_too():
    """12 bytes received as float64: the lane (the message already here) checks the type
    signature as the general path does."""
    def body(comm):
        spinning(comm)
        if comm.rank == 0:
            comm.Send(np.arange(3, dtype=np.int32), 1, tag=1)
            comm.Send(np.arange(2, dtype=np.float64), 1, tag=2)
            comm.Barrier()
            return None
        comm.Barrier()                          # both messages are here: the lane takes them
        got = np.zeros(2)
        with pytest.raises(TypeMismatchError) as info:
            comm.Recv(got, source=0, tag=1)
        assert "12 bytes" in str(info.value) and "DOUBLE" in str(info.value)
        comm.Recv(got, source=0, tag=2)
        return got.tolist()

    assert run_threads(2, body, timeout=60, transport="shm")[1] == [0.0, 1.0]


def test_a_listener_of_sends_sees_every_message_and_the_lane_stays_open():
    def body(comm):
        spinning(comm)
        counts = Counts()
        engine = comm.endpoint.engine
        engine.bus.subscribe(counts)
        general = count_general_sends(engine)
        peer = 1 - comm.rank
        buf = np.zeros(1)
        for i in range(10):
            if comm.rank == 0:
                comm.Send(buf, peer, tag=i)
            else:
                comm.Recv(buf, peer, tag=i)
        engine.bus.unsubscribe(counts)
        del engine.isend                        # (count_general_sends' wrapper)
        return counts.sent, general[0]

    assert run_threads(2, body, timeout=60, transport="shm") == [(10, 0), (0, 0)]


def test_a_receive_posted_before_keeps_its_turn():
    """An Irecv posted first must get the first message even when a later blocking Recv
    could take it from the unexpected queue through the lane."""
    def body(comm):
        spinning(comm)
        if comm.rank == 0:
            comm.Barrier()
            for i in range(2):
                comm.Send(np.array([float(i)]), 1, tag=9)
            return None
        first = np.zeros(1)
        req = comm.Irecv(first, source=0, tag=9)
        comm.Barrier()
        second = np.zeros(1)
        comm.Recv(second, source=0, tag=9)
        req.Wait()
        return first[0], second[0]

    assert run_threads(2, body, timeout=60, transport="shm")[1] == (0.0, 1.0)


def test_few_python_calls_per_send_and_recv_on_the_lane():
    """The issue's budget: at most 12 Python calls per Send and per Recv on the express lane
    (a Recv that finds its message already here; the transport's progress calls made while
    a receive waits for its peer are waiting, counted apart)."""
    def body(comm):
        spinning(comm)
        a, b = np.ones(1), np.empty(1)
        peer = 1 - comm.rank
        for _ in range(20):
            if comm.rank == 0:
                comm.Send(a, peer, 1)
            else:
                comm.Recv(b, peer, 1)
        comm.Barrier()
        if comm.rank == 0:
            send = calls_of(lambda: comm.Send(a, peer, 1))
            comm.Barrier()
            return send
        comm.Barrier()       # every message is here: each Recv finds its own
        return calls_of(lambda: comm.Recv(b, peer, 1))

    send, recv = run_threads(2, body, timeout=60, transport="shm")
    assert send <= 12, send
    assert recv <= 12, recv


def test_arrays_of_any_dtype_and_shape_cross_the_lane_byte_for_byte():
    """Send hands a C-contiguous array itself to the shm writer (no byte view): what
    arrives is its bytes, whatever the dtype and shape; a strided array takes the general
    path, which refuses it as mpi4py does."""
    from minimpi.errors import BufferAccessError
    sent = [np.arange(6, dtype=np.float32).reshape(2, 3), np.array(7, dtype=np.int16),
            np.array([True, False, True]), np.array([1 + 2j, -3j]),
            np.arange(12, dtype=np.int64).reshape(3, 4)[:, 1:3].copy()]

    def body(comm):
        spinning(comm)
        if comm.rank == 0:
            with pytest.raises(BufferAccessError, match="not contiguous"):
                comm.Send(np.arange(10)[::2], 1, tag=99)
            for i, a in enumerate(sent):
                comm.Send(a, 1, tag=i)
            # again with the lane open (the writer itself declines: its copy fails before
            # anything is published) - the next message is unharmed
            with pytest.raises(BufferAccessError, match="not contiguous"):
                comm.Send(np.arange(10)[::2], 1, tag=99)
            comm.Send(sent[0], 1, tag=len(sent))
            return None
        got = []
        for i, a in enumerate(sent + sent[:1]):
            b = np.empty(a.shape, a.dtype)
            comm.Recv(b, source=0, tag=i)
            got.append(b)
        return got

    got = run_threads(2, body, timeout=60, transport="shm")[1]
    assert len(got) == len(sent) + 1
    for a, b in zip(sent + sent[:1], got):
        assert b.dtype == a.dtype and b.shape == a.shape and np.array_equal(a, b)


def test_an_error_on_the_lane_goes_to_the_communicators_handler_once():
    """Send and Recv are hand-written front methods: an error their lane raises is routed
    to the error handler as a made front routes it (once), then raised."""
    from minimpi import MPI

    def body(comm):
        spinning(comm)
        seen = []
        eh = MPI.Comm.Create_errhandler(lambda c, code: seen.append(code))
        comm.Set_errhandler(eh)
        if comm.rank == 0:
            comm.Send(np.arange(3, dtype=np.int32), 1, tag=1)
            comm.Barrier()
            return seen
        comm.Barrier()                          # the message is here: the lane takes it
        with pytest.raises(TypeMismatchError):
            comm.Recv(np.zeros(2), source=0, tag=1)
        return seen

    seen0, seen1 = run_threads(2, body, timeout=60, transport="shm")
    assert seen0 == [] and seen1 == [MPI.ERR_TYPE]


def test_calls_are_published_while_someone_listens_and_the_lane_returns_after():
    """While a subscriber listens to calls, Send/Recv/send/recv take their general path,
    which publishes them; once it leaves, the lane serves them again."""
    from tests.unit.test_bus import Calls

    def body(comm):
        spinning(comm)
        engine = comm.endpoint.engine
        calls = Calls()
        engine.bus.subscribe(calls)
        peer = 1 - comm.rank
        buf = np.zeros(1)
        if comm.rank == 0:
            comm.Send(buf, peer, tag=1)
            comm.send("x", peer, tag=2)
        else:
            comm.Recv(buf, peer, tag=1)
            comm.recv(source=peer, tag=2)
        engine.bus.unsubscribe(calls)
        # the general path's frames are all delivered before the lane may take over: the
        # writer declines while a frame to that peer still waits in its queue (order)
        comm.Barrier()
        general = count_general_sends(engine)
        if comm.rank == 0:
            comm.Send(buf, peer, tag=3)
        else:
            comm.Recv(buf, peer, tag=3)
        del engine.isend                        # (count_general_sends' wrapper)
        return [c for kind, c, _ in calls.log if kind == "enter"], general[0]

    (calls0, general0), (calls1, _) = run_threads(2, body, timeout=60, transport="shm")
    assert calls0 == ["Intracomm.Send", "Intracomm.send"] and general0 == 0
    assert calls1 == ["Intracomm.Recv", "Intracomm.recv"]


def test_the_lane_closes_when_a_peer_is_lost():
    """send_now keeps the writers it may use without looking at anything else; a lost
    peer (as an abort or a revoked communicator) empties that lane, so the next send goes
    to the general path, which says what happened."""
    def body(comm):
        spinning(comm)
        engine = comm.endpoint.engine
        peer = 1 - comm.rank
        buf = np.zeros(1)
        if comm.rank == 0:
            comm.Send(buf, peer, tag=1)
            before = engine.send_now(0, peer, 0, 99, (b"12345678",), 8)   # context 0: unused
            comm.Barrier()
            with engine.lock:
                engine.peer_lost(peer, "test: gone")
            after = engine.send_now(0, peer, 0, 99, (b"12345678",), 8)
            return before, after
        comm.Recv(buf, peer, tag=1)
        comm.Barrier()
        return None

    before, after = run_threads(2, body, timeout=60, transport="shm")[0]
    assert before is True and after is False


def test_an_express_receive_in_a_world_of_one_declines_without_a_transport():
    # a world of one has no transport: with nothing queued, the express receive declines
    # (the general path receives) instead of asking a missing transport for a reader
    from minimpi.p2p.endpoint import Endpoint
    from minimpi.p2p.engine import Engine
    engine = Engine(0, 1, None)
    engine.set_progress_policy(ProgressPolicy("spin"))
    ep = Endpoint(engine, [0], 0, 4, "world of one")
    assert engine.receive_now(ep.context, 0, 3, np.zeros(2)) is None
    assert engine.receive_now(ep.context, 0, 3, None) is None


@pytest.mark.parametrize("lane", ["send_now", "receive_now"])
def test_the_express_lane_leaves_the_engine_lock_as_it_found_it_even_when_interrupted(lane):
    # send_now and receive_now take the engine lock without a with statement (half the
    # cost); a KeyboardInterrupt raised while a contended acquire waited (nothing held)
    # must come out as itself, and one raised right after the acquire returned must not
    # leave the lock held - else every other thread waits for it forever
    import threading

    from minimpi.p2p.endpoint import Endpoint
    from minimpi.p2p.engine import Engine
    engine = Engine(0, 1, None)
    engine.set_progress_policy(ProgressPolicy("spin"))
    ep = Endpoint(engine, [0], 0, 4, "world of one")

    def call():
        if lane == "send_now":
            return engine.send_now(ep.context, 0, 0, 1, (b"12345678",), 8)
        return engine.receive_now(ep.context, 0, 1, None)

    assert call() in (False, None)
    assert not engine.lock._is_owned()
    with engine.lock:                         # a caller that holds it keeps holding it
        call()
        assert engine.lock._is_owned()
    assert not engine.lock._is_owned()

    real = engine._lock_acquire

    def interrupted_wait():
        raise KeyboardInterrupt

    def interrupted_after():
        real()
        raise KeyboardInterrupt

    for acquire in (interrupted_wait, interrupted_after):
        engine._lock_acquire = acquire
        with pytest.raises(KeyboardInterrupt):
            call()
        engine._lock_acquire = real
        other = threading.Thread(target=lambda: engine.lock.acquire(timeout=5)
                                 and engine.lock.release())
        other.start()
        other.join(10)
        assert not other.is_alive() and not engine.lock._is_owned(), acquire.__name__
