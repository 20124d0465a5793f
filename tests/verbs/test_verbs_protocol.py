"""The verbs transport's protocol against the in-memory RC fabric (fake_verbs.py): slots and
credits, fragments, zero-copy rendezvous writes, the registration cache, failures, progress.

These run anywhere (no RDMA, no pyverbs). The real device runs the same transport in
test_verbs_device.py inside a soft-RoCE guest.
"""
from __future__ import annotations

import gc
import random
import threading
import time
import weakref

import numpy as np
import pytest
from fake_verbs import (
    LOC_LEN_ERR,
    LOC_PROT_ERR,
    REM_ACCESS_ERR,
    REM_INV_REQ_ERR,
    RNR_RETRY_EXC_ERR,
    SUCCESS,
    WR_FLUSH_ERR,
    FakeFabric,
    make_transports,
)
from jobhelpers import connect_all_in_threads

from minimpi.errors import TransportError
from minimpi.transports import frames
from minimpi.transports.base import FrameSink
from minimpi.transports.verbs import (
    ACCESS_LOCAL_WRITE,
    ACCESS_REMOTE_WRITE,
    OP_SEND,
    OP_WRITE,
    OP_WRITE_IMM,
    RESERVED,
    RegistrationCache,
    VerbsConfig,
    VerbsTransport,
    address_of,
    format_endpoint,
    parse_endpoint,
    status_text,
)

TINY = VerbsConfig(slots=4, slot_size=256, rndv_threshold=1024)


class Sink(FrameSink):
    """Records what a transport delivers; ``targets[msg_id]`` overrides a payload's destination."""

    def __init__(self) -> None:
        self.frames = []          # (peer, header, payload bytes or None)
        self.lost = []            # (peer, reason)
        self.targets = {}

    def frame_arrived(self, peer, header):
        if header.kind not in frames.HAS_PAYLOAD:
            self.frames.append((peer, header, None))
            return None
        target = self.targets.get(header.msg_id)
        if target is None:
            target = bytearray(header.length)
        return memoryview(target).cast("B")

    def payload_arrived(self, peer, header, buffer):
        self.frames.append((peer, header, bytes(buffer)))

    def peer_lost(self, peer, reason):
        self.lost.append((peer, reason))


def connect(size=2, config=TINY, **limits):
    fabric = FakeFabric()
    ts = make_transports(size, fabric, config, **limits)
    sinks = [Sink() for _ in ts]
    for t, s in zip(ts, sinks):
        t.attach(s)
    return fabric, ts, sinks


def settle(ts, until=lambda: False, timeout=5.0):
    """Progress every transport (non-blocking rounds) until ``until()`` or nothing moves."""
    deadline = time.monotonic() + timeout
    quiet = 0
    while time.monotonic() < deadline:
        moved = any([t.progress(0) for t in ts])
        if until():
            return
        quiet = 0 if moved else quiet + 1
        if quiet > 3 and not any(t.pending_sends() for t in ts):
            return
    raise AssertionError("transports did not settle")


def eager(msg_id, payload=b"", tag=0, kind=frames.EAGER):
    return frames.pack(kind, 0, 0, 0, tag, msg_id, len(payload))


def payloads(sink, peer=0):
    return [(h.msg_id, data) for p, h, data in sink.frames if p == peer]


# -- the fake itself enforces RC rules (otherwise the tests below could not fail) -------------

def _raw_pair():
    fabric = FakeFabric()
    a, b = fabric.ops(), fabric.ops()
    for ops in (a, b):
        ops.create_cq(64)
    qa, qb = a.create_qp(8, 8, 2), b.create_qp(8, 8, 2)
    from minimpi.transports.verbs import PeerEndpoint
    a.connect_qp(qa, 1, PeerEndpoint("b", 0, b.info.gid, 5, 2, ()), qb)
    b.connect_qp(qb, 2, PeerEndpoint("a", 0, a.info.gid, 5, 1, ()), qa)
    mem_a, mem_b = np.zeros(4096, np.uint8), np.zeros(4096, np.uint8)
    ra = a.register(address_of(memoryview(mem_a)), 4096, ACCESS_LOCAL_WRITE)
    rb = b.register(address_of(memoryview(mem_b)), 4096, ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE)
    return a, b, qa, qb, mem_a, mem_b, ra, rb


