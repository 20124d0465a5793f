"""Fuzzing the two ports a job exposes: the ranks' data plane and the coordinator.

Generated input (seeded: FUZZ_SEED replays a run) is thrown at both, before and after
authentication: junk, bad and truncated hellos, wrong proofs, huge lengths, an unpickling
bomb, idle connections by the hundred, floods, replays, oversize and malformed messages.
What must hold: the job goes on and computes the right results, the offending peer is
dropped and the reason logged (rate-limited), nothing is unpickled, and launcher and rank
memory stay bounded.
"""
from __future__ import annotations

import os
import pickle
import random
import resource
import socket
import struct
import subprocess
import sys
import threading
import time

import msgpack
import pytest
import zmq
from faultlib import Leftovers
from jobhelpers import MINIMPI, finish, start_minimpi
from minimpi.launcher.coordinator import LOG_FIRST, Coordinator

from minimpi.runtime.bootstrap import MAX_MESSAGE, curve_server_keys, seal
from minimpi.transports.frames import EAGER, F_OBJECT, HEADER
from minimpi.transports.tcp import _HELLO, MAGIC, REFUSALS_LOGGED

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

TARGET = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz_target.py")
SEED = int(os.environ.get("FUZZ_SEED") or random.SystemRandom().randrange(1 << 30))


def wait_addresses(outdir, n: int, proc, timeout: float = 30.0) -> list:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"job ended early ({proc.returncode}):\n{err[-3000:]}")
        files = [outdir / f"addr.{r}" for r in range(n)]
        if all(f.exists() for f in files):
            return [f.read_text().split() for f in files]
        time.sleep(0.05)
    pytest.fail("ranks never published their addresses")


def rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS"))
    except (OSError, StopIteration):
        return 0


class Sampler(threading.Thread):
    """Peak RSS of a process, sampled every 50 ms until stopped."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop = pid, 0, threading.Event()
        self.start()

    def run(self) -> None:
        while not self.stop.wait(0.05):
            self.peak = max(self.peak, rss_kib(self.pid))


def ok_lines(stdout: str, n: int) -> list:
    oks = [ln.split() for ln in stdout.splitlines() if " ok " in f" {ln.split('] ', 1)[-1]} "]
    assert len(oks) == n, stdout[-2000:]
    return [(int(o[-3]), int(o[-2]), int(o[-1])) for o in oks]


# -- data plane ---------------------------------------------------------------------------
def _junk_connection(rng: random.Random, addr: str, bomb_path: str) -> None:
    """One stranger: connects to a rank's data port and sends something generated."""
    host, port = addr.rsplit(":", 1)
    bomb = pickle.dumps(_Bomb(bomb_path))
    choice = rng.randrange(7)
    if choice == 0:
        data = rng.randbytes(rng.randrange(1, 4096))                     # junk
    elif choice == 1:
        data = _HELLO.pack(b"NOTMPI!!", 1, rng.randbytes(16))            # bad magic
    elif choice == 2:
        data = _HELLO.pack(MAGIC, rng.choice([99, 2**31, 0xFFFFFFFF]), rng.randbytes(16))
    elif choice == 3:
        data = _HELLO.pack(MAGIC, 0, rng.randbytes(16))[:rng.randrange(1, _HELLO.size)]
    elif choice == 4:   # a hello, then a wrong proof and a frame with a pickled payload
        data = (_HELLO.pack(MAGIC, 0, rng.randbytes(16)) + rng.randbytes(32)
                + HEADER.pack(EAGER, F_OBJECT, 0, 0, 0, 0, 1, len(bomb)) + bomb)
    elif choice == 5:   # a hello and, instead of a proof, a header claiming 2**60 bytes
        data = _HELLO.pack(MAGIC, 0, rng.randbytes(16)) + HEADER.pack(
            EAGER, 0, 0, 0, 0, 0, 1, 1 << 60)
    else:               # no proof at all: just the frame with the pickle
        data = HEADER.pack(EAGER, F_OBJECT, 0, 0, 0, 0, 1, len(bomb)) + bomb
    try:
        with socket.create_connection((host, int(port)), timeout=2) as s:
            s.sendall(data)
            s.settimeout(0.2)
            try:
                s.recv(64)
            except OSError:
                pass
    except OSError:
        pass   # refused or reset: what a rank does to strangers


