"""Fused calls: a compiled segment collective whose repeat runs in a few Python calls.

When a blocking call's compiled algorithm is a ``segment`` one (:mod:`.segment`: ranks of
one host meeting in shared memory) and its buffers are plain numpy arrays of a predefined
type, the API layer keeps a *fused* form of it (``plan.fused``): the same protocol on the
same segment - slot and signature, the call's numbers, publish, meet, read, done - written
as one straight function instead of a schedule generator run by the collective framework.
A repeat of the signature then costs about ten Python calls (a small ``Allreduce``: the
API front, the entry, :meth:`FusedAllreduce.run`, the slot's mismatch record, a fence, the
reduction as one ``ufunc.reduce`` over the p slots). The generator in ``coll/allreduce.py``
stays the algorithm's definition (drawn, traced, run for everything the fused form
declines); the two interleave freely on one communicator, as they share the segment's
state.

A fused call declines (``run`` returns False, and the caller takes the general path) when
the arguments differ from what it was made for, when someone on the bus watches the
algorithms' steps (``--trace``, ``minimpi draw``), when the engine has anything unusual to
report (a lost peer, an abort, a revoke), or when the segment's area is not free yet. Once
it has taken its slot it finishes or raises: a failure on this rank is announced to the
others (abort markers, :func:`~minimpi.coll.mismatch.abort_slot`), so nobody waits.
"""
from __future__ import annotations

import os
import time
from typing import Any, List

import numpy as np

from ..constants import IN_PLACE
from .mismatch import abort_slot, open_recorded
from .segment import CALL_SHIFT, SIG_MASK, HostSegment, MemoryWait
from .slots import SEQ_MASK, announced

_sched_yield = os.sched_yield


class _WaitOf:
    """What a :class:`~minimpi.coll.segment.MemoryWait` asks of the call it belongs to."""

    __slots__ = ("ep", "watch", "tag", "call")

    def __init__(self, ep: Any, watch: Any, call: str) -> None:
        self.ep, self.watch, self.tag, self.call = ep, watch, 0, call


