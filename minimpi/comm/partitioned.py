"""MPI-4 partitioned point-to-point: ``Psend_init``/``Precv_init`` and ``Pready``,
``Pready_range``, ``Pready_list``, ``Parrived``.

A partitioned request is a persistent request whose buffer is cut into ``partitions``
equal parts. After ``Start``, the sender declares each part ready (``Pready``) as its
threads fill it; the receiver may ask whether a part has arrived (``Parrived``) before the
whole message is complete. Here each part travels as one message on the communicator's
*partitioned context* (``Endpoint.partitioned_context``), so it never meets an ordinary
receive, not even an ``ANY_TAG`` one. Parts are sent in index order: a part declared ready
leaves once every part before it has been declared too (the receiver posts one receive per
part, in order, at ``Start``; MPI's non-overtaking rule then delivers part k into slot k).
Two partitioned requests between the same pair with the same tag, active at the same time,
match in the order their first parts are sent.

A non-contiguous datatype is packed when a part leaves (send) and unpacked into the
user's layout when the receive completes (``Wait``/``Test``); ``Parrived`` then reports
arrival, as MPI allows, and the contiguous case (the common one) is zero-copy.
MPI forbids wildcards here: ``ANY_SOURCE``/``ANY_TAG`` are refused.
"""
from __future__ import annotations

import os
from typing import Any, List, Sequence

from ..constants import ANY_SOURCE, ANY_TAG, PROC_NULL
from ..data.buffers import byte_view, hold_datatypes
from ..data.cint import as_int
from ..errors import ArgumentError, CountError, RequestError
from ..p2p.completion import Completion, layered
from ..p2p.request import CompletedRequest, Request, Status, collect
from .persistent import Prequest


def _partitions(comm: Any, partitions: Any, call: str) -> int:
    try:
        value = as_int(partitions)
    except (TypeError, ValueError, OverflowError):
        value = 0
    if value < 1:
        raise ArgumentError(f"rank {comm.rank}: {call}(partitions={partitions!r}): expected "
                            f"an int >= 1")
    return value


def _part_bytes(comm: Any, nbytes: int, partitions: int, call: str) -> int:
    if nbytes % partitions:
        raise CountError(f"rank {comm.rank}: {call}: the buffer holds {nbytes} bytes, which "
                         f"do not split into {partitions} equal partitions")
    return nbytes // partitions


class _SendRound(Completion):
    """One started partitioned send: the parts declared ready, and the sends of those that
    left (in index order)."""

    __slots__ = ("_ep", "_context", "_buf", "_view", "_repack", "_count", "_size", "_dest",
                 "_tag", "_ready", "_next", "_sends")

    def __init__(self, preq: "PartitionedRequest") -> None:
        super().__init__(preq._ep.engine)
        self._ep, self._context = preq._ep, preq._context
        self._buf, self._view, self._repack = preq._buf, preq._view, preq._repack
        self._count, self._size = preq._nparts, preq._part_size
        self._dest, self._tag = preq._peer, preq._tag
        self._ready = [False] * self._count
        self._next = 0
        self._sends: List[Request] = []
        self.on_complete(self._check_sent)

    @property
    def done(self) -> bool:
        return self._next == self._count and all(s.done for s in self._sends)

    def mark_ready(self, indices: Sequence[int], call: str) -> None:
        for i in indices:
            if self._ready[i]:
                raise RequestError(f"rank {self._ep.rank}: Prequest.{call}({i}): partition "
                                   f"{i} was already declared ready since Start")
            self._ready[i] = True
        if self._dest == PROC_NULL:      # nothing travels: done once every part is ready
            self._next = self._count if all(self._ready) else 0
            return
        first = self._next
        while self._next < self._count and self._ready[self._next]:
            self._next += 1
        if self._next > first:
            view = byte_view(self._buf, False, "Pready")[0] if self._repack else self._view
            for i in range(first, self._next):
                part = view[i * self._size:(i + 1) * self._size]
                self._sends.append(self._ep.isend((part,), self._size, self._dest, self._tag,
                                                  0, "Psend_init", self._context))

    def _check_sent(self) -> None:
        if self._next != self._count:
            missing = [i for i, r in enumerate(self._ready) if not r]
            raise RequestError(f"rank {self._ep.rank}: partitioned send to {self._dest}: "
                               f"partitions {missing} were never declared ready (Pready)")
        for s in self._sends:
            collect(s)