class _Bomb:
    """Unpickling this creates a file: proof that someone unpickled a stranger's bytes."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _low_fd_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (192, 192))


def test_data_plane_strangers_are_dropped_and_the_job_goes_on(tmp_path, job_marker):
    # 400 idle strangers on a rank allowed 192 descriptors: without the handshake cap it runs
    # out of descriptors and its next outgoing connection fails (the job dies)
    left = Leftovers(job_marker, tmp_path)
    env = dict(os.environ, MINIMPI_CONNECT_ALL_MAX="0")
    proc = subprocess.Popen([*MINIMPI, "run", "-n", "3", "--transport", "tcp", *left.args(),
                             TARGET, str(tmp_path), "plain", "30"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=_low_fd_limit)
    idle = []
    try:
        addrs = wait_addresses(tmp_path, 3, proc)
        rng = random.Random(SEED)
        bomb = str(tmp_path / "unpickled")
        for _ in range(150):
            _junk_connection(rng, addrs[rng.randrange(3)][0], bomb)
        host, port = addrs[1][0].rsplit(":", 1)
        for _ in range(400):   # held open while the ranks open their own connections
            try:
                idle.append(socket.create_connection((host, int(port)), timeout=2))
            except OSError:
                break
        (tmp_path / "go").touch()
        res = finish(proc, timeout=90)
    finally:
        for s in idle:
            s.close()
    where = f"(FUZZ_SEED={SEED})\n{res.stderr[-3000:]}"
    assert res.returncode == 0, where
    assert not os.path.exists(bomb), "a stranger's pickle was unpickled"
    for rank, peak_kib, fds in ok_lines(res.stdout, 3):
        assert peak_kib < 400_000, f"rank {rank} peaked at {peak_kib} KiB {where}"
    for r in range(3):
        one_by_one = [ln for ln in res.stderr.splitlines()
                      if ln.startswith(f"[{r}] minimpi rank {r}: refused a connection")]
        assert len(one_by_one) <= REFUSALS_LOGGED, where
    assert "[1] minimpi rank 1: refused" in res.stderr and "more connection(s)" in res.stderr
    assert "pushed out by a newer connection" in res.stderr, where
    left.check()


# -- coordinator --------------------------------------------------------------------------
FLOODER = r"""
import random, socket, sys, time, zmq
host, port, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
ctx = zmq.Context()
end = time.monotonic() + 60
while time.monotonic() < end:
    s = ctx.socket(zmq.DEALER); s.setsockopt(zmq.LINGER, 0)
    s.connect(f"tcp://{host}:{port}")
    for _ in range(200):
        s.send_multipart([rng.randbytes(32), rng.randbytes(rng.randrange(1, 200))])
    s.close(0)
    try:
        with socket.create_connection((host, port), timeout=1) as raw:
            raw.sendall(rng.randbytes(rng.randrange(1, 2000)))
    except OSError:
        pass
