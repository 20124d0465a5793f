"""The transports' eager readers (``Transport.eager_reader``), which a blocking receive uses
to take a peer's next eager frame without a signal mask: beside ``progress`` every frame is
handed over exactly once and in order, whichever of the two takes it; frames a reader does
not hand over (rendezvous headers, payloads larger than it looks at) stay ``progress``'s;
and a take after something else took the frame takes nothing."""
from __future__ import annotations

import os
import time

import pytest
from jobhelpers import progress_until, wire

from minimpi.transports import frames
from minimpi.transports.base import FrameSink
from minimpi.transports.shm import ShmTransport
from minimpi.transports.tcp import PEEK_BYTES, TcpTransport


class Sink(FrameSink):
    """Records every whole frame ``progress`` delivers: (msg_id, kind, payload)."""

    def __init__(self) -> None:
        self.frames = []

    def frame_arrived(self, peer, header):
        if header.kind in frames.HAS_PAYLOAD:
            return memoryview(bytearray(header.length))
        self.frames.append((header.msg_id, header.kind, b""))
        return None

    def payload_arrived(self, peer, header, buffer):
        self.frames.append((header.msg_id, header.kind, bytes(buffer)))

    def peer_lost(self, peer, reason):
        raise AssertionError(f"rank {peer} lost: {reason}")


def payload_of(i: int, n: int) -> bytes:
    return bytes((i * 13 + k) % 251 for k in range(n))


def wired(kind: str):
    """Two transports of this process (ranks 0 and 1), connected both ways."""
    if kind == "shm":
        job = "test" + os.urandom(6).hex()
        ts = [ShmTransport(r, 2, job, ring=1024) for r in range(2)]
    else:
        ts = [TcpTransport(r, 2, b"s" * 32) for r in range(2)]
    sinks = [Sink() for _ in ts]
    wire(ts, sinks)
    if kind == "tcp":      # a frame each way makes both connections
        for r in (0, 1):
            ts[r].send(1 - r, frames.pack(frames.SYNC_ACK, 0, 0, 0, 0, 10 ** 6, 0), (), None)
        progress_until(ts, lambda: all(len(s.frames) == 1 for s in sinks))
        for s in sinks:
            s.frames.clear()
    return ts, sinks


@pytest.mark.parametrize("kind", ["shm", "tcp"])
def test_reader_and_progress_hand_over_every_frame_once_in_order(kind):
    # eager frames of many sizes (over shm, some straddle the ring's end or stream through
    # it; over TCP, some are larger than a reader looks at) and rendezvous headers between
    ts, sinks = wired(kind)
    try:
        sizes = [0, 8, 31, 100, 700, 5000, 3, PEEK_BYTES + 100, 64, 900, 16, 1] * 4
        expect = []
        for i, n in enumerate(sizes):       # (tag i: which frame the reader took)
            if i % 7 == 6:
                ts[0].send(1, frames.pack(frames.RTS, 0, 0, 0, i, i, n), (), None)
                expect.append((i, frames.RTS, b""))
            else:
                data = payload_of(i, n)
                ts[0].send(1, frames.pack(frames.EAGER, 0, 0, 0, i, i, n), [memoryview(data)],
                           None)
                expect.append((i, frames.EAGER, data))
        reader = ts[1].eager_reader(0)
        taken, deadline, seen_other = [], time.monotonic() + 20, False
        while len(taken) + len(sinks[1].frames) < len(expect):
            assert time.monotonic() < deadline, (len(taken), sinks[1].frames[-3:])
            got = reader.take_matching(0, 0, -1, None, 4)     # any tag
            if got:
                source, tag, n, data = got
                assert source == 0
                assert len(data) == n
                taken.append((tag, frames.EAGER, bytes(data)))
            else:                  # None: nothing yet; (): progress's to deliver
                seen_other = seen_other or got == ()
                ts[1].progress(0)
            ts[0].progress(0)
        assert sorted(taken + sinks[1].frames) == expect  # every frame once, whoever took it
        assert taken == sorted(taken)                     # the reader's in order
        assert taken and sinks[1].frames                  # both took some
        assert seen_other              # a reader says when a frame there is not one for it
        assert reader.take_matching(0, 0, -1, None, 2) is None
    finally:
        for t in ts:
            t.close()


