"""How a rank learns who it is: rank, size, job secret, and where the coordinator is.

``bootstrap()`` turns the environment into a :class:`BootInfo`. It tries a short list of
*sources* in order (:data:`SOURCES`); the first one that recognises the environment wins:

1. ``minimpi run`` (the launcher sets ``MINIMPI_RANK``, ``MINIMPI_SIZE``, ``MINIMPI_COORD``,
   ``MINIMPI_SECRET``, ``MINIMPI_JOBID``, ``MINIMPI_BIND``, ...);
2. a singleton world of size 1 (plain ``python script.py``, MPI's "singleton init").

Slurm (``SLURM_PROCID``/``SLURM_NTASKS``) and torchrun-style variables
(``RANK``/``WORLD_SIZE``/``MASTER_ADDR``) are meant to become further entries of
:data:`SOURCES`, placed before the singleton; they are not implemented yet.

The :class:`CoordinatorClient` is the rank's side of the control plane: one pyzmq DEALER
talking to the launcher's ROUTER. Every message in both directions is a two-frame zmq
message ``[mac, payload]`` where ``payload`` is a msgpack map and ``mac`` is
HMAC-SHA256(job secret, payload). A message whose MAC does not verify is dropped before
it is unpacked. See ``launcher/coordinator.py`` for the message table.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional

import msgpack

from minimpi.errors import JobAbortedError, MinimpiError, MPITimeoutError

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
    secret: bytes                                 # b"" for a singleton
    job_id: str
    bind_host: str                                # where the data plane should listen
    coordinator: "CoordinatorClient | None"       # None for a singleton
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
    if environ.get(ENV_STARTUP_TIMEOUT):
        try:
            client.startup_timeout = float(environ[ENV_STARTUP_TIMEOUT])
        except ValueError:
            pass
    return BootInfo(rank=rank, size=size, secret=secret, job_id=job_id,
                    bind_host=environ.get(ENV_BIND, DEFAULT_BIND), coordinator=client,
                    env=_minimpi_env(environ), source="minimpi-run")


def _singleton(environ: Mapping[str, str]) -> Optional[BootInfo]:
    """Source: nothing recognised -> a world of one process (MPI singleton init)."""
    return BootInfo(rank=0, size=1, secret=b"", job_id=f"singleton-{os.getpid()}",
                    bind_host=environ.get(ENV_BIND, DEFAULT_BIND), coordinator=None,
                    env=_minimpi_env(environ), source="singleton")


#: Bootstrap sources, tried in order; each returns a BootInfo or None ("not mine").
#: Future: insert ("slurm", _from_slurm) and ("torchrun", _from_torchrun) before singleton.
SOURCES: list[tuple[str, Callable[[Mapping[str, str]], Optional[BootInfo]]]] = [
    ("minimpi-run", _from_launcher),
    ("singleton", _singleton),
]


def bootstrap(environ: Mapping[str, str] = os.environ) -> BootInfo:
    """Launcher env -> BootInfo; no MINIMPI_RANK -> singleton world of size 1."""
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
    t.start()


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

    Thread-safe: all socket use is under one lock. ``report_state`` never blocks.
    """

    #: the launcher's --startup-timeout (from MINIMPI_STARTUP_TIMEOUT), used when
    #: exchange_addresses is called without an explicit timeout
    startup_timeout: float = 60.0

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
        self._sock.connect(address)
        self._closed = False
        self.table: Optional[list[str]] = None
        #: every rank's host identity (:func:`host_identity`), index = rank, after the exchange
        self.hosts: Optional[list[str]] = None
        self.dropped = 0   # replies dropped for a bad MAC

    # -- plumbing ------------------------------------------------------------------------
    def _send(self, message: dict, block: bool = True) -> bool:
        message = {"r": self.rank, **message}
        frames = seal(self._secret, message)
        flags = 0 if block else self._zmq.NOBLOCK
        try:
            self._sock.send_multipart(frames, flags=flags)
            return True
        except self._zmq.Again:
            return False

    def _recv(self, timeout: float) -> Optional[dict]:
        """Next authentic message within ``timeout`` seconds, or None."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            if not self._sock.poll(int(remaining * 1000) + 1, self._zmq.POLLIN):
                return None
            frames = self._sock.recv_multipart()
            msg = unseal(self._secret, frames)
            if msg is None:
                self.dropped += 1
                print(f"minimpi: rank {self.rank}: dropped a coordinator message with a bad MAC",
                      file=sys.stderr)
                continue
            return msg

    # -- API -----------------------------------------------------------------------------
    def exchange_addresses(self, my_address: str, timeout: Optional[float] = None) -> list[str]:
        """Register ``my_address`` and wait for the full table (index = rank).

        Raises MPITimeoutError when the coordinator reports that some ranks never
        registered (naming them), or when no answer arrives within ``timeout`` seconds
        (default: the launcher's startup timeout plus 5 s).
        """
        if timeout is None:
            timeout = self.startup_timeout + 5.0
        with self._lock:
            self._send({"t": "register", "addr": str(my_address), "pid": os.getpid(),
                        "host": host_identity()})
            deadline = time.monotonic() + timeout
            while True:
                msg = self._recv(max(0.0, deadline - time.monotonic()))
                if msg is None:
                    raise MPITimeoutError(
                        f"rank {self.rank}: no address table from the coordinator at "
                        f"{self.address} after {timeout:g} s (is the launcher alive?)")
                kind = msg.get("t")
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

    def abort(self, code: int, message: str) -> None:
        """Ask the launcher to end the whole job with exit code ``code``.

        Waits at most ~1 s for the coordinator's acknowledgement, then returns; the
        caller is expected to exit (the launcher will terminate it anyway).
        """
        if self._closed:
            return
        with self._lock:
            self._send({"t": "abort", "code": int(code), "msg": str(message)}, block=False)
            deadline = time.monotonic() + 1.0
            while True:
                msg = self._recv(max(0.0, deadline - time.monotonic()))
                if msg is None or msg.get("t") == "abort_ack":
                    return

    def finalize(self) -> None:
        """Tell the launcher this rank finished cleanly."""
        if self._closed:
            return
        with self._lock:
            self._send({"t": "finalize"}, block=False)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._lock:
            self._sock.close(linger=1000)
            self._ctx.term()
