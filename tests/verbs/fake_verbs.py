"""An in-memory RDMA fabric with reliable-connected (RC) semantics, for the verbs protocol tests.

:class:`FakeFabric` connects any number of :class:`FakeOps` (one per rank, possibly in different
threads) and moves real bytes between their registered memory with ``ctypes.memmove``. It
enforces what a real RC device enforces, so protocol bugs fail here instead of on hardware:

- in-order delivery per queue pair; a SEND or an RDMA_WRITE_WITH_IMM consumes the oldest posted
  receive of the peer's queue pair, and finding none is an error (``RNR_RETRY_EXC_ERR``: the
  transport runs with ``rnr_retry = 0``);
- a message longer than the receive it lands in: ``LOC_LEN_ERR`` at the receiver and
  ``REM_INV_REQ_ERR`` at the sender;
- local keys must name a registration of the same protection domain that covers the bytes
  (``LOC_PROT_ERR``; an RDMA read's landing needs local write); remote keys must belong to the
  peer, allow remote write (writes) or remote read (RDMA_READ) and cover the whole target
  range (``REM_ACCESS_ERR``, which also breaks the peer's queue pair);
- queue depths (send, receive, completion queue) are limits: exceeding one raises, as
  ``ibv_post_*`` returns ENOMEM;
- a failed work request puts its queue pair in the error state: everything still posted on it,
  and anything posted later, completes with ``WR_FLUSH_ERR``;
- a peer whose queue pair was destroyed, or a connection made with the wrong PSN or GID, never
  answers: the sender gets ``RETRY_EXC_ERR``.

Delivery is deferred: a posted work request moves its bytes when any rank next polls, so a
sender that reuses a buffer before its completion is caught (the data would change under it).
Completion events are a pipe per rank: :meth:`FakeOps.arm` asks for one event, written when the
next completion arrives, as a completion channel does.
"""
from __future__ import annotations

import collections
import ctypes
import itertools
import os
import threading
from typing import Deque, Dict, List, Optional, Sequence, Tuple

from minimpi.transports.verbs import (
    ACCESS_LOCAL_WRITE,
    ACCESS_REMOTE_READ,
    ACCESS_REMOTE_WRITE,
    OP_READ,
    OP_SEND,
    OP_WRITE,
    OP_WRITE_IMM,
    WC_READ,
    WC_RECV,
    WC_RECV_WRITE_IMM,
    WC_SEND,
    WC_WRITE,
    Completion,
    PeerEndpoint,
    PortInfo,
    Registration,
    VerbsError,
    VerbsOps,
)

SUCCESS, LOC_LEN_ERR, LOC_PROT_ERR, WR_FLUSH_ERR = 0, 1, 4, 5
REM_INV_REQ_ERR, REM_ACCESS_ERR, RETRY_EXC_ERR, RNR_RETRY_EXC_ERR = 9, 10, 12, 13


class _MR:
    def __init__(self, pd: int, addr: int, length: int, access: int, key: int) -> None:
        self.pd, self.addr, self.length, self.access, self.key = pd, addr, length, access, key

    def covers(self, addr: int, length: int) -> bool:
        return self.addr <= addr and addr + length <= self.addr + self.length


class _QP:
    RESET, INIT, RTS, ERROR = range(4)

    def __init__(self, ops: "FakeOps", qpn: int, send_depth: int, recv_depth: int,
                 max_sge: int) -> None:
        self.ops = ops
        self.qpn = qpn
        self.state = self.INIT
        self.send_depth, self.recv_depth, self.max_sge = send_depth, recv_depth, max_sge
        self.rq: Deque[Tuple[int, int, int, int]] = collections.deque()   # wr_id, addr, len, lkey
        self.sq: Deque[tuple] = collections.deque()                        # posted, not delivered
        self.sq_outstanding = 0          # posted and not yet completed
        self.remote_qpn = 0
        self.remote_gid = ""
        self.sq_psn = self.rq_psn = 0


