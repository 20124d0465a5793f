"""TCP transport: plain non-blocking sockets driven by ``poll`` from the caller's thread.

Connections are opened lazily and carry both directions: rank *i* opens a connection to
rank *j* the first time it sends to *j*, unless *j*'s connection to *i* is ready by then, in
which case *i* sends on that one (:meth:`TcpTransport.adopt`). A rank keeps sending to a peer
on the connection it started with while that one is open, so frames from *i* to *j* travel
in order on one socket (MPI's non-overtaking rule); two ranks that connect to each other at
the same moment simply get two connections, one used each way - there is no race to
resolve. Jobs that connect at start-up (:meth:`TcpTransport.connect_all`) get exactly one
per pair: the lower rank opens it. One connection per pair matters for small messages: on
two one-way connections every frame costs a pure acknowledgement packet the other way,
~2 us of a ping-pong's round trip, where one connection carries the acknowledgement in the
answer.

Authentication (before a single frame is read, let alone unpickled): the connecting rank
sends ``HELLO = magic | rank | nonce_c``; the accepting rank answers ``nonce_a |
HMAC(secret, "A" | nonce_c | nonce_a | rank)``; the connecting rank checks it and sends
``HMAC(secret, "C" | nonce_a | nonce_c | rank)`` followed by its frames. A stranger, or a
peer without the job secret, is refused and logged, and the job goes on.

Strangers cannot starve a rank either: at most :data:`MAX_HANDSHAKES` accepted connections
may be handshaking at once (a new one pushes the oldest out), each has
:data:`HANDSHAKE_TIMEOUT` seconds, running out of file descriptors while accepting drops
the oldest handshake instead of spinning on the listener, and refusals are logged one by
one only for the first few, then as one count every :data:`REFUSAL_LOG_INTERVAL` seconds.

Zero copies: a frame goes out as one ``sendmsg`` of the header and the caller's memoryviews;
incoming data is read into a 256 KiB staging buffer, and a payload whose destination is known
(a posted receive) is then read straight into that destination with ``recv_into``.
"""
from __future__ import annotations

import collections
import errno
import hashlib
import hmac
import os
import select
import socket
import struct
import sys
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence

from ..errors import TransportError
from . import signal_guard
from .base import FrameSink, OnSent, Transport, take_matching
from .frames import EAGER, HAS_PAYLOAD, HEADER, HEADER_SIZE, Header

MAGIC = b"MINIMPI1"
_HELLO = struct.Struct("<8sI16s")     # magic, universe id, nonce_c
#: a process's *universe id* on the wire: ``(job number + 1) << UID_SHIFT | world rank``, so
#: that processes of different jobs of one launcher (``Spawn``) tell each other apart. A peer
#: of this process's own job is known by its world rank, a peer of another job by its
#: universe id (always >= 1 << UID_SHIFT, so never mistaken for a world rank).
UID_SHIFT = 20
UID_RANK_MASK = (1 << UID_SHIFT) - 1
_REPLY_SIZE = 16 + 32                 # nonce_a, mac
_PROOF_SIZE = 32
STAGING = 256 * 1024
#: the most an express receive looks at in the socket without taking it (larger frames are
#: read by progress)
PEEK_BYTES = 4096
IOV_MAX = 512
#: frames up to this size go to the kernel as one joined bytes object (header + payload)
JOIN_MAX = 1024
MAX_CHUNK = 1 << 30                   # largest single recv_into / sendmsg request
HANDSHAKE_TIMEOUT = 10.0
#: connections that may be handshaking with one rank at once (env MINIMPI_MAX_HANDSHAKES);
#: a real job needs at most size - 1 (every peer connecting at start-up)
MAX_HANDSHAKES = 64
REFUSALS_LOGGED = 5
REFUSAL_LOG_INTERVAL = 10.0
#: errno values that mean "this process or machine is out of a resource", not "peer gone"
_RESOURCE_ERRORS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


def _resource_text(exc: OSError) -> str:
    """``Too many open files (1021 of 1024 descriptors in use; raise it with ulimit -n)``."""
    text = exc.strerror or str(exc)
    if exc.errno in (errno.EMFILE, errno.ENFILE):
        try:
            import resource
            limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            used = len(os.listdir("/proc/self/fd"))
            text += f" ({used} of {limit} file descriptors in use; raise the limit with ulimit -n)"
        except (ImportError, OSError, ValueError):
            pass
    return text

_POLLIN = select.POLLIN
_POLLOUT = select.POLLOUT
_POLLERR = select.POLLERR | select.POLLHUP | getattr(select, "POLLNVAL", 0)


def _mac(secret: bytes, *parts: bytes) -> bytes:
    return hmac.new(secret, b"".join(parts), hashlib.sha256).digest()


