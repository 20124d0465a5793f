"""Bootstrap sources, message sealing, and CoordinatorClient against an in-process Coordinator."""
from __future__ import annotations

import threading
import time

import msgpack
import pytest
import zmq
from minimpi.launcher.argtypes import byte_size as parse_size
from minimpi.launcher.coordinator import Coordinator
from minimpi.launcher.run import split_argv

from minimpi.errors import MinimpiError, MPITimeoutError
from minimpi.runtime.bootstrap import (
    BootInfo,
    CoordinatorClient,
    bootstrap,
    curve_server_keys,
    seal,
    unseal,
)

SECRET = bytes(range(32))


def test_singleton_without_launcher_env():
    info = bootstrap({"MINIMPI_EAGER_LIMIT": "1024", "HOME": "/x"})
    assert isinstance(info, BootInfo)
    assert (info.rank, info.size, info.secret, info.coordinator) == (0, 1, b"", None)
    assert info.bind_host == "127.0.0.1"
    assert info.env == {"MINIMPI_EAGER_LIMIT": "1024"}


def test_launcher_env():
    coord = Coordinator(3, SECRET, "job1")
    try:
        env = {"MINIMPI_RANK": "2", "MINIMPI_SIZE": "3", "MINIMPI_COORD": coord.address,
               "MINIMPI_SECRET": SECRET.hex(), "MINIMPI_JOBID": "job1",
               "MINIMPI_BIND": "10.0.0.5", "MINIMPI_BCAST": "ring"}
        info = bootstrap(env)
        assert (info.rank, info.size, info.secret, info.job_id) == (2, 3, SECRET, "job1")
        assert info.bind_host == "10.0.0.5"
        assert info.env["MINIMPI_BCAST"] == "ring"
        assert "MINIMPI_SECRET" not in info.env
        assert isinstance(info.coordinator, CoordinatorClient)
        info.coordinator.close()
    finally:
        coord.close()


def test_incomplete_launcher_env_is_a_clear_error():
    with pytest.raises(MinimpiError, match="MINIMPI_SIZE"):
        bootstrap({"MINIMPI_RANK": "0"})


def test_seal_unseal():
    frames = seal(SECRET, {"t": "x", "r": 1})
    assert unseal(SECRET, frames) == {"t": "x", "r": 1}
    assert unseal(b"other" * 8, frames) is None
    assert unseal(SECRET, [b"\0" * 32, frames[1]]) is None
    assert unseal(SECRET, [frames[0], frames[1] + b"x"]) is None
    assert unseal(SECRET, [frames[1]]) is None


class CoordThread:
    """Run a Coordinator's receive loop in a thread (the launcher does it in its event loop)."""

    def __init__(self, size, secret=SECRET):
        self.coord = Coordinator(size, secret, "job", log=lambda text: None)
        self.events = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        poller = zmq.Poller()
        poller.register(self.coord.socket, zmq.POLLIN)
        while not self._stop.is_set():
            if poller.poll(50):
                self.events.extend(self.coord.receive())

    def stop(self):
        self._stop.set()
        self.thread.join(5)
        self.coord.close()


def _clients(coord, size, secret=SECRET):
    return [CoordinatorClient(coord.address, secret, r, size, "job") for r in range(size)]


def _wait_for(condition, what: str, timeout: float = 10.0) -> None:
    """Wait until ``condition()`` (the coordinator runs in another thread); fail naming
    ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"the coordinator did not record {what} within {timeout:g} s")
        time.sleep(0.01)


def test_rendezvous_state_abort_finalize():
    ct = CoordThread(3)
    clients = _clients(ct.coord, 3)
    try:
        results = [None] * 3

        def go(r):
            results[r] = clients[r].exchange_addresses(f"h:{r}", timeout=5)

        threads = [threading.Thread(target=go, args=(r,)) for r in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert results == [["h:0", "h:1", "h:2"]] * 3
        clients[1].report_state({"call": "recv", "source": 0})
        clients[2].abort(5, "bye")              # returns after the ack
        clients[0].finalize()
        # The state report and the finalize go unacknowledged, each on its own connection:
        # either may reach the coordinator after the other messages; and the abort's ack
        # leaves inside the coordinator's receive(), before its event is handed to the
        # thread's list. Wait for every one of them before looking.
        _wait_for(lambda: any(e.kind == "abort" for e in ct.events), "the abort event")
        _wait_for(lambda: ct.coord.ranks[1].state is not None, "rank 1's state report")
        _wait_for(lambda: ct.coord.ranks[0].finalized, "rank 0's finalize")
        kinds = [e.kind for e in ct.events]
        assert "all_registered" in kinds
        abort = next(e for e in ct.events if e.kind == "abort")
        assert (abort.rank, abort.code, abort.message) == (2, 5, "bye")
        assert ct.coord.ranks[1].state == {"call": "recv", "source": 0}
        assert ct.coord.ranks[1].describe() == "call=recv, source=0"
        assert ct.coord.ranks[0].finalized
        assert ct.coord.ranks[2].pid is not None
    finally:
        for c in clients:
            c.close()
        ct.stop()


def curve_dealer(ctx, address, secret=SECRET):
    """A DEALER that passes the coordinator's CURVE handshake (it knows the job secret)."""
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.curve_serverkey = curve_server_keys(secret)[0]
    s.curve_publickey, s.curve_secretkey = zmq.curve_keypair()
    s.connect(address)
    return s