class FusedCall:
    """What every fused call shares: the compiled call it fuses, the segment, and opening a
    slot as the compiled call would (:func:`~minimpi.coll.mismatch.open_slot`)."""

    __slots__ = ("compiled", "ep", "seg", "sig", "everyone", "waiting", "engine", "stacked")

    def __init__(self, compiled: Any, seg: HostSegment) -> None:
        self.compiled = compiled
        self.ep = compiled.ep
        self.engine = self.ep.engine
        self.seg = seg
        self.sig = compiled.sig
        self.everyone = range(seg.p)
        self.waiting = _WaitOf(self.ep, compiled.watch, compiled.label)
        self.stacked: List[np.ndarray] = []

    def next_call(self) -> int:
        """The number of the call the fused form makes now, once its area is free (see
        :meth:`wait_free`), or 0 when it must leave it to the general path: someone
        watches the algorithms' steps, or the engine has something unusual to report."""
        engine, seg = self.engine, self.seg
        k = seg.calls + 1
        if (engine.bus.steps or engine.bus.scratch or engine.lost_peers or engine.revoked
                or engine.aborted is not None or engine.faults or seg.published != k - 1):
            return 0
        words = seg.words
        for at in seg.done_at:       # (seg.all_done(k - 2), inline)
            if words[at] < k - 2:
                self.wait_free(k)
                break
        return k

    def wait_free(self, k: int) -> None:
        """Wait until every member finished reading call ``k - 2``, whose area call ``k``
        writes: a member that waits for no one - the root of a ``Bcast`` - runs up to two
        calls ahead of the others and then waits here (it used to leave each such call
        to the general path, several times slower). A look for the spin budget first, as
        :meth:`meet`, then the engine's wait."""
        seg = self.seg
        if self.engine.progress_policy.spin_until(lambda: seg.all_done(k - 2)):
            return
        wait = MemoryWait(seg, self.waiting, k, self.everyone, free=True)
        if not wait.done:
            self.engine.wait_all([wait])
        wait.wait()

    def meet_everyone(self, k: int) -> None:
        """Publish call ``k`` (this member's data is written), wait until every member has,
        and check that they all made the same call (raises the mismatch otherwise)."""
        seg = self.seg
        seg.publish(k, self.sig, call=self.waiting)
        words = seg.words
        for at in seg.seq_at:        # has every member published call k?
            if words[at] < k:
                self.meet(k, self.everyone)
                break
        signed = (k & SIG_MASK) << CALL_SHIFT | self.sig
        for at in seg.sig_at[k & 1]:     # did they all sign it alike?
            if words[at] != signed:
                seg.check(k, self.sig, self.everyone, self.waiting)   # raises
        seg.verified(k)

    def open(self) -> int:
        """Take the call's slot of the communicator's sequence; its signed tag."""
        c = self.compiled
        tag = open_recorded(self.ep, c.watch, self.ep.next_coll_tag(), c.fields)
        self.waiting.tag = tag
        return tag

    def meet(self, k: int, members: Any) -> None:
        """Wait until ``members`` published call ``k``: first a look at the segment for the
        engine's spin budget (no call, nothing to build: the peers of one host are usually
        a few microseconds behind), then the engine's wait (spin or sleep as its policy
        says, progress on every connection; an error ends it)."""
        words, at = self.seg.words, self.seg.seq_at
        policy = self.engine.progress_policy
        if policy.spin:      # (inline, not spin_until: no Python call per look)
            clock = time.perf_counter
            start = clock()
            deadline = start + policy.spin
            yield_from = start + policy.yield_after
            while True:
                for m in members:
                    if words[at[m]] < k:
                        break
                else:
                    return
                now = clock()
                if now >= deadline:
                    break
                if now >= yield_from:
                    _sched_yield()
        wait = MemoryWait(self.seg, self.waiting, k, members)
        if not wait.done:
            self.engine.wait_all([wait])
        wait.wait()

    def announce(self, exc: BaseException, tag: int) -> None:
        """This rank failed inside its call: tell the others (unless another rank's failure
        is the cause), as every collective does."""
        if announced(exc) and not getattr(exc, "_minimpi_slot_aborted", False):
            abort_slot(self.ep, exc, tag & SEQ_MASK, self.compiled.call)
            try:
                exc._minimpi_slot_aborted = True
            except AttributeError:
                pass

    def stack(self, nbytes: int, dtype: Any) -> List[np.ndarray]:
        """For each parity of call numbers, the p members' areas as one (p, items) array of
        ``dtype`` (a view: the slots lie at a fixed stride)."""
        seg = self.seg
        items = nbytes // np.dtype(dtype).itemsize
        out = []
        for parity in (0, 1):
            first = seg.areas[0][parity]
            stride = (seg.areas[1][parity].ctypes.data - first.ctypes.data) if seg.p > 1 \
                else nbytes
            out.append(np.lib.stride_tricks.as_strided(
                first[:nbytes].view(dtype), shape=(seg.p, items),
                strides=(stride, np.dtype(dtype).itemsize), writeable=False))
        return out


class FusedAllreduce(FusedCall):
    """``Allreduce`` of ``count`` items of a numpy ``dtype`` with a predefined elementwise op,
    fitting one slot: the fused form of ``allreduce_segment``."""

    __slots__ = ("dtype", "count", "ufunc", "nbytes", "mine", "pairs")

    def __init__(self, compiled: Any, seg: HostSegment, dtype: Any, count: int,
                 ufunc: Any) -> None:
        super().__init__(compiled, seg)
        self.dtype = dtype
        self.count = count
        self.ufunc = ufunc
        self.nbytes = count * np.dtype(dtype).itemsize
        self.stacked = self.stack(self.nbytes, dtype)
        #: this member's area of each parity, as ``count`` items of ``dtype``
        self.mine = [seg.areas[seg.rank][a][:self.nbytes].view(dtype) for a in (0, 1)]
        #: of two members, each parity's two areas: ``ufunc(x0, x1)`` is the reduction of
        #: the stacked areas in the same order, at half the cost of ``ufunc.reduce``
        self.pairs = [(s[0], s[1]) for s in self.stacked] if seg.p == 2 else None

    def run(self, sendbuf: Any, recvbuf: Any) -> bool:
        """Run the call, or decline (False) before anything happened."""
        if type(recvbuf) is not np.ndarray or recvbuf.dtype != self.dtype \
                or recvbuf.size != self.count:
            return False
        flags = recvbuf.flags
        if not flags.c_contiguous or not flags.writeable:
            return False
        if sendbuf is None or sendbuf is IN_PLACE:
            mine = recvbuf
        elif (type(sendbuf) is np.ndarray and sendbuf.dtype == self.dtype
              and sendbuf.size == self.count and sendbuf.flags.c_contiguous):
            mine = sendbuf
        else:
            return False
        # next_call(), open() and meet_everyone(), inline (the looks at every member's
        # words too): the repeated small Allreduce is the hottest collective, and each
        # Python call is ~5% of it at p = 2
        seg = self.seg
        k = seg.calls + 1
        engine = self.engine
        if (engine.bus.steps or engine.bus.scratch or engine.lost_peers or engine.revoked
                or engine.aborted is not None or engine.faults or seg.published != k - 1):
            return False
        words = seg.words
        for at in seg.done_at:        # every member read call k - 2, whose area k writes
            if words[at] < k - 2:
                return False
        ep, waiting = self.ep, self.waiting
        tag = waiting.tag = open_recorded(ep, waiting.watch, ep.next_coll_tag(),
                                          self.compiled.fields)
        seg.calls = k
        try:
            parity = k & 1
            self.mine[parity][...] = mine if mine.ndim == 1 else mine.reshape(-1)
            seg.publish(k, self.sig, call=waiting)
            for at in seg.seq_at:
                if words[at] < k:
                    self.meet(k, self.everyone)
                    break
            signed = (k & SIG_MASK) << CALL_SHIFT | self.sig
            for at in seg.sig_at[parity]:
                if words[at] != signed:
                    seg.check(k, self.sig, self.everyone, waiting)   # raises
            seg.verified(k)
            out = recvbuf if recvbuf.ndim == 1 else recvbuf.reshape(-1)
            if self.pairs is not None:
                # (out positional, no star-arguments: 0.3 us, where ``out=`` and a star
                # cost 0.9)
                x0, x1 = self.pairs[parity]
                self.ufunc(x0, x1, out)
            else:
                self.ufunc.reduce(self.stacked[parity], axis=0, out=out)
            seg.finished(k)
        except BaseException as exc:
            self.announce(exc, tag)
            raise
        return True