class FakeFabric:
    """All queue pairs and memory registrations of one fake network."""

    def __init__(self, gid_prefix: str = "fe80:0000:0000:0000:0000:0000:0000") -> None:
        self.lock = threading.RLock()
        self.qps: Dict[int, _QP] = {}
        self.mrs: Dict[int, _MR] = {}
        self._qpn = itertools.count(0x11)
        self._key = itertools.count(0x1000)
        self._pd = itertools.count(1)
        self._gid = itertools.count(1)
        self.gid_prefix = gid_prefix
        #: every delivered message, for tests: (src qpn, dst qpn, opcode, nbytes)
        self.log: List[Tuple[int, int, int, int]] = []

    def ops(self, **limits) -> "FakeOps":
        return FakeOps(self, **limits)

    # -- delivery (under the lock) --------------------------------------------------------------
    def deliver(self) -> None:
        with self.lock:
            for qp in list(self.qps.values()):
                while qp.sq:
                    self._execute(qp, qp.sq.popleft())

    def _execute(self, qp: _QP, wr: tuple) -> None:
        wr_id, opcode, sges, imm, remote_addr, rkey = wr
        done_opcode = _done_opcode(opcode)
        if qp.state == _QP.ERROR:
            return self._complete(qp, wr_id, WR_FLUSH_ERR, done_opcode)
        if opcode == OP_READ:
            return self._read(qp, wr_id, sges, remote_addr, rkey)
        data = bytearray()
        for addr, length, lkey in sges:
            mr = self.mrs.get(lkey)
            if mr is None or mr.pd != qp.ops.pd or not mr.covers(addr, length):
                return self._fail(qp, wr_id, LOC_PROT_ERR, done_opcode)
            chunk = bytearray(length)
            if length:
                ctypes.memmove((ctypes.c_char * length).from_buffer(chunk), addr, length)
            data += chunk
        peer = self.qps.get(qp.remote_qpn)
        if (peer is None or peer.state != _QP.RTS or peer.remote_qpn != qp.qpn
                or peer.rq_psn != qp.sq_psn or qp.remote_gid != peer.ops.info.gid):
            return self._fail(qp, wr_id, RETRY_EXC_ERR, done_opcode)
        if opcode in (OP_WRITE, OP_WRITE_IMM):
            mr = self.mrs.get(rkey)
            if (mr is None or mr.pd != peer.ops.pd or not mr.access & ACCESS_REMOTE_WRITE
                    or not mr.covers(remote_addr, len(data))):
                peer.state = _QP.ERROR
                self._flush(peer)
                return self._fail(qp, wr_id, REM_ACCESS_ERR, done_opcode)
        if opcode in (OP_SEND, OP_WRITE_IMM) and not peer.rq:
            return self._fail(qp, wr_id, RNR_RETRY_EXC_ERR, done_opcode)
        if opcode == OP_SEND:
            r_id, r_addr, r_len, r_key = peer.rq.popleft()
            if len(data) > r_len:
                peer.state = _QP.ERROR
                peer.ops._push(Completion(r_id, LOC_LEN_ERR, WC_RECV, 0, 0))
                self._flush(peer)
                return self._fail(qp, wr_id, REM_INV_REQ_ERR, done_opcode)
            self._copy_in(r_addr, data)
            peer.ops._push(Completion(r_id, SUCCESS, WC_RECV, len(data), 0))
        else:
            self._copy_in(remote_addr, data)
            if opcode == OP_WRITE_IMM:
                r_id = peer.rq.popleft()[0]
                peer.ops._push(Completion(r_id, SUCCESS, WC_RECV_WRITE_IMM, len(data), imm))
        self.log.append((qp.qpn, peer.qpn, opcode, len(data)))
        self._complete(qp, wr_id, SUCCESS, done_opcode)

    def _read(self, qp: _QP, wr_id: int, sges, remote_addr: int, rkey: int) -> None:
        """RDMA_READ: the peer's registered bytes into the local scatter list."""
        for addr, length, lkey in sges:
            mr = self.mrs.get(lkey)
            if (mr is None or mr.pd != qp.ops.pd or not mr.access & ACCESS_LOCAL_WRITE
                    or not mr.covers(addr, length)):
                return self._fail(qp, wr_id, LOC_PROT_ERR, WC_READ)
        peer = self.qps.get(qp.remote_qpn)
        if (peer is None or peer.state != _QP.RTS or peer.remote_qpn != qp.qpn
                or peer.rq_psn != qp.sq_psn or qp.remote_gid != peer.ops.info.gid):
            return self._fail(qp, wr_id, RETRY_EXC_ERR, WC_READ)
        total = sum(length for _, length, _ in sges)
        mr = self.mrs.get(rkey)
        if (mr is None or mr.pd != peer.ops.pd or not mr.access & ACCESS_REMOTE_READ
                or not mr.covers(remote_addr, total)):
            peer.state = _QP.ERROR
            self._flush(peer)
            return self._fail(qp, wr_id, REM_ACCESS_ERR, WC_READ)
        data = bytearray(total)
        if total:
            ctypes.memmove((ctypes.c_char * total).from_buffer(data), remote_addr, total)
        pos = 0
        for addr, length, _ in sges:
            self._copy_in(addr, data[pos:pos + length])
            pos += length
        self.log.append((qp.qpn, peer.qpn, OP_READ, total))
        self._complete(qp, wr_id, SUCCESS, WC_READ)

    @staticmethod
    def _copy_in(addr: int, data: bytearray) -> None:
        if data:
            ctypes.memmove(addr, (ctypes.c_char * len(data)).from_buffer(data), len(data))

    def _complete(self, qp: _QP, wr_id: int, status: int, opcode: int) -> None:
        qp.sq_outstanding -= 1
        qp.ops._push(Completion(wr_id, status, opcode, 0, 0))

    def _fail(self, qp: _QP, wr_id: int, status: int, opcode: int) -> None:
        qp.state = _QP.ERROR
        self._complete(qp, wr_id, status, opcode)
        self._flush(qp)

    def _flush(self, qp: _QP) -> None:
        while qp.rq:
            qp.ops._push(Completion(qp.rq.popleft()[0], WR_FLUSH_ERR, WC_RECV, 0, 0))
        while qp.sq:
            wr = qp.sq.popleft()
            self._complete(qp, wr[0], WR_FLUSH_ERR, _done_opcode(wr[1]))


