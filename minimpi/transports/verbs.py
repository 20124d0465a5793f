"""RDMA verbs transport: one reliable-connected (RC) queue pair per peer, through pyverbs.

Selected with ``MINIMPI_TRANSPORT=verbs``. pyverbs is optional (Debian: ``python3-pyverbs``); see
:func:`probe` for the one-line reason when it cannot be used.

Wiring. ``listen()`` opens the device, creates one RC queue pair per peer and posts its
receives, and returns an address string carrying this rank's endpoint: LID, GID, active MTU, a
random 24-bit PSN and the queue pair number it made for each peer. The coordinator exchanges
these strings; ``set_peers()`` moves every queue pair to RTR/RTS with the peer's numbers. The
strings travel only through the coordinator, which authenticates every rank with the job secret,
so a queue pair is only ever connected to a rank of this job (an RC queue pair accepts nothing
but its one connected peer; remote keys are valid only on this process's queue pairs).

Messages. Every message lands in one of ``slots`` pre-posted, registered receive slots of
``slot_size`` bytes per peer and starts with an 8-byte header ``type | 0 | credits | arg``:

- ``FRAME``: a whole frame (32-byte frame header and payload) that fits one slot.
- ``FRAG_HEAD`` then ``FRAG``...: a frame too large for one slot but below the rendezvous
  threshold, copied through slots in order.
- ``RTS`` (frame header, ``arg`` = transfer id): a frame above the threshold. The receiver asks
  its sink where the payload goes (``frame_arrived``), registers that buffer (through a bounded
  registration cache that keeps the array alive while registered) and answers ``GRANT`` with
  its address and rkey; the sender registers its own segments and writes them straight into the
  destination with RDMA_WRITE, the last one RDMA_WRITE_WITH_IMM, whose completion at the
  receiver (it consumes a receive slot) delivers the payload. Zero copies on both ends. When the
  destination cannot be registered the receiver grants address 0 and the sender falls back to
  ``FRAG`` messages; when the sender's segments cannot be registered it never sends ``RTS``.
- ``GRANT``, ``CREDIT``, ``HELLO``, ``BYE``: control (``BYE``: the rank is closing).

Flow control. A sender never posts a message the peer has no receive for (the queue pairs use
``rnr_retry = 0``, so a receiver-not-ready would be an error, never a silent retry): it holds
one credit per receive the peer has posted for it. The receiver reposts a slot as soon as the
message is consumed and returns credits in the header of every message it sends (or in the
immediate data of a write), and with an explicit ``CREDIT`` once ``slots // 4`` are owed. Data
messages leave the last ``RESERVED`` credits to control messages (credit returns and grants), so
those never starve behind data.

Order. Frames to one peer are delivered in the order sent (MPI's non-overtaking rule): RC
delivers messages in order, and a sender keeps the frames behind a rendezvous frame until that
frame's writes are posted, so nothing can overtake its payload.

Progress. ``progress()`` polls the completion queue; only when it is empty does it arm the
completion channel and ``poll()`` its file descriptor (a thread parked in pyverbs'
``get_cq_event`` would hold the GIL). A failed work completion marks that peer lost:
``peer_lost`` names the verbs status, and the engine fails every request that involves the peer.

Tests drive the same protocol over an in-memory fake of :class:`VerbsOps` with RC semantics
(tests/verbs/fake_verbs.py); :class:`PyverbsOps` is the real device.
"""
from __future__ import annotations

import collections
import fcntl
import os
import select
import socket
import struct
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Deque, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from ..errors import TransportError
from . import signal_guard
from .base import FrameSink, OnSent, Transport
from .frames import HAS_PAYLOAD, HEADER_SIZE, Header, unpack

# -- the verbs operations the protocol needs -------------------------------------------------

#: access flags of a registration (mapped to IBV_ACCESS_* by the real device)
ACCESS_LOCAL_WRITE = 1
ACCESS_REMOTE_WRITE = 2
ACCESS_REMOTE_READ = 4

#: send opcodes
OP_SEND = 1
OP_WRITE = 2
OP_WRITE_IMM = 3
OP_READ = 4

#: completion opcodes
WC_SEND = 1
WC_WRITE = 2
WC_RECV = 3
WC_RECV_WRITE_IMM = 4
WC_READ = 5

#: ibv_wc_status values (their order is libibverbs' ABI) with what each means for a user
WC_STATUS = (
    ("SUCCESS", "success"),
    ("LOC_LEN_ERR", "local length error: a message was longer than its receive buffer"),
    ("LOC_QP_OP_ERR", "local queue pair operation error"),
    ("LOC_EEC_OP_ERR", "local EE context operation error"),
    ("LOC_PROT_ERR", "local protection error: a buffer is not covered by a valid local key"),
    ("WR_FLUSH_ERR", "flushed: the queue pair was already in the error state"),
    ("MW_BIND_ERR", "memory window bind error"),
    ("BAD_RESP_ERR", "bad response from the peer"),
    ("LOC_ACCESS_ERR", "local access error"),
    ("REM_INV_REQ_ERR", "remote invalid request: the peer rejected the message"),
    ("REM_ACCESS_ERR", "remote access error: bad remote key, address or permission for an "
                       "RDMA write"),
    ("REM_OP_ERR", "remote operation error"),
    ("RETRY_EXC_ERR", "transport retry counter exceeded: the peer stopped answering "
                      "(it exited, or is unreachable with this GID/port)"),
    ("RNR_RETRY_EXC_ERR", "receiver not ready: the peer had no receive posted"),
    ("LOC_RDD_VIOL_ERR", "local RDD violation"),
    ("REM_INV_RD_REQ_ERR", "remote invalid RD request"),
    ("REM_ABORT_ERR", "remote aborted"),
    ("INV_EECN_ERR", "invalid EE context number"),
    ("INV_EEC_STATE_ERR", "invalid EE context state"),
    ("FATAL_ERR", "fatal device error"),
    ("RESP_TIMEOUT_ERR", "response timeout"),
    ("GENERAL_ERR", "general error"),
)


def status_text(status: int) -> str:
    """``12`` -> ``'IBV_WC_RETRY_EXC_ERR (transport retry counter exceeded: ...)'``."""
    if 0 <= status < len(WC_STATUS):
        name, meaning = WC_STATUS[status]
        return f"IBV_WC_{name} ({meaning})"
    return f"ibv_wc_status {status}"


class Completion(NamedTuple):
    """One work completion. For a failed one only ``wr_id`` and ``status`` are meaningful."""
    wr_id: int
    status: int
    opcode: int
    byte_len: int
    imm: int


class Registration(NamedTuple):
    """A registered memory region: ``handle`` is the backend's object (an MR)."""
    handle: object
    addr: int
    length: int
    lkey: int
    rkey: int
    access: int


@dataclass(frozen=True)
class PortInfo:
    """What this rank's device and port offer, and what peers need to reach it."""
    device: str
    port: int
    gid_index: int
    lid: int
    gid: str          # 8 groups of 4 hex digits, as pyverbs prints it
    mtu: int          # ibv_mtu enum: 1=256 .. 5=4096
    max_sge: int
    max_msg: int      # largest single message/write the port takes
    max_cqe: int
    max_qp_wr: int


class VerbsError(TransportError):
    """A verbs call itself failed (registration, posting, queue pair transition)."""