"""


def _huge_frame(host: str, port: int, claim: int, budget: int) -> int:
    """Speak ZMTP 3 (NULL mechanism) and stream one frame that claims ``claim`` bytes;
    returns how many bytes the coordinator took before it dropped us."""
    sent = 0
    try:
        with socket.create_connection((host, port), timeout=5) as s:
            s.sendall(b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\0")
                      + b"\0" * 31)
            ready = b"\x05READY" + b"\x0bSocket-Type" + struct.pack(">I", 6) + b"DEALER"
            s.sendall(b"\x04" + bytes([len(ready)]) + ready)
            s.sendall(b"\x02" + struct.pack(">Q", claim))
            chunk = b"\0" * (1 << 20)
            while sent < budget:
                s.sendall(chunk)
                sent += len(chunk)
    except OSError:
        pass
    return sent


def test_coordinator_strangers_cannot_starve_or_bloat_the_launcher(tmp_path, job_marker):
    left = Leftovers(job_marker, tmp_path)
    proc = start_minimpi("-n", 3, "--transport", "tcp", *left.args(), TARGET, tmp_path, "plain", 150)
    sampler = Sampler(proc.pid)
    flooders = []
    try:
        wait_addresses(tmp_path, 3, proc)
        coord = next(ln.split("=", 1)[1] for ln in open(f"/proc/{_rank_pid(tmp_path)}/environ")
                     .read().split("\0") if ln.startswith("MINIMPI_COORD="))
        host, port = coord[len("tcp://"):].rsplit(":", 1)
        flooders = [subprocess.Popen([sys.executable, "-c", FLOODER, host, port, str(SEED + i)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    for i in range(2)]
        took = _huge_frame(host, int(port), 4 << 30, 256 << 20)
        (tmp_path / "go").touch()
        work_started = time.monotonic()
        res = finish(proc, timeout=90)
        elapsed = time.monotonic() - work_started
    finally:
        for f in flooders:
            f.kill()
            f.wait()
        sampler.stop.set()
    where = f"(FUZZ_SEED={SEED})\n{res.stderr[-3000:]}"
    assert res.returncode == 0, where
    ok_lines(res.stdout, 3)
    assert took < 64 << 20, f"the coordinator took {took >> 20} MiB of a 4 GiB frame"
    assert sampler.peak < 200_000, f"launcher peaked at {sampler.peak} KiB {where}"
    # 150 rounds take a few seconds; a starved launcher used to exit 14 s late
    assert elapsed < 45, f"{elapsed:.1f} s {where}"
    left.check()


def _rank_pid(outdir) -> int:
    return int((outdir / "addr.0").read_text().split()[1])


def test_coordinator_insider_replay_and_junk_are_dropped(tmp_path, job_marker):
    left = Leftovers(job_marker, tmp_path)
    proc = start_minimpi("-n", 3, "--transport", "tcp", *left.args(), TARGET, tmp_path, "insider",
                         20)
    sampler = Sampler(proc.pid)
    try:
        wait_addresses(tmp_path, 3, proc)
        (tmp_path / "go").touch()
        res = finish(proc, timeout=90)
    finally:
        sampler.stop.set()
    where = f"\n{res.stderr[-3000:]}\n{res.stdout[-1000:]}"
    assert res.returncode == 0, where
    ok_lines(res.stdout, 3)
    # the replayed register did not move rank 1: the thief got a challenge, not the table
    assert "[1] replay-answer challenge" in res.stdout.splitlines(), where
    dropped = [ln for ln in res.stderr.splitlines() if ln.startswith("minimpi: coordinator dropped a ")]
    assert 1 <= len(dropped) <= LOG_FIRST, where
    assert "does not carry this connection's challenge (a replay?)" in res.stderr, where
    assert "more bad message(s)" in res.stderr, where
    assert sampler.peak < 200_000, f"launcher peaked at {sampler.peak} KiB"
    left.check()


def test_coordinator_survives_generated_messages_in_process():
    """Thousands of generated messages from an authenticated connection straight into
    Coordinator.receive: never an exception, never an event, bounded work per call."""
    secret = os.urandom(32)
    coord = Coordinator(4, secret, "fuzz", log=lambda text: None)
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.curve_serverkey = curve_server_keys(secret)[0]
    s.curve_publickey, s.curve_secretkey = zmq.curve_keypair()
    s.connect(coord.address)
    rng = random.Random(SEED)
    values = [None, 0, -1, 2**70, 1.5, "x", b"\0", [], {}, {"t": "register"}, [1, {"r": 0}]]
    try:
        sent = 0
        for i in range(3000):
            k = rng.randrange(6)
            if k == 0:
                frames = [rng.randbytes(rng.randrange(0, 64)) for _ in range(rng.randrange(1, 5))]
            elif k == 1:   # sealed, but any shape of map
                msg = {rng.choice(["t", "r", "c", "s", "x"]): rng.choice(values)
                       for _ in range(rng.randrange(0, 5))}
                frames = seal(secret, msg)
            elif k == 2:   # a sealed non-map
                frames = seal(secret, rng.choice(values))
            elif k == 3:   # sealed, plausible kinds, wrong challenge
                frames = seal(secret, {"t": rng.choice(["register", "state", "failed", "abort",
                                                         "finalize", "hb", "zz"]),
                                       "r": rng.randrange(-2, 6), "c": rng.randbytes(8).hex()})
            elif k == 4:   # right MAC over bytes that are not msgpack
                payload = rng.randbytes(rng.randrange(1, 100))
                frames = [seal(secret, {})[0][:0] + __import__("hmac").new(
                    secret, payload, "sha256").digest(), payload]
            else:
                frames = [b"\0" * 32, msgpack.packb({"t": "abort", "r": 0, "code": 1})]
            s.send_multipart(frames)
            sent += 1
        # one oversize message: zmq drops the connection, nothing is buffered
        s.send_multipart([b"\0" * 32, b"x" * (MAX_MESSAGE * 2)])
        handled, events, deadline = 0, [], time.monotonic() + 20
        while handled < sent and time.monotonic() < deadline:
            if coord.socket.poll(200):
                before = coord.bad_messages
                events += [e for e in coord.receive(max_messages=100)
                           if e.kind not in ("state",)]
                assert coord.bad_messages - before <= 100
                handled = coord.bad_messages
        assert not [e for e in events if e.kind in ("abort", "registered", "failed", "finalize")]
        assert coord.banned   # the connection was banned along the way
        assert not any(st.registered for st in coord.ranks)
    finally:
        s.close(0)
        ctx.term()
        coord.close()
