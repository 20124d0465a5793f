"""How a rank learns who it is: rank, size, job secret, and where the coordinator is.

``bootstrap()`` turns the environment into a :class:`BootInfo`. It tries a short list of
*sources* in order (:data:`SOURCES`); the first one that recognises the environment wins:

1. no launcher (``runtime/sources.py``): ``srun``, or environment rendezvous
   (``MINIMPI_COORDINATOR``, torchrun's ``MASTER_ADDR``, ...); rank 0 hosts the coordinator;
2. ``minimpi run`` (the launcher sets ``MINIMPI_RANK``, ``MINIMPI_SIZE``, ``MINIMPI_COORD``,
   ``MINIMPI_SECRET``, ``MINIMPI_JOBID``, ``MINIMPI_BIND``, ...);
3. a singleton world of size 1 (plain ``python script.py``, MPI's "singleton init").

The :class:`CoordinatorClient` is the rank's side of the control plane: one pyzmq DEALER
talking to the launcher's ROUTER. Every message in both directions is a two-frame zmq
message ``[mac, payload]`` where ``payload`` is a msgpack map and ``mac`` is
HMAC-SHA256(job secret, payload). A message whose MAC does not verify is dropped before
it is unpacked. See ``launcher/coordinator.py`` for the message table.

Three more layers keep strangers and replays out (``launcher/coordinator.py`` has the
server's side):

* the zmq connection itself uses CURVE, with the coordinator's key pair derived from the
  job secret: a peer without the secret cannot complete the handshake, so none of its bytes
  ever reach Python (and a captured TCP stream cannot be replayed: the keys are ephemeral);
* the client's first message is a ``hello``; the coordinator answers with a *challenge*
  bound to this very connection, and every later message carries it, so a sealed message
  copied onto another connection is refused;
* messages are at most :data:`MAX_MESSAGE` bytes (zmq drops a peer that sends more).

A daemon thread sends a heartbeat every ``heartbeat_interval`` seconds so that the launcher
can name a rank that stopped (SIGSTOP, a debugger, a hung C call) instead of waiting forever.
"""
from __future__ import annotations

import collections
import hashlib
import hmac
import os
import signal
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional, Sequence

import msgpack

from minimpi.errors import AuthenticationError, JobAbortedError, MinimpiError, MPITimeoutError
from minimpi.transports.signal_guard import start_thread_blocked

from . import sources

# ---------------------------------------------------------------------------------------
# Environment variables set by the launcher for every rank
# ---------------------------------------------------------------------------------------
ENV_RANK = "MINIMPI_RANK"
ENV_SIZE = "MINIMPI_SIZE"
ENV_COORD = "MINIMPI_COORD"            # tcp://127.0.0.1:PORT of the coordinator's ROUTER
ENV_SECRET = "MINIMPI_SECRET"          # hex of 32 random bytes
ENV_JOBID = "MINIMPI_JOBID"
ENV_BIND = "MINIMPI_BIND"              # host the data plane should listen on
ENV_LIFELINE = "MINIMPI_LIFELINE_FD"   # read end of a pipe; EOF means the launcher is gone
ENV_LAUNCHER_PID = "MINIMPI_LAUNCHER_PID"
ENV_STARTUP_TIMEOUT = "MINIMPI_STARTUP_TIMEOUT"
ENV_HEARTBEAT_INTERVAL = "MINIMPI_HEARTBEAT_INTERVAL"   # seconds; 0: no heartbeat
# ... and for dynamic processes (runtime/launcher_link.py, launcher/dynamic.py)
ENV_JOBNO = "MINIMPI_JOBNO"                     # 0: the job `minimpi run` started; k: Spawn's
ENV_PARENT = "MINIMPI_PARENT"                   # JSON: the parents of a spawned process
ENV_UNIVERSE_SIZE = "MINIMPI_UNIVERSE_SIZE"     # MPI.UNIVERSE_SIZE
ENV_FAULT_TOLERANT = "MINIMPI_FAULT_TOLERANT"   # "1": --fault-tolerant (ULFM)