def test_fake_enforces_receives_keys_bounds_and_order():
    a, b, qa, qb, mem_a, mem_b, ra, rb = _raw_pair()
    # a send with no posted receive: receiver-not-ready is an error (rnr_retry = 0)
    a.post_send(qa, 1, OP_SEND, [(ra.addr, 8, ra.lkey)])
    assert [c.status for c in a.poll(8)] == [RNR_RETRY_EXC_ERR]
    a, b, qa, qb, mem_a, mem_b, ra, rb = _raw_pair()
    mem_a[:4] = [1, 2, 3, 4]
    b.post_recv(qb, 10, rb.addr, 16, rb.lkey)
    b.post_recv(qb, 11, rb.addr + 16, 16, rb.lkey)
    a.post_send(qa, 1, OP_SEND, [(ra.addr, 4, ra.lkey)])
    a.post_send(qa, 2, OP_WRITE_IMM, [(ra.addr, 4, ra.lkey)], imm=7, remote_addr=rb.addr + 100,
                rkey=rb.rkey)
    got = b.poll(8)                         # delivered at a poll, in posting order
    assert [(c.wr_id, c.status, c.imm) for c in got] == [(10, SUCCESS, 0), (11, SUCCESS, 7)]
    assert list(mem_b[:4]) == list(mem_b[100:104]) == [1, 2, 3, 4]
    # remote key of the wrong domain / out of bounds / without remote write: access error
    b.post_recv(qb, 12, rb.addr, 16, rb.lkey)
    a.post_send(qa, 3, OP_WRITE, [(ra.addr, 8, ra.lkey)], remote_addr=rb.addr + 4090, rkey=rb.rkey)
    assert [c.status for c in a.poll(8)][-1] == REM_ACCESS_ERR
    # once in error, the queue pair flushes everything
    a.post_send(qa, 4, OP_SEND, [(ra.addr, 8, ra.lkey)])
    assert [c.status for c in a.poll(8)] == [WR_FLUSH_ERR]
    a, b, qa, qb, mem_a, mem_b, ra, rb = _raw_pair()
    a.post_send(qa, 1, OP_SEND, [(ra.addr, 8, ra.lkey + 999)])      # bad local key
    assert [c.status for c in a.poll(8)] == [LOC_PROT_ERR]
    a, b, qa, qb, mem_a, mem_b, ra, rb = _raw_pair()
    b.post_recv(qb, 10, rb.addr, 4, rb.lkey)
    a.post_send(qa, 1, OP_SEND, [(ra.addr, 8, ra.lkey)])            # longer than the receive
    assert [c.status for c in a.poll(8)] == [REM_INV_REQ_ERR]
    assert [c.status for c in b.poll(8)] == [LOC_LEN_ERR]


# -- slots, credits, order ----------------------------------------------------------------------

def test_small_frames_arrive_in_order_one_slot_message_each():
    fabric, ts, sinks = connect(config=VerbsConfig())
    sent = []
    for i in range(20):
        ts[0].send(1, eager(i, bytes([i]) * i), [memoryview(bytes([i]) * i)], sent.append)
    settle(ts)
    assert payloads(sinks[1]) == [(i, bytes([i]) * i) for i in range(20)]
    assert sent == [None] * 20
    assert ts[0].stats["sent_FRAME"] == 20 and ts[0].pending_sends() == 0


def test_sender_never_exceeds_the_receivers_posted_slots_and_credits_come_back():
    fabric, ts, sinks = connect()
    n = 60
    for i in range(n):
        ts[0].send(1, eager(i, b"x" * 10), [memoryview(b"x" * 10)], None)
    # The receiver has not run: only its 4 posted slots minus the control reserve were used.
    ts[0].progress(0)
    assert ts[0].stats["sent_FRAME"] == TINY.slots - RESERVED
    assert ts[0].pending_sends() > 0 and ts[0].stats["send_stalls"] > 0
    settle(ts)
    assert [m for m, _ in payloads(sinks[1])] == list(range(n))
    assert sinks[0].lost == sinks[1].lost == []            # never a receiver-not-ready error
    assert ts[1].stats["sent_CREDIT"] > 0                  # returned explicitly: no reverse traffic
    peer = ts[0]._peers[1]
    assert peer.credits + ts[1]._peers[0].to_return == TINY.slots