def test_a_take_after_the_frame_was_taken_meanwhile_takes_nothing():
    # (a signal handler's receive took it between the look and the take; the TCP reader
    # looks and takes in two steps - the shm reader's one step checks the ring's head word
    # again before its store)
    ts, sinks = wired("tcp")
    try:
        for i in range(2):
            ts[0].send(1, frames.pack(frames.EAGER, 0, 0, 0, 0, i, 8),
                       [memoryview(payload_of(i, 8))], None)
        reader = ts[1].eager_reader(0)
        progress_until([ts[0]], lambda: bool(reader.look()))
        header, _, end = reader.look()
        inner = reader.look()
        assert frames.Header(*inner[0]).msg_id == 0 and reader.take(inner[2], 8)
        assert not reader.take(end, frames.Header(*header).length)
        deadline = time.monotonic() + 5
        again = reader.look()
        while not again:
            assert time.monotonic() < deadline
            again = reader.look()
        assert frames.Header(*again[0]).msg_id == 1 and bytes(again[1]) == payload_of(1, 8)
        assert reader.take(again[2], 8)
        ts[1].progress(0)
        assert sinks[1].frames == []                       # nothing twice
    finally:
        for t in ts:
            t.close()


@pytest.mark.parametrize("kind", ["shm", "tcp"])
def test_take_matching_takes_only_what_the_receive_wants(kind):
    # a blocking receive for (context 5, source 0, tag 7) into 16 bytes, one frame at a time
    # at the head of the stream: frames of another context, source or tag, a synchronous
    # one and one too large are not taken (progress delivers them, once)
    ts, sinks = wired(kind)
    try:
        envelopes = [  # (flags, context, source, tag, length, the receive takes it)
            (0, 5, 0, 7, 8, True), (0, 6, 0, 7, 8, False), (0, 5, 1, 7, 8, False),
            (0, 5, 0, 8, 8, False), (frames.F_SYNC, 5, 0, 7, 8, False),
            (0, 5, 0, 7, 17, False), (0, 5, 0, 7, 0, True), (0, 5, 0, 7, 16, True)]
        reader = ts[1].eager_reader(0)
        target = memoryview(bytearray(16))
        deadline = time.monotonic() + 20
        for i, (flags, context, source, tag, n, takes) in enumerate(envelopes):
            data = payload_of(i, n)
            ts[0].send(1, frames.pack(frames.EAGER, flags, context, source, tag, i, n),
                       [memoryview(data)], None)
            before = len(sinks[1].frames)
            while True:
                assert time.monotonic() < deadline, (i, sinks[1].frames)
                ts[0].progress(0)
                got = reader.take_matching(5, 0, 7, target, 4)
                if got:
                    assert takes, i
                    assert got == (0, 7, n, None) and bytes(target[:n]) == data
                    break
                if got == ():      # not one for this receive: progress delivers it
                    assert not takes, i
                    ts[1].progress(0)
                    assert sinks[1].frames[before:] == [(i, frames.EAGER, data)]
                    break
        # an object receive (no target) of any tag gets the bytes
        ts[0].send(1, frames.pack(frames.EAGER, 0, 5, 0, 3, 99, 5),
                   [memoryview(payload_of(99, 5))], None)
        got = None
        while not got:
            assert time.monotonic() < deadline
            ts[0].progress(0)
            got = reader.take_matching(5, 0, -1, None, 4)
        assert got == (0, 3, 5, bytearray(payload_of(99, 5)))
        assert reader.take_matching(5, 0, -1, None, 2) is None
    finally:
        for t in ts:
            t.close()


@pytest.mark.parametrize("kind", ["shm", "tcp"])
def test_take_matching_copies_into_numpy_arrays_and_reports_any_tag(kind):
    # Recv's express lane hands the user's array itself to the reader (no byte view made
    # of it): the bytes land in float, 0-d and 2-D arrays alike; an object's flags do not
    # stop a take; a receive of any tag gets the frame's own tag, negative ones included
    np = pytest.importorskip("numpy")
    ts, sinks = wired(kind)
    try:
        reader = ts[1].eager_reader(0)
        cases = [(np.zeros(2), 0, 7, np.array([1.5, -2.25])),
                 (np.zeros((), np.int64), 0, 7, np.array(-5, np.int64)),
                 (np.zeros((2, 3), np.int32), frames.F_OBJECT | frames.F_PICKLE, 7,
                  np.arange(6, dtype=np.int32).reshape(2, 3)),
                 (np.zeros(1, np.uint8), 0, -7, np.array([200], np.uint8))]
        deadline = time.monotonic() + 20
        for i, (target, flags, tag, want) in enumerate(cases):
            data = want.tobytes()
            ts[0].send(1, frames.pack(frames.EAGER, flags, 5, 0, tag, i, len(data)),
                       [memoryview(data)], None)
            got = None
            while not got:
                assert time.monotonic() < deadline, i
                ts[0].progress(0)
                got = reader.take_matching(5, 0, tag if tag >= 0 else -1, target, 4)
            assert got == (0, tag, len(data), None), i
            assert np.array_equal(target, want), (i, target)
        assert sinks[1].frames == []
    finally:
        for t in ts:
            t.close()


