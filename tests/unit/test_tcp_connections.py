"""The TCP transport's connections: one per pair of ranks where it can (the lower rank
opens it at start-up and the higher adopts it; on first use, a rank whose peer's connection
is ready sends on it), frames in order both ways on it, and a peer that closes a connection
it sent on - or was sent to on - is reported lost, with what was queued failing."""
from __future__ import annotations

from jobhelpers import connect_all_in_threads, progress_until, wire

from minimpi.transports import frames
from minimpi.transports.base import FrameSink
from minimpi.transports.tcp import TcpTransport


class Sink(FrameSink):
    """Records every whole frame ``progress`` delivers, and every peer reported lost."""

    def __init__(self) -> None:
        self.frames = []
        self.lost = []

    def frame_arrived(self, peer, header):
        if header.kind in frames.HAS_PAYLOAD:
            return memoryview(bytearray(header.length))
        return None

    def payload_arrived(self, peer, header, buffer):
        self.frames.append((peer, header.tag, bytes(buffer)))

    def peer_lost(self, peer, reason):
        self.lost.append((peer, reason))


def transports(n: int):
    ts = [TcpTransport(r, n, b"k" * 32) for r in range(n)]
    sinks = [Sink() for _ in ts]
    wire(ts, sinks)
    return ts, sinks


def eager(t: TcpTransport, peer: int, tag: int, data: bytes) -> None:
    t.send(peer, frames.pack(frames.EAGER, 0, 0, t.rank, tag, tag, len(data)),
           [memoryview(data)], None)


def open_sockets(t: TcpTransport) -> int:
    """Connections of ``t`` (its listener and waker aside)."""
    return sum(1 for conn in t._handlers.values() if hasattr(conn, "peer"))


def test_connect_all_makes_one_connection_per_pair_that_carries_both_ways():
    ts, sinks = transports(5)
    try:
        errors, stuck = connect_all_in_threads(ts, timeout=20)
        assert not errors and not stuck
        assert [open_sockets(t) for t in ts] == [4] * 5        # not 8: one per pair
        for t in ts:                      # every rank to every other, 3 frames each
            for peer in range(5):
                if peer != t.rank:
                    for k in range(3):
                        eager(t, peer, k, bytes([t.rank, peer, k]) * 7)
        progress_until(ts, lambda: all(len(s.frames) == 12 for s in sinks))
        for r, s in enumerate(sinks):
            for peer in range(5):
                if peer != r:
                    got = [(tag, data) for p, tag, data in s.frames if p == peer]
                    assert got == [(k, bytes([peer, r, k]) * 7) for k in range(3)]
        assert [open_sockets(t) for t in ts] == [4] * 5
        assert not any(s.lost for s in sinks)
    finally:
        for t in ts:
            t.close()


def test_a_reply_goes_on_the_connection_of_the_first_message_and_the_reader_finds_it():
    ts, sinks = transports(2)
    try:
        eager(ts[0], 1, 1, b"ping")
        progress_until(ts, lambda: len(sinks[1].frames) == 1)
        eager(ts[1], 0, 2, b"pong")                 # rank 1 has no connection of its own
        reader = ts[0].eager_reader(1)
        got = None
        progress_until([ts[1]], lambda: bool(reader.look()))
        got = reader.take_matching(0, 1, 2, None, 4)
        assert got is not None and got[:3] == (1, 2, 4) and bytes(got[3]) == b"pong"
        assert [open_sockets(t) for t in ts] == [1, 1]
        for k in range(20):                         # and on, both ways, in order
            eager(ts[k % 2], 1 - k % 2, 10 + k, bytes([k]) * k)
        progress_until(ts, lambda: len(sinks[0].frames) == 10 and len(sinks[1].frames) == 11)
        assert [tag for _, tag, _ in sinks[0].frames] == list(range(11, 30, 2))
        assert [tag for _, tag, _ in sinks[1].frames] == [1] + list(range(10, 30, 2))
        assert all(data == bytes([tag - 10]) * (tag - 10)
                   for s in sinks for _, tag, data in s.frames if tag >= 10)
        assert [open_sockets(t) for t in ts] == [1, 1]
    finally:
        for t in ts:
            t.close()


def test_a_peer_closing_a_shared_connection_is_lost_at_either_end():
    for closer in (0, 1):                   # the end that opened it, and the one that adopted it
        ts, sinks = transports(2)
        try:
            eager(ts[0], 1, 1, b"a")
            progress_until(ts, lambda: len(sinks[1].frames) == 1)
            eager(ts[1], 0, 2, b"b")
            progress_until(ts, lambda: len(sinks[0].frames) == 1)
            ts[closer].close()
            other = 1 - closer
            progress_until([ts[other]], lambda: bool(sinks[other].lost))
            assert [peer for peer, _ in sinks[other].lost] == [closer]
            failed = []
            eager(ts[other], closer, 3, b"c")       # a new connection: refused, or no answer
            ts[other].send(closer, frames.pack(frames.EAGER, 0, 0, other, 4, 4, 1),
                           [memoryview(b"d")], failed.append)
            progress_until([ts[other]], lambda: bool(failed))
            assert failed[0] and f"rank {closer}" in failed[0]
        finally:
            for t in ts:
                t.close()