def test_both_directions_flooded_with_tiny_windows_never_deadlock():
    # Random sizes (slot-sized, fragmented, rendezvous) between 3 ranks, everyone sending
    # before anyone receives: credits for control messages must always get through.
    rng = random.Random(7)
    fabric, ts, sinks = connect(size=3)
    expected = {}
    for r in range(3):
        for i in range(40):
            dest = rng.choice([d for d in range(3) if d != r])
            n = rng.choice([0, 5, 200, 700, 3000, 20000])
            data = bytes(rng.getrandbits(8) for _ in range(min(n, 64))) * (n // 64 + 1)
            data = data[:n]
            msg_id = r * 1000 + i
            expected.setdefault((r, dest), []).append((msg_id, data))
            ts[r].send(dest, eager(msg_id, data), [memoryview(data)], None)
    settle(ts, timeout=20)
    for (src, dest), want in expected.items():
        assert payloads(sinks[dest], src) == want
    assert all(not s.lost for s in sinks)
    assert sum(t.stats["sent_RTS"] for t in ts) > 0 and sum(t.stats["sent_FRAG"] for t in ts) > 0


def test_frame_between_slot_and_threshold_is_fragmented_in_order():
    fabric, ts, sinks = connect()
    data = bytes(range(256)) * 3                        # 768 B: > one slot, < 1 KiB threshold
    ts[0].send(1, eager(1, data), [memoryview(data[:100]), memoryview(data[100:])], None)
    ts[0].send(1, eager(2, b"after"), [memoryview(b"after")], None)
    settle(ts)
    assert payloads(sinks[1]) == [(1, data), (2, b"after")]
    assert ts[0].stats["sent_FRAG_HEAD"] == 1 and ts[0].stats["sent_FRAG"] >= 2
    assert ts[0].stats["sent_RTS"] == 0


# -- rendezvous ------------------------------------------------------------------------------------

def test_large_frame_is_written_straight_into_the_registered_destination():
    fabric, ts, sinks = connect()
    src = np.arange(1 << 17, dtype=np.float64)           # 1 MiB
    dest = np.zeros_like(src)
    sinks[1].targets[5] = dest                           # what a posted receive would return
    done = []
    ts[0].send(1, eager(5, src.tobytes()), [memoryview(src).cast("B")], done.append)
    ts[0].send(1, eager(6, b"next"), [memoryview(b"next")], None)
    ts[0].progress(0)
    assert done == []                     # not handed off before the write completes
    settle(ts)
    assert np.array_equal(dest, src) and done == [None]
    assert [m for m, _ in payloads(sinks[1])] == [5, 6]  # the small frame did not overtake
    assert ts[0].stats["zero_copy_frames"] == 1 and ts[0].stats["sent_FRAG"] == 0
    # the destination array itself was registered and written (no staging copy on either side)
    assert ts[1].cache.covers(memoryview(dest).cast("B"))
    assert ts[0].cache.covers(memoryview(src).cast("B"))
    writes = [(op, n) for _, _, op, n in fabric.log if op in (OP_WRITE, OP_WRITE_IMM)]
    assert sum(n for _, n in writes) == src.nbytes and writes[-1][0] == OP_WRITE_IMM
    assert [op for op, _ in writes].count(OP_WRITE_IMM) == 1


def test_many_segments_and_a_small_max_message_split_into_several_writes():
    fabric, ts, sinks = connect(max_sge=2, max_msg=64 * 1024)
    segs = [np.full(50_000 + i, i, np.uint8) for i in range(5)]
    whole = b"".join(s.tobytes() for s in segs)
    ts[0].send(1, eager(9, whole), [memoryview(s) for s in segs], None)
    settle(ts)
    assert payloads(sinks[1]) == [(9, whole)]
    writes = [n for _, _, op, n in fabric.log if op in (OP_WRITE, OP_WRITE_IMM)]
    assert len(writes) > 3 and max(writes) <= 64 * 1024 and sum(writes) == len(whole)


def test_destination_that_cannot_be_registered_gets_fragments_instead():
    fabric = FakeFabric()
    ts = [VerbsTransport(0, 2, fabric.ops(), TINY),
          VerbsTransport(1, 2, fabric.ops(fail_register_above=64 * 1024), TINY)]
    addresses = [t.listen() for t in ts]
    for t in ts:
        t.set_peers(addresses)
    sinks = [Sink(), Sink()]
    for t, s in zip(ts, sinks):
        t.attach(s)
    data = bytes(range(256)) * 1024                      # 256 KiB
    ts[0].send(1, eager(3, data), [memoryview(data)], None)
    settle(ts)
    assert payloads(sinks[1]) == [(3, data)]
    assert ts[0].stats["grants_refused"] == 1 and ts[1].stats["target_copy_fallbacks"] == 1
    # and a source that cannot be registered is fragmented without asking
    ts[1].send(0, eager(4, data), [memoryview(data)], None)
    settle(ts)
    assert payloads(sinks[0], 1) == [(4, data)]
    assert ts[1].stats["source_copy_fallbacks"] == 1 and ts[1].stats["sent_RTS"] == 0


def test_registration_cache_is_bounded_reuses_covering_regions_and_keeps_arrays_alive():
    fabric = FakeFabric()
    ops = fabric.ops()
    cache = RegistrationCache(ops, max_bytes=3000, max_entries=2)
    a = np.zeros(1000, np.uint8)
    ref = weakref.ref(a)
    e1 = cache.acquire(memoryview(a), ACCESS_LOCAL_WRITE)
    e2 = cache.acquire(memoryview(a)[100:200], ACCESS_LOCAL_WRITE)    # covered: same entry
    assert e1 is e2 and cache.hits == 1 and len(ops.registered) == 1
    cache.release(e1)
    cache.release(e2)
    del a, e1, e2
    gc.collect()
    assert ref() is not None              # still registered, so the memory must stay valid
    b, c = np.zeros(1500, np.uint8), np.zeros(1500, np.uint8)
    eb = cache.acquire(memoryview(b), ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE)
    ec = cache.acquire(memoryview(c), ACCESS_LOCAL_WRITE)          # in use: over budget
    assert len(cache) == 2 and cache.bytes <= 3000
    gc.collect()
    assert ref() is None                  # evicted (least recently used) and released
    # entries in use are never evicted, even over the bound
    d = np.zeros(2000, np.uint8)
    ed = cache.acquire(memoryview(d), ACCESS_LOCAL_WRITE)
    assert len(cache) == 3 and len(ops.registered) == 3
    for e in (eb, ec, ed):
        cache.release(e)
    assert len(cache) <= 2 and cache.bytes <= 3000
    # a local-only registration does not satisfy a remote-write request
    e = cache.acquire(memoryview(d), ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE)
    assert e.reg.access & ACCESS_REMOTE_WRITE


# -- failures ---------------------------------------------------------------------------------------

def test_failed_completion_loses_the_peer_and_names_the_verbs_status():
    fabric, ts, sinks = connect()
    ts[1].ops.destroy_qp(ts[1]._peers[0].qpn)            # rank 1's process "died"
    failures = []
    ts[0].send(1, eager(1, b"hello"), [memoryview(b"hello")], failures.append)
    ts[0].send(1, eager(2, b"queued"), [memoryview(b"queued")], failures.append)
    settle(ts, until=lambda: sinks[0].lost)
    (peer, reason), = sinks[0].lost
    assert peer == 1 and "IBV_WC_RETRY_EXC_ERR" in reason and "rank 1" in reason
    ts[0].send(1, eager(3, b"later"), [memoryview(b"later")], failures.append)
    assert any(f and "RETRY_EXC_ERR" in f for f in failures)
    assert failures[-1] is not None and "connection to rank 1" in failures[-1]
    settle(ts)
    assert ts[0].pending_sends() == 0      # flushed work requests are accounted for


def test_bad_remote_key_is_a_remote_access_error_on_both_sides(monkeypatch):
    fabric, ts, sinks = connect()
    original = VerbsTransport._on_grant

    def corrupt(self, p, xfer, addr, rkey):
        return original(self, p, xfer, addr, rkey + 1)
    monkeypatch.setattr(VerbsTransport, "_on_grant", corrupt)
    data = bytes(5000)
    ts[0].send(1, eager(1, data), [memoryview(data)], None)
    settle(ts, until=lambda: sinks[0].lost and sinks[1].lost)
    assert "IBV_WC_REM_ACCESS_ERR" in sinks[0].lost[0][1]
    assert sinks[1].lost[0][0] == 0 and "WR_FLUSH_ERR" in sinks[1].lost[0][1]


def test_a_closing_peer_says_goodbye_and_later_sends_fail_at_once():
    fabric, ts, sinks = connect(size=3)
    ts[0].send(1, eager(1, b"last words"), [memoryview(b"last words")], None)
    settle(ts)
    ts[0].close()
    settle(ts[1:], until=lambda: sinks[1].lost and sinks[2].lost)
    assert payloads(sinks[1]) == [(1, b"last words")]      # delivered before the goodbye
    assert sinks[1].lost == [(0, "exited (closed its verbs connection)")]
    failures = []
    ts[1].send(0, eager(2), [], failures.append)
    assert failures and "rank 0" in failures[0] and "exited" in failures[0]
    ts[1].send(2, eager(3, b"still fine"), [memoryview(b"still fine")], None)
    settle(ts[1:])
    assert payloads(sinks[2], 1) == [(3, b"still fine")]


def test_close_is_bounded_when_peers_are_already_gone():
    fabric, ts, sinks = connect(size=3)
    ts[1].ops.close()                        # vanished without a goodbye
    ts[2].ops.close()
    start = time.monotonic()
    ts[0].close()
    assert time.monotonic() - start < ts[0].cfg.linger + 0.5
    assert not ts[0].ops.registered          # every registration was released


def test_connect_all_confirms_every_pair_and_names_an_unreachable_peer():
    fabric = FakeFabric()
    ts = [VerbsTransport(r, 3, fabric.ops(), TINY) for r in range(3)]
    addresses = [t.listen() for t in ts]
    for t in ts:
        t.set_peers(addresses)
        t.attach(Sink())
    errors, _ = connect_all_in_threads(ts, timeout=5)
    assert errors == []
    # A peer advertising a GID this fabric does not route to: named at start-up.
    fabric = FakeFabric()
    ts = [VerbsTransport(r, 2, fabric.ops(), TINY) for r in range(2)]
    addresses = [t.listen() for t in ts]
    addresses[1] = addresses[1].replace(ts[1].ops.info.gid, "fe80:0000:0000:0000:0000:0000:0000:dead")
    for t in ts:
        t.set_peers(addresses)
        t.attach(Sink())
    with pytest.raises(TransportError, match=r"rank 0: cannot reach rank 1 .*RETRY_EXC_ERR.*GID"):
        ts[0].connect_all(timeout=5)


def test_addresses_are_checked_and_errors_name_the_rank():
    fabric, ts, sinks = connect()
    t = VerbsTransport(0, 2, fabric.ops(), TINY)
    t.listen()
    with pytest.raises(TransportError, match=r"rank 0: address of rank 1: not a verbs endpoint.*"
                                             r"MINIMPI_TRANSPORT=verbs"):
        t.set_peers(["x", "127.0.0.1:5555"])
    info = ts[0].ops.info
    text = format_endpoint("h", info, 12345, [0, 17, 18])
    ep = parse_endpoint(text, 3)
    assert (ep.host, ep.gid, ep.psn, ep.qpns, ep.mtu) == ("h", info.gid, 12345, (0, 17, 18), info.mtu)
    with pytest.raises(ValueError, match="lists 3 queue pairs for a job of 2"):
        parse_endpoint(text, 2)
    with pytest.raises(ValueError, match="malformed"):
        parse_endpoint("verbs1;host=h;lid=x", 2)


@pytest.mark.parametrize("env, message", [
    ({"MINIMPI_VERBS_SLOTS": "2"}, "MINIMPI_VERBS_SLOTS=2: expected 4..4096"),
    ({"MINIMPI_VERBS_SLOT_SIZE": "16"}, "MINIMPI_VERBS_SLOT_SIZE=16: expected"),
    ({"MINIMPI_VERBS_SLOTS": "many"}, "MINIMPI_VERBS_SLOTS='many' is not a valid number"),
])
def test_settings_from_the_environment_are_validated(env, message):
    with pytest.raises(TransportError, match="rank 3: " + message):
        VerbsConfig.from_env(env, 3)
    assert VerbsConfig.from_env({"MINIMPI_VERBS_SLOT_SIZE": "4KiB"}, 0).slot_size == 4096


def test_status_names_are_those_of_libibverbs():
    assert status_text(12).startswith("IBV_WC_RETRY_EXC_ERR (")
    assert status_text(13).startswith("IBV_WC_RNR_RETRY_EXC_ERR (")
    assert status_text(5).startswith("IBV_WC_WR_FLUSH_ERR (")
    assert status_text(99) == "ibv_wc_status 99"


# -- progress -----------------------------------------------------------------------------------------

def test_progress_sleeps_in_poll_and_wakes_when_a_completion_arrives():
    fabric, ts, sinks = connect()
    cpu = time.process_time()
    start = time.monotonic()
    assert ts[1].progress(0.3) is False
    assert 0.25 < time.monotonic() - start < 1.0
    assert time.process_time() - cpu < 0.1                 # slept, did not spin

    def later():
        time.sleep(0.2)
        ts[0].send(1, eager(1, b"wake"), [memoryview(b"wake")], None)
        ts[0].progress(0)                                  # the fake delivers at a poll
    threading.Thread(target=later).start()
    start = time.monotonic()
    deadline = start + 5
    while not sinks[1].frames and time.monotonic() < deadline:
        ts[1].progress(5.0)
    assert sinks[1].frames and time.monotonic() - start < 2.0