class VerbsOps(ABC):
    """The few verbs the protocol uses. Keys and addresses are plain ints; queue pairs are
    named by their number. :class:`PyverbsOps` is the real device; the tests' fake mirrors RC
    semantics in memory."""

    info: PortInfo

    @abstractmethod
    def create_cq(self, depth: int) -> None:
        """Create the one completion queue (with its completion channel) every QP uses."""

    @abstractmethod
    def create_qp(self, send_depth: int, recv_depth: int, max_send_sge: int) -> int:
        """A new RC queue pair in the INIT state (receives may be posted); returns its number."""

    @abstractmethod
    def connect_qp(self, qpn: int, local_psn: int, remote: "PeerEndpoint", remote_qpn: int) -> None:
        """Move queue pair ``qpn`` to RTR and RTS towards ``remote``'s queue pair."""

    @abstractmethod
    def register(self, address: int, length: int, access: int) -> Registration:
        """Register ``length`` bytes at ``address`` (raises VerbsError if the device refuses)."""

    @abstractmethod
    def deregister(self, registration: Registration) -> None:
        """Undo :meth:`register`."""

    @abstractmethod
    def post_recv(self, qpn: int, wr_id: int, address: int, length: int, lkey: int) -> None:
        """Post one receive of up to ``length`` bytes into registered memory."""

    @abstractmethod
    def post_send(self, qpn: int, wr_id: int, opcode: int, sges: Sequence[Tuple[int, int, int]],
                  imm: int = 0, remote_addr: int = 0, rkey: int = 0) -> None:
        """Post one signalled send or RDMA write; ``sges`` are ``(address, length, lkey)``."""

    @abstractmethod
    def poll(self, max_entries: int) -> List[Completion]:
        """Completions now in the queue (never blocks)."""

    @abstractmethod
    def arm(self) -> None:
        """Request one event on the channel for the next completion."""

    @abstractmethod
    def fileno(self) -> int:
        """The completion channel's descriptor: readable once an armed event fired."""

    @abstractmethod
    def consume_events(self) -> None:
        """Take (and acknowledge) the channel's pending events without blocking."""

    @abstractmethod
    def close(self) -> None:
        """Destroy every verbs object, queue pairs first."""


# -- this rank's endpoint, as exchanged through the coordinator ------------------------------

ADDRESS_PREFIX = "verbs1"


@dataclass(frozen=True)
class PeerEndpoint:
    host: str
    lid: int
    gid: str
    mtu: int
    psn: int
    qpns: Tuple[int, ...]    # the queue pair this rank made for each rank (0 for itself)


def format_endpoint(host: str, info: PortInfo, psn: int, qpns: Sequence[int]) -> str:
    return (f"{ADDRESS_PREFIX};host={host};lid={info.lid};gid={info.gid};mtu={info.mtu};"
            f"psn={psn};qpn={','.join(str(q) for q in qpns)}")


def parse_endpoint(text: str, size: int) -> PeerEndpoint:
    """Parse :func:`format_endpoint`'s string (ValueError saying what is wrong)."""
    parts = text.split(";")
    if parts[0] != ADDRESS_PREFIX:
        raise ValueError(f"not a verbs endpoint ({text[:40]!r}): every rank must use "
                         f"MINIMPI_TRANSPORT=verbs")
    fields = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
    try:
        qpns = tuple(int(q) for q in fields["qpn"].split(","))
        endpoint = PeerEndpoint(fields["host"], int(fields["lid"]), fields["gid"],
                                int(fields["mtu"]), int(fields["psn"]), qpns)
    except (KeyError, ValueError) as exc:
        raise ValueError(f"malformed verbs endpoint {text!r} ({exc})") from None
    if len(qpns) != size:
        raise ValueError(f"verbs endpoint lists {len(qpns)} queue pairs for a job of {size}")
    return endpoint


# -- settings ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class VerbsConfig:
    """Protocol sizes (``MINIMPI_VERBS_*``); the defaults pin ~0.5 MiB per peer."""
    slots: int = 32                        # receive slots (= credits) per peer
    slot_size: int = 8 * 1024
    rndv_threshold: int = 64 * 1024        # larger payloads are written zero-copy
    reg_cache_bytes: int = 256 * 1024 * 1024
    reg_cache_entries: int = 128
    linger: float = 0.5                    # how long close() waits for its goodbyes to go out

    @classmethod
    def from_env(cls, env: Mapping[str, str], rank: int) -> "VerbsConfig":
        from ..data.units import parse_size

        def get(name: str, default: int, parse=int) -> int:
            raw = env.get(name)
            if raw is None or raw == "":
                return default
            try:
                return parse(raw)
            except ValueError:
                raise TransportError(f"rank {rank}: {name}={raw!r} is not a valid number") from None

        cfg = cls(slots=get("MINIMPI_VERBS_SLOTS", cls.slots),
                  slot_size=get("MINIMPI_VERBS_SLOT_SIZE", cls.slot_size, parse_size),
                  rndv_threshold=get("MINIMPI_VERBS_RNDV_THRESHOLD", cls.rndv_threshold, parse_size),
                  reg_cache_bytes=get("MINIMPI_VERBS_REG_CACHE", cls.reg_cache_bytes, parse_size))
        cfg.check(rank)
        return cfg

    def check(self, rank: int) -> None:
        if not 4 <= self.slots <= 4096:
            raise TransportError(f"rank {rank}: MINIMPI_VERBS_SLOTS={self.slots}: expected 4..4096 "
                                 f"(credits need a reserve for control messages)")
        if not _MSG.size + HEADER_SIZE + 64 <= self.slot_size <= 1 << 20:
            raise TransportError(f"rank {rank}: MINIMPI_VERBS_SLOT_SIZE={self.slot_size}: expected "
                                 f"{_MSG.size + HEADER_SIZE + 64} bytes .. 1 MiB")


# -- wire format -------------------------------------------------------------------------------

_MSG = struct.Struct("<BBHI")        # type, 0, credits returned, arg (transfer id)
_GRANT = struct.Struct("<QI")        # destination address, rkey (0, 0: send it as fragments)
M_FRAME, M_FRAG_HEAD, M_FRAG, M_RTS, M_GRANT, M_CREDIT, M_HELLO, M_BYE = range(1, 9)
_MSG_NAMES = {M_FRAME: "FRAME", M_FRAG_HEAD: "FRAG_HEAD", M_FRAG: "FRAG", M_RTS: "RTS",
              M_GRANT: "GRANT", M_CREDIT: "CREDIT", M_HELLO: "HELLO", M_BYE: "BYE"}

#: credits data messages leave to control messages (credit returns, grants, goodbyes)
RESERVED = 2

# wr_id = kind << 56 | peer << 32 | index
K_RECV, K_SEND, K_WRITE, K_RDMA = 1, 2, 3, 4


def _wr_id(kind: int, peer: int, index: int) -> int:
    return (kind << 56) | (peer << 32) | (index & 0xFFFFFFFF)


def _as_bytes(view: memoryview) -> memoryview:
    """A flat unsigned-byte view of a contiguous buffer (slice assignment needs format 'B')."""
    view = memoryview(view)
    if view.format == "B" and view.ndim == 1:
        return view
    return view.cast("B")


def address_of(view: memoryview) -> int:
    """The address of a contiguous buffer's first byte (read-only buffers too)."""
    return int(np.frombuffer(view, dtype=np.uint8).ctypes.data)


# -- registration cache ------------------------------------------------------------------------

class _CacheEntry:
    __slots__ = ("reg", "keepalive", "users")

    def __init__(self, reg: Registration, keepalive: memoryview) -> None:
        self.reg = reg
        self.keepalive = keepalive   # the buffer cannot be freed (or resized) while registered
        self.users = 0


class RegistrationCache:
    """Registrations reused across messages, least recently used first out.

    A buffer is found again when a cached region covers it with the access it needs. Each
    entry holds a reference to the buffer it registered: while the registration lives the
    memory cannot be freed and its address cannot be reused by another object, so a stale
    key can never point at someone else's data. Bounded in bytes and entries; entries in use
    by a transfer are never evicted (the cache may exceed its bound until they are released).
    """

    def __init__(self, ops: VerbsOps, max_bytes: int, max_entries: int) -> None:
        self.ops = ops
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self._entries: "collections.OrderedDict[int, _CacheEntry]" = collections.OrderedDict()
        self.bytes = 0
        self.hits = 0
        self.misses = 0

    def acquire(self, view: memoryview, access: int) -> _CacheEntry:
        """A registration covering ``view`` (contiguous) with ``access``; release it after use."""
        addr = address_of(view)
        end = addr + view.nbytes
        for key, entry in self._entries.items():
            reg = entry.reg
            if reg.addr <= addr and end <= reg.addr + reg.length and not access & ~reg.access:
                self._entries.move_to_end(key)
                entry.users += 1
                self.hits += 1
                return entry
        reg = self.ops.register(addr, view.nbytes, access)
        entry = _CacheEntry(reg, view)
        entry.users = 1
        self._entries[id(entry)] = entry
        self.bytes += reg.length
        self.misses += 1
        self._evict()
        return entry

    def release(self, entry: _CacheEntry) -> None:
        entry.users -= 1
        self._evict()

    def _evict(self) -> None:
        while self.bytes > self.max_bytes or len(self._entries) > self.max_entries:
            victim = next((k for k, e in self._entries.items() if e.users == 0), None)
            if victim is None:
                return
            entry = self._entries.pop(victim)
            self.bytes -= entry.reg.length
            self.ops.deregister(entry.reg)

    def __len__(self) -> int:
        return len(self._entries)

    def covers(self, view: memoryview) -> bool:
        """Whether some cached registration covers ``view`` (tests and diagnostics)."""
        addr = address_of(view)
        return any(e.reg.addr <= addr and addr + view.nbytes <= e.reg.addr + e.reg.length
                   for e in self._entries.values())

    def clear(self) -> None:
        for entry in self._entries.values():
            self.ops.deregister(entry.reg)
        self._entries.clear()
        self.bytes = 0