class _RecvRound(Completion):
    """One started partitioned receive: one posted receive per part, in order."""

    __slots__ = ("_ep", "_recvs", "_spec", "_nbytes")

    def __init__(self, preq: "PartitionedRequest") -> None:
        source, tag = preq._peer, preq._tag
        self._nbytes = preq._part_size * preq._nparts
        super().__init__(preq._ep.engine,
                         Status(PROC_NULL, ANY_TAG, 0) if source == PROC_NULL else
                         Status(source, tag, self._nbytes))
        self._ep = preq._ep
        self._recvs: List[Request] = []
        self._spec = None
        self.on_complete(self._finish_parts)
        if source == PROC_NULL:
            self._recvs = [CompletedRequest(Status(PROC_NULL, ANY_TAG, 0))] * preq._nparts
            return
        view, spec = byte_view(preq._buf, True, "Precv_init")
        self._spec = spec if spec is not None and spec.is_temporary else None
        size = preq._part_size
        self._recvs = [self._ep.irecv(view[i * size:(i + 1) * size], source, tag,
                                      "Precv_init", preq._context)
                       for i in range(preq._nparts)]

    @property
    def done(self) -> bool:
        return all(r.done for r in self._recvs)

    def arrived(self, index: int) -> bool:
        recv = self._recvs[index]
        if not recv.done:
            self.engine.poll()
            if not recv.done:
                # Programs ask in a loop (``while not Parrived(k)``): give the core to a
                # rank that shares it - maybe the sender - instead of spinning it out.
                os.sched_yield()
        return recv.done

    def _finish_parts(self) -> None:
        for r in self._recvs:
            collect(r)
        if self._spec is not None:
            self._spec.finish(self._nbytes)


class PartitionedRequest(Prequest):
    """A partitioned send or receive (``Psend_init``/``Precv_init``): a ``Prequest`` with
    ``Pready*`` (sender) and ``Parrived`` (receiver)."""

    __slots__ = ("_ep", "_context", "_buf", "_view", "_repack", "_nparts", "_part_size",
                 "_peer", "_tag", "_sending")

    @classmethod
    def make(cls, comm: Any, buf: Any, partitions: Any, peer: Any, tag: Any, info: Any,
             sending: bool) -> "PartitionedRequest":
        call = "Psend_init" if sending else "Precv_init"
        parts = _partitions(comm, partitions, call)
        if sending:
            peer = comm._check_dest(peer, call)
            tag = comm._check_send_tag(tag, call)
        else:
            peer = comm._check_source(peer, call)
            tag = comm._check_recv_tag(tag, call)
            if peer == ANY_SOURCE or tag == ANY_TAG:
                raise ArgumentError(f"rank {comm.rank}: {call}(source={peer}, tag={tag}): "
                                    f"partitioned receives take no wildcards (MPI-4): name "
                                    f"the source rank and the tag")
        view, spec = byte_view(buf, not sending, call)
        size = _part_bytes(comm, view.nbytes, parts, call)
        ep = comm.endpoint
        kind = _SendRound if sending else _RecvRound
        description = (f"{call}({parts} partitions, {'dest' if sending else 'source'}="
                       f"{peer}, tag={tag}) on {comm.name}")
        round_text = f"partitioned {'send to' if sending else 'receive from'} {peer}"
        preq = cls._create(lambda: layered(kind(preq), round_text), ep.engine, description)
        preq._ep, preq._context = ep, ep.use_partitioned_context()
        preq._buf, preq._view = hold_datatypes(buf), view   # (every round repacks it)
        preq._repack = spec is not None and spec.is_temporary
        preq._nparts, preq._part_size, preq._peer, preq._tag = parts, size, peer, tag
        preq._sending = sending
        return preq

    def _round(self, call: str, sending: bool, inactive_ok: bool = False) -> Any:
        how = self.completion
        if how.freed:
            raise RequestError(f"Prequest.{call}: the request was freed")
        if self._sending is not sending:
            side = "a partitioned send (Psend_init)" if sending else \
                "a partitioned receive (Precv_init)"
            raise RequestError(f"Prequest.{call}: only {side} has it; this is "
                               f"{self.description}")
        if how.op is None:
            if not inactive_ok:
                raise RequestError(f"Prequest.{call}: {self.description} is not active; "
                                   f"Start it first")
            return None
        return how.op.completion

    def _index(self, partition: Any, call: str) -> int:
        try:
            i = as_int(partition)
        except (TypeError, ValueError, OverflowError):
            i = -1
        if not 0 <= i < self._nparts:
            raise ArgumentError(f"Prequest.{call}({partition!r}): expected a partition "
                                f"0..{self._nparts - 1}")
        return i

    def Pready(self, partition: int) -> None:
        """Declare ``partition`` of the send buffer ready to go."""
        self._round("Pready", True).mark_ready([self._index(partition, "Pready")], "Pready")

    def Pready_range(self, partition_low: int, partition_high: int) -> None:
        """Declare partitions ``partition_low``..``partition_high`` (inclusive) ready."""
        op = self._round("Pready_range", True)
        low = self._index(partition_low, "Pready_range")
        high = self._index(partition_high, "Pready_range")
        op.mark_ready(range(low, high + 1), "Pready_range")

    def Pready_list(self, partitions: Sequence[int]) -> None:
        """Declare each partition of ``partitions`` ready."""
        op = self._round("Pready_list", True)
        op.mark_ready([self._index(p, "Pready_list") for p in partitions], "Pready_list")

    def Parrived(self, partition: int) -> bool:
        """Whether ``partition`` of the receive buffer has arrived (makes progress); on an
        inactive request (completed, or never started) True, as MPI says."""
        op = self._round("Parrived", False, inactive_ok=True)
        index = self._index(partition, "Parrived")
        return True if op is None else op.arrived(index)
