"""Shared-memory transport: ranks on one host exchange frames through per-pair rings.

**Segments.** Every rank owns one segment, its *inbox* ``/dev/shm/minimpi-<job>-<rank>``,
created in :meth:`ShmTransport.listen`: a control block, then one ring per possible sender
(indexed by world rank; only the rings of senders on this host are ever touched, and only
those are reserved with ``posix_fallocate``, so a full /dev/shm is a clear error at start-up
rather than a SIGBUS later). Each rank maps the inbox of every peer on its host in
:meth:`set_peers` and is the only writer of its own ring there; the owner is the only reader.
Once every local peer has mapped an inbox, its owner unlinks the file (the memory lives on
while mapped), so after start-up nothing is left under /dev/shm whatever happens; before
that, the launcher removes a job's segments when the job ends (:func:`cleanup_job`), also
after ``kill -9``.

**Rings** are single-producer single-consumer byte streams carrying exactly the frames TCP
carries (32-byte header, then payload). ``tail`` (bytes ever written, producer) and ``head``
(bytes ever consumed, consumer) are 8-byte counters in cache lines of their own. The producer
copies a frame in and then publishes ``tail``; the consumer copies each payload straight into
its destination (the posted receive buffer) and then publishes ``head``. A header never
straddles the end of the ring (when fewer than 32 bytes are left there, both sides skip
them); a payload may, and is copied in two pieces. A frame larger than the free space streams
through in pieces, as through a socket, while the reader copies out on its own core.

**Large payloads are copied once.** A rendezvous ``DATA`` frame of ``CMA_MIN`` bytes or more
travels as a descriptor (the sender's buffer addresses) instead of its bytes; the receiver
reads them straight into the posted buffer with ``process_vm_readv`` (cross memory attach)
and answers with an ``ACK`` record, which completes the send. A receiver first checks that the
kernel lets it read each peer (a probe in :meth:`set_peers`) and says so in that peer's ring;
without that the bytes stream through the ring (two copies, pipelined). Under YAMA
``ptrace_scope=1`` a rank allows this with ``PR_SET_PTRACER_ANY``, as MPI libraries do: the
trust boundary is the user account either way, since any process of that user may also open
the job's segments (mode 0600).

**Sleeping without missing a wake-up.** The engine spins on ``progress(0)`` (its progress
policy) and then sleeps in ``progress(timeout)``: in poll on this rank's wake socket (an
abstract-namespace unix datagram socket: nothing on disk) and on a pidfd per local peer
(readable when that peer exits). Before sleeping, a rank raises its ``sleeping`` flag, fences,
and looks at its rings once more; a sender publishes ``tail``, fences, and sends one datagram
if it sees the flag. Each side stores, fences, then loads the other's word, so at least one
sees the other (Dekker): no lost wake-up, and a syscall only when someone really sleeps. A
sender waiting for ring space raises ``want_space`` on its ring in the same way; the reader
wakes it after freeing space. The fence is a lock acquire/release (a locked instruction).
Where the kernel allows (:mod:`.membarrier`), the fence is asymmetric: a rank that is about
to sleep issues a process-wide barrier after raising its flags, and then its peers, being
registered for it, publish with no fence at all - the per-message half of the cost goes,
the barrier (a microsecond) is paid only by a rank that sleeps. Each rank says in its
inbox whether it does (``C_BARRIER``); toward a peer that does not, both sides fence.
That bytes are visible before the counter that publishes them is x86-64's store order
(Python cannot place a release/acquire barrier cheaply), so the transport is offered on
x86-64 only; elsewhere ``auto`` uses TCP.

A peer that exits, is killed, or closes its transport is noticed through its pidfd or its
``closed`` flag: what it wrote before is delivered, then the engine hears ``peer_lost`` and
every operation that needs that peer fails with a clear error.
"""
from __future__ import annotations

import collections
import ctypes
import functools
import glob
import mmap
import os
import platform
import select
import shutil
import socket
import stat
import struct
import sys
import threading
from typing import Any, Deque, Dict, List, Optional, Sequence, Tuple

from ..data.units import parse_size
from ..errors import TransportError
from . import membarrier, signal_guard
from .base import FrameSink, OnSent, Transport
from .frames import (
    DATA,
    EAGER,
    F_SYNC,
    FILLERS,
    HAS_PAYLOAD,
    HEADER,
    HEADER_SIZE,
    MATCH_AND_PAYLOAD,
    MATCH_FIELDS,
    PAYLOAD_WITH_MATCH_MAX,
    Header,
    filler,
)

SHM_DIR = "/dev/shm"
PREFIX = "minimpi-"
MAGIC = 0x314D48534D50494D   # b"MIPMSHM1" little-endian: an inbox of this protocol

#: per-sender ring size bounds; the size is chosen from the job size (see :func:`ring_bytes`)
RING_MAX = 256 * 1024
RING_MIN = 32 * 1024
#: the inbox of one rank is at most about this large (rings of all possible senders)
INBOX_BUDGET = 8 * 1024 * 1024
#: rendezvous payloads from this size on are read with process_vm_readv (one copy)
CMA_MIN = 64 * 1024
#: the most one progress call reads by reference, or streams through one ring, before it
#: returns: a gigabyte message still lets the engine run its checks (deadlock detection,
#: other peers) every few milliseconds
CMA_CHUNK = 32 * 1024 * 1024
STREAM_CHUNK = 4 * 1024 * 1024
#: a descriptor names at most this many sender buffers (else the bytes stream through the ring)
MAX_DESC_SEGMENTS = 256
#: progress(0) calls between two looks for peers that exited (a spinning rank never sleeps)
CHECK_EVERY = 512

# control block of an inbox: 8-byte words; words written by different processes sit in
# different cache lines (indices into a 'Q' view)
C_MAGIC, C_RING, C_SLOTS = 0, 1, 2
C_OWNER, C_OWNER_NS = 3, 4   # the owner's pid and pid namespace (``minimpi clean`` reads them)
C_BARRIER = 5            # 1: the owner issues a process-wide barrier before it sleeps (below)
C_SLEEPING = 8           # byte 64: the owner is (about to be) asleep in poll
C_CLOSED = 16            # byte 128: the owner closed its transport
MAPPED_AT = 192          # one byte per sender: it has mapped this inbox
# control words of one ring (indices into a 'Q' view of its 256-byte head)
R_TAIL = 0               # producer: bytes ever written
R_HEAD = 8               # consumer: bytes ever consumed
R_WANT = 16              # producer: blocked waiting for space
R_CMA = 24               # consumer: whether it can read the producer's memory (below)
CMA_UNKNOWN, CMA_YES, CMA_NO = 0, 1, 2
RING_CTL = 256

#: in the header's ``extra`` field: the payload is sent by reference (a descriptor follows)
BY_REFERENCE = 1
#: the bits of a header's first word (kind | flags << 8 | extra << 16: frames.MATCH_FIELDS)
#: that an express receive needs to be an EAGER frame and nothing else: not synchronous,
#: not by reference
_EXPRESS_MASK = 0xFF | F_SYNC << 8 | BY_REFERENCE << 16
#: a transport-level record (never shown to the engine): "your by-reference frame was read"
K_ACK = 0x7F
_DESC = struct.Struct("<QI4x")      # token, number of (address, length) entries
_ENTRY = struct.Struct("<QQ")
_PROBE = b"minimpi cma probe"