def _tune(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setblocking(False)


class _Frame:
    __slots__ = ("segments", "on_sent")

    def __init__(self, segments: List[memoryview], on_sent: OnSent) -> None:
        self.segments = segments
        self.on_sent = on_sent


class _Conn:
    """What a ready connection does at either end: it carries the frames each of its two
    ranks sends to the other. Frames to the peer are queued and flushed; frames from the
    peer are read into a staging buffer and handed to the engine (:meth:`read_frames`), or
    taken by the express receive (:meth:`look`, :meth:`take`). Which end opened it
    (:class:`_OutConn`, :class:`_InConn`) only matters until the handshake is done."""

    #: the states every connection ends in (each subclass numbers its handshake's below)
    READY = 2
    ENDED = 3

    def __init__(self, transport: "TcpTransport", peer: int) -> None:
        self.t = transport
        self.peer = peer
        self.sock: socket.socket
        self.fd = -1
        self.state = 0
        self.queue: Deque[_Frame] = collections.deque()
        self.buf: Optional[bytearray] = None     # the staging buffer (made on first read)
        self.view: Optional[memoryview] = None
        self.start = self.end = 0
        # payload being received straight into its destination
        self.d_header: Optional[Header] = None
        self.d_target: Optional[memoryview] = None
        self.d_pos = 0
        self.d_skip = 0     # payload bytes to drop (their frame failed in the engine)
        #: bytes taken out of the socket once ready (where in the stream it stands)
        self.consumed = 0
        #: a poll of this socket alone (made on the express receive's first look)
        self.readable: Optional[Callable[[int], list]] = None
        self.was_ready = False

    def on_ready_event(self, events: int) -> None:
        if events & _POLLOUT:
            self.flush()
        if events & ~_POLLOUT and self.state == self.READY:
            self.read_frames()

    # -- sending --------------------------------------------------------------------------
    def flush(self) -> None:
        """Write as much of the queue as the kernel takes now, in one ``sendmsg`` per round."""
        queue = self.queue
        while queue:
            if len(queue) == 1:
                iov = queue[0].segments[:IOV_MAX]
            else:
                iov = []
                for frame in queue:
                    iov.extend(frame.segments)
                    if len(iov) >= IOV_MAX:
                        break
                iov = iov[:IOV_MAX]
            try:
                sent = self.sock.sendmsg(iov)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as exc:
                return self.ended(f"send failed: {exc}")
            partial = sent < sum(seg.nbytes for seg in iov)
            while queue:
                frame = queue[0]
                segs = frame.segments
                while segs and sent >= segs[0].nbytes:
                    sent -= segs.pop(0).nbytes
                if segs:
                    if sent:
                        segs[0] = segs[0][sent:]
                        sent = 0
                    break
                queue.popleft()
                self.t._pending -= 1
                if frame.on_sent is not None:
                    frame.on_sent(None)
            if partial:
                # The socket buffer is full: wait for POLLOUT rather than retrying now.
                self.t._modify(self, _POLLIN | _POLLOUT)
                return
        self.t._modify(self, _POLLIN)

    # -- ending ---------------------------------------------------------------------------
    def ended(self, reason: str) -> None:
        """The connection is closed or broken: close it; frames still queued on it fail
        with ``reason``, and if the peer sends on it the engine hears that the peer is lost
        (a peer closes its connections when it exits). A later send to the same peer opens
        a new connection (and fails then if the peer is gone)."""
        if not self.close():
            return
        t = self.t
        if t._out.get(self.peer) is self:
            del t._out[self.peer]
        t._out_errors[self.peer] = reason   # for connect_all's message
        if t._in_by_peer.get(self.peer) is self:
            del t._in_by_peer[self.peer]
        why = f"connection to rank {self.peer}: {reason}"
        dropped = list(self.queue)
        self.queue.clear()
        t._pending -= len(dropped)
        for frame in dropped:
            if frame.on_sent is not None:
                frame.on_sent(why)
        if self.was_ready and t._sink is not None:
            # (a connection the peer closes once ready: the peer exited - it may have sent
            # nothing on it yet, and may have been about to)
            t._sink.peer_lost(self.peer, reason)

    def close(self) -> bool:
        """Close the socket (once: False if it already was); ``was_ready`` says whether it
        had been ready."""
        if self.state == self.ENDED:
            return False
        self.was_ready = self.state == self.READY
        self.state = self.ENDED
        self.t._unregister(self)
        self.sock.close()
        return True

    # -- receiving ------------------------------------------------------------------------
    def read_frames(self) -> None:
        """Read what the socket has and hand every complete frame to the engine.

        The read position is saved frame by frame (``try/finally``), so an exception from
        the engine (a protocol error, or anything raised while it handled a frame) never
        makes a later call parse the same bytes again. If the engine raises while a frame's
        payload is still to come, the rest of that payload is read and dropped, so the
        next frame starts where it should (that one message is lost with the error raised;
        the stream stays aligned). Signal handlers cannot run here: the transport delivers
        inside :func:`~minimpi.transports.signal_guard.hold`.
        """
        sink = self.t._sink
        if self.view is None:
            self.buf = bytearray(STAGING)
            self.view = memoryview(self.buf)
        if self.d_skip:
            # Drop the rest of a payload whose frame the engine failed on.
            try:
                n = self.sock.recv_into(self.view[self.end:], min(self.d_skip, STAGING - self.end))
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                return self.ended(str(exc))
            if n == 0:
                return self.ended("connection closed in the middle of a message")
            self.consumed += n
            self.d_skip -= n
            return
        if self.d_target is not None:
            # Stream the rest of a payload straight into its destination.
            remaining = self.d_target.nbytes - self.d_pos
            try:
                n = self.sock.recv_into(self.d_target[self.d_pos:self.d_pos + min(remaining, MAX_CHUNK)])
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                return self.ended(str(exc))
            if n == 0:
                return self.ended("connection closed in the middle of a message")
            self.consumed += n
            self.d_pos += n
            if self.d_pos == self.d_target.nbytes:
                header, target = self.d_header, self.d_target
                self.d_header = self.d_target = None
                sink.payload_arrived(self.peer, header, target)
            return
        view = self.view
        try:
            n = self.sock.recv_into(view[self.end:])
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            return self.ended(str(exc))
        if n == 0:
            return self.ended("exited (connection closed)")
        if not self.consumed:
            self.first_bytes()
        self.consumed += n
        self.end += n
        start, end = self.start, self.end
        unpack, new = HEADER.unpack_from, tuple.__new__
        payload_at = -1        # where the payload of the frame being delivered begins
        length = 0
        try:
            while end - start >= HEADER_SIZE:
                header = new(Header, unpack(view, start))
                kind, length = header[0], header[7]
                start += HEADER_SIZE
                if kind in HAS_PAYLOAD:
                    payload_at = start
                target = sink.frame_arrived(self.peer, header)
                if kind not in HAS_PAYLOAD:
                    continue
                take = min(end - start, length)
                if take:
                    target[:take] = view[start:start + take]
                    start += take
                if take == length:
                    sink.payload_arrived(self.peer, header, target)
                    payload_at = -1
                else:
                    payload_at = -1
                    self.d_header, self.d_target, self.d_pos = header, target, take
                    break
        except BaseException:
            if payload_at >= 0:
                # the engine failed on this frame: skip its payload, keep the stream aligned
                start = payload_at + min(end - payload_at, length)
                due = length - (start - payload_at)
                self.d_skip = due
            raise
        finally:
            if start == end:
                start = end = 0
            elif start > STAGING // 2 or STAGING - end < HEADER_SIZE:
                rest = end - start
                view[:rest] = view[start:end]
                start, end = 0, rest
            self.start, self.end = start, end

    def first_bytes(self) -> None:
        """The peer's first bytes on this connection are here (see :class:`_OutConn`)."""

    # -- the express receive (TcpTransport.eager_reader) ----------------------------------
    def look(self, times: int = 1) -> Optional[tuple]:
        """The next frame of this connection if it is a whole eager frame of at most
        :data:`PEEK_BYTES`: (header fields, payload, where taking it ends: a position in the
        bytes read, or minus one in the stream) - from the bytes already read, or peeked at
        in the socket (``MSG_PEEK``: nothing is taken). None: nothing there (after ``times``
        looks); ``()``: something is there that :meth:`read_frames` must read."""
        if self.state != self.READY:
            return None
        if self.d_skip or self.d_target is not None:
            return ()
        start, end = self.start, self.end
        if start != end:                       # bytes read already come first
            if end - start < HEADER_SIZE:
                return ()
            header = HEADER.unpack_from(self.view, start)
            stop = start + HEADER_SIZE + header[7]
            if header[0] != EAGER or stop > end:
                return ()
            return header, self.view[start + HEADER_SIZE:stop], stop
        readable = self.readable
        if readable is None:
            poller = select.poll()
            poller.register(self.fd, _POLLIN)
            readable = self.readable = poller.poll
        # (asked first: a recv of an empty socket raises, which costs 3x this poll)
        while not readable(0):
            times -= 1
            if times <= 0:
                return None
        peek = self.t._peek
        try:
            n = self.sock.recv_into(peek, PEEK_BYTES, socket.MSG_PEEK)
        except OSError:                        # progress finds out and says what
            return None
        if n < HEADER_SIZE:                    # (0: closed - progress says so)
            return ()
        header = HEADER.unpack_from(peek, 0)
        stop = HEADER_SIZE + header[7]
        if header[0] != EAGER or stop > n:
            return ()
        return header, self.t._peek_view[HEADER_SIZE:stop], -(self.consumed + stop)

    def take(self, end: int, length: int) -> bool:
        """Take the frame :meth:`look` found: from the bytes read (one store of the read
        position), or out of the socket (one ``recv`` of exactly that frame, which a
        signal handler raising before it leaves there). False: it is not first any more."""
        if end >= 0:
            if self.start != end - HEADER_SIZE - length or self.state != self.READY:
                return False
            self.start = end
            return True
        want = -end - self.consumed            # (the frame is next in the socket: its size)
        if want != HEADER_SIZE + length or self.start != self.end or self.state != self.READY:
            return False
        try:
            n = self.sock.recv_into(self.t._discard, want)
        except OSError:
            return False
        if not self.consumed:
            self.first_bytes()
        self.consumed += n
        if n != want:     # the peeked bytes are always there to take: a broken stream
            self.ended(f"a frame of {want} bytes it had shown arrived as {n}")
        return True


class _OutConn(_Conn):
    """A connection this rank opened to one peer: this rank sends on it, and so may the
    peer (the peer uses it instead of opening its own when it is ready before the peer
    first sends to this rank - :meth:`TcpTransport.adopt`)."""

    CONNECTING, HELLO_SENT = 0, 1        # then READY, ENDED (:class:`_Conn`)

    def __init__(self, transport: "TcpTransport", peer: int, address: str) -> None:
        super().__init__(transport, peer)
        self.state = self.CONNECTING
        self.reply = bytearray()
        self.nonce = os.urandom(16)
        host, port = address.rsplit(":", 1)
        try:
            self.sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET,
                                      socket.SOCK_STREAM)
        except OSError as exc:
            if exc.errno not in _RESOURCE_ERRORS:
                raise
            err = TransportError(f"rank {transport.rank}: cannot open a connection to rank "
                                 f"{peer} at {address}: {_resource_text(exc)}")
            err.resource = True   # this rank's problem, not a lost peer: raise, don't fail a send
            raise err from None
        _tune(self.sock)
        self.fd = self.sock.fileno()
        try:
            err = self.sock.connect_ex((host.strip("[]"), int(port)))
            why = None if err in (0, errno.EINPROGRESS, errno.EWOULDBLOCK) else os.strerror(err)
        except (OSError, ValueError) as exc:   # an address that does not resolve or parse
            why = str(exc)
        if why is not None:
            self.sock.close()
            raise TransportError(f"rank {transport.rank}: cannot connect to rank {peer} at "
                                 f"{address}: {why}")
        transport._register(self, _POLLOUT)

    def on_event(self, events: int) -> None:
        if self.state == self.READY:
            return self.on_ready_event(events)
        if self.state == self.CONNECTING:
            err = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                return self.ended(f"connect failed: {os.strerror(err)}")
            try:
                self.sock.send(_HELLO.pack(MAGIC, self.t.uid, self.nonce))
            except OSError as exc:
                return self.ended(f"handshake failed: {exc}")
            self.state = self.HELLO_SENT
            self.t._modify(self, _POLLIN)
            return
        if self.state == self.HELLO_SENT:
            try:
                data = self.sock.recv(_REPLY_SIZE - len(self.reply))
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                return self.ended(f"handshake failed: {exc}")
            if not data:
                return self.ended("connection closed during the handshake")
            self.reply += data
            if len(self.reply) < _REPLY_SIZE:
                return
            nonce_a, mac = bytes(self.reply[:16]), bytes(self.reply[16:])
            rank = struct.pack("<I", self.t.uid)
            if not hmac.compare_digest(mac, _mac(self.t.secret, b"A", self.nonce, nonce_a, rank)):
                return self.ended("the peer did not prove it knows the job secret")
            proof = _mac(self.t.secret, b"C", nonce_a, self.nonce, rank)
            self.queue.appendleft(_Frame([memoryview(proof)], None))
            self.t._pending += 1
            self.state = self.READY
            self.t._ready_out.add(self.peer)
            self.flush()

    def first_bytes(self) -> None:
        # the peer sends to this rank on this connection: the express receive looks here
        self.t._in_by_peer.setdefault(self.peer, self)