#: keys of BootInfo.env that are never exposed there (the secret has its own field)
_PRIVATE_KEYS = {ENV_SECRET}

DEFAULT_BIND = "127.0.0.1"


def host_identity() -> str:
    """Which machine this process runs on: ``hostname/boot id``.

    Ranks with the same identity share a host (memory, ``/dev/shm``, cores): topology-aware
    collectives and the choice of transport depend on it. The boot id tells apart machines
    that happen to share a host name; the host name tells apart network-namespace "hosts"
    that share a kernel (as the multi-host tests set up).
    """
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


# ---------------------------------------------------------------------------------------
# Message sealing (shared with launcher/coordinator.py)
# ---------------------------------------------------------------------------------------
MAC_SIZE = 32

#: largest coordinator message (one zmq frame), both directions; zmq disconnects a peer that
#: sends a larger one before buffering it. Clients trim state reports to fit.
MAX_MESSAGE = 256 * 1024


def curve_server_keys(secret: bytes) -> tuple[bytes, bytes]:
    """(public, secret) CURVE keys of the coordinator, both derived from the job secret.

    The public key is never sent on the wire, so knowing it proves knowing the job secret:
    that is what keeps a stranger from completing the zmq handshake at all.
    """
    import zmq
    import zmq.utils.z85

    raw = hmac.new(secret, b"minimpi coordinator curve key", hashlib.sha256).digest()
    private = zmq.utils.z85.encode(raw)
    return zmq.curve_public(private), private


def monitor_event(frames: list) -> Optional[int]:
    """The event number of a zmq socket monitor's message (``[6 bytes: event (16 bits),
    value (32 bits)], [endpoint]``), None if malformed. (pyzmq's
    ``zmq.utils.monitor.recv_monitor_message`` says the same, but importing it loads
    ``asyncio`` and ``ssl``: ~35 ms of CPU in every rank.)"""
    if len(frames) != 2 or len(frames[0]) != 6:
        return None
    return _MONITOR_EVENT.unpack(frames[0])[0]


_MONITOR_EVENT = struct.Struct("=Hi")


def challenge_for(secret: bytes, connection_id: bytes) -> str:
    """The challenge a coordinator connection must repeat in every message (hex).

    Derived from the routing id zmq gives each connection (never reused while the
    coordinator runs), so the coordinator keeps no table and a message sealed for one
    connection is worthless on any other.
    """
    return hmac.new(secret, b"challenge" + bytes(connection_id), hashlib.sha256).hexdigest()[:32]


def seal(secret: bytes, message: dict) -> list[bytes]:
    """Pack ``message`` with msgpack and return the frames ``[mac, payload]``."""
    payload = msgpack.packb(message, use_bin_type=True, default=_fallback_encode)
    mac = hmac.new(secret, payload, hashlib.sha256).digest()
    return [mac, payload]


def unseal(secret: bytes, frames: list[bytes]) -> Optional[dict]:
    """Verify and unpack ``[mac, payload]``; ``None`` if malformed or the MAC is wrong.

    The payload is only handed to msgpack after the MAC has been verified.
    """
    if len(frames) != 2:
        return None
    mac, payload = bytes(frames[0]), bytes(frames[1])
    if len(mac) != MAC_SIZE:
        return None
    expected = hmac.new(secret, payload, hashlib.sha256).digest()
    if not hmac.compare_digest(mac, expected):
        return None
    try:
        message = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except Exception:
        return None
    return message if isinstance(message, dict) else None


def _fallback_encode(obj):
    # state reports may contain tuples of odd objects; never fail a report over a repr
    return repr(obj)