def test_coordinator_drops_bad_mac_and_bans_the_connection():
    ct = CoordThread(1)
    ctx = zmq.Context()
    s = curve_dealer(ctx, ct.coord.address)
    try:
        s.send_multipart([b"\1" * 32, msgpack.packb({"t": "abort", "r": 0, "code": 1})])
        s.send_multipart(seal(b"wrong" * 7, {"t": "abort", "r": 0, "code": 1}))
        for _ in range(3):
            s.send_multipart(seal(SECRET, {"t": "abort", "r": 0, "code": 1, "c": "x" * 32}))
        deadline = time.monotonic() + 5
        while ct.coord.bad_messages < 5 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ct.coord.bad_messages == 5
        assert len(ct.coord.banned) == 1       # banned after the third bad message
        assert ct.events == []
    finally:
        s.close(0)
        ctx.term()
        ct.stop()


def test_stranger_without_the_secret_gets_nothing_through():
    ct = CoordThread(1)
    ctx = zmq.Context()
    plain = ctx.socket(zmq.DEALER)             # no CURVE at all
    plain.setsockopt(zmq.LINGER, 0)
    plain.connect(ct.coord.address)
    other = curve_dealer(ctx, ct.coord.address, secret=b"y" * 32)   # another job's keys
    try:
        for sock in (plain, other):
            sock.send_multipart(seal(SECRET, {"t": "hello", "r": 0}))
        time.sleep(1.0)
        assert ct.coord.bad_messages == 0 and ct.events == []
        assert not plain.poll(100) and not other.poll(100)   # not even a challenge
    finally:
        plain.close(0)
        other.close(0)
        ctx.term()
        ct.stop()


def test_client_drops_bad_mac_reply_then_times_out():
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.curve_server = True
    router.curve_publickey, router.curve_secretkey = curve_server_keys(SECRET)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    client = CoordinatorClient(f"tcp://127.0.0.1:{port}", SECRET, 0, 1, "job")
    try:
        def fake():
            ident, *_ = router.recv_multipart()
            router.send_multipart([ident, *seal(b"x" * 32, {"t": "challenge", "c": "evil"})])

        t = threading.Thread(target=fake)
        t.start()
        with pytest.raises(MPITimeoutError, match="no address table"):
            client.exchange_addresses("h:0", timeout=0.5)
        t.join(5)
        assert client.dropped == 1
    finally:
        client.close()
        router.close(0)
        ctx.term()


def test_startup_failure_names_missing_ranks():
    ct = CoordThread(3)
    clients = _clients(ct.coord, 3)
    try:
        err = []

        def go():
            try:
                clients[0].exchange_addresses("h:0", timeout=5)
            except MPITimeoutError as e:
                err.append(e)

        t = threading.Thread(target=go)
        t.start()
        deadline = time.monotonic() + 5
        while not ct.coord.ranks[0].registered and time.monotonic() < deadline:
            time.sleep(0.02)
        ct.coord.fail_startup([1, 2], "ranks 1, 2 never registered")
        t.join(5)
        assert err and err[0].missing_ranks == [1, 2]
        assert "1, 2" in str(err[0])
    finally:
        for c in clients:
            c.close()
        ct.stop()


def test_report_state_never_blocks_without_coordinator():
    client = CoordinatorClient("tcp://127.0.0.1:1", SECRET, 0, 2, "job")
    try:
        t0 = time.monotonic()
        for i in range(5000):
            client.report_state({"i": i})
        assert time.monotonic() - t0 < 2
    finally:
        t0 = time.monotonic()
        client.close()
        assert time.monotonic() - t0 < 3


def test_parse_size():
    assert parse_size("65536") == 65536
    assert parse_size("64KiB") == 65536
    assert parse_size("64k") == 65536
    assert parse_size("1MiB") == 1 << 20
    with pytest.raises(Exception):
        parse_size("lots")


def test_split_argv():
    import argparse

    from minimpi.launcher.run import add_arguments
    p = argparse.ArgumentParser()
    add_arguments(p)
    assert split_argv(p, ["-n", "3", "--timeout", "5", "s.py", "-n", "7"]) == (
        ["-n", "3", "--timeout", "5"], ["s.py", "-n", "7"])
    assert split_argv(p, ["-n", "3", "-m", "pkg.mod", "--flag"]) == (
        ["-n", "3", "-m", "pkg.mod"], ["--flag"])
    assert split_argv(p, ["-n3", "--no-prefix", "--", "-weird.py"]) == (
        ["-n3", "--no-prefix"], ["-weird.py"])