class FusedBarrier(FusedCall):
    """``Barrier``: the fused form of ``barrier_segment``."""

    __slots__ = ()

    def run(self) -> bool:
        k = self.next_call()
        if not k:
            return False
        tag = self.open()
        seg = self.seg
        seg.calls = k
        try:
            self.meet_everyone(k)
            seg.finished(k)
        except BaseException as exc:
            self.announce(exc, tag)
            raise
        return True


class FusedBcast(FusedCall):
    """``Bcast`` of ``nbytes`` of a numpy ``dtype`` from ``root``, fitting one slot: the fused
    form of ``bcast_segment``. The root copies its buffer into its area, publishes and goes
    on (up to two calls ahead: :meth:`FusedCall.wait_free`); every other member publishes
    quietly (nobody waits for its slot), waits for the root's and copies it out."""

    __slots__ = ("nbytes", "root", "dtype", "roots_area")

    def __init__(self, compiled: Any, seg: HostSegment, dtype: Any, nbytes: int,
                 root: int) -> None:
        super().__init__(compiled, seg)
        self.dtype = dtype
        self.nbytes = nbytes
        self.root = root
        #: the root's area of each parity, as items of ``dtype``
        self.roots_area = [seg.areas[root][a][:nbytes].view(dtype) for a in (0, 1)]

    def run(self, buf: Any) -> bool:
        if (type(buf) is not np.ndarray or buf.dtype != self.dtype or buf.nbytes != self.nbytes
                or not buf.flags.c_contiguous):
            return False
        seg = self.seg
        root = self.root
        is_root = seg.rank == root
        if not is_root and not buf.flags.writeable:
            return False
        # next_call(), inline (as in FusedAllreduce: the root of repeated Bcasts pays every
        # microsecond of its own call in the others' wait)
        k = seg.calls + 1
        engine = self.engine
        if (engine.bus.steps or engine.bus.scratch or engine.lost_peers or engine.revoked
                or engine.aborted is not None or engine.faults or seg.published != k - 1):
            return False
        if not seg.all_done(k - 2):
            self.wait_free(k)
        tag = self.open()
        seg.calls = k
        try:
            area = self.roots_area[k & 1]
            flat = buf if buf.ndim == 1 else buf.reshape(-1)
            if is_root:
                area[...] = flat
                seg.publish(k, self.sig, root=True, call=self.waiting, finished=True)
            else:
                seg.publish(k, self.sig, call=self.waiting, quiet=True)
                words = seg.words
                if words[seg.seq_at[root]] < k:
                    self.meet(k, (root,))
                if words[seg.sig_at[k & 1][root]] != (k & SIG_MASK) << CALL_SHIFT | self.sig:
                    seg.check(k, self.sig, (root,), self.waiting)      # raises
                flat[...] = area
                seg.finished(k)
        except BaseException as exc:
            self.announce(exc, tag)
            raise
        return True


