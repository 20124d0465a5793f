"""The verbs transport on a real RDMA device (soft-RoCE in the QEMU guest of run-in-guest.sh).

Skips, with the probe's one-line reason, where no usable device is present. In the guest:
the p2p conformance suite with ranks as threads, every collective at p = 2 and 4 and some
examples as real ``minimpi run`` jobs, and the properties only a device can show (zero-copy
writes into the destination array, failed completions naming their status, progress that
never parks a thread inside pyverbs).
"""
from __future__ import annotations

import importlib.util
import pathlib
import threading
import time

import numpy as np
import pytest
from conformance import conformance_fixture, conformance_tests
from jobhelpers import marker_args, progress_until, run_minimpi

from minimpi.transports import frames, verbs
from minimpi.transports.base import FrameSink
from minimpi.transports.verbs import PyverbsOps, VerbsConfig, VerbsTransport

REASON = verbs.probe()
if REASON is not None:      # one skip for the module, with the probe's one-line reason
    pytest.skip(f"no usable RDMA device: {REASON}", allow_module_level=True)

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
TINY = VerbsConfig(slots=4, slot_size=256, rndv_threshold=1024, reg_cache_entries=4)


def real_transports(size, config=None):
    ts = [VerbsTransport(r, size, PyverbsOps(r), config) for r in range(size)]
    addresses = [t.listen() for t in ts]
    for t in ts:
        t.set_peers(addresses)
    return ts


# -- the conformance suite, ranks as threads of this process --------------------------------------

TESTS = conformance_tests()
globals().update(TESTS)
run = conformance_fixture(lambda size, name: real_transports(size, {"default": None, "tiny": TINY}[name]),
                          ["default", "tiny"], run_timeout=280)


# -- real jobs: every collective, and examples -----------------------------------------------------

