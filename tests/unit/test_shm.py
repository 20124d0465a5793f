"""The shared-memory transport at the frame level, and what it relies on: the router that
picks it per peer and the progress policy that spins before sleeping.

The engine-level conformance suite runs over shm too (tests/unit/test_p2p_engine.py, params
``shm`` and ``routed``); these tests aim at what only shm has: ring wrap-around, payloads
streamed through a ring smaller than they are, payloads read by reference, wake-ups of a
sleeping rank, peers that close or are killed, and the segments' names on disk.
"""
from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from jobhelpers import progress_until, wire

from minimpi import errors
from minimpi.p2p import progress
from minimpi.p2p.progress import ProgressPolicy
from minimpi.runtime.inproc import run_threads
from minimpi.transports import frames, membarrier, shm
from minimpi.transports.base import FrameSink
from minimpi.transports.router import RouterTransport, parse_address
from minimpi.transports.shm import ShmTransport, cleanup_job
from minimpi.transports.tcp import TcpTransport


class Sink(FrameSink):
    """Records every frame (with its payload) and every lost peer, in order."""

    def __init__(self) -> None:
        self.events = []

    def frame_arrived(self, peer, header):
        if header.kind in frames.HAS_PAYLOAD:
            return memoryview(bytearray(header.length))
        self.events.append(("frame", peer, header.msg_id, None))
        return None

    def payload_arrived(self, peer, header, buffer):
        self.events.append(("frame", peer, header.msg_id, bytes(buffer)))

    def peer_lost(self, peer, reason):
        self.events.append(("lost", peer, reason, None))


def job() -> str:
    return "test" + os.urandom(6).hex()


def pair(ring=4096, cma=True, size=2, asymmetric=(True, True)):
    """``size`` shm transports in this process (ranks as objects), wired and mapped.
    ``asymmetric``: per rank, whether it may use the process-wide barrier (else it fences)."""
    name = job()
    ts = [ShmTransport(r, size, name, ring=ring, cma=cma, asymmetric=asymmetric[r % 2])
          for r in range(size)]
    sinks = [Sink() for _ in ts]
    wire(ts, sinks)
    return ts, sinks, name


def close_all(ts):
    for t in ts:
        t.close()


def payload_of(i: int, n: int) -> bytes:
    return bytes((i * 7 + k) % 251 for k in range(n))