# -- the transport -----------------------------------------------------------------------------

# stages of an outgoing frame
_NEW, _WHOLE, _FRAG_HEAD, _FRAG_BODY, _RTS, _WAIT_GRANT, _WRITE, _WRITTEN = range(8)
# states of a peer
_INIT, _READY, _GONE = range(3)
#: largest single RDMA write (the port's max_msg_sz may be lower: 8 MiB on soft-RoCE)
MAX_WRITE = 1 << 30
#: send-queue entries beyond the slots, for the RDMA writes of one rendezvous frame
WRITE_DEPTH = 16
#: most scatter/gather entries per write (device limit permitting)
MAX_SGE = 16
#: send-queue entries per peer for one-sided RDMA writes and reads (:meth:`VerbsTransport.rdma`)
RDMA_DEPTH = 16


class Exposure(NamedTuple):
    """Memory exposed to the peers' one-sided RDMA (a window): what they need to reach it."""
    addr: int
    rkey: int
    length: int
    handle: object


class _RdmaOp:
    """One one-sided RDMA write or read on its way to a peer's exposed memory."""
    __slots__ = ("write", "local", "remote_addr", "rkey", "on_done", "entry")

    def __init__(self, write: bool, local: memoryview, remote_addr: int, rkey: int,
                 on_done: OnSent) -> None:
        self.write, self.local = write, local
        self.remote_addr, self.rkey = remote_addr, rkey
        self.on_done = on_done
        self.entry: Optional[_CacheEntry] = None


class _Out:
    """A frame on its way to one peer."""
    __slots__ = ("header", "segments", "total", "on_sent", "stage", "seg", "off", "sent",
                 "xfer", "entries", "plan", "next_wr", "done_wrs", "rkey")

    def __init__(self, header: memoryview, segments: List[memoryview], on_sent: OnSent) -> None:
        self.header = header
        self.segments = segments
        self.total = sum(s.nbytes for s in segments)
        self.on_sent = on_sent
        self.stage = _NEW
        self.seg = self.off = self.sent = 0        # copy cursor (fragments)
        self.xfer = -1
        self.entries: List[_CacheEntry] = []       # registrations of the segments (writes)
        self.plan: List[Tuple[List[Tuple[int, int, int]], int]] = []   # (sges, remote address)
        self.next_wr = self.done_wrs = 0
        self.rkey = 0


class _Rx:
    """The frame whose payload is arriving from one peer."""
    __slots__ = ("header", "target", "pos", "entry", "xfer")

    def __init__(self, header: Header, target: memoryview, xfer: int = -1) -> None:
        self.header = header
        self.target = target
        self.pos = 0
        self.entry: Optional[_CacheEntry] = None
        self.xfer = xfer


class _Peer:
    """This rank's queue pair to one peer and the protocol state on it."""

    def __init__(self, rank: int, index: int, qpn: int, slots: int) -> None:
        self.rank = rank
        self.index = index                 # position among the peers (slot memory layout)
        self.qpn = qpn
        self.state = _INIT
        self.reason = ""
        self.host = "?"
        self.credits = slots               # receives the peer has posted for us
        self.to_return = 0                 # receives we reposted and have not announced yet
        self.free_slots = list(range(slots - 1, -1, -1))
        self.sq_free = 0
        self.queue: Deque[_Out] = collections.deque()
        self.ctrl: Deque[Tuple[int, int, memoryview]] = collections.deque()
        self.out_xfers: Dict[int, _Out] = {}
        self.next_xfer = 1
        self.rx: Optional[_Rx] = None
        self.pumping = False
        self.hello_in = False
        self.hello_slot = -1
        self.hello_acked = False
        self.rdma_queue: Deque[_RdmaOp] = collections.deque()   # not posted yet
        self.rdma_posted: Dict[int, _RdmaOp] = {}                # posted, by op number
        self.next_rdma = 1