class _InConn(_Conn):
    """A connection a peer opened to this rank: the peer sends on it, and so does this
    rank once it is ready, if this rank has no connection of its own to the peer then
    (:meth:`TcpTransport.adopt`)."""

    HELLO, PROOF = 0, 1                  # then READY, ENDED (:class:`_Conn`)

    def __init__(self, transport: "TcpTransport", sock: socket.socket, address) -> None:
        super().__init__(transport, -1)
        self.sock = sock
        self.address = address
        _tune(sock)
        self.fd = sock.fileno()
        self.state = self.HELLO
        self.hs = bytearray()
        self.peer_uid = 0
        self.deadline = time.monotonic() + HANDSHAKE_TIMEOUT
        self.nonce = os.urandom(16)
        self.peer_nonce = b""
        transport._register(self, _POLLIN)

    def refuse(self, why: str) -> None:
        self.t._refused(f"{self.address[0]}:{self.address[1]}", why)
        self.close()

    def _read_exact(self, total: int) -> Optional[bytes]:
        try:
            data = self.sock.recv(total - len(self.hs))
        except (BlockingIOError, InterruptedError):
            return None
        except ConnectionResetError:
            self.close()   # the other end went away (a rank ending with the job): not a refusal
            return None
        except OSError as exc:
            self.refuse(f"handshake failed: {exc}")
            return None
        if not data:
            self.close()
            return None
        self.hs += data
        if len(self.hs) < total:
            return None
        out, self.hs = bytes(self.hs), bytearray()
        return out

    def on_event(self, events: int) -> None:
        if self.state == self.READY:
            return self.on_ready_event(events)
        if self.state == self.HELLO:
            data = self._read_exact(_HELLO.size)
            if data is None:
                return
            magic, uid, nonce_c = _HELLO.unpack(data)
            rank = self.t.peer_of(uid)
            if magic != MAGIC or rank is None:
                return self.refuse("not a minimpi peer (bad hello)")
            self.peer, self.peer_uid, self.peer_nonce = rank, uid, nonce_c
            mac = _mac(self.t.secret, b"A", nonce_c, self.nonce, struct.pack("<I", uid))
            try:
                self.sock.send(self.nonce + mac)
            except OSError as exc:
                return self.refuse(f"handshake failed: {exc}")
            self.state = self.PROOF
            return
        if self.state == self.PROOF:
            data = self._read_exact(_PROOF_SIZE)
            if data is None:
                return
            want = _mac(self.t.secret, b"C", self.nonce, self.peer_nonce,
                        struct.pack("<I", self.peer_uid))
            if not hmac.compare_digest(data, want):
                return self.refuse(f"claimed to be rank {self.peer} but did not prove the job secret")
            self.state = self.READY
            self.t._ready_in.add(self.peer)
            self.t._in_by_peer[self.peer] = self
            self.t._handshaking.pop(self, None)
            self.t.adopt(self)
            return