class FusedAllgather(FusedCall):
    """``Allgather`` of equal blocks of ``count`` items of a numpy ``dtype``, each fitting a
    slot: the fused form of ``allgather_segment`` (every member writes its block once; each
    then copies the p areas into its receive buffer in one step)."""

    __slots__ = ("dtype", "count", "nbytes", "mine")

    def __init__(self, compiled: Any, seg: HostSegment, dtype: Any, count: int) -> None:
        super().__init__(compiled, seg)
        self.dtype = dtype
        self.count = count
        self.nbytes = count * np.dtype(dtype).itemsize
        self.stacked = self.stack(self.nbytes, dtype)
        self.mine = [seg.areas[seg.rank][a][:self.nbytes].view(dtype) for a in (0, 1)]

    def run(self, sendbuf: Any, recvbuf: Any) -> bool:
        """Run the call, or decline (False) before anything happened."""
        p, count = self.seg.p, self.count
        if type(recvbuf) is not np.ndarray or recvbuf.dtype != self.dtype \
                or recvbuf.size != p * count:
            return False
        flags = recvbuf.flags
        if not (flags.c_contiguous and flags.writeable):
            return False
        seg = self.seg
        out = recvbuf.reshape(p, count)
        if sendbuf is IN_PLACE:
            mine = out[seg.rank]
        elif (type(sendbuf) is np.ndarray and sendbuf.dtype == self.dtype
              and sendbuf.size == count and sendbuf.flags.c_contiguous):
            mine = sendbuf if sendbuf.ndim == 1 else sendbuf.reshape(-1)
        else:
            return False
        k = self.next_call()
        if not k:
            return False
        tag = self.open()
        seg.calls = k
        try:
            parity = k & 1
            self.mine[parity][...] = mine
            self.meet_everyone(k)
            out[...] = self.stacked[parity]
            seg.finished(k)
        except BaseException as exc:
            self.announce(exc, tag)
            raise
        return True


class FusedAlltoall(FusedCall):
    """``Alltoall`` of ``count`` items of a numpy ``dtype`` per pair, a rank's whole send
    buffer fitting a slot: the fused form of ``alltoall_segment`` (every member writes its
    send buffer once; each then copies block ``rank`` of every area in one step)."""

    __slots__ = ("dtype", "count", "nbytes", "mine")

    def __init__(self, compiled: Any, seg: HostSegment, dtype: Any, count: int) -> None:
        super().__init__(compiled, seg)
        self.dtype = dtype
        self.count = count
        item = np.dtype(dtype).itemsize
        self.nbytes = count * item
        p, rank = seg.p, seg.rank
        self.mine = [seg.areas[rank][a][:p * self.nbytes].view(dtype) for a in (0, 1)]
        # of each parity, block ``rank`` of every member's area, as one (p, count) view
        self.stacked = []
        for parity in (0, 1):
            first = seg.areas[0][parity]
            stride = (seg.areas[1][parity].ctypes.data - first.ctypes.data) if p > 1 \
                else p * self.nbytes
            at = rank * self.nbytes
            self.stacked.append(np.lib.stride_tricks.as_strided(
                first[at:at + self.nbytes].view(dtype), shape=(p, count),
                strides=(stride, item), writeable=False))

    def run(self, sendbuf: Any, recvbuf: Any) -> bool:
        """Run the call, or decline (False) before anything happened."""
        p, count = self.seg.p, self.count
        if (type(recvbuf) is not np.ndarray or recvbuf.dtype != self.dtype
                or recvbuf.size != p * count or type(sendbuf) is not np.ndarray
                or sendbuf.dtype != self.dtype or sendbuf.size != p * count
                or not sendbuf.flags.c_contiguous):
            return False
        flags = recvbuf.flags
        if not (flags.c_contiguous and flags.writeable) or np.may_share_memory(sendbuf, recvbuf):
            return False
        seg = self.seg
        k = self.next_call()
        if not k:
            return False
        tag = self.open()
        seg.calls = k
        try:
            parity = k & 1
            self.mine[parity][...] = sendbuf if sendbuf.ndim == 1 else sendbuf.reshape(-1)
            self.meet_everyone(k)
            recvbuf.reshape(p, count)[...] = self.stacked[parity]
            seg.finished(k)
        except BaseException as exc:
            self.announce(exc, tag)
            raise
        return True