class VerbsTransport(Transport):
    """Frames over one RC queue pair per peer (see the module docstring for the protocol)."""

    name = "verbs"

    def __init__(self, rank: int, size: int, ops: VerbsOps, config: Optional[VerbsConfig] = None,
                 host: Optional[str] = None) -> None:
        self.rank = rank
        self.size = size
        self.ops = ops
        self.cfg = cfg = config or VerbsConfig()
        cfg.check(rank)
        self.host = host or socket.gethostname()
        self._sink: Optional[FrameSink] = None
        self._peers: List[Optional[_Peer]] = [None] * size
        self._listening = False
        self._closing = False
        self._closed = False
        self._frames = 0            # frames accepted whose on_sent has not run yet
        self._error: Optional[BaseException] = None
        self._poller = select.poll()
        self.psn = int.from_bytes(os.urandom(3), "little")
        self.cache = RegistrationCache(ops, cfg.reg_cache_bytes, cfg.reg_cache_entries)
        self.stats: "collections.Counter[str]" = collections.Counter()
        info = ops.info
        self._frame_room = cfg.slot_size - _MSG.size - HEADER_SIZE
        self._frag_room = cfg.slot_size - _MSG.size
        self._threshold = max(cfg.rndv_threshold, self._frame_room)
        self._return_at = max(2, cfg.slots // 4)
        self._send_depth = cfg.slots + WRITE_DEPTH + RDMA_DEPTH
        self._exposed: Dict[int, Registration] = {}
        self._max_write = max(1, min(info.max_msg, MAX_WRITE))
        self._max_sge = max(1, min(info.max_sge, MAX_SGE))

    # -- set-up ----------------------------------------------------------------------------
    def attach(self, sink: FrameSink) -> None:
        self._sink = sink

    def listen(self) -> str:
        cfg, ops = self.cfg, self.ops
        peers = [j for j in range(self.size) if j != self.rank]
        depth = len(peers) * (cfg.slots + self._send_depth) + 16
        if depth > ops.info.max_cqe:
            raise TransportError(
                f"rank {self.rank}: verbs: {len(peers)} peers need a completion queue of {depth} "
                f"entries but {ops.info.device} allows {ops.info.max_cqe}; lower MINIMPI_VERBS_SLOTS")
        if self._send_depth > ops.info.max_qp_wr:
            raise TransportError(f"rank {self.rank}: verbs: MINIMPI_VERBS_SLOTS={cfg.slots} exceeds "
                                 f"the queue depth {ops.info.max_qp_wr} of {ops.info.device}")
        ops.create_cq(depth)
        pool = max(1, len(peers)) * cfg.slots * cfg.slot_size
        # Slot memory is registered once for the life of the transport.
        self._recv_mem = np.zeros(pool, dtype=np.uint8)
        self._send_mem = np.zeros(pool, dtype=np.uint8)
        self._recv_view = memoryview(self._recv_mem)
        self._send_view = memoryview(self._send_mem)
        self._recv_reg = ops.register(address_of(self._recv_view), pool, ACCESS_LOCAL_WRITE)
        # writable although only read by the device: see _register_sources on read-only pins
        self._send_reg = ops.register(address_of(self._send_view), pool, ACCESS_LOCAL_WRITE)
        qpns = [0] * self.size
        for index, j in enumerate(peers):
            qpn = ops.create_qp(self._send_depth, cfg.slots, self._max_sge)
            peer = self._peers[j] = _Peer(j, index, qpn, cfg.slots)
            peer.sq_free = self._send_depth
            qpns[j] = qpn
            for slot in range(cfg.slots):
                self._post_recv(peer, slot)
        self._poller.register(ops.fileno(), select.POLLIN)
        self._listening = True
        return format_endpoint(self.host, ops.info, self.psn, qpns)

    def set_peers(self, addresses: Sequence[Optional[str]]) -> None:
        if not self._listening:
            raise TransportError(f"rank {self.rank}: verbs: set_peers before listen")
        for peer in self._peers:
            if peer is None or addresses[peer.rank] is None:
                continue        # a peer the router reaches another way: its queue pair stays idle
            try:
                remote = parse_endpoint(addresses[peer.rank], self.size)
            except ValueError as exc:
                raise TransportError(f"rank {self.rank}: address of rank {peer.rank}: {exc}") from None
            try:
                self.ops.connect_qp(peer.qpn, self.psn, remote, remote.qpns[self.rank])
            except VerbsError as exc:
                raise TransportError(
                    f"rank {self.rank}: cannot connect the verbs queue pair to rank {peer.rank} "
                    f"(host {remote.host}, GID {remote.gid}): {exc}") from None
            peer.host = remote.host
            peer.state = _READY

    def connect_all(self, timeout: float = 60.0) -> None:
        """Exchange a HELLO with every peer, so that a wiring problem (wrong GID, unreachable
        fabric) is reported at start-up, naming the peer, rather than at the first message."""
        live = [p for p in self._peers if p is not None and p.state == _READY]
        for peer in live:
            slot = self._post(peer, M_HELLO, 0, (), control=True)
            if slot < 0 and peer.state == _READY:
                raise TransportError(f"rank {self.rank}: verbs: cannot post the HELLO to rank {peer.rank}")
            peer.hello_slot = slot
        deadline = time.monotonic() + timeout
        while True:
            waiting = [p for p in live if not (p.hello_in and p.hello_acked)]
            if not waiting:
                return
            broken = [p for p in waiting if p.state == _GONE]
            if broken:
                p = broken[0]
                raise TransportError(
                    f"rank {self.rank}: cannot reach rank {p.rank} (host {p.host}) over verbs: "
                    f"{p.reason}; check that all ranks share one RDMA fabric and a usable GID "
                    f"(MINIMPI_VERBS_DEVICE, MINIMPI_VERBS_PORT, MINIMPI_VERBS_GID_INDEX)")
            if time.monotonic() > deadline:
                raise TransportError(
                    f"rank {self.rank}: verbs connections not confirmed within {timeout:g} s: no "
                    f"HELLO exchanged with ranks {[p.rank for p in waiting]}")
            self.progress(0.2)

    # -- sending ---------------------------------------------------------------------------
    def send(self, peer: int, header: bytes, payload: Sequence[memoryview], on_sent: OnSent) -> None:
        p = self._peers[peer] if 0 <= peer < self.size else None
        if p is None:
            raise TransportError(f"rank {self.rank}: verbs: no queue pair to rank {peer}")
        if p.state == _INIT:
            raise TransportError(f"rank {self.rank}: no address table yet (rendezvous not done)")
        if p.state == _GONE:
            if on_sent is not None:
                on_sent(f"connection to rank {peer}: {p.reason}")
            return
        segments = [_as_bytes(s) for s in payload if s.nbytes]
        p.queue.append(_Out(memoryview(header), segments, on_sent))
        self._frames += 1
        self._pump(p)

    def _pump(self, p: _Peer) -> None:
        # An on_sent callback may call send() for the same peer while this runs: the frame it
        # queues is taken by the running loop (or waits for the same missing credit), so the
        # nested call must not post out of order.
        if p.pumping:
            return
        p.pumping = True
        try:
            self._pump_queue(p)
        finally:
            p.pumping = False

    def _pump_queue(self, p: _Peer) -> None:
        while p.ctrl and p.state == _READY:
            mtype, arg, body = p.ctrl[0]
            if self._post(p, mtype, arg, (body,), control=True) < 0:
                return
            p.ctrl.popleft()
        queue = p.queue
        while queue and p.state == _READY:
            out = queue[0]
            if out.stage == _NEW:
                out.stage = self._choose(out)
            stage = out.stage
            if stage == _WHOLE:
                if self._post(p, M_FRAME, 0, [out.header, *out.segments]) < 0:
                    return
                queue.popleft()
                self._finish(out, None)
            elif stage in (_FRAG_HEAD, _FRAG_BODY):
                if not self._post_fragments(p, out):
                    return
                queue.popleft()
                self._finish(out, None)
            elif stage == _RTS:
                if self._post(p, M_RTS, p.next_xfer, (out.header,)) < 0:
                    return
                out.xfer = p.next_xfer
                p.next_xfer = (p.next_xfer + 1) & 0xFFFFFFFF or 1
                p.out_xfers[out.xfer] = out
                out.stage = _WAIT_GRANT
                return          # later frames wait: nothing may overtake this payload
            elif stage == _WAIT_GRANT:
                return
            elif stage == _WRITE:
                if not self._post_writes(p, out):
                    return
                queue.popleft()     # completes when its last write completes
                out.stage = _WRITTEN

    def _choose(self, out: _Out) -> int:
        if out.total <= self._frame_room:
            return _WHOLE
        if out.total > self._threshold and self._register_sources(out):
            return _RTS
        return _FRAG_HEAD

    def _register_sources(self, out: _Out) -> bool:
        entries = []
        try:
            for seg in out.segments:
                if not seg.contiguous:
                    raise VerbsError("non-contiguous segment")
                # Writable memory is registered writable although the device only reads it:
                # a read-only pin of anonymous memory can keep a page that copy-on-write later
                # replaces (a never-written numpy array maps the shared zero page), and the
                # cached registration would then send stale bytes.
                entries.append(self.cache.acquire(seg, 0 if seg.readonly else ACCESS_LOCAL_WRITE))
        except VerbsError:
            for entry in entries:
                self.cache.release(entry)
            self.stats["source_copy_fallbacks"] += 1
            return False
        out.entries = entries
        return True

    def _post(self, p: _Peer, mtype: int, arg: int, parts: Sequence[memoryview],
              control: bool = False) -> int:
        """Copy one message into a free send slot and post it; the slot index, or -1 if a
        credit, a slot or send-queue room is missing (the caller retries after progress)."""
        if p.credits < (1 if control else RESERVED + 1) or not p.free_slots or p.sq_free == 0:
            self.stats["send_stalls"] += 1
            return -1
        cfg = self.cfg
        slot = p.free_slots.pop()
        base = (p.index * cfg.slots + slot) * cfg.slot_size
        view = self._send_view[base:base + cfg.slot_size]
        pos = _MSG.size
        for part in parts:
            n = part.nbytes
            view[pos:pos + n] = part
            pos += n
        returned = min(p.to_return, 0xFFFF)
        _MSG.pack_into(view, 0, mtype, 0, returned, arg)
        try:
            self.ops.post_send(p.qpn, _wr_id(K_SEND, p.rank, slot), OP_SEND,
                               [(self._send_reg.addr + base, pos, self._send_reg.lkey)])
        except VerbsError as exc:
            p.free_slots.append(slot)
            self._lose(p, f"posting a send failed: {exc}")
            return -1
        p.to_return -= returned
        p.credits -= 1
        p.sq_free -= 1
        self.stats["sent_" + _MSG_NAMES[mtype]] += 1
        return slot

    def _post_fragments(self, p: _Peer, out: _Out) -> bool:
        """Post the next fragments of ``out``; True once all of it is posted."""
        while True:
            head = out.stage == _FRAG_HEAD
            room = self._frame_room if head else self._frag_room
            parts, n, seg, off = self._slice(out, room)
            if self._post(p, M_FRAG_HEAD if head else M_FRAG, 0,
                          [out.header, *parts] if head else parts) < 0:
                return False
            out.seg, out.off, out.stage = seg, off, _FRAG_BODY
            out.sent += n
            if out.sent == out.total:
                return True

    @staticmethod
    def _slice(out: _Out, room: int) -> Tuple[List[memoryview], int, int, int]:
        """The next at most ``room`` bytes of ``out`` as views, and where the cursor then is."""
        parts, n = [], 0
        seg, off = out.seg, out.off
        segments = out.segments
        while n < room and seg < len(segments):
            s = segments[seg]
            take = min(room - n, s.nbytes - off)
            parts.append(s[off:off + take])
            n += take
            off += take
            if off == s.nbytes:
                seg, off = seg + 1, 0
        return parts, n, seg, off

    def _plan_writes(self, out: _Out, remote_addr: int) -> List[Tuple[List[Tuple[int, int, int]], int]]:
        """Split the registered segments into writes of at most ``max_sge`` pieces and
        ``max_write`` bytes, each with the remote address it starts at."""
        plan = []
        sges: List[Tuple[int, int, int]] = []
        length = 0
        offset = 0
        for seg, entry in zip(out.segments, out.entries):
            addr, left = address_of(seg), seg.nbytes
            while left:
                take = min(left, self._max_write - length)
                sges.append((addr, take, entry.reg.lkey))
                addr += take
                left -= take
                length += take
                if length == self._max_write or len(sges) == self._max_sge:
                    plan.append((sges, remote_addr + offset))
                    offset += length
                    sges, length = [], 0
        if sges:
            plan.append((sges, remote_addr + offset))
        return plan

    def _post_writes(self, p: _Peer, out: _Out) -> bool:
        """Post the RDMA writes of ``out`` as far as room allows; True once all are posted."""
        plan = out.plan
        while out.next_wr < len(plan):
            sges, raddr = plan[out.next_wr]
            last = out.next_wr == len(plan) - 1
            if p.sq_free == 0 or (last and p.credits <= RESERVED):
                self.stats["send_stalls"] += 1
                return False
            returned = min(p.to_return, 0xFFFF) if last else 0
            # The last write carries an immediate, which consumes one receive at the peer
            # (hence the credit) and names the transfer and the credits we return.
            imm = ((out.xfer & 0xFFFF) << 16) | returned
            try:
                self.ops.post_send(p.qpn, _wr_id(K_WRITE, p.rank, out.xfer),
                                   OP_WRITE_IMM if last else OP_WRITE, sges, imm, raddr, out.rkey)
            except VerbsError as exc:
                self._lose(p, f"posting an RDMA write failed: {exc}")
                return False
            if last:
                p.credits -= 1
                p.to_return -= returned
            p.sq_free -= 1
            out.next_wr += 1
        self.stats["zero_copy_frames"] += 1
        self.stats["zero_copy_bytes"] += out.total
        return True

    def _finish(self, out: _Out, reason: Optional[str]) -> None:
        for entry in out.entries:
            self.cache.release(entry)
        out.entries = []
        self._frames -= 1
        if out.on_sent is not None:
            out.on_sent(reason)

    # -- one-sided RDMA (windows) -------------------------------------------------------------
    def reaches(self, peer: int) -> bool:
        """Whether ``peer`` (a world rank) is connected to this rank over verbs now."""
        p = self._peers[peer] if 0 <= peer < self.size else None
        return p is not None and p.state == _READY

    def expose(self, view: memoryview) -> Optional[Exposure]:
        """Register ``view`` (contiguous, writable) for the peers' RDMA writes and reads: a
        window's memory. None when there is nothing to expose (empty) or the device refuses
        (locked-memory limit...): the window then serves its peers by messages. The caller
        keeps the memory alive until :meth:`unexpose`."""
        if not self._listening or self._closed or not view.nbytes or view.readonly:
            return None
        try:
            reg = self.ops.register(address_of(view), view.nbytes,
                                    ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ)
        except VerbsError:
            self.stats["expose_refused"] += 1
            return None
        self._exposed[id(reg)] = reg
        return Exposure(reg.addr, reg.rkey, reg.length, id(reg))

    def unexpose(self, exposure: Exposure) -> None:
        """Undo :meth:`expose` (the peers must be done with it: a window's Free)."""
        reg = self._exposed.pop(exposure.handle, None)
        if reg is not None and not self._closed:
            self.ops.deregister(reg)

    def rdma(self, peer: int, write: bool, local: memoryview, remote_addr: int, rkey: int,
             on_done: OnSent) -> bool:
        """Post an RDMA write of ``local`` to ``remote_addr`` of ``peer`` (``write``), or a
        read from there into ``local``; ``on_done(None)`` once it completed - for a write,
        the bytes are in the peer's memory - or ``on_done(reason)`` if it failed (the queue
        pair then breaks, as any failed work request breaks it). False, with nothing posted,
        when ``peer`` is not reached over verbs or ``local`` cannot be registered: the caller
        takes another path. ``local`` must stay unchanged (write) or untouched (read) until
        ``on_done``. Waits for room in the send queue inside progress, never here."""
        p = self._peers[peer] if 0 <= peer < self.size else None
        if p is None or p.state != _READY or self._closing:
            return False
        local = _as_bytes(local)
        if (local.readonly and not write) or not local.contiguous:
            return False
        if not local.nbytes or local.nbytes > self._max_write:
            return False
        # writable memory registered writable even for a write (see _register_sources)
        access = 0 if local.readonly else ACCESS_LOCAL_WRITE
        try:
            entry = self.cache.acquire(local, access)
        except VerbsError:
            self.stats["rdma_register_refused"] += 1
            return False
        op = _RdmaOp(write, local, remote_addr, rkey, on_done)
        op.entry = entry
        p.rdma_queue.append(op)
        self.stats["rdma_writes" if write else "rdma_reads"] += 1
        self._pump_rdma(p)
        return True

    def _pump_rdma(self, p: _Peer) -> None:
        while p.rdma_queue and len(p.rdma_posted) < RDMA_DEPTH and p.sq_free > 0:
            op = p.rdma_queue.popleft()
            n = p.next_rdma
            p.next_rdma = n + 1 if n < 0xFFFFFFFF else 1
            sge = [(address_of(op.local), op.local.nbytes, op.entry.reg.lkey)]
            try:
                self.ops.post_send(p.qpn, _wr_id(K_RDMA, p.rank, n),
                                   OP_WRITE if op.write else OP_READ, sge, 0,
                                   op.remote_addr, op.rkey)
            except VerbsError as exc:
                p.rdma_queue.appendleft(op)
                self._lose(p, f"posting a one-sided RDMA operation failed: {exc}")
                return
            p.sq_free -= 1
            p.rdma_posted[n] = op

    # -- receiving -------------------------------------------------------------------------
    def _post_recv(self, p: _Peer, slot: int) -> None:
        cfg = self.cfg
        base = (p.index * cfg.slots + slot) * cfg.slot_size
        self.ops.post_recv(p.qpn, _wr_id(K_RECV, p.rank, slot), self._recv_reg.addr + base,
                           cfg.slot_size, self._recv_reg.lkey)

    def _on_completion(self, c: Completion) -> None:
        kind = c.wr_id >> 56
        p = self._peers[(c.wr_id >> 32) & 0xFFFFFF]
        index = c.wr_id & 0xFFFFFFFF
        if kind == K_RECV:
            if c.status:
                return self._wc_failed(p, c, "receive")
            if p.state != _READY:
                return
            try:
                if c.opcode == WC_RECV_WRITE_IMM:
                    self._on_write_arrived(p, c.imm)
                else:
                    self._on_message(p, index, c.byte_len)
            finally:
                # The slot's bytes are consumed: it takes the next message, and we owe the
                # peer one credit for it.
                if p.state == _READY and not self._closing:
                    try:
                        self._post_recv(p, index)
                        p.to_return += 1
                    except VerbsError as exc:
                        self._lose(p, f"reposting a receive failed: {exc}")
            return
        p.sq_free += 1
        if kind == K_SEND:
            p.free_slots.append(index)
            if c.status:
                return self._wc_failed(p, c, "send")
            if index == p.hello_slot:
                p.hello_acked, p.hello_slot = True, -1
        elif kind == K_RDMA:
            op = p.rdma_posted.pop(index, None)
            if op is None:
                return
            self.cache.release(op.entry)
            op.entry = None
            if c.status:
                what = "one-sided RDMA " + ("write" if op.write else "read")
                op.on_done(f"verbs {what} to rank {p.rank} failed: {status_text(c.status)}")
                return self._wc_failed(p, c, what)
            op.on_done(None)
        elif kind == K_WRITE:
            if c.status:
                return self._wc_failed(p, c, "RDMA write")
            out = p.out_xfers.get(index)
            if out is not None:
                out.done_wrs += 1
                if out.done_wrs == len(out.plan) and out.stage == _WRITTEN:
                    del p.out_xfers[index]
                    self._finish(out, None)

    def _on_message(self, p: _Peer, slot: int, nbytes: int) -> None:
        cfg = self.cfg
        base = (p.index * cfg.slots + slot) * cfg.slot_size
        view = self._recv_view[base:base + nbytes]
        mtype, _, credits, arg = _MSG.unpack_from(view, 0)
        p.credits += credits
        self.stats["recv_" + _MSG_NAMES.get(mtype, "unknown")] += 1
        if self._closing and mtype != M_BYE:
            return
        sink = self._sink
        if mtype == M_FRAME:
            if self._frame_in_progress(p, mtype):
                return
            header = unpack(view, _MSG.size)
            target = sink.frame_arrived(p.rank, header)
            if header.kind in HAS_PAYLOAD:
                n = header.length
                start = _MSG.size + HEADER_SIZE
                if nbytes != start + n:
                    return self._protocol_error(p, f"FRAME of {nbytes} bytes for a payload of {n}")
                if n:
                    _as_bytes(target)[:n] = view[start:start + n]
                sink.payload_arrived(p.rank, header, target)
        elif mtype == M_FRAG_HEAD:
            if self._frame_in_progress(p, mtype):
                return
            header = unpack(view, _MSG.size)
            target = sink.frame_arrived(p.rank, header)
            p.rx = _Rx(header, _as_bytes(target))
            self._fragment(p, view[_MSG.size + HEADER_SIZE:])
        elif mtype == M_FRAG:
            if p.rx is None:
                return self._protocol_error(p, "FRAG with no frame in progress")
            self._fragment(p, view[_MSG.size:])
        elif mtype == M_RTS:
            if self._frame_in_progress(p, mtype):
                return
            self._on_rts(p, unpack(view, _MSG.size), arg)
        elif mtype == M_GRANT:
            addr, rkey = _GRANT.unpack_from(view, _MSG.size)
            self._on_grant(p, arg, addr, rkey)
        elif mtype == M_HELLO:
            p.hello_in = True
        elif mtype == M_BYE:
            self._lose(p, "exited (closed its verbs connection)")
        elif mtype != M_CREDIT:
            self._protocol_error(p, f"unknown message type {mtype}")

    def _frame_in_progress(self, p: _Peer, mtype: int) -> bool:
        """A new frame must not start while another one's payload is arriving."""
        if p.rx is None:
            return False
        self._protocol_error(p, f"{_MSG_NAMES[mtype]} while the payload of a frame is still arriving")
        return True

    def _fragment(self, p: _Peer, data: memoryview) -> None:
        rx = p.rx
        n = data.nbytes
        if rx.pos + n > rx.header.length:
            return self._protocol_error(p, f"fragments exceed the frame's {rx.header.length} bytes")
        rx.target[rx.pos:rx.pos + n] = data
        rx.pos += n
        if rx.pos == rx.header.length:
            p.rx = None
            self._sink.payload_arrived(p.rank, rx.header, rx.target)

    def _on_rts(self, p: _Peer, header: Header, xfer: int) -> None:
        target = self._sink.frame_arrived(p.rank, header)
        if header.kind not in HAS_PAYLOAD or target is None or target.nbytes != header.length:
            return self._protocol_error(p, f"RTS for frame kind {header.kind} of {header.length} "
                                           f"bytes has no matching destination")
        rx = p.rx = _Rx(header, _as_bytes(target), xfer)
        addr = rkey = 0
        if not rx.target.readonly and rx.target.contiguous:
            try:
                rx.entry = self.cache.acquire(rx.target, ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE)
                addr, rkey = address_of(rx.target), rx.entry.reg.rkey
            except VerbsError:
                self.stats["target_copy_fallbacks"] += 1
        # addr = rkey = 0 asks the sender for fragments instead (the destination could not be
        # registered); the frame's payload then arrives through the slots.
        p.ctrl.append((M_GRANT, xfer, memoryview(_GRANT.pack(addr, rkey))))

    def _on_grant(self, p: _Peer, xfer: int, addr: int, rkey: int) -> None:
        out = p.out_xfers.get(xfer)
        if out is None or out.stage != _WAIT_GRANT:
            return self._protocol_error(p, f"GRANT for unknown transfer {xfer}")
        if addr == 0 and rkey == 0:
            del p.out_xfers[xfer]
            for entry in out.entries:
                self.cache.release(entry)
            out.entries = []
            out.stage = _FRAG_BODY
            self.stats["grants_refused"] += 1
        else:
            out.rkey = rkey
            out.plan = self._plan_writes(out, addr)
            out.stage = _WRITE

    def _on_write_arrived(self, p: _Peer, imm: int) -> None:
        rx = p.rx
        p.credits += imm & 0xFFFF
        if rx is None or rx.entry is None or (rx.xfer & 0xFFFF) != imm >> 16:
            return self._protocol_error(p, f"RDMA write with immediate {imm:#x} matches no grant")
        p.rx = None
        self.cache.release(rx.entry)
        self._sink.payload_arrived(p.rank, rx.header, rx.target)

    # -- failures ----------------------------------------------------------------------------
    def _wc_failed(self, p: _Peer, c: Completion, what: str) -> None:
        if p.state == _GONE:
            return      # the rest of a broken queue pair's work flushes out
        self._lose(p, f"verbs {what} to/from rank {p.rank} failed: {status_text(c.status)}")

    def _protocol_error(self, p: _Peer, what: str) -> None:
        self._lose(p, f"verbs protocol error: {what}")

    def _lose(self, p: _Peer, reason: str) -> None:
        """The peer is gone or its queue pair broke: fail what waits on it, tell the sink."""
        if p.state == _GONE:
            return
        p.state = _GONE
        p.reason = reason
        rx, p.rx = p.rx, None
        if rx is not None and rx.entry is not None:
            self.cache.release(rx.entry)
        outs = list(p.queue)
        outs.extend(o for o in p.out_xfers.values() if o.stage == _WRITTEN)
        p.queue.clear()
        p.out_xfers.clear()
        p.ctrl.clear()
        ops = [*p.rdma_posted.values(), *p.rdma_queue]
        p.rdma_posted.clear()
        p.rdma_queue.clear()
        why = f"connection to rank {p.rank}: {reason}"
        for out in outs:
            self._finish(out, why)
        for op in ops:
            if op.entry is not None:
                self.cache.release(op.entry)
                op.entry = None
            op.on_done(why)
        if not self._closing and self._sink is not None:
            self._sink.peer_lost(p.rank, reason)

    # -- progress ----------------------------------------------------------------------------
    def _drain(self) -> int:
        total = 0
        # Polled completions are taken from the queue: no handler may raise before each one
        # is handled (see signal_guard).
        held = signal_guard.hold()
        try:
            for _ in range(8):      # bounded: a peer that keeps sending cannot hold us here
                batch = self.ops.poll(64)
                for c in batch:
                    try:
                        self._on_completion(c)
                    except Exception as exc:   # finish the batch: its completions are taken
                        if self._error is None:
                            self._error = exc
                total += len(batch)
                if len(batch) < 64:
                    break
            if total:
                self._after_drain()
        finally:
            signal_guard.release(held)
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        return total

    def _after_drain(self) -> None:
        for p in self._peers:
            if p is None or p.state != _READY:
                continue
            if p.queue or p.ctrl:
                self._pump(p)
            if p.rdma_queue:
                self._pump_rdma(p)
            # Return credits explicitly only when no outgoing message carried them.
            if p.to_return >= self._return_at and not self._closing:
                self._post(p, M_CREDIT, 0, (), control=True)

    def progress(self, timeout: Optional[float]) -> bool:
        if not self._listening or self._closed:
            if timeout:
                self._sink.sleep(time.sleep, min(timeout, 0.05))
            return False
        moved = self._drain()
        if moved or timeout == 0:
            return moved > 0
        if not self.prepare_sleep():        # a completion landed while arming
            return True
        ms = -1 if timeout is None else max(1, int(timeout * 1000))
        try:
            ready = self._sink.sleep(signal_guard.interruptible, self._poller.poll, ms)
        except InterruptedError:
            return False
        if not ready:
            return False
        self.end_sleep()
        return bool(self._drain())

    # -- sleeping beside other transports (the router polls every member's fds at once) -----
    def wait_fds(self) -> Sequence[int]:
        return (self.ops.fileno(),) if self._listening and not self._closed else ()

    def prepare_sleep(self) -> bool:
        if not self._listening or self._closed:
            return True
        # Arm first, then look again: a completion that landed in between raises no event.
        self.ops.arm()
        return self._drain() == 0

    def end_sleep(self) -> None:
        if self._listening and not self._closed:
            self.ops.consume_events()

    def pending_sends(self) -> int:
        return self._frames + self._unacknowledged()

    def _unacknowledged(self) -> int:
        """Work requests posted to live peers and not completed yet. Those to a peer that is
        gone do not count: on soft-RoCE a send to a destroyed queue pair never completes (no
        retry timeout fires), and waiting for it would only delay this rank's exit."""
        return sum(self._send_depth - p.sq_free + len(p.rdma_queue) for p in self._peers
                   if p is not None and p.state == _READY)

    def close(self) -> None:
        """Say goodbye to every live peer (bounded by ``linger``), then destroy everything."""
        if self._closed:
            return
        self._closed = True
        if not self._listening:
            self.ops.close()
            return
        self._closing = True
        try:
            try:
                self._drain()           # learn which peers already left
            except Exception:
                pass
            for p in self._peers:
                if p is not None and p.state == _READY:
                    self._post(p, M_BYE, 0, (), control=True)
            deadline = time.monotonic() + self.cfg.linger
            while self._unacknowledged() and time.monotonic() < deadline:
                try:
                    if not self._drain():
                        self.ops.arm()
                        if not self._drain():
                            left = max(0.001, deadline - time.monotonic())
                            if self._poller.poll(int(left * 1000) + 1):
                                self.ops.consume_events()
                except Exception:
                    break
        finally:
            self._poller = select.poll()
            self.cache.clear()
            for reg in self._exposed.values():
                self.ops.deregister(reg)
            self._exposed.clear()
            self.ops.close()


# -- the real device ---------------------------------------------------------------------------

#: local ACK timeout exponent (4.096 us * 2**16 = 0.27 s per try) and tries: a peer whose queue
#: pair is gone is reported after about 2 s, and the first message of a freshly connected pair
#: survives the peer reaching RTR a little later than us.
ACK_TIMEOUT = 16
#: what a queue pair lets its peer do: write into slots and grants, write into and read from
#: exposed windows (each registration then says which of those it allows)
QP_ACCESS = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ
RETRY_COUNT = 7
MIN_RNR_TIMER = 12


def _memlock_hint() -> str:
    import resource
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    if soft == resource.RLIM_INFINITY:
        return ""
    return (f"; the locked-memory limit is {soft // 1024} KiB (ulimit -l): raise it, or lower "
            f"MINIMPI_VERBS_SLOTS / MINIMPI_VERBS_REG_CACHE")


def _env_int(env: Mapping[str, str], name: str, who: str) -> Optional[int]:
    raw = env.get(name)
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise VerbsError(f"{who}: {name}={raw!r} is not a number") from None


class PyverbsOps(VerbsOps):
    """:class:`VerbsOps` on a real device through pyverbs (any rdma-core, via verbs_compat).

    Device, port and GID index: ``MINIMPI_VERBS_DEVICE`` / ``_PORT`` / ``_GID_INDEX``, by default
    the first device with an active port, its first active port, and that port's first non-zero
    GID.
    """

    def __init__(self, rank: int, env: Mapping[str, str] = os.environ) -> None:
        from . import verbs_compat
        self.pv = pv = verbs_compat.load()
        self.rank = rank
        m = pv.m
        self._ctx = self._pd = self._channel = self._cq = None
        self._qps: Dict[int, object] = {}
        self._mrs: Dict[int, object] = {}
        self._recv_wrs: Dict[Tuple[int, int], object] = {}
        who = f"rank {rank}: verbs" if rank >= 0 else "verbs"
        try:
            names = [d.name.decode() for d in m.device.get_device_list()]
        except pv.RDMAError as exc:
            # With no device at all libibverbs fails (ENOSYS) instead of listing none.
            raise VerbsError(f"{who}: no RDMA device (ibv_get_device_list: {exc})") from None
        try:
            self._find_port(names, env, who)
        except pv.RDMAError as exc:
            self.close()
            raise VerbsError(f"{who}: cannot open the RDMA device: {exc}") from None

    def _find_port(self, names: List[str], env: Mapping[str, str], who: str) -> None:
        pv, m = self.pv, self.pv.m
        want_device = env.get("MINIMPI_VERBS_DEVICE") or None
        want_port = _env_int(env, "MINIMPI_VERBS_PORT", who)
        if want_device is not None and want_device not in names:
            raise VerbsError(f"{who}: MINIMPI_VERBS_DEVICE={want_device!r} not found "
                             f"(devices: {', '.join(names) or 'none'})")
        active = pv.const("IBV_PORT_ACTIVE")
        tried = []
        for name in ([want_device] if want_device else names):
            ctx = m.device.Context(name=name)
            dev = ctx.query_device()
            ports = [want_port] if want_port else range(1, dev.phys_port_cnt + 1)
            for port in ports:
                try:
                    attr = ctx.query_port(port)
                except pv.RDMAError as exc:
                    tried.append(f"{name} port {port}: {exc}")
                    continue
                if attr.state == active:
                    self._open(ctx, name, dev, port, attr, env, who)
                    return
                tried.append(f"{name} port {port}: not active (state {attr.state})")
            ctx.close()
        raise VerbsError(f"{who}: no active port ({'; '.join(tried) or 'no devices'})")

    def _open(self, ctx, name: str, dev, port: int, attr, env: Mapping[str, str], who: str) -> None:
        pv = self.pv
        self._ctx = ctx
        want_gid = _env_int(env, "MINIMPI_VERBS_GID_INDEX", who)
        zero = "0000:0000:0000:0000:0000:0000:0000:0000"
        if want_gid is not None:
            gid_index = want_gid
            gid = ctx.query_gid(port, gid_index).gid
            if gid == zero:
                ctx.close()
                raise VerbsError(f"{who}: MINIMPI_VERBS_GID_INDEX={gid_index}: that GID of {name} "
                                 f"port {port} is empty")
        else:
            gid_index, gid = -1, zero
            for index in range(min(attr.gid_tbl_len, 256)):
                try:
                    gid = ctx.query_gid(port, index).gid
                except pv.RDMAError:
                    continue
                if gid != zero:
                    gid_index = index
                    break
            if gid_index < 0:
                ctx.close()
                raise VerbsError(f"{who}: {name} port {port} has no usable GID")
        self._global = attr.link_layer == pv.const("IBV_LINK_LAYER_ETHERNET") or attr.lid == 0
        self.info = PortInfo(name, port, gid_index, attr.lid, gid, attr.active_mtu, dev.max_sge,
                             attr.max_msg_sz, dev.max_cqe, dev.max_qp_wr)
        self._pd = pv.m.pd.PD(ctx)
        self._channel, self._fd = pv.open_channel(ctx)
        # Never block inside pyverbs: get_cq_event on a non-blocking fd returns EAGAIN instead.
        flags = fcntl.fcntl(self._fd, fcntl.F_GETFL)
        fcntl.fcntl(self._fd, fcntl.F_SETFL, flags | os.O_NONBLOCK)
        c = pv.const
        self._access = {ACCESS_LOCAL_WRITE: c("IBV_ACCESS_LOCAL_WRITE"),
                        ACCESS_REMOTE_WRITE: c("IBV_ACCESS_REMOTE_WRITE"),
                        ACCESS_REMOTE_READ: c("IBV_ACCESS_REMOTE_READ")}
        self._opcodes = {OP_SEND: c("IBV_WR_SEND"), OP_WRITE: c("IBV_WR_RDMA_WRITE"),
                         OP_READ: c("IBV_WR_RDMA_READ"),
                         OP_WRITE_IMM: c("IBV_WR_RDMA_WRITE_WITH_IMM")}
        self._wc_opcodes = {c("IBV_WC_SEND"): WC_SEND, c("IBV_WC_RDMA_WRITE"): WC_WRITE,
                            c("IBV_WC_RDMA_READ"): WC_READ,
                            c("IBV_WC_RECV"): WC_RECV,
                            c("IBV_WC_RECV_RDMA_WITH_IMM"): WC_RECV_WRITE_IMM}
        self._with_imm = c("IBV_WC_WITH_IMM")
        self._signaled = c("IBV_SEND_SIGNALED")

    def _flags(self, access: int) -> int:
        flags = 0
        for bit, value in self._access.items():
            if access & bit:
                flags |= value
        return flags

    def create_cq(self, depth: int) -> None:
        self._cq = self.pv.m.cq.CQ(self._ctx, depth, None, self._channel, 0)

    def create_qp(self, send_depth: int, recv_depth: int, max_send_sge: int) -> int:
        m, c = self.pv.m, self.pv.const
        cap = m.qp.QPCap(max_send_wr=send_depth, max_recv_wr=recv_depth,
                         max_send_sge=max_send_sge, max_recv_sge=1, max_inline_data=0)
        init = m.qp.QPInitAttr(qp_type=c("IBV_QPT_RC"), scq=self._cq, rcq=self._cq, cap=cap,
                               sq_sig_all=1)
        attr = m.qp.QPAttr(port_num=self.info.port)
        attr.qp_access_flags = self._flags(QP_ACCESS)
        attr.pkey_index = 0
        try:
            qp = m.qp.QP(self._pd, init, attr)      # comes back in INIT: receives may be posted
        except self.pv.RDMAError as exc:
            raise VerbsError(f"creating an RC queue pair failed: {exc}") from None
        self._qps[qp.qp_num] = qp
        return qp.qp_num

    def connect_qp(self, qpn: int, local_psn: int, remote: PeerEndpoint, remote_qpn: int) -> None:
        m = self.pv.m
        info = self.info
        attr = m.qp.QPAttr(port_num=info.port)
        attr.qp_access_flags = self._flags(QP_ACCESS)
        attr.path_mtu = min(info.mtu, remote.mtu)
        attr.dest_qp_num = remote_qpn
        attr.rq_psn = remote.psn
        attr.max_dest_rd_atomic = 1
        attr.min_rnr_timer = MIN_RNR_TIMER
        if self._global:   # RoCE needs a global route header; IB routes by LID alone
            route = m.addr.GlobalRoute(dgid=m.addr.GID(remote.gid), sgid_index=info.gid_index,
                                       hop_limit=64)
            attr.ah_attr = m.addr.AHAttr(port_num=info.port, is_global=1, gr=route, dlid=remote.lid)
        else:
            attr.ah_attr = m.addr.AHAttr(port_num=info.port, dlid=remote.lid)
        attr.timeout = ACK_TIMEOUT
        attr.retry_cnt = RETRY_COUNT
        attr.rnr_retry = 0          # credits guarantee a posted receive: RNR is a bug, not a wait
        attr.sq_psn = local_psn
        attr.max_rd_atomic = 1
        try:
            self._qps[qpn].to_rts(attr)
        except self.pv.RDMAError as exc:
            raise VerbsError(f"queue pair {qpn} to RTR/RTS failed: {exc}") from None

    def register(self, address: int, length: int, access: int) -> Registration:
        try:
            mr = self.pv.m.mr.MR(self._pd, length, self._flags(access), address=address)
        except self.pv.RDMAError as exc:
            raise VerbsError(f"registering {length} bytes failed: {exc}{_memlock_hint()}") from None
        self._mrs[id(mr)] = mr
        return Registration(mr, address, length, mr.lkey, mr.rkey, access)

    def deregister(self, registration: Registration) -> None:
        mr = self._mrs.pop(id(registration.handle), None)
        if mr is not None:
            mr.close()

    def post_recv(self, qpn: int, wr_id: int, address: int, length: int, lkey: int) -> None:
        # A slot is always reposted with the same address: build its work request once.
        key = (qpn, wr_id)
        wr = self._recv_wrs.get(key)
        m = self.pv.m
        if wr is None:
            sge = m.wr.SGE(address, length, lkey)
            wr = self._recv_wrs[key] = m.wr.RecvWR(wr_id=wr_id, num_sge=1, sg=[sge])
            self.pv.release([sge])
        try:
            self._qps[qpn].post_recv(wr)
        except self.pv.RDMAError as exc:
            raise VerbsError(f"ibv_post_recv failed: {exc}") from None

    def post_send(self, qpn: int, wr_id: int, opcode: int, sges: Sequence[Tuple[int, int, int]],
                  imm: int = 0, remote_addr: int = 0, rkey: int = 0) -> None:
        m = self.pv.m
        sg = [m.wr.SGE(a, n, k) for a, n, k in sges]
        wr = m.wr.SendWR(wr_id=wr_id, opcode=self._opcodes[opcode], num_sge=len(sg), sg=sg,
                         imm_data=socket.htonl(imm), send_flags=self._signaled)
        try:
            if opcode != OP_SEND:
                wr.set_wr_rdma(rkey, remote_addr)
            self._qps[qpn].post_send(wr)
        except self.pv.RDMAError as exc:
            raise VerbsError(f"ibv_post_send failed: {exc}") from None
        finally:
            self.pv.release(sg + [wr])

    def poll(self, max_entries: int) -> List[Completion]:
        _, wcs = self._cq.poll(max_entries)
        opcodes, with_imm = self._wc_opcodes, self._with_imm
        return [Completion(wc.wr_id, wc.status, opcodes.get(wc.opcode, 0), wc.byte_len,
                           socket.ntohl(wc.imm_data) if wc.wc_flags & with_imm else 0)
                for wc in wcs]

    def arm(self) -> None:
        self._cq.req_notify()

    def fileno(self) -> int:
        return self._fd

    def consume_events(self) -> None:
        events = 0
        for _ in range(64):
            try:
                self._channel.get_cq_event(self._cq)
            except self.pv.RDMAError:      # EAGAIN: no more events (the fd is non-blocking)
                break
            events += 1
        if events:
            self._cq.ack_events(events)

    def __del__(self) -> None:
        # A transport dropped without close() (e.g. a run abandoned on timeout) must not leave
        # its pyverbs objects to the cycle collector: it may clear the context's list of
        # dependents first and then destroy a queue pair on a closed device (a segfault, seen
        # in the soft-RoCE guest). Finalizers run before that clearing, so close in order here.
        self.close()

    def close(self) -> None:
        # Teardown order matters: queue pairs before the CQ they use, memory regions before
        # the protection domain, the CQ (which acknowledges its events) before its channel.
        if not hasattr(self, "_recv_wrs"):      # __init__ failed before any resource
            return
        self.pv.release(self._recv_wrs.values())
        self._recv_wrs.clear()
        objects = [*self._qps.values(), *self._mrs.values(), self._cq, self._channel, self._pd,
                   self._ctx]
        self._qps.clear()
        self._mrs.clear()
        self._cq = self._channel = self._pd = self._ctx = None
        for obj in objects:
            if obj is not None:
                try:
                    obj.close()
                except Exception:     # keep tearing down the rest
                    pass


def probe(env: Mapping[str, str] = os.environ) -> Optional[str]:
    """None when the verbs transport can run here, else one line saying why not."""
    try:
        ops = PyverbsOps(-1, env)
    except (ImportError, VerbsError) as exc:     # PyverbsRDMAError arrives as VerbsError
        return str(exc)
    ops.close()
    return None


def create(info) -> VerbsTransport:
    """The transport of a process started by ``minimpi run`` (see minimpi.transports)."""
    config = VerbsConfig.from_env(info.env, info.rank)
    try:
        ops = PyverbsOps(info.rank, info.env)
    except ImportError as exc:
        raise TransportError(f"rank {info.rank}: verbs: {exc}") from None
    return VerbsTransport(info.rank, info.size, ops, config)