def test_frames_of_every_size_wrap_around_a_small_ring_in_order():
    # 40 frames of sizes that put headers at every offset near the end of a 512-byte ring,
    # and payloads larger than the ring (streamed through it in pieces)
    ts, sinks, _ = pair(ring=512)
    try:
        sizes = [0, 1, 7, 31, 32, 33, 100, 480, 511, 512, 513, 1500, 5000] * 3 + [3, 64, 200, 9]
        sent = []
        for i, n in enumerate(sizes):
            header = frames.pack(frames.EAGER, 0, 0, 0, 0, i, n)
            data = payload_of(i, n)
            ts[0].send(1, header, [memoryview(data[:n // 3]), memoryview(data[n // 3:])],
                       lambda why, i=i: sent.append((i, why)))
        progress_until(ts, lambda: len(sinks[1].events) == len(sizes))
        assert [e[2] for e in sinks[1].events] == list(range(len(sizes)))
        assert all(e[3] == payload_of(e[2], sizes[e[2]]) for e in sinks[1].events)
        assert sent == [(i, None) for i in range(len(sizes))]
        assert ts[0].pending_sends() == 0
    finally:
        close_all(ts)


@pytest.mark.parametrize("cma", [True, False])
def test_large_data_frame_by_reference_completes_only_once_read(cma):
    ts, sinks, _ = pair(ring=4096, cma=cma)
    try:
        n = 3 * shm.CMA_MIN + 5
        data = payload_of(3, n)
        parts = [memoryview(data[:1000]), memoryview(data[1000:n - 7]), memoryview(data[n - 7:])]
        done = []
        ts[0].send(1, frames.pack(frames.DATA, 0, 0, 0, 0, 9, n), parts, done.append)
        if cma:   # only the descriptor went into the ring: nothing is complete before the read
            assert done == [] and ts[0].pending_sends() == 1
        progress_until(ts, lambda: done == [None])
        assert sinks[1].events == [("frame", 0, 9, data)]
        assert ts[0].pending_sends() == 0
    finally:
        close_all(ts)


def test_descriptor_is_used_exactly_when_the_reader_can_read_us():
    ts, _, _ = pair(ring=4096, cma=True)
    try:
        out = ts[0]._out[1]
        assert out.ctl[shm.R_CMA] == 1       # rank 1 probed rank 0's memory successfully
        header = frames.pack(frames.DATA, 0, 0, 0, 0, 1, shm.CMA_MIN)
        assert ts[0]._frame(out, header, [memoryview(bytes(shm.CMA_MIN))], None).token
        small = frames.pack(frames.DATA, 0, 0, 0, 0, 1, 100)
        assert not ts[0]._frame(out, small, [memoryview(bytes(100))], None).token
        eager = frames.pack(frames.EAGER, 0, 0, 0, 0, 1, shm.CMA_MIN)   # eager: always inline
        assert not ts[0]._frame(out, eager, [memoryview(bytes(shm.CMA_MIN))], None).token
    finally:
        close_all(ts)


@pytest.mark.parametrize("asymmetric", [(True, True), (True, False), (False, False)])
def test_a_sleeping_reader_is_woken_by_a_frame_and_a_blocked_writer_by_free_space(asymmetric):
    ts, sinks, _ = pair(ring=1024, asymmetric=asymmetric)
    try:
        woke = []

        def reader():
            start = time.monotonic()
            ts[1].progress(5.0)       # sleeps: nothing is there yet
            woke.append(time.monotonic() - start)

        th = threading.Thread(target=reader)
        th.start()
        time.sleep(0.2)
        ts[0].send(1, frames.pack(frames.EAGER, 0, 0, 0, 0, 1, 3), [memoryview(b"abc")], None)
        th.join(5)
        assert woke and woke[0] < 2.0, woke          # woken, not timed out
        assert sinks[1].events[-1][3] == b"abc"
        # Fill the ring: the writer blocks (sleeps) until the reader frees space.
        big = payload_of(1, 10_000)
        done = []
        ts[0].send(1, frames.pack(frames.EAGER, 0, 0, 0, 0, 2, len(big)), [memoryview(big)], done.append)
        assert not done

        def writer():
            deadline = time.monotonic() + 5
            while not done and time.monotonic() < deadline:
                ts[0].progress(5.0)

        th = threading.Thread(target=writer)
        start = time.monotonic()
        th.start()
        time.sleep(0.2)
        while len(sinks[1].events) < 2 and time.monotonic() - start < 5:
            ts[1].progress(0.05)
        th.join(5)
        assert done == [None] and sinks[1].events[-1][3] == big
        assert time.monotonic() - start < 3.0
    finally:
        close_all(ts)


BARRIER = pytest.mark.skipif(not membarrier.supported(),
                             reason="this kernel offers no membarrier(GLOBAL_EXPEDITED)")


@BARRIER
@pytest.mark.parametrize("asymmetric", [(True, True), (True, False), (False, True),
                                        (False, False)])
def test_publishes_skip_the_fence_only_where_both_ranks_barrier_before_they_sleep(
        asymmetric, monkeypatch):
    ts, sinks, _ = pair(asymmetric=asymmetric)
    try:
        both = all(asymmetric)
        assert [t.asymmetric for t in ts] == list(asymmetric)
        for me, t in enumerate(ts):
            out, inc = t._out[1 - me], t._in[0]
            assert (out.fenced, inc.fenced) == (not both, not both)
            # what a segment tests before it calls fence() (Transport.needs_fence)
            assert t.needs_fence == (not both) and t.host_memory() is t
        # the collectives' fence (a store a peer may wait for, then a look at who sleeps)
        # is none between two such ranks either
        for t in ts:
            fences = []
            monkeypatch.setattr(t, "_fence_in", lambda: fences.append(1))
            monkeypatch.setattr(t, "_fence_out", lambda: None)
            t.fence()
            t.wake_peers([])
            t.wake_peers([], fenced=True)
            assert len(fences) == (0 if both else 2)
            monkeypatch.undo()
        # the rank that may barrier does so before each sleep (its peers may not have
        # fenced); the other fences, as every rank does without the barrier
        barriers = []
        monkeypatch.setattr(shm.membarrier, "barrier", lambda: barriers.append(1))
        for t in ts:
            barriers.clear()
            assert t.prepare_sleep()
            t.end_sleep()
            assert len(barriers) == int(t.asymmetric)
        # and frames still go both ways, fenced or not, through both writers
        for me, t in enumerate(ts):
            t.send(1 - me, frames.pack(frames.EAGER, 0, 0, 0, me, 5, 2), [memoryview(b"hi")],
                   None)
            assert t._out[1 - me].send_eager(0, 0, me, 6, 9, [memoryview(b"yo")], 2)
        progress_until(ts, lambda: all(len(s.events) >= 2 for s in sinks))
        assert [[e[3] for e in s.events] for s in sinks] == [[b"hi", b"yo"]] * 2
    finally:
        close_all(ts)


def test_without_the_barrier_every_publish_fences():
    ts, _, _ = pair(asymmetric=(False, False))
    try:
        assert not any(t.asymmetric for t in ts)
        assert all(t._out[1 - me].fenced and t._in[0].fenced for me, t in enumerate(ts))
    finally:
        close_all(ts)


def test_frames_sent_before_a_peer_closed_arrive_then_the_peer_is_lost():
    ts, sinks, _ = pair()
    try:
        ts[1].send(0, frames.pack(frames.EAGER, 0, 0, 0, 0, 5, 2), [memoryview(b"hi")], None)
        ts[1].close()
        start = time.monotonic()
        while len(sinks[0].events) < 2 and time.monotonic() - start < 2:
            ts[0].progress(0.5)
        assert time.monotonic() - start < 1.0     # noticed at once, not after a timeout
        assert [e[0] for e in sinks[0].events] == ["frame", "lost"]
        assert sinks[0].events[1][1:3] == (1, "exited")
        failed = []
        ts[0].send(1, frames.pack(frames.EAGER, 0, 0, 0, 0, 6, 0), [], failed.append)
        assert failed and "rank 1 exited" in failed[0]
    finally:
        close_all(ts)


def test_segments_are_unlinked_once_every_peer_mapped_them_and_cleanup_removes_the_rest():
    name = job()
    ts = [ShmTransport(r, 3, name, ring=4096) for r in range(3)]
    try:
        for t in ts:
            t.attach(Sink())
        addresses = [t.listen() for t in ts]
        files = sorted(glob.glob(f"/dev/shm/minimpi-{name}-*"))
        # the inboxes, and the private directory of the wake-up sockets
        assert [os.path.basename(f) for f in files] == \
            [f"minimpi-{name}-{r}" for r in range(3)] + [f"minimpi-{name}-wake"]
        assert os.stat(f"/dev/shm/minimpi-{name}-wake").st_mode & 0o777 == 0o700
        for t in ts:
            t.set_peers(addresses)
        for t in ts:
            t.progress(0.01)
        assert glob.glob(f"/dev/shm/minimpi-{name}-*") == []
    finally:
        close_all(ts)
    # a job whose ranks never got as far as mapping each other (killed during start-up)
    name = job()
    t = ShmTransport(0, 2, name, ring=4096)
    t.listen()
    assert sorted(cleanup_job(name)) == [f"/dev/shm/minimpi-{name}-0",
                                         f"/dev/shm/minimpi-{name}-wake"]
    assert glob.glob(f"/dev/shm/minimpi-{name}-*") == []
    t.close()
    assert cleanup_job("") == [] and cleanup_job("../etc") == []


PEER = r'''
import sys, time
from minimpi.p2p.engine import Engine
from minimpi.transports.shm import ShmTransport
job, mode = sys.argv[1], sys.argv[2]
t = ShmTransport(1, 2, job, ring=65536, cma=(mode == "rendezvous"))
eng = Engine(1, 2, t, eager_limit=1024 if mode == "rendezvous" else 1 << 30)
print(t.listen(), flush=True)
t.set_peers([sys.stdin.readline().strip(), None])
eng.register_context(0, (0, 1))
data = bytes(4 << 20)
req = eng.isend(0, 0, 1, 7, [memoryview(data)], len(data))   # rendezvous, or streaming
t.progress(0)
print("sent", flush=True)
time.sleep(60)
'''


@pytest.mark.parametrize("mode", ["rendezvous", "streaming"])
def test_a_peer_killed_mid_message_fails_the_receive_with_a_clear_error(mode):
    from minimpi.p2p.engine import Engine
    name = job()
    t = ShmTransport(0, 2, name, ring=65536)
    eng = Engine(0, 2, t)
    address = t.listen()
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(PEER), name, mode],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        peer_address = child.stdout.readline().strip()
        t.set_peers([address, peer_address])
        child.stdin.write(address + "\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "sent"
        eng.register_context(0, (0, 1))
        target = bytearray(4 << 20)
        req = eng.irecv(0, 1, 7, memoryview(target), False, ("Recv", "source", 1, 7, "COMM_WORLD"))
        eng.poll()                 # matched: a CTS went out, or the first 64 KiB came in
        os.kill(child.pid, signal.SIGKILL)
        child.wait(5)
        start = time.monotonic()
        eng.wait_for(req, timeout=10)
        with pytest.raises(errors.PeerLostError, match=r"Recv\(source=1, tag=7\).*world rank 1 is gone \(exited\)"):
            req.wait()
        assert time.monotonic() - start < 2.0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        t.close()
        cleanup_job(name)
    assert glob.glob(f"/dev/shm/minimpi-{name}-*") == []


# --------------------------------------------------------------------------- the router
def test_router_sends_through_shm_on_the_same_host_and_tcp_between_hosts():
    def body(comm):
        return comm.allgather(comm.rank)

    assert run_threads(4, body, transport="routed") == [list(range(4))] * 4
    name, secret = job(), os.urandom(32)
    ts = [RouterTransport(r, 3, [ShmTransport(r, 3, name, ring=4096), TcpTransport(r, 3, secret)],
                          host="a" if r < 2 else "b") for r in range(3)]
    try:
        for t in ts:
            t.attach(Sink())
        addresses = [t.listen() for t in ts]
        assert parse_address(addresses[2])[0] == "b" and set(parse_address(addresses[2])[1]) == {"shm", "tcp"}
        for t in ts:
            t.set_peers(addresses)
        assert ts[0].routes() == [None, "shm", "tcp"]
        assert ts[2].routes() == ["tcp", "tcp", None]
        assert ts[0].local_ranks == [0, 1] and ts[2].local_ranks == [2]
        # a segment's fences and wake-ups go to the shared-memory member itself
        # (rank 2, alone on its host, keeps no shared-memory member: none, and no fence)
        for t in ts:
            member = t.member("shm")
            assert t.host_memory() is member
            assert t.needs_fence == (member is not None and member.needs_fence)
        assert ts[2].member("shm") is None and ts[0].host_memory() is not None
    finally:
        close_all(ts)


def test_shm_alone_cannot_reach_another_host_and_says_so():
    name = job()
    ts = [RouterTransport(r, 2, [ShmTransport(r, 2, name, ring=4096)], host=f"h{r}")
          for r in range(2)]
    try:
        addresses = [t.listen() for t in ts]
        with pytest.raises(errors.TransportError, match="no transport reaches rank 1 on host h1"):
            ts[0].set_peers(addresses)
    finally:
        close_all(ts)
        cleanup_job(name)


# --------------------------------------------------------------------------- progress policy
@pytest.mark.parametrize("ranks, cores, mode", [(2, 2, "spin"), (1, 4, "spin"), (3, 2, "yield"),
                                                (4, 2, "yield"), (16, 2, "yield"),
                                                (32, 2, "yield"), (33, 2, "block"),
                                                (64, 2, "block")])
def test_auto_spins_only_while_ranks_have_cores(ranks, cores, mode):
    assert ProgressPolicy.choose("auto", ranks, cores).mode == mode


def test_a_crowded_host_yields_longer_and_an_asked_budget_stays():
    from minimpi.p2p.progress import CROWDED, MAX_SPIN, SPIN_BUDGET
    assert ProgressPolicy.choose("auto", CROWDED * 2, 2).max_spin == MAX_SPIN
    assert ProgressPolicy.choose("auto", 5, 2).max_spin == MAX_SPIN       # a futures pool
    assert ProgressPolicy.choose("auto", 32, 2).max_spin == pytest.approx(MAX_SPIN * 16 / CROWDED)
    assert ProgressPolicy.choose("auto", 32, 2, max_spin=1e-3).max_spin == 1e-3
    assert ProgressPolicy.choose("auto", 2, 2).max_spin == SPIN_BUDGET   # spin: a core each
    assert ProgressPolicy.choose("spin", 8, 2).max_spin == SPIN_BUDGET
    assert ProgressPolicy.choose("yield", 2, 2).max_spin == MAX_SPIN
    assert ProgressPolicy.choose("block", 1, 64).mode == "block"
    assert ProgressPolicy.choose("spin", 64, 1).mode == "spin"


def test_bound_ranks_count_the_ranks_on_their_own_cpus():
    # --bind-to core: a rank alone on its core spins; 16 on one core yield as 32 on two do
    from minimpi.p2p.progress import CROWDED, MAX_SPIN, set_binding
    try:
        set_binding((1, 1))
        alone = ProgressPolicy.from_env({}, 2)
        assert alone.mode == "spin"
        assert alone.reason == "auto: 1 rank bound to this rank's 1 CPU"
        set_binding((16, 1))
        crowded = ProgressPolicy.from_env({}, 32)
        assert crowded.mode == "yield"
        assert crowded.max_spin == pytest.approx(MAX_SPIN * 16 / CROWDED)
        assert crowded.reason == "auto: 16 ranks bound to this rank's 1 CPU"
        assert ProgressPolicy.from_env({"MINIMPI_PROGRESS": "block"}, 2).mode == "block"
    finally:
        set_binding(None)
    # not bound: the host's ranks on the cores this process may use
    assert ProgressPolicy.from_env({}, 2).reason.startswith("auto: 2 ranks on this host, ")


def test_progress_setting_errors_name_the_choices():
    with pytest.raises(errors.ArgumentError, match="auto, spin, yield, block"):
        ProgressPolicy.choose("fast", 2, 2)
    with pytest.raises(errors.ArgumentError, match="MINIMPI_SPIN_US"):
        ProgressPolicy.from_env({"MINIMPI_SPIN_US": "x"}, 2)


class _Clocked:
    """A transport whose data arrives ``delay`` seconds after each wait starts."""

    def __init__(self, delay):
        self.delay = delay
        self.calls = []
        self.start = None

    def progress(self, timeout):
        now = time.perf_counter()
        if self.start is None:
            self.start = now
        self.calls.append(timeout)
        if now - self.start >= self.delay:
            self.start = None
            return True
        if timeout:
            time.sleep(max(0.0, min(timeout, self.start + self.delay - now)))
            self.start = None
            return True
        return False


def test_block_never_polls_and_spin_catches_early_replies_without_sleeping():
    block = _Clocked(0.0)
    ProgressPolicy("block").wait(block, 0.25)
    assert block.calls == [0.25]
    quick = _Clocked(20e-6)
    policy = ProgressPolicy("spin", max_spin=0.01)
    assert policy.wait(quick, 0.25)
    assert 0.25 not in quick.calls and quick.calls[0] == 0


class _Silent:
    """A transport on which nothing ever arrives (what a wait on shared memory sees)."""

    def __init__(self):
        self.calls = []

    def progress(self, timeout):
        self.calls.append(timeout)
        return False


def test_spin_ends_when_memory_a_peer_writes_is_ready_without_a_message():
    # a segment collective's step waits for memory, not for a frame: the spin looks at
    # what it waits for too, and ends with it - it used to spin its whole budget (up to
    # 3 ms, then a sleep's check) for data that came in microseconds
    for mode in ("spin", "yield"):
        silent = _Silent()
        looks = []

        def ready():
            looks.append(1)
            return len(looks) >= 3

        policy = ProgressPolicy(mode, max_spin=30.0)
        assert policy.wait(silent, 0.25, ready)
        assert silent.calls == [0, 0, 0] and len(looks) == 3


def test_spin_budget_shrinks_when_waits_are_long_and_grows_back_when_short():
    # real clocks: a rank descheduled for milliseconds in the middle (a loaded 2-core CI
    # machine) sees other delays than the ones set up, so the scenario gets three tries
    for attempt in range(3):
        policy = ProgressPolicy("spin", max_spin=2e-3)   # long enough for a loaded machine
        late = _Clocked(0.03)                  # replies come long after any spin
        for _ in range(progress.WINDOW):
            policy.wait(late, 0.25)
        assert policy.spin == pytest.approx(policy.min_spin)
        soon = _Clocked(1e-3)                  # soon after the spin gave up: a longer one pays
        for _ in range(progress.PAYING):
            policy.wait(soon, 0.25)
        if policy.spin == policy.max_spin:     # back, whatever the wake-up cost
            return
    assert policy.spin == policy.max_spin


def test_one_long_wait_does_not_collapse_the_spin_budget():
    """A long Barrier (or a peer descheduled once) among quick replies leaves the budget as it
    was: the next quick replies are still caught by spinning, not through a wake-up."""
    policy = ProgressPolicy("spin", max_spin=200e-6)
    for _ in range(5):
        policy.wait(_Clocked(0.005), 0.25)     # a Barrier while another rank computes
        assert policy.spin == policy.max_spin
        for _ in range(3):
            policy.wait(_Clocked(20e-6), 0.25) # quick replies, caught while spinning
    assert policy.spin == policy.max_spin


class _Woken:
    """A transport on which no frame ever arrives, whose sleeps end ``delay`` seconds in:
    what a wait on a shared segment sees when the peer that publishes wakes it."""

    def __init__(self, delay):
        self.delay = delay
        self.woke = False          # whether a sleep ended (the peer published and woke it)

    def progress(self, timeout):
        if timeout:
            time.sleep(self.delay)
            self.woke = True
        return False


def test_a_wait_on_memory_woken_soon_pays_as_a_message_would():
    """A segment wait that slept and was woken soon after its spin gave up would have been
    caught by a longer spin: it brings the budget back as a message that came then does (it
    used to count as unpaid, so ranks that only meet in a segment, once at the minimum,
    slept through every wait)."""
    for attempt in range(3):
        policy = ProgressPolicy("yield", max_spin=2e-3)
        late = _Clocked(0.03)
        for _ in range(progress.WINDOW):
            policy.wait(late, 0.25)
        assert policy.spin == pytest.approx(policy.min_spin)
        for _ in range(progress.PAYING):
            woken = _Woken(1e-3)
            policy.wait(woken, 0.25, lambda: woken.woke)   # its data comes with the wake-up
        if policy.spin == policy.max_spin:
            break
    assert policy.spin == policy.max_spin
    # a sleep that ends with the wait not over (a spurious wake-up) does not pay
    policy = ProgressPolicy("yield", max_spin=2e-3)
    for _ in range(progress.WINDOW):
        policy.wait(_Woken(1e-4), 0.25, lambda: False)
    assert policy.spin == policy.min_spin


class _Sleeps:
    """A transport on which nothing arrives while polled; a sleep ends the wait. Records when
    the first sleep began, after the wait's start."""

    def __init__(self):
        self.start = time.perf_counter()
        self.slept_after = None

    def progress(self, timeout):
        if timeout:
            self.slept_after = time.perf_counter() - self.start
            return True
        return False


def test_a_wait_on_a_large_transfer_yields_briefly_and_leaves_the_budget_alone():
    """A yielding rank waiting for a large transfer sleeps after BULK_SPIN, not after the
    milliseconds small waits get; those waits neither read nor change the budget that follows
    whether spinning pays for small ones. A spinning rank (a core each) waits alike for both."""
    for attempt in range(3):
        policy = ProgressPolicy("yield", max_spin=50e-3)
        assert policy.bulk_spin == progress.BULK_SPIN
        late = _Sleeps()
        policy.wait(late, 0.25, bulk=True)
        if late.slept_after < 10e-3:          # (a descheduled test thread: try again)
            break
    assert late.slept_after < 10e-3
    for _ in range(progress.WINDOW):
        policy.wait(_Clocked(0.03), 0.25, bulk=True)
    assert policy.recent == progress._ALL and policy.spin == policy.max_spin
    small = _Sleeps()
    policy.wait(small, 0.25)
    assert small.slept_after >= 50e-3
    policy = ProgressPolicy("yield", max_spin=2e-3)
    for _ in range(progress.WINDOW):           # small waits that outlast the spin turn it
        policy.wait(_Clocked(0.03), 0.25)      # down; a large transfer's budget stays
    assert policy.spin == policy.min_spin
    late = _Sleeps()
    policy.wait(late, 0.25, bulk=True)
    assert policy.spin == policy.min_spin and late.slept_after >= progress.BULK_SPIN
    spinning = ProgressPolicy("spin", max_spin=0.01)
    assert spinning.bulk_spin is None and ProgressPolicy("block").bulk_spin is None
    for _ in range(progress.WINDOW):           # a spinning rank's large waits count as any
        spinning.wait(_Clocked(0.03), 0.25, bulk=True)
    assert spinning.spin == spinning.min_spin
    assert ProgressPolicy("yield", max_spin=10e-6).bulk_spin == 10e-6


def test_spinning_stops_where_it_never_pays():
    """A rank whose peer is rarely running (a busy machine) or whose messages come late
    sleeps at once after a few waits, instead of burning the CPU it will need."""
    policy = ProgressPolicy("spin", max_spin=2e-3)
    late = _Clocked(0.03)
    for i in range(progress.WINDOW):
        policy.wait(late, 0.25)
    assert policy.spin == policy.min_spin
    policy.wait(_Clocked(1e-3), 0.25)          # one quick reply among late ones: not enough
    policy.wait(late, 0.25)
    assert policy.spin == policy.min_spin


# --------------------------------------------------------------------------- start-up failures
def test_a_full_dev_shm_is_a_clear_error_at_start_up_not_a_crash_later(monkeypatch):
    import errno

    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    name = job()
    t = ShmTransport(0, 2, name, ring=4096)
    try:
        # the control page is reserved before it is written: the first write cannot SIGBUS
        with pytest.raises(errors.TransportError,
                           match=r"rank 0: cannot create its shared-memory inbox /dev/shm/.*"
                                 r"No space left on device; /dev/shm has \d+ MiB free of \d+ MiB;"
                                 r".* or run with --transport tcp"):
            t.listen()
        assert glob.glob(f"/dev/shm/minimpi-{name}-[0-9]*") == []
    finally:
        t.close()
        cleanup_job(name)


def test_auto_falls_back_to_tcp_where_shared_memory_cannot_run(monkeypatch):
    from minimpi import transports
    from minimpi.runtime.bootstrap import BootInfo

    info = BootInfo(rank=0, size=2, secret=b"s" * 32, job_id=job(), bind_host="127.0.0.1",
                    coordinator=None, env={})
    monkeypatch.setattr(shm, "available", lambda directory=shm.SHM_DIR: "no /dev/shm here")
    router = transports.create("auto", info, "this-host")
    try:
        assert router.name == "tcp"
        assert parse_address(router.listen())[1].keys() == {"tcp"}
    finally:
        router.close()
    with pytest.raises(errors.TransportError, match="cannot use the shared-memory transport: no /dev/shm here"):
        transports.create("shm", info, "this-host")
    with pytest.raises(errors.TransportError, match="unknown transport 'udp'.*available: auto, tcp, shm"):
        transports.create("udp", info, "this-host")


def test_same_host_name_but_another_dev_shm_or_network_namespace_goes_over_tcp():
    # (containers on one kernel, or network-namespace "hosts" that share a host name)
    name, secret = job(), os.urandom(32)
    ts = [RouterTransport(r, 2, [ShmTransport(r, 2, name, ring=4096), TcpTransport(r, 2, secret)],
                          "same-host") for r in range(2)]
    try:
        for t in ts:
            t.attach(Sink())
        addresses = [t.listen() for t in ts]
        host, offered = parse_address(addresses[1])
        pid, probe, key = offered["shm"].split(",")
        assert ts[0].members[0].reaches(offered["shm"])
        addresses[1] = addresses[1].replace(f"shm={offered['shm']}", f"shm={pid},{probe},elsewhere")
        ts[0].set_peers(addresses)
        assert ts[0].routes() == [None, "tcp"]
    finally:
        close_all(ts)
        cleanup_job(name)


def test_spin_until_looks_for_the_budget_and_yields_after_the_first_moments():
    from minimpi.p2p.progress import SPIN_ALONE
    policy = ProgressPolicy("spin", max_spin=0.01)
    assert policy.yield_after == SPIN_ALONE and ProgressPolicy("yield").yield_after == 0
    at = time.perf_counter() + 0.002
    assert policy.spin_until(lambda: time.perf_counter() >= at)       # came true in time
    start = time.perf_counter()
    assert not policy.spin_until(lambda: False)                        # the budget ran out
    assert 0.009 < time.perf_counter() - start < 1.0
    looks = []
    assert not ProgressPolicy("block").spin_until(lambda: looks.append(1))   # one look
    assert looks == [1]