def _done_opcode(opcode: int) -> int:
    return {OP_SEND: WC_SEND, OP_READ: WC_READ}.get(opcode, WC_WRITE)


class FakeOps(VerbsOps):
    """One rank's device on a :class:`FakeFabric` (its own protection domain and CQ)."""

    def __init__(self, fabric: FakeFabric, max_sge: int = 4, max_msg: int = 1 << 20,
                 max_cqe: int = 1 << 16, fail_register_above: Optional[int] = None) -> None:
        self.fabric = fabric
        self.pd = next(fabric._pd)
        n = next(fabric._gid)
        self.info = PortInfo("fake0", 1, 0, 0, f"{fabric.gid_prefix}:{n:04x}", 5, max_sge,
                             max_msg, max_cqe, 1 << 14)
        #: registrations larger than this fail, as when the locked-memory limit is reached
        self.fail_register_above = fail_register_above
        self.cq: Deque[Completion] = collections.deque()
        self.cq_depth = 0
        self.qps: Dict[int, _QP] = {}
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        self.armed = False
        self.closed = False
        self.registered: Dict[int, _MR] = {}

    def _push(self, completion: Completion) -> None:
        if self.closed:
            return
        if len(self.cq) >= self.cq_depth:
            raise AssertionError(f"fake: completion queue of depth {self.cq_depth} overflowed")
        self.cq.append(completion)
        if self.armed:
            self.armed = False
            os.write(self._w, b"e")

    def create_cq(self, depth: int) -> None:
        self.cq_depth = depth

    def create_qp(self, send_depth: int, recv_depth: int, max_send_sge: int) -> int:
        if max_send_sge > self.info.max_sge:
            raise VerbsError(f"fake: max_send_sge {max_send_sge} > device limit {self.info.max_sge}")
        with self.fabric.lock:
            qp = _QP(self, next(self.fabric._qpn), send_depth, recv_depth, max_send_sge)
            self.fabric.qps[qp.qpn] = self.qps[qp.qpn] = qp
            return qp.qpn

    def connect_qp(self, qpn: int, local_psn: int, remote: PeerEndpoint, remote_qpn: int) -> None:
        with self.fabric.lock:
            qp = self.qps[qpn]
            qp.remote_qpn, qp.remote_gid = remote_qpn, remote.gid
            qp.sq_psn, qp.rq_psn = local_psn, remote.psn
            qp.state = _QP.RTS

    def destroy_qp(self, qpn: int) -> None:
        """Tests: the queue pair disappears, as when its process dies."""
        with self.fabric.lock:
            self.fabric.qps.pop(qpn, None)
            self.qps.pop(qpn, None)

    def register(self, address: int, length: int, access: int) -> Registration:
        if self.fail_register_above is not None and length > self.fail_register_above:
            raise VerbsError(f"fake: registering {length} bytes refused (limit)")
        with self.fabric.lock:
            key = next(self.fabric._key)
            mr = _MR(self.pd, address, length, access, key)
            self.fabric.mrs[key] = self.registered[key] = mr
        return Registration(mr, address, length, key, key, access)

    def deregister(self, registration: Registration) -> None:
        with self.fabric.lock:
            self.fabric.mrs.pop(registration.lkey, None)
            self.registered.pop(registration.lkey, None)

    def post_recv(self, qpn: int, wr_id: int, address: int, length: int, lkey: int) -> None:
        with self.fabric.lock:
            qp = self.qps[qpn]
            mr = self.fabric.mrs.get(lkey)
            if mr is None or not mr.access & ACCESS_LOCAL_WRITE or not mr.covers(address, length):
                raise VerbsError("fake: receive buffer not covered by a writable registration")
            if len(qp.rq) >= qp.recv_depth:
                raise VerbsError(f"fake: receive queue of depth {qp.recv_depth} is full")
            if qp.state == _QP.ERROR:
                self._push(Completion(wr_id, WR_FLUSH_ERR, WC_RECV, 0, 0))
                return
            qp.rq.append((wr_id, address, length, lkey))

    def post_send(self, qpn: int, wr_id: int, opcode: int, sges: Sequence[Tuple[int, int, int]],
                  imm: int = 0, remote_addr: int = 0, rkey: int = 0) -> None:
        with self.fabric.lock:
            qp = self.qps[qpn]
            if qp.sq_outstanding >= qp.send_depth:
                raise VerbsError(f"fake: send queue of depth {qp.send_depth} is full")
            if not 1 <= len(sges) <= qp.max_sge:
                raise VerbsError(f"fake: {len(sges)} scatter/gather entries (1..{qp.max_sge})")
            if sum(s[1] for s in sges) > self.info.max_msg:
                raise VerbsError(f"fake: message larger than max_msg {self.info.max_msg}")
            if not 0 <= imm < 1 << 32:
                raise VerbsError(f"fake: immediate {imm} is not 32 bits")
            qp.sq_outstanding += 1
            qp.sq.append((wr_id, opcode, list(sges), imm, remote_addr, rkey))

    def poll(self, max_entries: int) -> List[Completion]:
        self.fabric.deliver()
        with self.fabric.lock:
            out = []
            while self.cq and len(out) < max_entries:
                out.append(self.cq.popleft())
            return out

    def arm(self) -> None:
        with self.fabric.lock:
            self.armed = True

    def fileno(self) -> int:
        return self._r

    def consume_events(self) -> None:
        try:
            while os.read(self._r, 4096):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        with self.fabric.lock:
            for qpn in list(self.qps):
                self.destroy_qp(qpn)
            for key in list(self.registered):
                self.fabric.mrs.pop(key, None)
            self.registered.clear()
            self.closed = True
        for fd in (self._r, self._w):
            try:
                os.close(fd)
            except OSError:
                pass


def make_transports(size: int, fabric: Optional[FakeFabric] = None, config=None, **limits):
    """``size`` connected verbs transports over one fake fabric (ranks as threads)."""
    from minimpi.transports.verbs import VerbsTransport
    fabric = fabric or FakeFabric()
    ts = [VerbsTransport(r, size, fabric.ops(**limits), config, host=f"fakehost{r}")
          for r in range(size)]
    addresses = [t.listen() for t in ts]
    for t in ts:
        t.set_peers(addresses)
    return ts