class _InReader:
    """:meth:`TcpTransport.eager_reader`: the connection the peer sends on once it is ready
    (the one it opened, or this rank's own if the peer adopted it)."""

    __slots__ = ("t", "peer")

    def __init__(self, transport: "TcpTransport", peer: int) -> None:
        self.t = transport
        self.peer = peer

    def _conn(self) -> Optional[_Conn]:
        t = self.t
        conn = t._in_by_peer.get(self.peer)
        # (before the peer's first frame, a connection this rank opened may carry it)
        return conn if conn is not None else t._out.get(self.peer)

    def look(self, times: int = 1) -> Optional[tuple]:
        conn = self._conn()
        return None if conn is None else conn.look(times)

    def take(self, end: int, length: int) -> bool:
        conn = self._conn()
        return conn is not None and conn.take(end, length)

    def take_matching(self, context: int, source: int, tag: int,
                      target: Any, times: int) -> Optional[tuple]:
        return take_matching(self, context, source, tag, target, times)


class _Waker:
    """A descriptor another thread of the process makes readable to end a sleep in the
    poller (:meth:`TcpTransport.wake`): an eventfd, or a pipe where there is none."""

    def __init__(self) -> None:
        if hasattr(os, "eventfd"):
            self.fd = self._write_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        else:   # pragma: no cover - platforms without eventfd
            self.fd, self._write_fd = os.pipe()
            os.set_blocking(self.fd, False)
            os.set_blocking(self._write_fd, False)
        self.sock = self     # (close() closes every handler's .sock)

    def ring(self) -> None:
        try:
            os.write(self._write_fd, (1).to_bytes(8, sys.byteorder))
        except OSError:      # full (a wake-up is pending anyway) or closed
            pass

    def on_event(self, events: int) -> None:
        try:
            os.read(self.fd, 4096)
        except OSError:
            pass

    def close(self) -> None:
        for fd in {self.fd, self._write_fd}:
            try:
                os.close(fd)
            except OSError:
                pass