# ---------------------------------------------------------------------------------------
# BootInfo and the sources
# ---------------------------------------------------------------------------------------
@dataclass
class BootInfo:
    rank: int
    size: int
    secret: bytes                                 # b"" for a singleton (until it
    job_id: str                                   # starts its launcher to spawn:
    bind_host: str                                # runtime/launcher_link.py)
    coordinator: "CoordinatorClient | None"       # None for a singleton (idem)
    env: dict = field(default_factory=dict)       # MINIMPI_* settings (str values), no secret
    source: str = "singleton"                     # which bootstrap source produced this


def _minimpi_env(environ: Mapping[str, str]) -> dict:
    return {k: str(v) for k, v in environ.items()
            if k.startswith("MINIMPI_") and k not in _PRIVATE_KEYS}


def _from_launcher(environ: Mapping[str, str]) -> Optional[BootInfo]:
    """Source: ``minimpi run``. Recognised by MINIMPI_RANK."""
    if ENV_RANK not in environ:
        return None
    try:
        rank = int(environ[ENV_RANK])
        size = int(environ[ENV_SIZE])
        coord = environ[ENV_COORD]
        secret = bytes.fromhex(environ[ENV_SECRET])
        job_id = environ[ENV_JOBID]
    except KeyError as e:
        raise MinimpiError(
            f"minimpi bootstrap: {ENV_RANK} is set but {e.args[0]} is missing; "
            "start the program with `minimpi run` (or unset MINIMPI_RANK for a singleton)"
        ) from None
    except ValueError as e:
        raise MinimpiError(f"minimpi bootstrap: malformed launcher environment: {e}") from None
    if not 0 <= rank < size:
        raise MinimpiError(f"minimpi bootstrap: {ENV_RANK}={rank} is outside 0..{size - 1}")
    _start_lifeline_watch(environ)
    client = CoordinatorClient(coord, secret, rank, size, job_id)
    for var, attr in ((ENV_STARTUP_TIMEOUT, "startup_timeout"),
                      (ENV_HEARTBEAT_INTERVAL, "heartbeat_interval")):
        if environ.get(var):
            try:
                setattr(client, attr, float(environ[var]))
            except ValueError:
                pass
    return BootInfo(rank=rank, size=size, secret=secret, job_id=job_id,
                    bind_host=environ.get(ENV_BIND, DEFAULT_BIND), coordinator=client,
                    env=_minimpi_env(environ), source="minimpi-run")


def _from_environment(environ: Mapping[str, str]) -> Optional[BootInfo]:
    """Source: started without ``minimpi run`` (srun, MINIMPI_COORDINATOR, MASTER_ADDR...)."""
    rdv = sources.find(environ)
    if rdv is None:
        return None
    env = _minimpi_env(environ)
    if rdv.size == 1:   # nothing to meet: no coordinator, no secret needed
        return BootInfo(rank=0, size=1, secret=b"", job_id=rdv.job_id,
                        bind_host=environ.get(ENV_BIND, DEFAULT_BIND), coordinator=None,
                        env=env, source=rdv.source)
    secret = sources.job_secret(environ, rdv)
    if sources.insecure(environ) and rdv.rank == 0 and not environ.get(sources.ENV_SECRET):
        print(f"minimpi: {sources.ENV_INSECURE}=1: job {rdv.job_id} runs without "
              "authentication", file=sys.stderr, flush=True)
    bind = sources.data_plane_address(environ, rdv)
    try:
        startup = float(environ.get(ENV_STARTUP_TIMEOUT) or 60.0)
    except ValueError:
        startup = 60.0
    address = f"tcp://{rdv.coordinator}"
    if rdv.rank == 0:
        address = sources.host_coordinator(rdv, secret, startup)
    client = CoordinatorClient(address, secret, rdv.rank, rdv.size, rdv.job_id)
    client.startup_timeout = startup
    return BootInfo(rank=rdv.rank, size=rdv.size, secret=secret, job_id=rdv.job_id,
                    bind_host=bind, coordinator=client, env=env, source=rdv.source)