@pytest.mark.parametrize("as_array", [False, True])
def test_a_small_buffer_gets_exactly_the_frame_wherever_it_lies_in_the_ring(as_array):
    # a receive buffer of at most frames.PAYLOAD_WITH_MATCH_MAX bytes reads the header and
    # that many bytes in one unpack, or, where they would pass the ring's end, the payload
    # alone: frames of every length up to the buffer's, at every place in a small ring,
    # fill exactly their bytes (what lies past a shorter frame is never copied)
    np = pytest.importorskip("numpy")
    ts, sinks = wired("shm")
    try:
        reader = ts[1].eager_reader(0)
        room = frames.PAYLOAD_WITH_MATCH_MAX
        deadline, taken = time.monotonic() + 20, 0
        for i in range(150):
            n = (i * 7) % (room + 1)
            data = payload_of(i, n)
            ts[0].send(1, frames.pack(frames.EAGER, 0, 5, 0, 3, i, n), [memoryview(data)],
                       None)
            buf = np.full(room, 0xEE, np.uint8)
            target = buf if as_array else memoryview(buf).cast("B")
            before = len(sinks[1].frames)
            while True:
                assert time.monotonic() < deadline, i
                ts[0].progress(0)
                got = reader.take_matching(5, 0, 3, target, 4)
                if got:
                    assert got == (0, 3, n, None), i
                    assert bytes(buf[:n]) == data and (buf[n:] == 0xEE).all(), (i, n)
                    taken += 1
                    break
                if got == ():          # where no header fits before the ring's end
                    while len(sinks[1].frames) == before:
                        assert time.monotonic() < deadline, i
                        ts[1].progress(0)
                    assert sinks[1].frames[before:] == [(i, frames.EAGER, data)], i
                    break
        assert taken > 140
    finally:
        for t in ts:
            t.close()


def test_the_shm_express_writer_packs_every_field_of_the_header():
    # send_eager packs the header as its four words: what progress unpacks field by field
    # is what was sent, negative tags and every flag included
    ts, sinks = wired("shm")
    try:
        writer = ts[0].eager_writer(1)
        sent = [(0, 5, 0, 7, 11, b"abcdefgh"), (frames.F_OBJECT | frames.F_PICKLE, 2 ** 32 - 1,
                                                0, -3, 12, b"xyz"), (0, 9, 0, 2 ** 31 - 1, 13, b"")]
        for flags, context, source, tag, msg_id, data in sent:
            assert writer.send_eager(flags, context, source, tag, msg_id, [memoryview(data)],
                                     len(data))
        got = []

        class Keep(Sink):
            def frame_arrived(self, peer, header):
                got.append(header)
                return super().frame_arrived(peer, header)

        ts[1].attach(Keep())
        progress_until(ts, lambda: len(got) == len(sent))
        assert [(h.kind, h.flags, h.extra, h.context, h.source, h.tag, h.msg_id, h.length)
                for h in got] == [(frames.EAGER, f, 0, c, s, t, i, len(d))
                                  for f, c, s, t, i, d in sent]
    finally:
        for t in ts:
            t.close()


@pytest.mark.parametrize("kind", ["shm", "tcp"])
def test_an_express_send_writes_one_whole_frame_or_nothing(kind):
    # send_express (a blocking Send of one buffer, in one call under the engine's gate):
    # a frame whose header is packed from the arguments and numbered from the gate's
    # message numbers; declined - nothing published, the number spent at most - when the
    # gate is closed, the buffer is above the eager limit or not C-contiguous
    import itertools
    import threading

    np = pytest.importorskip("numpy")
    from minimpi.p2p.engine import _FrameSender
    from minimpi.transports.base import ExpressGate

    ts, sinks = wired(kind)
    try:
        writer = ts[0].eager_writer(1) or _FrameSender(ts[0], 1)
        lock = threading.RLock()
        gate = ExpressGate(lock, 64, itertools.count(40))
        a = np.arange(4, dtype=np.int16)
        assert not writer.send_express(gate, 5, 0, 7, a, a.nbytes)        # closed
        gate.open = True
        assert not writer.send_express(gate, 5, 0, 7, np.zeros(9), 72)   # above the limit
        strided = np.arange(8.0)[::2]
        assert not writer.send_express(gate, 5, 0, 7, strided, strided.nbytes)
        assert writer.send_express(gate, 5, 0, 7, a, a.nbytes)
        assert writer.send_express(gate, 6, 0, 2 ** 31 - 1, np.zeros(0), 0)
        assert not lock._is_owned()
        progress_until(ts, lambda: len(sinks[1].frames) == 2)
        (id1, kind1, data1), (id2, _, data2) = sinks[1].frames
        assert (kind1, data1, data2) == (frames.EAGER, a.tobytes(), b"")
        assert 40 <= id1 < id2 == next(gate.msg_ids) - 1     # numbered from the gate, in order
    finally:
        for t in ts:
            t.close()