class _Listener:
    def __init__(self, transport: "TcpTransport", sock: socket.socket) -> None:
        self.t = transport
        self.sock = sock
        self.fd = sock.fileno()

    def on_event(self, events: int) -> None:
        t = self.t
        while True:
            try:
                sock, address = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _RESOURCE_ERRORS and t._handshaking:
                    # The pending connection stays in the backlog and the listener stays
                    # readable: free a descriptor (a stranger's, most likely) and retry,
                    # rather than return to a poll that would wake at once, forever.
                    t._oldest_handshake().refuse(f"pushed out: this rank is out of file "
                                                 f"descriptors ({_resource_text(exc)})")
                    continue
                if exc.errno in _RESOURCE_ERRORS:
                    # nothing of ours to free: stop watching the listener for a second
                    # instead of being woken by it on every poll
                    t._modify(self, 0)
                    t._listener_paused_until = time.monotonic() + 1.0
                return
            if len(t._handshaking) >= t.max_handshakes:
                t._oldest_handshake().refuse(
                    f"pushed out by a newer connection: {t.max_handshakes} were handshaking "
                    f"at once (MINIMPI_MAX_HANDSHAKES)")
            conn = _InConn(t, sock, address)
            t._handshaking[conn] = None


class TcpTransport(Transport):
    """Frames over authenticated TCP connections, one per pair of ranks where it can."""

    name = "tcp"

    def __init__(self, rank: int, size: int, secret: bytes, bind_host: str = "127.0.0.1",
                 job_number: int = 0) -> None:
        self.rank = rank
        self.size = size
        #: this process's universe id (:data:`UID_SHIFT`): what its hello says it is
        self.uid = ((job_number + 1) << UID_SHIFT) | rank
        self.secret = secret
        self.bind_host = bind_host
        self._sink: Optional[FrameSink] = None
        # epoll where there is one: its own fd can be polled, so a router can sleep on TCP
        # and shared memory at once (wait_fds)
        self._epoll = hasattr(select, "epoll")
        self._poller = select.epoll() if self._epoll else select.poll()
        self._handlers: Dict[int, object] = {}
        self._masks: Dict[int, int] = {}
        self._out: Dict[int, _OutConn] = {}
        self._addresses: Optional[List[str]] = None
        #: addresses of processes of other jobs (Spawn, Connect), by universe id
        self._foreign: Dict[int, str] = {}
        # accepted connections still handshaking, oldest first (a dict keeps the order)
        self._handshaking: Dict[_InConn, None] = {}
        try:
            self.max_handshakes = max(1, int(os.environ.get("MINIMPI_MAX_HANDSHAKES", "")
                                             or MAX_HANDSHAKES))
        except ValueError:
            self.max_handshakes = MAX_HANDSHAKES
        self.refusals = 0
        self._listener_paused_until: Optional[float] = None
        # An exception (sys.exit from a signal handler) escaped from the middle of a send or
        # receive: queues and offsets may be half-updated, so nothing more may be sent
        # (a "flush" could send bytes twice and the peer would read garbage).
        self.interrupted = False
        self._unlogged_refusals: Dict[str, int] = {}
        self._refusal_logged_at = 0.0
        self._ready_out = set()  # peers whose connection from / to this rank was ever ready
        self._ready_in = set()
        self._in_by_peer: Dict[int, _InConn] = {}     # ready incoming connection by peer
        self._peek = bytearray(PEEK_BYTES)
        self._peek_view = memoryview(self._peek)
        self._discard = bytearray(PEEK_BYTES)
        self._out_errors: Dict[int, str] = {}   # peer -> why the last connection to it failed
        self._pending = 0
        self._listener: Optional[_Listener] = None
        self._address = "?"                     # what listen() published
        #: what wake() rings (made on its first use)
        self._waker: Optional[_Waker] = None

    def attach(self, sink: FrameSink) -> None:
        self._sink = sink

    # registration with the poller
    def _register(self, conn, mask: int) -> None:
        self._handlers[conn.fd] = conn
        self._masks[conn.fd] = mask
        self._poller.register(conn.fd, mask)

    def _modify(self, conn, mask: int) -> None:
        if self._masks.get(conn.fd) != mask and conn.fd in self._handlers:
            self._masks[conn.fd] = mask
            self._poller.modify(conn.fd, mask)

    def _unregister(self, conn) -> None:
        if self._handlers.pop(conn.fd, None) is not None:
            self._masks.pop(conn.fd, None)
            try:
                self._poller.unregister(conn.fd)
            except (KeyError, ValueError, OSError):
                pass
        self._handshaking.pop(conn, None)

    def _oldest_handshake(self) -> "_InConn":
        return next(iter(self._handshaking))

    def _refused(self, peer: str, why: str) -> None:
        """Log a refused connection: the first few one by one, then counts by reason."""
        self.refusals += 1
        if self.refusals <= REFUSALS_LOGGED:
            print(f"minimpi rank {self.rank}: refused a connection from {peer}: {why}",
                  file=sys.stderr, flush=True)
            self._refusal_logged_at = time.monotonic()
            return
        reason = why.split(":", 1)[0]
        self._unlogged_refusals[reason] = self._unlogged_refusals.get(reason, 0) + 1
        self._log_refusals(time.monotonic())

    def _log_refusals(self, now: float, force: bool = False) -> None:
        if self._unlogged_refusals and (force or now - self._refusal_logged_at >= REFUSAL_LOG_INTERVAL):
            counts = ", ".join(f"{n} x {why}" for why, n in self._unlogged_refusals.items())
            print(f"minimpi rank {self.rank}: refused {sum(self._unlogged_refusals.values())} "
                  f"more connection(s): {counts}", file=sys.stderr, flush=True)
            self._unlogged_refusals.clear()
            self._refusal_logged_at = now

    def listen(self) -> str:
        family = socket.AF_INET6 if ":" in self.bind_host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.bind_host, 0))
        sock.listen(max(128, self.size))
        sock.setblocking(False)
        self._listener = _Listener(self, sock)
        self._register(self._listener, _POLLIN)
        host, port = sock.getsockname()[:2]
        self._address = f"[{host}]:{port}" if family == socket.AF_INET6 else f"{host}:{port}"
        return self._address

    def set_peers(self, addresses: Sequence[Optional[str]]) -> None:
        self._addresses = list(addresses)

    @property
    def address(self) -> str:
        """What :meth:`listen` published ("?" before it)."""
        return self._address

    def peer_of(self, uid: int) -> Optional[int]:
        """The peer id of the process whose hello says ``uid``: its world rank when it is of
        this job, its universe id when it is of another; None for nonsense (or ourselves)."""
        if uid >> UID_SHIFT == self.uid >> UID_SHIFT:
            rank = uid & UID_RANK_MASK
            return rank if rank < self.size and rank != self.rank else None
        return uid if uid >> UID_SHIFT else None

    def add_foreign(self, addresses: Dict[int, str]) -> None:
        """Processes of other jobs this process may now send to: universe id -> address."""
        self._foreign.update(addresses)

    def _address_of(self, peer: int) -> Optional[str]:
        if peer >> UID_SHIFT:
            return self._foreign.get(peer)
        return self._addresses[peer] if peer < len(self._addresses) else None

    def _reached(self) -> List[int]:
        """The peers this transport carries messages to (a router gives others None)."""
        return [p for p, a in enumerate(self._addresses) if a and p != self.rank]

    def adopt(self, conn: "_InConn") -> None:
        """A connection from ``conn.peer`` is ready: if this rank has none of its own to that
        peer, it sends on this one from now on (one connection per pair: a pure
        acknowledgement per frame on each of two one-way connections costs ~2 us of a
        small message's round trip). A rank never moves its frames to another connection
        while one it sends on is open, so frames to each peer stay in order."""
        if self._out.get(conn.peer) is None:
            self._out[conn.peer] = conn
            self._ready_out.add(conn.peer)

    def eager_reader(self, peer: int) -> "_InReader":
        """The express receive's reader of ``peer``'s connection (:meth:`Transport.eager_reader`):
        it peeks at the socket instead of reading it, so taking a frame is one ``recv`` of
        exactly that frame, and no signal mask is needed around it."""
        return _InReader(self, peer)

    def send_now(self, peer: int, header: bytes, payload: Sequence[memoryview],
                 nbytes: int) -> bool:
        """The express lane (:meth:`Transport.send_now`): on a ready connection with nothing
        queued, hand the frame to the kernel at once; what the kernel did not take is
        copied (the caller's buffer is the caller's again when this returns) and queued."""
        conn = self._out.get(peer)
        if conn is None or conn.state != _Conn.READY or conn.queue:
            return False
        total = HEADER_SIZE + nbytes
        if total <= JOIN_MAX and len(payload) == 1:
            # one bytes object of header and payload: cheaper than a two-part sendmsg
            segments = [header + bytes(payload[0])]
        else:
            segments = [memoryview(header), *payload]
        try:
            try:
                sent = conn.sock.sendmsg(segments)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:         # failed: the general path finds out and says which
                return False
        except BaseException:       # part of a frame may be out: see ``interrupted``
            self.interrupted = True
            raise
        if sent == total:
            return True
        rest = b"".join(segments)[sent:]
        conn.queue.append(_Frame([memoryview(rest)], None))
        self._pending += 1
        try:
            conn.flush()
        except BaseException:
            self.interrupted = True
            raise
        return True

    def send(self, peer: int, header: bytes, payload: Sequence[memoryview], on_sent: OnSent) -> None:
        conn = self._out.get(peer)
        if conn is None:
            if self._addresses is None:
                raise TransportError(f"rank {self.rank}: no address table yet (rendezvous not done)")
            address = self._address_of(peer)
            if not address:
                if on_sent is not None:
                    on_sent(f"rank {peer} is not reachable over TCP")
                return
            try:
                conn = self._out[peer] = _OutConn(self, peer, address)
            except TransportError as exc:
                if getattr(exc, "resource", False):
                    raise
                if on_sent is not None:
                    on_sent(str(exc))
                return
        segments = [memoryview(header)]
        segments.extend(payload)
        if conn.state == _Conn.READY and not conn.queue and len(segments) <= IOV_MAX:
            # Nothing queued (the common case): hand the frame to the kernel at once, and
            # queue only what it did not take.
            total = HEADER_SIZE
            for seg in payload:
                total += seg.nbytes
            try:
                try:
                    sent = conn.sock.sendmsg(segments)
                except OSError:      # would block, or failed: flush() below says which
                    sent = 0
                if sent < total:
                    while sent >= segments[0].nbytes:
                        sent -= segments.pop(0).nbytes
                    if sent:
                        segments[0] = segments[0][sent:]
            except BaseException:   # part of a frame may be out: see ``interrupted``
                self.interrupted = True
                raise
            if sent == total:
                if on_sent is not None:
                    on_sent(None)
                return
        conn.queue.append(_Frame(segments, on_sent))
        self._pending += 1
        if conn.state == _Conn.READY and len(conn.queue) == 1:
            try:
                conn.flush()
            except BaseException:
                self.interrupted = True
                raise

    def connect_all(self, timeout: float = 60.0) -> None:
        """Open (and authenticate) every connection now instead of on first use.

        One connection per pair: the lower rank opens it, the higher adopts it
        (:meth:`adopt`). Waits until this rank can send to every peer and every connection
        a lower rank opens to it is ready, so no rank leaves while a handshake with it is
        still pending (the higher rank's wait ends when the lower one's proof has come).
        """
        peers = self._reached()     # routing is symmetric: these also connect to us
        lower = [p for p in peers if p < self.rank]
        for peer in peers:
            if peer > self.rank and self._out.get(peer) is None:
                self._out[peer] = _OutConn(self, peer, self._addresses[peer])
        deadline = time.monotonic() + timeout
        while True:
            # A peer may finish and close before this loop sees it: count what was ever ready.
            outs = sum(p in self._ready_out for p in peers)
            ins = sum(p in self._ready_in for p in lower)
            if outs == len(peers) and ins == len(lower):
                return
            failed = [p for p in peers if p > self.rank and self._out.get(p) is None
                      and p not in self._ready_out]
            if failed or time.monotonic() > deadline:
                # name both ends: on several hosts, an unreachable address is the usual cause
                unreached = failed or [p for p in peers if p not in self._ready_out]
                ends = "; ".join(f"rank {p} at {self._addresses[p]}"
                                 f" ({self._out_errors.get(p, 'no answer')})" for p in unreached)
                raise TransportError(
                    f"rank {self.rank}: could not connect to every rank within {timeout:g} s "
                    f"({outs} of {len(peers)} connections ready, {ins} of {len(lower)} "
                    f"opened by lower ranks"
                    f"{'; failed: ranks ' + str(failed) if failed else ''})"
                    + (f"; rank {self.rank} at {self._address} cannot reach {ends}"
                       if unreached else ""))
            self.progress(0.2)

    def progress(self, timeout: Optional[float]) -> bool:
        if self._handshaking or self._listener_paused_until is not None:
            timeout = 0.2 if timeout is None else min(timeout, 0.2)
        if not self._epoll:   # select.poll counts milliseconds
            timeout = -1 if timeout is None else int(timeout * 1000)
        try:
            if timeout == 0:
                events = self._poller.poll(0)
            else:   # a sleep: the engine's other threads may send meanwhile
                events = self._sink.sleep(signal_guard.interruptible, self._poller.poll, timeout)
        except InterruptedError:
            return False
        handlers = self._handlers
        if events:
            held = signal_guard.hold()   # no handler may raise half-way through a frame
            try:
                for fd, ev in events:
                    conn = handlers.get(fd)
                    if conn is not None:
                        conn.on_event(ev)
            except BaseException:
                self.interrupted = True
                raise
            finally:
                signal_guard.release(held)
        if self._handshaking:
            now = time.monotonic()
            for conn in [c for c in self._handshaking if c.deadline < now]:
                conn.refuse("handshake not completed in time")
        if self._unlogged_refusals:
            self._log_refusals(time.monotonic())
        if self._listener_paused_until is not None and time.monotonic() >= self._listener_paused_until:
            self._listener_paused_until = None
            self._modify(self._listener, _POLLIN)
        return bool(events)

    def wake(self) -> None:
        """Make the poller readable through the waker (another thread's sleep ends)."""
        waker = self._waker
        if waker is None:
            waker = self._waker = _Waker()
            self._register(waker, _POLLIN)
        waker.ring()

    def wait_fds(self) -> List[int]:
        if not self._epoll:
            return super().wait_fds()
        return [self._poller.fileno()]

    def pending_sends(self) -> int:
        return self._pending

    def close(self) -> None:
        self._log_refusals(time.monotonic(), force=True)
        for conn in list(self._handlers.values()):
            try:
                conn.sock.close()
            except OSError:
                pass
        self._handlers.clear()
        self._masks.clear()
        if self._epoll:
            self._poller.close()


def create(info) -> TcpTransport:
    """The transport of a process started by ``minimpi run`` (see minimpi.transports)."""
    return TcpTransport(info.rank, info.size, info.secret, info.bind_host,
                        job_number_of(info.env))


def job_number_of(env) -> int:
    """Which job of its launcher this process belongs to (0: the job ``minimpi run``
    started; 1, 2, ...: jobs started by ``Spawn``), from ``MINIMPI_JOBNO`` (set by the
    launcher; ``minimpi.runtime.bootstrap.ENV_JOBNO``)."""
    try:
        return max(0, int(env.get("MINIMPI_JOBNO", "0")))
    except ValueError:
        return 0