def _collectives_program() -> str:
    path = ROOT / "tests" / "integration" / "test_collectives_tcp.py"
    spec = importlib.util.spec_from_file_location("collectives_over_tcp", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # ...and show which transport carried it, and that rendezvous frames went zero-copy.
    return module.PROGRAM + (
        "\nfrom minimpi.runtime import world\n"
        "t = world.world_state().engine.transport\n"
        "t = t.member('verbs') or t\n"
        "print(f'rank {rank}: transport {t.name} zero-copy frames {t.stats[\"zero_copy_frames\"]}')\n"
    ) + ONE_SIDED


VERBS = ["-x", "MINIMPI_TRANSPORT=verbs"]
SMALL_WINDOWS = ["-x", "MINIMPI_VERBS_SLOTS=4", "-x", "MINIMPI_VERBS_SLOT_SIZE=256",
                 "-x", "MINIMPI_VERBS_RNDV_THRESHOLD=1KiB"]


# Every job in the guest is emulated instruction by instruction (a 4-rank job costs about a
# minute of CI): p = 2 with the default windows, and p = 4 with windows small enough that
# most collective messages go through rendezvous; the same program runs at p = 4 over TCP
# and shared memory in tests/integration.
@pytest.mark.parametrize("size, settings", [(2, []), (4, SMALL_WINDOWS)],
                         ids=["p2", "p4-small-windows"])
def test_every_collective_and_algorithm_over_verbs(size, settings, write_script, job_marker):
    script = write_script("all_collectives.py", _collectives_program())
    r = run_minimpi("-n", str(size), *VERBS, *settings, *marker_args(job_marker), script,
                    timeout=280)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [l for l in r.stdout.splitlines() if "collective calls correct" in l]
    assert len(lines) == size
    counts = {int(l.split(":")[1].split()[0]) for l in lines}
    assert len(counts) == 1 and counts.pop() > 30
    used = [l for l in r.stdout.splitlines() if "transport verbs" in l]
    assert len(used) == size, r.stdout
    if settings:
        assert any(int(l.rsplit(" ", 1)[1]) > 0 for l in used), r.stdout
    # the one-sided part: contiguous Put/Get were RDMA writes and reads (2 of each per rank)
    rma = [l for l in r.stdout.splitlines() if "one-sided over" in l]
    assert len(rma) == size and all("over verbs: rdma writes 2 reads 2" in l for l in rma), \
        r.stdout


# a few of the examples as they are (every example runs over TCP and shared memory in
# tests/integration; here each job costs emulated minutes)
@pytest.mark.parametrize("size, program", [
    (2, "hello.py"), (4, "data_parallel.py"), (4, "expert_parallel.py"),
])
def test_examples_run_over_verbs(size, program, job_marker):
    r = run_minimpi("-n", str(size), *VERBS, *marker_args(job_marker), str(EXAMPLES / program),
                    timeout=280)
    assert r.returncode == 0, f"{program} failed:\n{r.stdout}\n{r.stderr}"


def test_a_device_that_does_not_exist_fails_the_job_naming_it(write_script, job_marker):
    script = write_script("barrier.py", """
        from minimpi import MPI
        MPI.COMM_WORLD.Barrier()
    """)
    r = run_minimpi("-n", "2", *VERBS, "-x", "MINIMPI_VERBS_DEVICE=nonexistent0",
                    *marker_args(job_marker), script, timeout=120)
    assert r.returncode != 0
    assert "MINIMPI_VERBS_DEVICE='nonexistent0' not found (devices: " in r.stderr, r.stderr


#: appended to the collectives job (one job fewer: every emulated job costs about a minute):
#: Put/Get under Fence and Lock/Flush to the ring neighbours of a Win.Create window, values
#: checked in the ranks, and the verbs transport's counts of RDMA writes and reads printed
ONE_SIDED = """

def one_sided_over_rdma():
    import numpy as np
    from minimpi import MPI
    from minimpi.runtime import world
    comm = MPI.COMM_WORLD
    r, size = comm.rank, comm.size
    right, left = (r + 1) % size, (r - 1) % size
    mem = np.full(16, -1, "i")
    win = MPI.Win.Create(mem, 4, None, comm)
    win.Fence()                                         # fence: Put, then Get what was put
    win.Put(np.array([r, 10 * r], "i"), right, 1)
    win.Fence()
    got = np.zeros(2, "i")
    win.Get(got, right, 1)
    win.Fence()
    assert mem[1:3].tolist() == [left, 10 * left] and got.tolist() == [r, 10 * r], (mem, got)
    block = np.arange(4, dtype="i") + 100 * r           # passive target: Lock, Put, Flush, Get
    win.Lock(right, MPI.LOCK_EXCLUSIVE)
    win.Put(block, right, 4)
    win.Flush(right)
    back = np.zeros(4, "i")
    win.Get(back, right, 4)
    win.Unlock(right)
    assert back.tolist() == block.tolist(), back
    comm.Barrier()
    assert mem[4:8].tolist() == (np.arange(4) + 100 * left).tolist(), mem
    win.Lock_all()                                      # an accumulate stays target-served
    win.Accumulate(np.array([1], "i"), right, 9, MPI.SUM)
    win.Unlock_all()
    comm.Barrier()
    assert mem[9] == 0, mem
    win.Free()
    t = world.world_state().engine.transport
    t = t.member("verbs") or t
    print(f"rank {r}: one-sided over {t.name}: rdma writes {t.stats['rdma_writes']} "
          f"reads {t.stats['rdma_reads']}")


one_sided_over_rdma()
"""


# -- what only a device shows ------------------------------------------------------------------------

class _Sink(FrameSink):
    def __init__(self):
        self.got, self.lost, self.targets = [], [], {}

    def frame_arrived(self, peer, header):
        target = self.targets.get(header.msg_id)
        return memoryview(target if target is not None else bytearray(header.length)).cast("B")

    def payload_arrived(self, peer, header, buffer):
        self.got.append((header.msg_id, buffer))

    def peer_lost(self, peer, reason):
        self.lost.append((peer, reason))


@pytest.fixture
def pair():
    """Two connected transports on the device (ranks 0 and 1 of this process), closed after."""
    ts = real_transports(2)
    sinks = [_Sink(), _Sink()]
    for t, s in zip(ts, sinks):
        t.attach(s)
    yield ts, sinks
    for t in ts:
        t.close()


def test_large_array_is_written_into_the_destination_array_itself(pair):
    ts, sinks = pair
    src = np.random.default_rng(1).random(5 * 1024 * 1024 // 8 * 4)   # 20 MiB: several writes
    dest = np.zeros_like(src)
    sinks[1].targets[7] = dest
    sent = []
    header = frames.pack(frames.EAGER, 0, 0, 0, 0, 7, src.nbytes)
    ts[0].send(1, header, [memoryview(src).cast("B")], sent.append)
    progress_until(ts, lambda: sinks[1].got and sent, 60.0, 0.01)
    assert sent == [None] and np.array_equal(dest, src)
    view = sinks[1].got[0][1]
    assert np.shares_memory(np.frombuffer(view, np.uint8), dest)   # delivered in place
    assert ts[0].stats["zero_copy_frames"] == 1 and ts[0].stats["sent_FRAG"] == 0
    assert ts[1].cache.covers(memoryview(dest).cast("B"))
    assert ts[0].ops.info.max_msg < src.nbytes      # so it really took several writes


def test_a_cached_source_registration_sends_what_the_array_holds_now(pair):
    # A never-written array (its pages may still be the shared zero page) is registered by the
    # first send and reused from the cache by the second, after it was written.
    ts, sinks = pair
    src = np.zeros(1 << 18)                            # 2 MiB, untouched
    first, second = np.ones_like(src), np.zeros_like(src)
    sinks[1].targets.update({1: first, 2: second})
    for msg_id in (1, 2):
        if msg_id == 2:
            src[:] = 7.0                               # written after registration
        ts[0].send(1, frames.pack(frames.EAGER, 0, 0, 0, 0, msg_id, src.nbytes),
                   [memoryview(src).cast("B")], None)
        progress_until(ts, lambda: len(sinks[1].got) == msg_id, 60.0, 0.01)
    assert (first == 0).all() and (second == 7).all()
    assert ts[0].cache.hits >= 1                       # the second send reused it


def test_failed_completion_loses_the_peer_naming_the_verbs_status(pair, monkeypatch):
    # A grant with a wrong remote key: the device itself refuses the write.
    original = VerbsTransport._on_grant
    monkeypatch.setattr(VerbsTransport, "_on_grant",
                        lambda self, p, xfer, addr, rkey: original(self, p, xfer, addr, rkey ^ 0x100))
    ts, sinks = pair
    failures = []
    data = bytes(1 << 20)
    ts[0].send(1, frames.pack(frames.EAGER, 0, 0, 0, 0, 1, len(data)), [memoryview(data)],
               failures.append)
    progress_until(ts, lambda: sinks[0].lost and sinks[1].lost, 60.0, 0.01)
    assert "IBV_WC_REM_ACCESS_ERR" in sinks[0].lost[0][1], sinks[0].lost
    assert failures and "REM_ACCESS_ERR" in failures[0]
    assert sinks[1].lost[0][0] == 0           # the receiving side learns it too
    print(f"sender: {sinks[0].lost[0][1]}\nreceiver: {sinks[1].lost[0][1]}")


def test_waiting_for_completions_never_holds_the_gil(pair):
    ts, sinks = pair
    done = threading.Event()

    def wait():
        ts[1].progress(1.5)               # nothing arrives: sleeps the whole time
        done.set()
    counter = 0
    th = threading.Thread(target=wait)
    th.start()
    start = time.monotonic()
    while not done.is_set() and time.monotonic() - start < 10:
        counter += 1
    th.join()
    # The main thread ran throughout the wait (a thread parked in get_cq_event would
    # have frozen it: measured at 1.5 s in that case).
    assert time.monotonic() - start >= 1.4 and counter > 10_000


def test_the_installed_pyverbs_is_reached_through_the_compat_layer():
    from minimpi.transports import verbs_compat
    pv = verbs_compat.load()
    ops = PyverbsOps(0)
    try:
        assert ops.fileno() >= 0 and pv.const("IBV_QPT_RC") == 2
        print(f"device {ops.info.device} port {ops.info.port} GID[{ops.info.gid_index}] "
              f"{ops.info.gid} mtu enum {ops.info.mtu} max_msg {ops.info.max_msg}; channel fd "
              f"via {'CompChannel.fd' if 'fd' in dir(pv.m.cq.CompChannel) else '/proc scan'}")
    finally:
        ops.close()


def test_rdma_write_and_read_into_exposed_memory_and_a_wrong_key_fails(pair):
    (a, b), sinks = pair
    window = np.zeros(4096, np.uint8)
    exp = b.expose(memoryview(window))
    src = np.arange(256, dtype=np.uint8)
    done = []
    assert a.rdma(1, True, memoryview(src), exp.addr + 1000, exp.rkey, done.append)
    progress_until([a, b], lambda: done)
    assert done == [None] and window[1000:1256].tolist() == src.tolist()
    back = np.zeros(256, np.uint8)
    assert a.rdma(1, False, memoryview(back), exp.addr + 1000, exp.rkey, done.append)
    progress_until([a, b], lambda: len(done) == 2)
    assert done[1] is None and back.tolist() == src.tolist()
    # a key the device never issued: the device rejects it (remote access error)
    assert a.rdma(1, True, memoryview(src), exp.addr, exp.rkey ^ 0x5A5A, done.append)
    progress_until([a, b], lambda: len(done) == 3, timeout=30)
    assert "REM_ACCESS_ERR" in done[2] and not window[:256].any()
    b.unexpose(exp)