def _singleton(environ: Mapping[str, str]) -> Optional[BootInfo]:
    """Source: nothing recognised -> a world of one process (MPI singleton init)."""
    return BootInfo(rank=0, size=1, secret=b"", job_id=f"singleton-{os.getpid()}",
                    bind_host=environ.get(ENV_BIND, DEFAULT_BIND), coordinator=None,
                    env=_minimpi_env(environ), source="singleton")


#: Bootstrap sources, tried in order; each returns a BootInfo or None ("not mine").
SOURCES: list[tuple[str, Callable[[Mapping[str, str]], Optional[BootInfo]]]] = [
    ("environment", _from_environment),
    ("minimpi-run", _from_launcher),
    ("singleton", _singleton),
]


#: the job secret once bootstrap() took it out of os.environ
_taken_secret: Optional[str] = None


def take_secret() -> None:
    """Move the job secret out of ``os.environ`` (the rank start script does this before the
    program runs, so even a subprocess started before ``import mpi4py`` cannot inherit it)."""
    global _taken_secret
    if ENV_SECRET in os.environ:
        _taken_secret = os.environ.pop(ENV_SECRET)


def bootstrap(environ: Mapping[str, str] = os.environ) -> BootInfo:
    """Launcher env -> BootInfo; no MINIMPI_RANK -> singleton world of size 1.

    The job secret is removed from ``os.environ`` here, the first time minimpi runs in the
    rank: every subprocess the program starts (a shell, a compiler, a helper script) would
    otherwise inherit it and could impersonate the rank.
    """
    if environ is os.environ:
        take_secret()
        if _taken_secret is not None:   # bootstrap() may run more than once in a process
            environ = {**os.environ, ENV_SECRET: _taken_secret}
    for _name, source in SOURCES:
        info = source(environ)
        if info is not None:
            return info
    raise MinimpiError("minimpi bootstrap: no bootstrap source applies")  # unreachable


# ---------------------------------------------------------------------------------------
# Noticing that the launcher is gone
# ---------------------------------------------------------------------------------------
_lifeline_started = False
_lifeline_lock = threading.Lock()


def _start_lifeline_watch(environ: Mapping[str, str]) -> None:
    """Start (once) a daemon thread that ends this rank when the launcher disappears.

    The launcher also sets PR_SET_PDEATHSIG on Linux; this is the portable second line:
    a blocking read on the lifeline pipe (EOF when the launcher's write end closes,
    i.e. it exited or was killed), or, without a pipe, a getppid() check every 2 s.
    """
    global _lifeline_started
    with _lifeline_lock:
        if _lifeline_started:
            return
        _lifeline_started = True
    fd = None
    if environ.get(ENV_LIFELINE):
        try:
            fd = int(environ[ENV_LIFELINE])
            os.fstat(fd)
        except (ValueError, OSError):
            fd = None
    launcher_pid = None
    try:
        launcher_pid = int(environ.get(ENV_LAUNCHER_PID, ""))
    except ValueError:
        pass
    if fd is None and launcher_pid is None:
        return
    t = threading.Thread(target=_lifeline_main, args=(fd, launcher_pid),
                         name="minimpi-lifeline", daemon=True)
    start_thread_blocked(t)   # process signals go to the main thread (see signal_guard)


def _lifeline_main(fd: Optional[int], launcher_pid: Optional[int]) -> None:
    if fd is not None:
        try:
            while os.read(fd, 4096):
                pass  # the launcher never writes; data would be ignored
        except OSError:
            pass
    else:
        while os.getppid() == launcher_pid:
            time.sleep(2.0)
    _die_with_launcher()


def _die_with_launcher() -> None:
    try:
        os.write(2, b"minimpi: the launcher is gone; ending rank %d\n" % os.getpid())
    except OSError:
        pass
    try:
        if os.getpgrp() == os.getpid():   # our own process group (as the launcher makes it)
            os.killpg(os.getpid(), signal.SIGKILL)
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGKILL)