def ring_bytes(size: int, override: Optional[str] = None) -> int:
    """The ring size for a job of ``size`` ranks: a power of two, so that an inbox of
    ``size`` rings stays within ``INBOX_BUDGET`` (``MINIMPI_SHM_RING`` overrides)."""
    if override:
        want = max(4 * HEADER_SIZE, parse_size(override))
    else:
        want = max(RING_MIN, min(RING_MAX, INBOX_BUDGET // max(1, size)))
    return 1 << (want.bit_length() - 1)


def ring_for_space(size: int, directory: str = SHM_DIR, share: float = 0.5) -> Optional[int]:
    """A ring size that lets ``size`` ranks of one host fit in ``share`` of ``directory``'s
    free space, where :func:`ring_bytes`' default would not (None: the default fits, or the
    space cannot be read). Every inbox holds a ring per other local rank, so a host's ranks
    need about ``size * (size - 1)`` rings: 32 ranks at 256 KiB rings take 248 MiB, more
    than Docker's 64 MiB /dev/shm. The launcher decides this once for the whole job (every
    rank must use the same ring size) and passes it as ``MINIMPI_SHM_RING``."""
    if size < 2:
        return None
    try:
        st = os.statvfs(directory)
    except OSError:
        return None
    room = int(st.f_bavail * st.f_frsize * share)
    rings = size * (size - 1)
    per_ring = room // rings - RING_CTL
    if ring_bytes(size) <= per_ring:
        return None
    if per_ring < 4 * HEADER_SIZE:
        return None            # nothing fits: the transport's own error says so, with the fixes
    return 1 << (per_ring.bit_length() - 1)


#: the ranks the launcher (or a host's agent) starts on this host, e.g. ``0-7`` or ``4,5,9``:
#: a rank reserves the rings of these peers in its inbox when it creates it (listen), so that
#: a /dev/shm without room for them is known before the ranks exchange addresses, and ``auto``
#: can still route this rank over TCP. Without it (srun, environment rendezvous) the rings
#: are reserved in set_peers, where running out is an error.
ENV_LOCAL_RANKS = "MINIMPI_LOCAL_RANKS"


def format_ranks(ranks: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2,5`` (the value of MINIMPI_LOCAL_RANKS)."""
    parts, ordered = [], sorted(set(ranks))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def parse_ranks(text: Optional[str]) -> Optional[List[int]]:
    """The inverse of :func:`format_ranks`; None for no value or one that is not a list."""
    if not text:
        return None
    ranks: List[int] = []
    try:
        for part in text.split(","):
            low, _, high = part.partition("-")
            ranks.extend(range(int(low), int(high or low) + 1))
    except ValueError:
        return None
    return ranks


def segment_name(job_id: str, rank: int) -> str:
    return f"{PREFIX}{job_id}-{rank}"


def cleanup_job(job_id: str, directory: str = SHM_DIR) -> List[str]:
    """Remove every shared-memory segment of job ``job_id``; returns the paths removed.

    The launcher calls this when a job ends, however it ends. Ranks unlink their own segment
    as soon as every local peer has mapped it, so normally nothing is left to remove; this
    covers ranks that crashed or were killed during start-up.
    """
    if not job_id or "/" in job_id or not os.path.isdir(directory):
        return []
    removed = []
    for path in glob.glob(os.path.join(directory, glob.escape(f"{PREFIX}{job_id}-") + "*")):
        try:
            if os.path.isdir(path) and not os.path.islink(path):   # the wake-up sockets
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
            removed.append(path)
        except FileNotFoundError:
            pass
    return removed


def _pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def segment_owner(path: str) -> Optional[Tuple[int, int]]:
    """(pid, pid namespace inode) of the rank that created inbox ``path``; None when the
    file is not (yet) a complete inbox. Read with pread, never mapped: a page a full
    /dev/shm never backed reads as zeros instead of raising SIGBUS."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        words = os.pread(fd, 8 * (C_OWNER_NS + 1), 0)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(words) < 8 * (C_OWNER_NS + 1):
        return None
    magic, _, _, pid, pid_ns = struct.unpack(f"<{C_OWNER_NS + 1}Q", words)
    return (pid, pid_ns) if magic == MAGIC and pid else None


def owner_alive(path: str) -> Optional[bool]:
    """Whether the rank that created inbox ``path`` is still running: None when that cannot
    be told from here (not a complete inbox, or its owner is in another pid namespace)."""
    owner = segment_owner(path)
    if owner is None or owner[1] != _pid_namespace():
        return None
    return _alive(owner[0]) and not _zombie(owner[0])


def _zombie(pid: int) -> bool:
    """Whether ``pid`` has exited and only waits to be reaped."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return False


def available(directory: str = SHM_DIR) -> Optional[str]:
    """None if this host can run the transport, else why not."""
    if not sys.platform.startswith("linux"):
        return "shared memory transport needs Linux (abstract unix sockets, /dev/shm)"
    if platform.machine() not in ("x86_64", "AMD64"):
        return (f"shared memory transport needs x86-64's store order (this is "
                f"{platform.machine()}): its rings publish bytes with plain stores")
    if not os.path.isdir(directory) or not os.access(directory, os.W_OK):
        return f"{directory} is missing or not writable"
    return None


# --------------------------------------------------------------------------- helpers
class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


_libc = None
if sys.platform.startswith("linux"):
    try:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.process_vm_readv.restype = ctypes.c_ssize_t
        _libc.process_vm_readv.argtypes = [ctypes.c_int, ctypes.POINTER(_Iovec), ctypes.c_ulong,
                                           ctypes.POINTER(_Iovec), ctypes.c_ulong, ctypes.c_ulong]
    except (OSError, AttributeError):
        _libc = None


def _address(view: memoryview) -> int:
    """The address of a contiguous buffer's first byte (read-only buffers too)."""
    # numpy is imported here, not with the module: the launcher imports this module for
    # the segments' names and clean-up, and starts ~60 ms sooner without numpy (a rank has
    # numpy loaded long before it sends a message this large)
    import numpy as np
    return int(np.frombuffer(view, np.uint8).ctypes.data) if view.nbytes else 0


def _read_remote(pid: int, local: int, remote: int, length: int) -> Optional[str]:
    """Copy ``length`` bytes at address ``remote`` of process ``pid`` to address ``local``
    of ours; None on success, else the reason it failed."""
    if _libc is None:
        return "process_vm_readv is not available"
    done = 0
    while done < length:
        mine = _Iovec(local + done, length - done)
        theirs = _Iovec(remote + done, length - done)
        n = _libc.process_vm_readv(pid, ctypes.byref(mine), 1, ctypes.byref(theirs), 1, 0)
        if n <= 0:
            err = ctypes.get_errno()
            return f"process_vm_readv from pid {pid} failed: {os.strerror(err) if n < 0 else 'no progress'}"
        done += n
    return None


def _allow_peers_to_read() -> None:
    """Under YAMA ptrace_scope=1 only ancestors may read a process's memory; let the other
    ranks (siblings) do it, as MPI libraries' cross memory attach does."""
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            if f.read().strip() != "1":
                return
    except OSError:
        return
    if _libc is not None:
        PR_SET_PTRACER, PR_SET_PTRACER_ANY = 0x59616D61, ctypes.c_ulong(-1)
        _libc.prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0)


def _reach_key(directory: str) -> str:
    """What two processes must share to use this transport: the segments' file system and
    the network namespace of the wake-up sockets (device and inode of each)."""
    parts = []
    for path in (directory, "/proc/self/ns/net"):
        try:
            st = os.stat(path)
            parts.append(f"{st.st_dev:x}.{st.st_ino:x}")
        except OSError:
            parts.append("?")
    return "-".join(parts)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists (without a pidfd to tell; ours always does)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass
    return True


def _pidfd(pid: int) -> Optional[int]:
    if pid == os.getpid() or not hasattr(os, "pidfd_open"):
        return None
    try:
        return os.pidfd_open(pid)
    except OSError:
        return None


# --------------------------------------------------------------------------- segments
class _Segment:
    """One mapped inbox (ours or a peer's)."""

    def __init__(self, path: str, fd: int, length: int) -> None:
        self.path = path
        self.map = mmap.mmap(fd, length)
        self.view = memoryview(self.map)
        self.ctl = self.view[:MAPPED_AT].cast("Q")

    def ring(self, index: int, ring: int) -> Tuple[memoryview, memoryview]:
        """(control words, data area) of ring ``index``."""
        start = self.ring_start(index, ring)
        return self.view[start:start + RING_CTL].cast("Q"), self.view[start + RING_CTL:start + RING_CTL + ring]

    def ring_start(self, index: int, ring: int) -> int:
        """Where ring ``index``'s control words begin in the mapping (its data area follows
        them)."""
        return _rings_offset(self.ctl[C_SLOTS]) + index * (RING_CTL + ring)

    def close(self) -> None:
        self.ctl.release()
        self.view.release()
        try:
            self.map.close()
        except BufferError:   # a ring view still referenced somewhere: the GC unmaps it
            pass


def _runs(ranks: Sequence[int]) -> List[Tuple[int, int]]:
    """Sorted ranks as (first, count) runs of consecutive ones (one fallocate each)."""
    runs: List[Tuple[int, int]] = []
    for r in ranks:
        if runs and runs[-1][0] + runs[-1][1] == r:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((r, 1))
    return runs


def _rings_offset(slots: int) -> int:
    return (MAPPED_AT + slots + 4095) // 4096 * 4096


def _inbox_bytes(slots: int, ring: int) -> int:
    return _rings_offset(slots) + slots * (RING_CTL + ring)


# --------------------------------------------------------------------------- rings
class _Frame:
    """A frame (or the rest of one) waiting for room in a ring."""

    __slots__ = ("segments", "on_sent", "started", "token", "keep", "header")

    def __init__(self, segments: Optional[List[memoryview]], on_sent: OnSent, token: int = 0,
                 keep: Sequence[memoryview] = (), header: bytes = b"") -> None:
        # the first segment is the header (and descriptor); None: not decided yet whether
        # the payload goes by reference (``header`` and ``keep`` hold the frame until then)
        self.segments = segments
        self.on_sent = on_sent
        self.started = False          # header written: the rest is payload
        self.token = token            # by reference: completed by the receiver's ACK
        self.keep = keep              # by reference: the buffers the receiver reads
        self.header = header


class _Out:
    """Our ring in one peer's inbox: we write, the peer reads. Besides the transport's
    queue, the engine's express send writes a whole eager frame into it at once
    (:meth:`send_eager`, the transport's :meth:`ShmTransport.eager_writer`)."""

    __slots__ = ("peer", "ctl", "data", "cap", "mask", "tail", "head", "queue", "peer_ctl",
                 "wake", "awaiting", "tokens", "kicked", "owner", "map", "base", "fenced")

    def __init__(self, peer: int, seg: _Segment, index: int, ring: int,
                 wake: Optional[socket.socket], owner: "ShmTransport", fenced: bool = True) -> None:
        self.peer = peer
        self.owner = owner
        #: a publish fences before it looks at the peer's sleeping flag (False: the peer
        #: issues a process-wide barrier before it sleeps; see the module docstring)
        self.fenced = fenced
        self.ctl, self.data = seg.ring(index, ring)
        # the mapping itself and where the data area lies in it: a slice of an mmap takes
        # any C-contiguous buffer (a numpy array too), a memoryview only bytes
        self.map = seg.map
        self.base = seg.ring_start(index, ring) + RING_CTL
        self.cap = ring
        self.mask = ring - 1
        self.tail = self.ctl[R_TAIL]
        self.head = self.ctl[R_HEAD]
        self.queue: Deque[_Frame] = collections.deque()
        self.peer_ctl = seg.ctl
        self.wake = wake
        self.awaiting: Dict[int, _Frame] = {}   # token -> frame read by reference, not yet ACKed
        self.tokens = 0
        #: the peer's sleep we last woke (its sleeping word: a number per sleep): one
        #: doorbell wakes a sleep, so the frames after it need none
        self.kicked = 0

    def send_eager(self, flags: int, context: int, source: int, tag: int, msg_id: int,
                   payload: Sequence[memoryview], nbytes: int) -> bool:
        """Write an EAGER frame (its header made in place from the fields) and its
        ``payload`` (``nbytes`` in all) into the ring if nothing waits before it and it fits
        before the ring's end: True if it is on its way, False if not (then nothing is
        written). The express lane of :meth:`Transport.send_now`."""
        if self.queue:
            return False
        tail = self.tail
        pos = tail & self.mask
        n = HEADER_SIZE + nbytes
        cap = self.cap
        if pos + n > cap or (tail + n - self.head > cap
                             and tail + n - ShmTransport._refresh(self) > cap):
            return False
        data = self.data
        HEADER.pack_into(data, pos, EAGER, flags, 0, context, source, tag, msg_id, nbytes)
        pos += HEADER_SIZE
        if len(payload) == 1:   # (any C-contiguous buffer of nbytes: bytes, a numpy array)
            start = self.base + pos
            self.map[start:start + nbytes] = payload[0]
        else:
            for seg in payload:
                end = pos + seg.nbytes
                data[pos:end] = seg
                pos = end
        self.tail = tail = tail + n
        self.ctl[R_TAIL] = tail
        if self.fenced:                         # store tail; fence; load the reader's flag
            self.owner._fence_in()
            self.owner._fence_out()
        sleep = self.peer_ctl[C_SLEEPING]
        if sleep and sleep != self.kicked:
            self.owner._wake(self, sleep)
        return True

    def send_express(self, gate: Any, context: int, source: int, tag: int, buf: Any,
                     nbytes: int) -> bool:
        """A blocking ``Send`` of ``buf`` (``nbytes``, one buffer) as one EAGER frame, in
        one call under the engine's ``gate`` (:class:`~minimpi.transports.base.ExpressGate`;
        :meth:`Transport.eager_writer` says when it declines). The header is packed where
        the frame goes, before the payload: a ``buf`` that is not C-contiguous fails its
        copy after it, and since ``tail`` is not moved, nothing is published."""
        try:
            gate.acquire()
            if not gate.open or nbytes > gate.eager_limit or self.queue:
                return False
            tail = self.tail
            pos = tail & self.mask
            n = HEADER_SIZE + nbytes
            cap = self.cap
            if pos + n > cap or (tail + n - self.head > cap
                                 and tail + n - ShmTransport._refresh(self) > cap):
                return False
            HEADER.pack_into(self.data, pos, EAGER, 0, 0, context, source, tag,
                             next(gate.msg_ids), nbytes)
            start = self.base + pos + HEADER_SIZE
            try:
                self.map[start:start + nbytes] = buf
            except ValueError:                  # not C-contiguous: the engine's to send
                return False
            self.tail = tail = tail + n
            self.ctl[R_TAIL] = tail
            if self.fenced:                     # store tail; fence; load the reader's flag
                self.owner._fence_in()
                self.owner._fence_out()
            sleep = self.peer_ctl[C_SLEEPING]
            if sleep and sleep != self.kicked:
                self.owner._wake(self, sleep)
            return True
        finally:
            if gate.held():
                gate.release()


class _In:
    """A ring in our inbox that one peer writes and we read.

    Besides the transport's :meth:`ShmTransport.progress`, a blocking receive reads it
    through :meth:`take_matching` (the transport's :meth:`ShmTransport.eager_reader`): the
    ring's shared head word is where the reader is, and one store of it takes a frame, so a
    signal handler that raises anywhere before that store leaves the frame in the ring,
    whole, for the next receive - no signal mask needed (see :mod:`.signal_guard`).
    ``head`` is a copy of that word that :meth:`progress` polls; the word is the truth."""

    __slots__ = ("peer", "ctl", "data", "cap", "mask", "head", "d_header", "d_target", "d_pos",
                 "d_skip", "gone", "owner", "map", "base", "fence_in", "fence_out",
                 "fenced", "pid", "x_header", "x_target", "x_base", "x_pos", "x_entries", "x_token")

    def __init__(self, peer: int, seg: _Segment, ring: int, pid: int,
                 owner: "ShmTransport") -> None:
        self.peer = peer
        self.owner = owner
        self.gone = False        # the peer is given up or the transport closed: no reads
        self.ctl, self.data = seg.ring(peer, ring)
        # the mapping and where the data area lies in it: a slice of an mmap is bytes, what
        # a small payload's copy into any buffer takes (frames.filler)
        self.map = seg.map
        self.base = seg.ring_start(peer, ring) + RING_CTL
        self.fence_in, self.fence_out = owner._fence_in, owner._fence_out
        #: taking a frame fences before it looks at the writer's want-room flag (False:
        #: the writer issues a process-wide barrier before it sleeps; module docstring)
        self.fenced = True
        self.cap = ring
        self.mask = ring - 1
        self.head = self.ctl[R_HEAD]
        self.d_header: Optional[Header] = None     # payload being copied out in pieces
        self.d_target: Optional[memoryview] = None
        self.d_pos = 0
        self.d_skip = 0      # payload bytes to drop: the engine failed on their frame
        self.pid = pid
        # a payload being read by reference, a chunk per progress call
        self.x_header: Optional[Header] = None
        self.x_target: Optional[memoryview] = None
        self.x_base = self.x_pos = self.x_token = 0
        self.x_entries: List[List[int]] = []      # [address, length] still to read

    def take_matching(self, context: int, source: int, tag: int,
                      target: Any, times: int) -> Optional[tuple]:
        """The frame at the head of the ring, taken if a blocking receive for (``context``,
        ``source``, ``tag``) gets it (see :func:`~minimpi.transports.base.take_matching`),
        in one Python call: nothing half-delivered before it, a whole eager frame in one
        piece, not by reference."""
        if self.gone:
            return None
        # what does not depend on the frame is looked at before it comes (off the path
        # from its arrival to the receive's return): progress is in the middle of a frame
        # (it delivers the rest), or the ring's head is where no header fits (the writer
        # skips to the start: progress's frame)
        if self.d_target is not None or self.d_skip or self.x_target is not None:
            return ()
        ctl = self.ctl
        head = ctl[R_HEAD]
        pos = head & self.mask
        cap = self.cap
        if cap - pos < HEADER_SIZE:
            return ()
        # a small buffer's header and payload come in one unpack (frames.MATCH_AND_PAYLOAD),
        # chosen now, before the frame, with the copy into an array (a byte view takes a
        # slice assignment)
        room = 0 if target is None else target.nbytes
        both = fill = None
        if 0 < room <= PAYLOAD_WITH_MATCH_MAX and pos + HEADER_SIZE + room <= cap:
            both = MATCH_AND_PAYLOAD[room]
            if type(target) is not memoryview:
                fill = FILLERS.get(room) or filler(room)
        tail = ctl[R_TAIL]
        while tail == head:
            if times <= 1:
                return None
            times -= 1
            tail = ctl[R_TAIL]
        data = None
        if both is not None:         # (it fits before the ring's end if n <= room)
            word, hcontext, hsource, htag, n, payload = both.unpack_from(self.data, pos)
            end = head + HEADER_SIZE + n
            if (word & _EXPRESS_MASK != EAGER or n > room or end > tail
                    or hcontext != context or hsource != source or htag != tag and tag >= 0):
                return ()
            if n != room:            # (the unpack read the buffer's size: the frame's part)
                payload = payload[:n]
                if fill is not None:
                    fill = filler(n) if n else None
            if fill is not None:
                fill(target, 0, payload)
            elif n:                  # (no filler: a byte view)
                target[:n] = payload
        else:
            word, hcontext, hsource, htag, n = MATCH_FIELDS.unpack_from(self.data, pos)
            start = pos + HEADER_SIZE
            end = head + HEADER_SIZE + n
            if (word & _EXPRESS_MASK != EAGER or start + n > cap or end > tail
                    or hcontext != context or hsource != source or htag != tag and tag >= 0):
                return ()
            if target is None:
                data = bytearray(self.data[start:start + n])
            elif n > room:
                return ()
            elif type(target) is memoryview:    # a byte view: the cheapest copy of all
                target[:n] = self.data[start:start + n]
            elif n:         # bytes of the mapping, for an array (no view made of it)
                start += self.base
                (FILLERS.get(n) or filler(n))(target, 0, self.map[start:start + n])
        # take it: one store of the shared head word commits it (unless a signal handler's
        # receive took it meanwhile)
        if ctl[R_HEAD] != head or self.gone:
            return ()
        ctl[R_HEAD] = end
        self.head = end
        if self.fenced:                         # store head; fence; load the writer's flag
            self.fence_in()
            self.fence_out()
        if ctl[R_WANT]:                         # the peer waits for room in this ring
            self.owner.kick_peer(self.peer)
        return source, htag, n, data


class ShmTransport(Transport):
    """Frames through shared-memory rings between the ranks of one host."""

    name = "shm"
    #: reaches only ranks on the same host (see minimpi.transports.router)
    scope = "host"

    def __init__(self, rank: int, size: int, job_id: str, directory: str = SHM_DIR,
                 ring: Optional[int] = None, cma: bool = True,
                 local_ranks: Optional[Sequence[int]] = None, asymmetric: bool = True) -> None:
        why = available(directory)
        if why is not None:
            raise TransportError(f"rank {rank}: cannot use the shared-memory transport: {why}")
        self.rank = rank
        self.size = size
        self.job_id = job_id
        self.directory = directory
        self.ring = ring or ring_bytes(size)
        if self.ring & (self.ring - 1) or self.ring < 4 * HEADER_SIZE:
            raise TransportError(f"rank {rank}: shared-memory ring size {self.ring} must be a "
                                 f"power of two of at least {4 * HEADER_SIZE} bytes")
        self.cma = cma and _libc is not None
        #: this rank issues a process-wide barrier before it sleeps, and is registered for
        #: its peers' barriers: toward a peer that says the same, nobody fences per message
        #: (module docstring: Sleeping without missing a wake-up)
        self.asymmetric = asymmetric and membarrier.register()
        #: some peer on this host needs our fence between a store it may wait for and our
        #: look at whether it sleeps (fence()): one that does not barrier before it sleeps
        self.needs_fence = not self.asymmetric
        #: the peers expected on this host (ENV_LOCAL_RANKS): their rings are reserved in listen
        self._expected = sorted({r for r in local_ranks or () if 0 <= r < size and r != rank})
        self._sink: Optional[FrameSink] = None
        self._inbox: Optional[_Segment] = None
        self._unlinked = False
        self._reach: Optional[str] = None      # _reach_key of this rank (set by listen)
        self._out: List[Optional[_Out]] = [None] * size
        self._in: List[_In] = []
        self._peers: List[int] = []            # local peers (world ranks)
        self._segments: Dict[int, _Segment] = {}
        self._pidfds: Dict[int, int] = {}      # fd -> peer
        self._pids: Dict[int, int] = {}
        self._departed: List[int] = []         # peers that left before we could map them
        self._lost: Dict[int, str] = {}
        self._blocked: List[_Out] = []         # rings with frames waiting for room
        self._sleeps = 0                        # how many times this rank slept (see _wake)
        self._pulling: List[_In] = []          # rings whose payload we read by reference
        self._pending = 0
        # An exception (sys.exit from a signal handler) escaped from the middle of writing or
        # reading a ring: offsets may be half-updated, so nothing more may be sent (as TCP)
        self.interrupted = False
        self._until_check = CHECK_EVERY
        self._watch: Optional[List[Tuple[int, Optional[memoryview], int]]] = None
        self._pidless = False           # a peer no pidfd watches (see _unwatched)
        # a lock's acquire and release (locked instructions): a full memory fence. The
        # acquire never blocks: a signal handler that raised between the two calls left the
        # lock held, and a blocking acquire would then wait forever; a failed try-acquire is
        # a locked instruction too, and the release that follows frees the lock again
        fence = threading.Lock()
        self._fence_in, self._fence_out = functools.partial(fence.acquire, False), fence.release
        self._wake_sock: Optional[socket.socket] = None
        self._self_kick: Optional[socket.socket] = None
        #: peer -> a datagram socket connected to its wake-up socket (connected while its
        #: path exists, so the owner can unlink the path once every peer is connected)
        self._kicks: Dict[int, socket.socket] = {}
        self._wake_dir = os.path.join(directory, f"{PREFIX}{job_id}-wake")
        self._wake_removed = False
        self._poller = select.poll()         # wake socket and pidfds: where we sleep
        self._pid_poller = select.poll()     # pidfds alone: who has exited
        self._inbox_fd = -1
        self._probe = ctypes.create_string_buffer(_PROBE + struct.pack("<I", rank))
        #: what the wait now running also waits for besides frames (set_sleep_check)
        self._sleep_check = None
        self._shared: Dict[str, Tuple[mmap.mmap, str]] = {}   # key -> (map, path)

    # -- set-up ---------------------------------------------------------------------------
    def attach(self, sink: FrameSink) -> None:
        self._sink = sink

    def _wake_name(self, rank: int) -> bytes:
        """Where ``rank``'s wake-up socket is bound: a path in the job's 0700 directory, so
        only this user's processes can send it datagrams (an abstract name can be flooded
        by any local user); the abstract name only where that path would be too long."""
        path = os.path.join(self._wake_dir, str(rank))
        if len(path.encode()) < 100:
            return path.encode()
        return f"\0{PREFIX}{self.job_id}-{rank}".encode()

    def _make_wake_dir(self) -> None:
        """Create (or join) the job's private directory of wake-up sockets."""
        try:
            os.mkdir(self._wake_dir, 0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            raise TransportError(f"rank {self.rank}: cannot create {self._wake_dir}: {exc}") from None
        st = os.lstat(self._wake_dir)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise TransportError(f"rank {self.rank}: {self._wake_dir} is not a private "
                                 f"directory of this user (another user's, or open to others)")

    def listen(self) -> str:
        path = os.path.join(self.directory, segment_name(self.job_id, self.rank))
        length = _inbox_bytes(self.size, self.ring)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as exc:
            raise TransportError(f"rank {self.rank}: cannot create shared memory {path}: {exc}") from None
        try:
            os.ftruncate(fd, length)         # sparse: only the rings of local peers get pages
            # the control page is written next: its pages must exist (a write to a page a
            # full /dev/shm cannot back is a SIGBUS, not an error)
            os.posix_fallocate(fd, 0, _rings_offset(self.size))
            # the rings of the peers expected here, before anyone learns our address: if
            # they do not fit, auto routes this rank over the network instead
            for first, count in _runs(self._expected):
                os.posix_fallocate(fd, _rings_offset(self.size) + first * (RING_CTL + self.ring),
                                   count * (RING_CTL + self.ring))
            self._inbox = _Segment(path, fd, length)
        except OSError as exc:
            os.close(fd)
            os.unlink(path)
            raise TransportError(f"rank {self.rank}: cannot create its shared-memory inbox "
                                 f"{path}: {exc}{self._space_note()}") from None
        self._inbox_fd = fd                  # kept to reserve rings in set_peers
        ctl = self._inbox.ctl
        ctl[C_RING], ctl[C_SLOTS] = self.ring, self.size
        ctl[C_OWNER], ctl[C_OWNER_NS] = os.getpid(), _pid_namespace()
        ctl[C_BARRIER] = int(self.asymmetric)
        ctl[C_MAGIC] = MAGIC                 # last: the inbox is ready
        self._wake_sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            name = self._wake_name(self.rank)
            if not name.startswith(b"\0"):     # (an abstract name needs no directory)
                self._make_wake_dir()
            self._wake_sock.bind(name)
        except OSError as exc:
            self.close()
            raise TransportError(f"rank {self.rank}: cannot bind the shared-memory wake-up "
                                 f"socket: {exc}") from None
        self._wake_sock.setblocking(False)
        self._poller.register(self._wake_sock.fileno(), select.POLLIN)
        # another thread of this process wakes our sleep through the same socket (wake())
        self._self_kick = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._self_kick.setblocking(False)
        self._self_kick.connect(self._wake_name(self.rank))
        if self.cma:
            _allow_peers_to_read()
        self._reach = _reach_key(self.directory)      # decided once, asked for every peer
        return f"{os.getpid()},{ctypes.addressof(self._probe)},{self._reach}"

    def reaches(self, address: str) -> bool:
        """A peer on this host shares our memory and wake-ups only with the same /dev/shm
        and network namespace (abstract sockets live there): containers on one kernel may not."""
        return address.split(",")[2] == (self._reach or _reach_key(self.directory))

    def set_peers(self, addresses: Sequence[Optional[str]]) -> None:
        """Map the inbox of every peer with an address (peers routed elsewhere have None)."""
        expected = set(self._expected)
        for peer, address in enumerate(addresses):
            if peer == self.rank or not address:
                continue
            pid, probe = (int(x) for x in address.split(",")[:2])
            self._peers.append(peer)
            self._pids[peer] = pid
            self._watch = None
            # what the peer sends us lands in our own inbox, whatever becomes of it: its
            # ring is reserved before anything reads or writes it (listen reserved the
            # rings of the peers the launcher started here)
            if peer not in expected:
                self._reserve(peer)
            self._in.append(_In(peer, self._inbox, self.ring, pid, self))
            seg = self._map_inbox(peer, reserved=peer in expected)
            if seg is None:               # it has finished already (and removed its inbox)
                self._departed.append(peer)
                continue
            self._segments[peer] = seg
            # both of us barrier before we sleep: neither fences to publish to the other
            fenced = not (self.asymmetric and seg.ctl[C_BARRIER] == 1)
            self._in[-1].fenced = fenced
            self._out[peer] = _Out(peer, seg, self.rank, self.ring, self._connect_wake(peer),
                                   self, fenced)
            fd = _pidfd(pid)
            if fd is not None:
                self._pidfds[fd] = peer
                self._poller.register(fd, select.POLLIN)
                self._pid_poller.register(fd, select.POLLIN)
            # may the peer send us its large payloads by reference? (it waits for the answer)
            verdict = CMA_YES if self.cma and self._can_read(peer, pid, probe) else CMA_NO
            self._in[-1].ctl[R_CMA] = verdict
            seg.view[MAPPED_AT + self.rank] = 1
            self._fence_in()
            self._fence_out()
            if seg.ctl[C_SLEEPING]:
                self._kick(self._kicks.get(peer))
        self.needs_fence = any(out.fenced for out in self._out if out is not None)
        self._maybe_unlink()

    def _map_inbox(self, peer: int, reserved: bool = False) -> Optional[_Segment]:
        """Map ``peer``'s inbox; None if it is gone (a peer removes it when it closes).
        ``reserved``: the peer reserved our ring in it before it published its address (the
        launcher started both here: each reserved the rings of the other's list)."""
        path = os.path.join(self.directory, segment_name(self.job_id, peer))
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise TransportError(f"rank {self.rank}: cannot open rank {peer}'s shared memory "
                                 f"{path}: {exc}") from None
        try:
            # the ring this rank writes in that inbox: its pages must exist before we touch
            # them, whether or not its owner has reserved them yet
            offset = _rings_offset(self.size) + self.rank * (RING_CTL + self.ring)
            try:
                if not reserved:
                    os.posix_fallocate(fd, offset, RING_CTL + self.ring)
            except OSError as exc:
                raise TransportError(
                    f"rank {self.rank}: cannot reserve {self.ring} bytes of shared memory in "
                    f"rank {peer}'s inbox {path} ({exc}){self._space_note()}") from None
            seg = _Segment(path, fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)
        if seg.ctl[C_MAGIC] != MAGIC or seg.ctl[C_RING] != self.ring or seg.ctl[C_SLOTS] != self.size:
            seg.close()
            raise TransportError(f"rank {self.rank}: {path} is not an inbox of this job")
        return seg

    def _can_read(self, peer: int, pid: int, probe: int) -> bool:
        """Whether the kernel lets us read ``peer``'s memory: read its probe buffer."""
        expect = _PROBE + struct.pack("<I", peer) + b"\0"
        got = ctypes.create_string_buffer(len(expect))
        return _read_remote(pid, ctypes.addressof(got), probe, len(expect)) is None and \
            got.raw == expect

    def _reserve(self, peer: int) -> None:
        """Allocate the pages of the ring ``peer`` writes in our inbox now, so that a full
        /dev/shm is an error here rather than a SIGBUS in the middle of a message."""
        offset = _rings_offset(self.size) + peer * (RING_CTL + self.ring)
        try:
            os.posix_fallocate(self._inbox_fd, offset, RING_CTL + self.ring)
        except OSError as exc:
            raise TransportError(
                f"rank {self.rank}: cannot reserve {self.ring} bytes of shared memory in "
                f"{self.directory} ({exc}){self._space_note()}") from None

    def _space_note(self) -> str:
        """How full the shared-memory directory is, and what to do about it."""
        try:
            st = os.statvfs(self.directory)
            free, total = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
            room = f"; {self.directory} has {free // 1024 ** 2} MiB free of {total // 1024 ** 2} MiB"
        except OSError:
            room = ""
        need = self.size * _inbox_bytes(self.size, self.ring) // 1024 ** 2
        return (f"{room}; {self.size} ranks on one host need about {need} MiB with "
                f"{self.ring // 1024} KiB rings: free space there, use smaller rings "
                f"(-x MINIMPI_SHM_RING=32KiB), or run with --transport tcp")

    def _remove_wake_socket(self) -> None:
        """Unlink our wake-up socket; the last rank of the job here removes the directory
        (tried again at close: a rank that unlinked its socket early, once every peer had
        connected, may not be the last to go)."""
        name = self._wake_name(self.rank)
        if self._wake_sock is None or name.startswith(b"\0"):
            return
        if not self._wake_removed:
            self._wake_removed = True
            try:
                os.unlink(name)
            except OSError:
                pass
        try:
            os.rmdir(self._wake_dir)
        except OSError:              # others still bound there, or gone already
            pass

    def _maybe_unlink(self) -> None:
        """Remove our inbox's name once every local peer has mapped it."""
        if self._unlinked or self._inbox is None:
            return
        view = self._inbox.view
        if all(view[MAPPED_AT + p] for p in self._peers):
            self._unlink(self._inbox.path)
            self._remove_wake_socket()     # every peer is connected to it by now

    def _unlink(self, path: str) -> None:
        self._unlinked = True
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        os.close(self._inbox_fd)
        self._inbox_fd = -1

    # -- sending --------------------------------------------------------------------------
    def send(self, peer: int, header: bytes, payload: Sequence[memoryview], on_sent: OnSent) -> None:
        out = self._out[peer]
        if out is None:
            reason = (f"rank {peer} {self._lost[peer]}" if peer in self._lost
                      else f"rank {peer} is not reachable through shared memory")
            if on_sent is not None:
                on_sent(reason)
            return
        if not out.queue:
            # The common small frame: header and payload fit before the end of the ring.
            tail = out.tail
            pos = tail & out.mask
            n = HEADER_SIZE
            for seg in payload:
                n += seg.nbytes
            cap = out.cap
            if pos + n <= cap and (tail + n - out.head <= cap or tail + n - self._refresh(out) <= cap):
                data = out.data
                data[pos:pos + HEADER_SIZE] = header
                pos += HEADER_SIZE
                for seg in payload:
                    end = pos + seg.nbytes
                    data[pos:end] = seg
                    pos = end
                out.tail = tail = tail + n
                self._publish(out, tail)
                if on_sent is not None:
                    on_sent(None)
                return
        out.queue.append(self._frame(out, header, payload, on_sent))
        self._pending += 1
        if len(out.queue) == 1:
            self._flush(out)

    def send_now(self, peer: int, header: bytes, payload: Sequence[memoryview],
                 nbytes: int) -> bool:
        """The express lane (:meth:`Transport.send_now`): an EAGER frame goes into the
        peer's ring if nothing waits before it and it fits before the end of the ring."""
        out = self._out[peer]
        if out is None:
            return False
        kind, flags, _, context, source, tag, msg_id, _ = HEADER.unpack(header)
        return kind == EAGER and out.send_eager(flags, context, source, tag, msg_id,
                                                payload, nbytes)

    def eager_writer(self, peer: int) -> Optional[_Out]:
        """The writer of our ring in ``peer``'s inbox for the engine's express send
        (:meth:`Transport.eager_writer`); None if ``peer`` is not reached through it."""
        return self._out[peer] if 0 <= peer < len(self._out) else None

    def eager_reader(self, peer: int) -> Optional[_In]:
        """The reader of ``peer``'s ring for a blocking receive (:meth:`Transport.eager_reader`):
        its ``take_matching()`` needs no signal mask (see :class:`_In`)."""
        for inc in self._in:
            if inc.peer == peer:
                return inc
        return None

    def kick_peer(self, peer: int) -> None:
        """Ring ``peer``'s doorbell (it waits for room in its ring in our inbox)."""
        self._kick(self._kicks.get(peer))

    @staticmethod
    def _refresh(out: _Out) -> int:
        out.head = out.ctl[R_HEAD]
        return out.head

    def _publish(self, out: _Out, tail: int) -> None:
        out.ctl[R_TAIL] = tail
        if out.fenced:                          # store tail; fence; load the reader's flag
            self._fence_in()
            self._fence_out()
        sleep = out.peer_ctl[C_SLEEPING]
        if sleep and sleep != out.kicked:
            self._wake(out, sleep)

    def _wake(self, out: _Out, sleep: int) -> None:
        """Ring ``out``'s peer's doorbell for its sleep number ``sleep``, once: the datagram
        stays queued until that sleep ends (the sleeper drains it then), so a second one
        for the same sleep would only cost both sides a system call. A sleeper numbers each
        sleep (:meth:`prepare_sleep`), so its next sleep is woken again."""
        if out.wake is not None:
            out.kicked = sleep
            self._kick(out.wake)

    def _kick(self, sock: Optional[socket.socket]) -> None:
        if sock is None:
            return
        try:
            sock.send(b"w")
        except OSError:   # its queue is full (it will wake anyway) or it is gone (pidfd tells)
            pass

    def _connect_wake(self, peer: int) -> Optional[socket.socket]:
        """A socket connected to ``peer``'s wake-up socket (None if it is gone already)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.setblocking(False)
        try:
            sock.connect(self._wake_name(peer))
        except OSError:
            sock.close()
            return None
        self._kicks[peer] = sock
        return sock

    def _frame(self, out: _Out, header: bytes, payload: Sequence[memoryview], on_sent: OnSent) -> _Frame:
        """A queued frame; a large DATA payload goes by reference when the reader can read us
        (until the reader has said whether it can, the frame waits: see set_peers)."""
        # (a descriptor is written whole, so it must fit in the ring with room to spare)
        if header[0] == DATA and out.ctl[R_CMA] != CMA_NO and 0 < len(payload) <= MAX_DESC_SEGMENTS \
                and HEADER_SIZE + _DESC.size + len(payload) * _ENTRY.size <= out.cap // 2:
            length = sum(seg.nbytes for seg in payload)
            if length >= CMA_MIN and all(seg.c_contiguous for seg in payload):
                if out.ctl[R_CMA] == CMA_UNKNOWN:
                    return _Frame(None, on_sent, keep=payload, header=header)
                out.tokens += 1
                token = out.tokens
                desc = bytearray(header)
                desc[2] |= BY_REFERENCE           # the extra field (see frames.py)
                desc += _DESC.pack(token, len(payload))
                for seg in payload:
                    desc += _ENTRY.pack(_address(seg), seg.nbytes)
                return _Frame([memoryview(desc)], on_sent, token, payload)
        segments = [memoryview(header)]
        segments.extend(payload)
        return _Frame(segments, on_sent)

    def _flush(self, out: _Out) -> bool:
        """Write as much of ``out``'s queue as the ring has room for. True if anything moved."""
        try:
            return self._write_queue(out)
        except BaseException:   # half-way through a frame: see ``interrupted``
            self.interrupted = True
            raise

    def _write_queue(self, out: _Out) -> bool:
        queue, data, cap, mask = out.queue, out.data, out.cap, out.mask
        tail, head = out.tail, out.head
        start = tail
        while queue:
            frame = queue[0]
            segs = frame.segments
            if not frame.started:
                if segs is None:                  # by reference or not: the reader decides
                    if out.ctl[R_CMA] == CMA_UNKNOWN:
                        break
                    queue[0] = frame = self._frame(out, frame.header, frame.keep, frame.on_sent)
                    segs = frame.segments
                first = segs[0]
                skip = cap - (tail & mask) if cap - (tail & mask) < HEADER_SIZE else 0
                if tail + skip + first.nbytes - head > cap:
                    head = self._refresh(out)
                    if tail + skip + first.nbytes - head > cap:
                        break
                tail += skip
                tail = self._copy_in(data, mask, tail, first)
                frame.started = True
                segs.pop(0)
                if frame.token:                   # by reference: only the header travels
                    out.awaiting[frame.token] = frame
                    segs.clear()
            while segs and tail - start < STREAM_CHUNK:
                free = cap - (tail - head)
                if not free:
                    head = self._refresh(out)
                    free = cap - (tail - head)
                    if not free:
                        break
                seg = segs[0]
                n = min(free, seg.nbytes)
                tail = self._copy_in(data, mask, tail, seg[:n] if n < seg.nbytes else seg)
                if n == seg.nbytes:
                    segs.pop(0)
                else:
                    segs[0] = seg[n:]
                    out.tail = tail
                    self._publish(out, tail)      # the reader copies this part out meanwhile
            if segs:
                break
            queue.popleft()
            if not frame.token:
                self._pending -= 1
                if frame.on_sent is not None:
                    frame.on_sent(None)
        if tail != start:
            out.tail = tail
            self._publish(out, tail)
        if queue and out not in self._blocked:
            self._blocked.append(out)
        return tail != start

    @staticmethod
    def _copy_in(data: memoryview, mask: int, tail: int, seg: memoryview) -> int:
        pos = tail & mask
        n = seg.nbytes
        first = min(n, mask + 1 - pos)
        data[pos:pos + first] = seg[:first] if first < n else seg
        if first < n:
            data[:n - first] = seg[first:]
        return tail + n

    # -- receiving ------------------------------------------------------------------------
    def progress(self, timeout: Optional[float]) -> bool:
        moved = False
        held = None
        try:
            if self._pulling:                     # payloads being read by reference
                held = signal_guard.hold()        # no handler may raise half-way through a frame
                for inc in list(self._pulling):
                    failure = self._read(inc)
                    if failure is not None:
                        self._peer_gone(inc.peer, failure)
                moved = True
            for inc in self._in:
                if inc.ctl[R_TAIL] != inc.head:
                    if not moved:                 # the first delivery of this round
                        held = signal_guard.hold()
                    failure = self._read(inc)
                    moved = True
                    if failure is not None:
                        self._peer_gone(inc.peer, failure)
                        break                     # self._in changed
        finally:
            if held is not None:
                signal_guard.release(held)
        if self._blocked:
            moved = self._unblock() or moved
        if moved or timeout == 0:
            self._until_check -= 1
            if self._until_check <= 0:
                self._until_check = CHECK_EVERY
                moved = self._check_peers(0) or moved
            return moved
        if self.prepare_sleep():
            try:
                self._sink.sleep(signal_guard.interruptible, self._poller.poll,
                                 -1 if timeout is None else int(timeout * 1000))
            except InterruptedError:
                pass
            self.end_sleep()
        return self.progress(0) or moved

    def _unblock(self) -> bool:
        moved = False
        for out in list(self._blocked):
            if out.queue:
                moved = self._flush(out) or moved
            if not out.queue:
                self._blocked.remove(out)
        return moved

    def _read(self, inc: _In) -> Optional[str]:
        """Deliver everything the peer has published in its ring. Returns why the peer must
        be given up (its large payload could not be read), else None."""
        sink, data, cap, mask, peer = self._sink, inc.data, inc.cap, inc.mask, inc.peer
        unpack, new = HEADER.unpack_from, tuple.__new__
        head = start = inc.ctl[R_HEAD]          # (the truth: see _In; inc.head may lag)
        tail = inc.ctl[R_TAIL]
        payload_at = -1                           # where the payload being delivered begins
        length = 0
        try:
            if inc.x_target is not None:          # first the payload we are reading
                failure = self._pull(inc)
                if failure is not None or inc.x_target is not None:
                    return failure
            while head != tail:
                if inc.d_skip:                    # the rest of a dropped payload
                    n = min(inc.d_skip, tail - head)
                    head += n
                    inc.d_skip -= n
                elif inc.d_target is not None:    # the rest of a payload
                    target, pos = inc.d_target, head & mask
                    n = min(target.nbytes - inc.d_pos, tail - head, cap - pos)
                    target[inc.d_pos:inc.d_pos + n] = data[pos:pos + n]
                    head += n
                    inc.d_pos += n
                    if inc.d_pos == target.nbytes:
                        header, inc.d_header, inc.d_target = inc.d_header, None, None
                        sink.payload_arrived(peer, header, target)
                else:
                    pos = head & mask
                    if cap - pos < HEADER_SIZE:   # headers never straddle the end
                        head += cap - pos
                        continue
                    header = new(Header, unpack(data, pos))
                    kind, length = header[0], header[7]
                    head += HEADER_SIZE
                    if kind == K_ACK:
                        self._acked(peer, header.msg_id)
                        continue
                    if header.extra & BY_REFERENCE:
                        head = self._start_pull(inc, header, head)
                        failure = self._pull(inc)
                        if failure is not None or inc.x_target is not None:
                            return failure        # later frames wait for this payload
                        continue
                    if kind in HAS_PAYLOAD:
                        payload_at = head
                        pos = head & mask
                        if kind == EAGER and length <= tail - head and pos + length <= cap:
                            # all here, in one piece: one call hands it over
                            sink.eager_arrived(peer, header, data[pos:pos + length])
                            head += length
                            payload_at = -1
                            continue
                    target = sink.frame_arrived(peer, header)
                    if kind not in HAS_PAYLOAD:
                        continue
                    pos = head & mask
                    if length <= tail - head and pos + length <= cap:   # all here, in one piece
                        if length:
                            target[:length] = data[pos:pos + length]
                        head += length
                        sink.payload_arrived(peer, header, target)
                    else:
                        inc.d_header, inc.d_target, inc.d_pos = header, target, 0
                    payload_at = -1
                if head == tail and head - start < STREAM_CHUNK:
                    tail = inc.ctl[R_TAIL]
            return None
        except BaseException:
            # The engine failed on a frame (signal handlers are held back: see progress).
            # Skip that frame's payload so the next frame starts where it should.
            if payload_at >= 0:
                head = payload_at + min(tail - payload_at, length)
                inc.d_skip = length - (head - payload_at)
            raise
        finally:
            inc.head = head
            ctl = inc.ctl
            ctl[R_HEAD] = head
            if inc.fenced:                      # store head; fence; load the writer's flag
                self._fence_in()
                self._fence_out()
            if ctl[R_WANT]:
                self._kick(self._kicks.get(peer))

    def _start_pull(self, inc: _In, header: Header, head: int) -> int:
        """A descriptor arrived: find the destination of its payload. Returns the new head."""
        token, count = _DESC.unpack(self._copy_out(inc, head, _DESC.size))
        head += _DESC.size
        raw = self._copy_out(inc, head, count * _ENTRY.size)
        inc.x_entries = [list(_ENTRY.unpack_from(raw, i * _ENTRY.size)) for i in range(count)]
        inc.x_header, inc.x_token, inc.x_pos = header, token, 0
        inc.x_target = self._sink.frame_arrived(inc.peer, header)
        inc.x_base = _address(inc.x_target)
        return head + count * _ENTRY.size

    def _pull(self, inc: _In) -> Optional[str]:
        """Read the next ``CMA_CHUNK`` bytes of a payload straight from the sender's memory
        into its destination; once all is there, deliver it and ACK. None, or why it failed."""
        budget = CMA_CHUNK
        entries = inc.x_entries
        while entries and budget:
            entry = entries[0]
            n = min(entry[1], budget)
            failure = _read_remote(inc.pid, inc.x_base + inc.x_pos, entry[0], n)
            if failure is not None:
                return f"failed: its message could not be read ({failure})"
            inc.x_pos += n
            budget -= n
            if n == entry[1]:
                entries.pop(0)
            else:
                entry[0] += n
                entry[1] -= n
        if entries:
            if inc not in self._pulling:
                self._pulling.append(inc)
            return None
        header, target, token = inc.x_header, inc.x_target, inc.x_token
        inc.x_header = inc.x_target = None
        if inc in self._pulling:
            self._pulling.remove(inc)
        self._sink.payload_arrived(inc.peer, header, target)
        self.send(inc.peer, HEADER.pack(K_ACK, 0, 0, 0, 0, 0, token, 0), (), None)
        return None

    @staticmethod
    def _copy_out(inc: _In, head: int, n: int) -> bytes:
        pos = head & inc.mask
        first = min(n, inc.cap - pos)
        out = bytes(inc.data[pos:pos + first])
        if first < n:
            out += bytes(inc.data[:n - first])
        return out

    def _acked(self, peer: int, token: int) -> None:
        out = self._out[peer]
        frame = out.awaiting.pop(token, None) if out is not None else None
        if frame is not None:
            self._pending -= 1
            if frame.on_sent is not None:
                frame.on_sent(None)

    # -- sleeping (also used by the router, which polls several transports at once) ------
    def wake(self) -> None:
        """A datagram to our own wake-up socket (another thread's sleep in poll ends)."""
        self._kick(self._self_kick)

    def wait_fds(self) -> List[int]:
        return [self._wake_sock.fileno(), *self._pidfds]

    def prepare_sleep(self) -> bool:
        """Raise our flags before blocking; False (flags lowered) if work is already here."""
        inbox = self._inbox
        if inbox is None:       # closed meanwhile (another thread finalized): do not sleep;
            return False        # the caller's wait finds out why and says so
        ctl = inbox.ctl
        self._sleeps += 1
        ctl[C_SLEEPING] = self._sleeps          # this sleep's number (see _wake)
        for out in self._blocked:
            out.ctl[R_WANT] = 1
        # store the flags; fence - on every core that runs a peer too, whose publishes to
        # us carry no fence of their own (module docstring) -; look at the rings
        if self.asymmetric:
            try:
                membarrier.barrier()
            except OSError as exc:
                self.end_sleep()
                raise TransportError(f"rank {self.rank}: the process-wide memory barrier its "
                                     f"peers rely on failed before a sleep ({exc}); run with "
                                     f"MINIMPI_SHM_MEMBARRIER=0") from None
        else:
            self._fence_in()
            self._fence_out()
        check = self._sleep_check
        ready = any(inc.ctl[R_TAIL] != inc.head for inc in self._in) or \
            (self._blocked and self._unblock()) or \
            (self._unwatched() and self._check_peers(0)) or \
            (check is not None and check())
        if ready:
            self.end_sleep()
            return False
        return True

    def set_sleep_check(self, check) -> None:
        self._sleep_check = check

    def host_memory(self) -> "ShmTransport":
        return self

    def fence(self) -> None:
        if self.needs_fence:
            self._fence_in()
            self._fence_out()

    def wake_peers(self, peers: Sequence[int], fenced: bool = False) -> None:
        if not fenced and self.needs_fence:
            self._fence_in()                    # our stores first; then their flags
            self._fence_out()
        for peer in peers:
            out = self._out[peer] if peer < self.size else None
            if out is not None:
                sleep = out.peer_ctl[C_SLEEPING]
                if sleep and sleep != out.kicked:
                    self._wake(out, sleep)

    # -- segments shared by the host's ranks (a communicator's collectives) ----------------
    def shared_segment(self, key: str, nbytes: int) -> Optional[memoryview]:
        if key in self._shared:
            return memoryview(self._shared[key][0])
        path = os.path.join(self.directory, f"{PREFIX}{self.job_id}-{key}")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size < nbytes:
                try:
                    os.posix_fallocate(fd, 0, nbytes)   # reserved now: no SIGBUS later
                except OSError as exc:
                    raise TransportError(
                        f"rank {self.rank}: cannot reserve a {nbytes}-byte shared segment "
                        f"in {self.directory}: {exc.strerror} ({self._space_note()})") from None
            seg = mmap.mmap(fd, nbytes)
        finally:
            os.close(fd)
        self._shared[key] = (seg, path)
        return memoryview(seg)

    def release_segment(self, key: str) -> None:
        entry = self._shared.get(key)
        if entry is not None:
            try:
                os.unlink(entry[1])
            except FileNotFoundError:      # another member was first
                pass

    def forget_segment(self, key: str, mem: memoryview) -> None:
        entry = self._shared.get(key)
        if entry is not None and mem.obj is entry[0]:
            del self._shared[key]     # (the name is not removed: it may be a new segment's)

    def end_sleep(self) -> None:
        inbox = self._inbox
        if inbox is None:       # closed meanwhile (see prepare_sleep)
            return
        inbox.ctl[C_SLEEPING] = 0
        for out in self._blocked:
            out.ctl[R_WANT] = 0
        while True:
            try:
                self._wake_sock.recv(64)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                break
        self._check_peers(0)
        self._maybe_unlink()

    # -- peers that go away -----------------------------------------------------------------
    def _check_peers(self, timeout: int) -> bool:
        """Notice peers that exited (pidfd readable) or closed their transport."""
        gone = self._departed
        self._departed = []
        ended: list[int] = []           # their processes are over (not just closed)
        if self._pidfds:
            events = self._pid_poller.poll(timeout)
            if events:
                ended = [self._pidfds[fd] for fd, _ in events]
                gone += ended
        watch = self._watch
        if watch is None:
            watch = self._watch = self._watch_list()
        for peer, ctl, pid in watch:
            if ctl is not None and ctl[C_CLOSED]:
                if peer not in gone:
                    gone.append(peer)
            elif pid and not _alive(pid) and peer not in gone:
                gone.append(peer)
                ended.append(peer)
        for peer in gone:
            self._peer_gone(peer, "exited")
        for peer in ended:
            self._remove_remains(peer)
        return bool(gone)

    def _unwatched(self) -> bool:
        """Whether a peer's end could go unnoticed by a sleep: one without a pidfd in the
        sleep's poller, or one found gone while mapping. (A peer that exits makes its pidfd
        readable; one that closes its transport rings our doorbell, whose datagram waits in
        the socket until we drain it after a sleep - and then look: ``end_sleep``.)"""
        if self._watch is None:
            self._watch = self._watch_list()
        return bool(self._departed) or self._pidless

    def _watch_list(self) -> List[Tuple[int, Optional[memoryview], int]]:
        """What :meth:`_check_peers` looks at for each peer: (peer, the control words of its
        inbox - its closed flag -, its pid where no pidfd watches it, else 0). Made again
        after the peers or their pidfds change (``_watch = None``)."""
        watched = set(self._pidfds.values())
        out = []
        for peer in self._peers:
            seg = self._segments.get(peer)
            out.append((peer, seg.ctl if seg is not None else None,
                        0 if peer in watched else self._pids[peer]))
        self._pidless = any(pid for _, _, pid in out)
        return out

    def _peer_gone(self, peer: int, reason: str) -> None:
        """Deliver what ``peer`` wrote before it went, then fail everything that needs it."""
        if peer in self._lost:
            return
        self._watch = None
        self._lost[peer] = reason
        for inc in self._in:
            if inc.peer == peer:
                self._in.remove(inc)
                inc.gone = True
                if inc in self._pulling:
                    self._pulling.remove(inc)
                if inc.ctl[R_TAIL] != inc.head and not reason.startswith("failed"):
                    self._read(inc)             # frames it wrote before it went
                break
        for fd, p in list(self._pidfds.items()):
            if p == peer:
                del self._pidfds[fd]
                for poller in (self._poller, self._pid_poller):
                    poller.unregister(fd)
                os.close(fd)
        out = self._out[peer]
        self._out[peer] = None
        if out is not None:
            if out in self._blocked:
                self._blocked.remove(out)
            dropped = list(out.queue) + [f for f in out.awaiting.values() if f not in out.queue]
            out.queue.clear()
            out.awaiting.clear()
            self._pending -= len(dropped)
            why = f"rank {peer} {reason}"
            for frame in dropped:
                if frame.on_sent is not None:
                    frame.on_sent(why)
        if peer in self._peers:
            self._peers.remove(peer)
        self._sink.peer_lost(peer, reason)

    def _remove_remains(self, peer: int) -> None:
        """A local peer's process ended (``os._exit``, a signal) maybe before it removed its
        inbox's name and wake-up socket: remove them, and the job's wake-up directory once
        empty, so that a job without a launcher to clean up leaves nothing. Names only: the
        memory stays mapped wherever it is. A peer that closed its transport removed them
        itself (nothing is then found)."""
        seg = self._segments.get(peer)
        paths = [seg.path] if seg is not None else []
        wake = self._wake_name(peer)
        if not wake.startswith(b"\0"):
            paths.append(wake.decode())
        for path in paths:
            try:
                os.unlink(path)
            except OSError:
                pass
        try:
            os.rmdir(self._wake_dir)
        except OSError:              # others still bound there, or gone already
            pass

    def pending_sends(self) -> int:
        return self._pending

    def close(self) -> None:
        """Tell the local peers we are gone, wake them, and release our memory."""
        inbox, self._inbox = self._inbox, None
        if inbox is None:
            return
        inbox.ctl[C_CLOSED] = 1
        for peer in self._peers:
            self._kick(self._kicks.get(peer))
        if not self._unlinked:
            self._unlink(inbox.path)
        for sock in [self._wake_sock, self._self_kick, *self._kicks.values()]:
            if sock is not None:
                sock.close()
        self._kicks.clear()
        self._remove_wake_socket()
        for fd in self._pidfds:
            os.close(fd)
        self._pidfds.clear()
        # drop our views into the rings before unmapping
        for inc in self._in:
            inc.gone = True
        self._in.clear()
        self._out = [None] * self.size
        self._blocked.clear()
        self._watch = []
        for seg in self._segments.values():
            seg.close()
        self._segments.clear()
        inbox.close()


def create(info) -> ShmTransport:
    """The transport of a process started by ``minimpi run`` (see minimpi.transports)."""
    env = info.env
    return ShmTransport(info.rank, info.size, info.job_id,
                        ring=ring_bytes(info.size, env.get("MINIMPI_SHM_RING")),
                        cma=env.get("MINIMPI_SHM_CMA", "1") != "0",
                        asymmetric=env.get("MINIMPI_SHM_MEMBARRIER", "1") != "0",
                        local_ranks=parse_ranks(env.get(ENV_LOCAL_RANKS)))