# ---------------------------------------------------------------------------------------
# The client
# ---------------------------------------------------------------------------------------
class CoordinatorClient:
    """The rank's side of the coordinator protocol (one zmq DEALER).

    Thread-safe: all socket use is under one lock. ``report_state`` never blocks for long.
    The connection's challenge is fetched on first use (a ``hello`` round trip), so merely
    creating a client costs nothing and needs no running launcher.
    """

    #: the launcher's --startup-timeout (from MINIMPI_STARTUP_TIMEOUT), used when
    #: exchange_addresses is called without an explicit timeout
    startup_timeout: float = 60.0
    #: seconds between heartbeats (MINIMPI_HEARTBEAT_INTERVAL, set by the launcher from
    #: --heartbeat-timeout); 0 sends none
    heartbeat_interval: float = 0.0
    #: how long a send that needs the challenge may wait for it when it must not block
    QUICK_HELLO = 0.5
    #: after a hello that got no answer, non-blocking sends wait this long before trying again
    HELLO_RETRY = 5.0

    def __init__(self, address: str, secret: bytes, rank: int, size: int, job_id: str):
        import zmq  # local import: a singleton never needs zmq

        self._zmq = zmq
        self.address = address
        self.rank = rank
        self.size = size
        self.job_id = job_id
        self._secret = secret
        self._lock = threading.Lock()
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 1000)
        self._sock.setsockopt(zmq.SNDHWM, 1000)
        self._sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE + 1024)
        server_public, _ = curve_server_keys(secret)
        public, private = zmq.curve_keypair()
        self._sock.curve_serverkey = server_public
        self._sock.curve_publickey = public
        self._sock.curve_secretkey = private
        # handshakes that fail: the coordinator's key is not the one derived from our
        # secret (ranks without one shared secret); without this, a wrong secret looks like
        # a coordinator that never answers, and is said only after the startup timeout
        self._monitor = self._sock.get_monitor_socket(
            zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
            | zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_SUCCEEDED)
        self._handshakes_failed = 0
        self._handshake_ok = False
        self._poller = zmq.Poller()
        self._poller.register(self._sock, zmq.POLLIN)
        self._poller.register(self._monitor, zmq.POLLIN)
        self._sock.connect(address)
        self._closed = False
        self._challenge: Optional[str] = None
        self._hello_failed_at: Optional[float] = None
        # authentic messages read while looking for something else (by the heartbeat)
        self._inbox: collections.deque = collections.deque(maxlen=64)
        self._stop = threading.Event()
        self._heartbeat: Optional[threading.Thread] = None
        self.table: Optional[list[str]] = None
        #: every rank's host identity (:func:`host_identity`), index = rank, after the exchange
        self.hosts: Optional[list[str]] = None
        self.dropped = 0   # replies dropped for a bad MAC
        self._request_lock = threading.Lock()   # one request (spawn, port, name) at a time
        self._requests = 0
        #: message kind -> what to call with each such message (from the reading thread)
        #: instead of keeping it for a reader (:meth:`on_message`)
        self._handlers: dict = {}

    # -- plumbing ------------------------------------------------------------------------
    def _pack(self, message: dict) -> list[bytes]:
        frames = seal(self._secret, message)
        if len(frames[1]) > MAX_MESSAGE:
            # A state report of a wait on thousands of requests: keep what fits (the
            # coordinator would drop the connection over an oversize message).
            message = dict(message)
            if isinstance(message.get("s"), dict) and message["s"].get("items"):
                s = dict(message["s"])
                s["items_total"] = len(s["items"])
                s["items"] = s["items"][:20]
                message["s"] = s
            for key in ("msg", "error", "tb"):
                if isinstance(message.get(key), str):
                    message[key] = message[key][:8192]
            frames = seal(self._secret, message)
            if len(frames[1]) > MAX_MESSAGE:
                frames = seal(self._secret, {k: v for k, v in message.items()
                                             if k in ("t", "r", "c", "code")})
        return frames

    def _send_raw(self, message: dict, block: bool) -> bool:
        flags = 0 if block else self._zmq.NOBLOCK
        try:
            self._sock.send_multipart(self._pack({"r": self.rank, **message}), flags=flags)
            return True
        except self._zmq.Again:
            return False

    def _send(self, message: dict, block: bool = True, hello_wait: Optional[float] = None) -> bool:
        """Send with this connection's challenge (fetching it first if need be; lock held)."""
        if self._challenge is None and not self._hello(hello_wait, block):
            return False
        return self._send_raw({**message, "c": self._challenge}, block)

    def _hello(self, wait: Optional[float], block: bool) -> bool:
        """Get this connection's challenge; False if none came within ``wait`` seconds."""
        now = time.monotonic()
        if not block and self._hello_failed_at is not None and \
                now - self._hello_failed_at < self.HELLO_RETRY:
            return False
        if wait is None:
            wait = self.startup_timeout + 5.0 if block else self.QUICK_HELLO
        self._send_raw({"t": "hello"}, block=False)
        deadline = now + wait
        while True:
            msg = self._recv(max(0.0, deadline - time.monotonic()), want="challenge")
            if msg is None:
                self._hello_failed_at = time.monotonic()
                return False
            if isinstance(msg.get("c"), str):
                self._challenge = msg["c"]
                self._hello_failed_at = None
                self._start_heartbeat()
                return True

    def _read(self, timeout: float) -> Optional[dict]:
        """Next authentic message within ``timeout`` seconds, or None (lock held)."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            ms = int(remaining * 1000) + 1 if remaining > 0 else 0   # 0: look once
            ready = dict(self._poller.poll(ms))
            if self._monitor in ready:
                self._check_handshakes()
            if self._sock not in ready:
                if ready and remaining > 0:
                    continue
                return None
            frames = self._sock.recv_multipart()
            msg = unseal(self._secret, frames)
            if msg is None:
                self.dropped += 1
                if self.dropped <= 3:
                    print(f"minimpi: rank {self.rank}: dropped a coordinator message with a "
                          f"bad MAC", file=sys.stderr)
                continue
            handler = self._handlers.get(msg.get("t"))
            if handler is not None:   # a notice (a failed process): no reader waits for it
                handler(msg)
                continue
            if msg.get("t") == "challenge" and isinstance(msg.get("c"), str) \
                    and self._challenge is not None:
                # zmq reconnected (a new connection, so a new challenge); messages sent on
                # the old one are lost, which the callers' timeouts already allow for
                self._challenge = msg["c"]
            return msg

    #: failed handshakes (zmq retries each) before the secret is said to be wrong
    AUTH_FAILURES = 2

    def _check_handshakes(self) -> None:
        """Read the connection's events; AuthenticationError once handshakes keep failing
        and none ever succeeded (lock held)."""
        while self._monitor.poll(0):
            event = monitor_event(self._monitor.recv_multipart())
            if event == self._zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self._handshake_ok = True
            else:
                self._handshakes_failed += 1
        if not self._handshake_ok and self._handshakes_failed >= self.AUTH_FAILURES:
            raise AuthenticationError(
                f"rank {self.rank}: authentication with the coordinator at {self.address} "
                f"failed: it does not hold the key of this rank's secret (do all ranks of "
                f"job {self.job_id} share one secret? MINIMPI_SECRET, MINIMPI_SECRET_FILE or "
                f"~/.minimpi/secret differ between them)")

    def _recv(self, timeout: float, want: Optional[str] = None) -> Optional[dict]:
        """Next authentic message (of kind ``want`` if given) within ``timeout`` seconds."""
        for i, msg in enumerate(self._inbox):
            if want is None or msg.get("t") == want:
                del self._inbox[i]
                return msg
        deadline = time.monotonic() + timeout
        while True:
            msg = self._read(max(0.0, deadline - time.monotonic()))
            if msg is None or want is None or msg.get("t") == want:
                return msg
            self._inbox.append(msg)

    # -- notices -------------------------------------------------------------------------
    @property
    def closed_event(self) -> threading.Event:
        """Set once the connection is closed (threads that use it end on it)."""
        return self._stop

    def on_message(self, kind: str, handler: Callable[[dict], None]) -> None:
        """Call ``handler(message)`` for every coordinator message of ``kind`` as it is read
        (by whichever thread reads), instead of keeping it for a reader."""
        self._handlers[kind] = handler

    def read_notices(self) -> None:
        """Read what the coordinator sent, without waiting: notices go to their handlers,
        replies are kept for their readers. Never blocks for long (skipped while another
        thread talks to the coordinator, which reads them then)."""
        if self._closed or not self._lock.acquire(timeout=0.01):
            return
        try:
            if self._closed:
                return
            while True:
                msg = self._read(0)
                if msg is None:
                    break
                if msg.get("t") != "challenge":
                    self._inbox.append(msg)
        except Exception:   # reading notices must never take the rank down
            pass
        finally:
            self._lock.release()

    # -- heartbeat -----------------------------------------------------------------------
    def _start_heartbeat(self) -> None:
        if self.heartbeat_interval > 0 and self._heartbeat is None:
            self._heartbeat = threading.Thread(target=self._heartbeat_main,
                                               name="minimpi-heartbeat", daemon=True)
            start_thread_blocked(self._heartbeat)

    def _heartbeat_main(self) -> None:
        while not self._stop.wait(self.heartbeat_interval):
            if not self._lock.acquire(timeout=self.heartbeat_interval):
                continue   # someone is talking to the coordinator: that proves life too
            try:
                if self._closed:
                    return
                while True:   # keep replies that arrived unasked for their reader
                    msg = self._read(0)
                    if msg is None:
                        break
                    if msg.get("t") != "challenge":
                        self._inbox.append(msg)
                self._send_raw({"t": "hb", "c": self._challenge}, block=False)
            except Exception:   # a heartbeat must never take the rank down
                pass
            finally:
                self._lock.release()

    # -- API -----------------------------------------------------------------------------
    def exchange_addresses(self, my_address: str, timeout: Optional[float] = None) -> list[str]:
        """Register ``my_address`` and wait for the full table (index = rank).

        Raises MPITimeoutError when the coordinator reports that some ranks never
        registered (naming them), or when no answer arrives within ``timeout`` seconds
        (default: the launcher's startup timeout plus 5 s).
        """
        if timeout is None:
            timeout = self.startup_timeout + 5.0
        no_table = MPITimeoutError(
            f"rank {self.rank}: no address table from the coordinator at {self.address} "
            f"after {timeout:g} s (is the launcher alive?)")
        register = {"t": "register", "addr": str(my_address), "pid": os.getpid(),
                    "host": host_identity()}
        with self._lock:
            deadline = time.monotonic() + timeout
            if not self._send(register, hello_wait=timeout):
                raise no_table
            challenge = self._challenge
            while True:
                msg = self._recv(max(0.0, deadline - time.monotonic()))
                if msg is None:
                    raise no_table
                kind = msg.get("t")
                if kind == "challenge" and self._challenge != challenge:
                    challenge = self._challenge     # reconnected: register again
                    self._send(register)
                    continue
                if kind == "table":
                    table = [str(a) for a in msg.get("addrs", [])]
                    if len(table) != self.size:
                        raise MinimpiError(
                            f"rank {self.rank}: coordinator sent {len(table)} addresses "
                            f"for a job of size {self.size}")
                    self.table = table
                    hosts = [str(h) for h in msg.get("hosts", [])]
                    self.hosts = hosts if len(hosts) == self.size else None
                    return table
                if kind == "error":
                    missing = msg.get("missing") or []
                    text = msg.get("msg") or "coordinator error"
                    if msg.get("kind") == "startup_timeout":
                        err = MPITimeoutError(text)
                        err.missing_ranks = list(missing)
                        raise err
                    raise MinimpiError(text)
                if kind == "abort":
                    raise JobAbortedError(msg.get("msg") or "the job was aborted")
                # anything else (a late ack...) is not for us: keep waiting

    def request(self, message: dict, timeout: float) -> Optional[dict]:
        """Ask the launcher something about other jobs (``Spawn``, ports, names: the
        ``REQUEST_KINDS`` of ``launcher/coordinator.py``) and wait at most ``timeout``
        seconds for its ``reply``; None if none came. The lock is taken for short slices
        only, so the heartbeat goes on while the launcher works on the answer."""
        if self._closed:
            return None
        with self._request_lock:
            self._requests += 1
            number = self._requests
            with self._lock:
                if not self._send({**message, "n": number}, hello_wait=min(timeout, 30.0)):
                    return None
            deadline = time.monotonic() + timeout
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                with self._lock:
                    msg = self._recv(min(remaining, 0.5), want="reply")
                if msg is not None and msg.get("n") == number:
                    return msg
                # (nothing yet, or a late reply to an earlier request that gave up: dropped)

    def report_state(self, state: dict) -> None:
        """Tell the launcher what this rank is blocked on. Fire-and-forget."""
        if self._closed:
            return
        if not self._lock.acquire(timeout=0.05):
            return
        try:
            self._send({"t": "state", "s": dict(state), "time": time.time()}, block=False)
        except Exception:
            pass
        finally:
            self._lock.release()

    def report_live(self, snapshot: dict) -> bool:
        """Send this rank's live-view snapshot (``minimpi run --dashboard``: the reporter of
        :mod:`minimpi.runtime.dashboard`, on a connection of its own). Fire-and-forget:
        False when it could not go now (it is replaced by the next one)."""
        if self._closed or not self._lock.acquire(timeout=0.05):
            return False
        try:
            return self._send({"t": "live", "s": snapshot}, block=False)
        except Exception:
            return False
        finally:
            self._lock.release()

    def report_failure(self, state: dict, timeout: float = 1.0) -> bool:
        """Tell the launcher why this rank is about to fail, and wait (at most ``timeout``
        seconds) until it has read it.

        The wait is what lets the launcher name the right rank: once this returns, the
        launcher knows this failure before it can see the process end.
        """
        if self._closed:
            return False
        if not self._lock.acquire(timeout=timeout):
            return False
        try:
            deadline = time.monotonic() + timeout
            if not self._send({"t": "failed", "s": dict(state), "time": time.time()},
                              block=False, hello_wait=timeout):
                return False
            return self._recv(max(0.0, deadline - time.monotonic()), want="failed_ack") \
                is not None
        except Exception:
            return False
        finally:
            self._lock.release()

    def abort(self, code: int, message: str) -> None:
        """Ask the launcher to end the whole job with exit code ``code``.

        Waits at most ~1 s for the coordinator's acknowledgement, then returns; the
        caller is expected to exit (the launcher will terminate it anyway).
        """
        if self._closed:
            return
        with self._lock:
            deadline = time.monotonic() + 1.0
            if not self._send({"t": "abort", "code": int(code), "msg": str(message)},
                              block=False, hello_wait=1.0):
                return
            self._recv(max(0.0, deadline - time.monotonic()), want="abort_ack")

    def finalize(self, lost: Sequence[int] = ()) -> None:
        """Tell the launcher this rank finished cleanly (and which peers it saw vanish)."""
        if self._closed:
            return
        with self._lock:
            self._send({"t": "finalize", "lost": [int(p) for p in lost]}, block=False,
                       hello_wait=1.0)

    def close(self) -> None:
        if self._closed:
            return
        self._stop.set()
        with self._lock:
            self._closed = True
            try:
                self._sock.disable_monitor()
            except self._zmq.ZMQError:
                pass
            self._monitor.close(linger=0)
            self._sock.close(linger=1000)
            self._ctx.term()
