"""A communicator's shared segment: where the ranks of one host meet for small collectives.

Tree and ring algorithms cost a message - and, when ranks share cores, a wake-up of the
peer - per step. On one host the ranks can meet in memory instead: each writes its
contribution once into its own slot of one segment and publishes the call's number, then
waits until the slots it needs carry that number, and reads (and reduces) them. Each rank
wakes at most once per collective, whatever ``p``. The ``segment`` algorithms of the
collective modules (``coll/allreduce.py``...) are written on this object. A vector larger
than a slot goes in c slot-sized pieces, a meeting each: their formulas charge c·α/2, and
with more ranks than cores (c-1)·o·α/4 more, o = max(0, p/cores - 1), since every meeting
after the first waits for descheduled ranks to run again (:mod:`.cost`).

Layout (one file under /dev/shm per communicator, mapped by its members; its name is
removed once every member has it mapped)::

    header   64 B     magic, members p, creator's pid  (as an inbox: ``minimpi clean``)
    mapped   p B      1 once member i has the segment mapped (rounded up to 64 B)
    slot i   64 B     seq (the member's last published call), two signed calls (call k's
                      at k % 2: its signature and the low 32 bits of k, one word - so a
                      reader never takes the signature of a call being published for that
                      of the call before it), done (the last call whose slots it finished
                      reading),
                      wants (1 while it waits for the others' done)
             2 x S    two data areas: call k writes area k % 2

**Why two areas are enough.** A member writes area k % 2 (and its signature) for call k
only after every member's ``done`` reached k - 2, the last call that used that area
(:meth:`HostSegment.free_for`, which every segment algorithm waits for first - usually
true at once), and after it published k - 1 itself (a member publishes its calls in
order, so ``seq >= k`` means "call k's data is there"). Calls are numbered when they start
- a call takes as many numbers as it has pieces (:meth:`HostSegment.reserve`) - and every
member starts its collectives in the same order, so several nonblocking calls in flight at
once stay in step.

**Ordering.** The publishing store of ``seq`` follows the data stores (x86-64's store order,
the condition of the shared-memory transport too); the transport's fence orders a writer's
``seq`` store before it looks at who sleeps, and a sleeper's flag before it looks at the
segment once more (:meth:`~minimpi.transports.base.Transport.set_sleep_check`), so the last
writer wakes whoever sleeps and no wake-up is lost. (Where every rank of the host issues a
process-wide barrier before it sleeps, the writer's fence is none: the sleeper's barrier
orders both sides - :mod:`minimpi.transports.membarrier`.)

**Failures.** A wait on the segment ends with an error - not a hang - when a member is gone
(the transport noticed its exit), another rank's call failed (an abort marker on the
collective context: :mod:`.slots`), or a member's call has another signature (a mismatch:
another collective, root, op or size).
"""
from __future__ import annotations

import os
import weakref
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import CollectiveMismatchError, RevokedError
from .mismatch import describe_signature
from .slots import SEQ_BITS, SEQ_MASK

#: the bytes each member may write per call (per area); larger data goes through in pieces
#: (the segment algorithms' formulas count them: ⌈n/16384⌉)
SLOT_BYTES = 16 * 1024
_MAGIC = 0x314745534D50494D        # b"MIPMSEG1" little-endian
_HEADER = 64
_CTL = 64
#: words of a slot's control line (uint64 view): the last published call, the signature of
#: the calls of each parity (call k's at SIG + k % 2), the last call read to the end, and
#: whether the member waits for the others' reads
_SEQ, _SIG, _DONE, _WANTS = 0, 1, 3, 4
#: a signature word holds the call's number (low 32 bits) above the signature (< 2**17)
CALL_SHIFT = 32
SIG_MASK = (1 << CALL_SHIFT) - 1


def signed_call(k: int, sig: int) -> int:
    """The signature word member writes for call ``k`` of signature ``sig``."""
    return (k & SIG_MASK) << CALL_SHIFT | sig


def pieces(nbytes: int, slot: int, unit: int = 1) -> List[range]:
    """Byte ranges of at most ``slot`` bytes (multiples of ``unit``: whole items of a
    reduction) that cover ``nbytes``; one empty range for 0 bytes (a call still meets)."""
    per = max(unit, slot // unit * unit)
    return [range(lo, min(lo + per, nbytes)) for lo in range(0, nbytes, per)] or [range(0, 0)]


def segment_bytes(p: int, slot: int = SLOT_BYTES) -> int:
    """The size of the segment of ``p`` members with ``slot``-byte areas."""
    flags = (p + 63) // 64 * 64
    return _HEADER + flags + p * (_CTL + 2 * slot)


#: engine id -> its processes' segments (weakly: a freed communicator's goes with it), for
#: the finalize check (:func:`segments_of`)
_SEGMENTS: dict = {}


def segments_of(engine: Any) -> List["HostSegment"]:
    """The shared segments of ``engine``'s communicators (what the finalize check reads)."""
    return list(_SEGMENTS.get(id(engine), ()))


def reduce_slots(seg: "HostSegment", k: int, nbytes: int, members: Sequence[int], red: Any,
                 acc: np.ndarray, within: slice = slice(None)) -> None:
    """``acc`` = the areas of call ``k`` (their first ``nbytes``; of each, the bytes
    ``within``) of ``members``, reduced with ``red`` in rank order (so any op)."""
    dtype = acc.dtype
    acc[...] = seg.area(members[0], k, nbytes)[within].view(dtype)
    for r in members[1:]:
        red.into_lower(acc, seg.area(r, k, nbytes)[within].view(dtype))


class MemoryWait:
    """What a segment algorithm yields for a step: "wait until these members published call
    ``k``" (or, ``free``: until every member finished reading call k and this member
    published k - 1 - the area of call k + 2 is free) - a request-like object the
    collective framework waits on like a message (``done``; ``error`` when the wait must
    end otherwise, which ``wait()`` raises; ``description`` for the deadlock report)."""

    __slots__ = ("segment", "ch", "k", "members", "free", "error", "status")

    def __init__(self, segment: "HostSegment", ch: Any, k: int, members: Sequence[int],
                 free: bool = False) -> None:
        self.segment = segment
        self.ch = ch
        self.k = k
        self.members = members
        self.free = free
        self.error: Optional[BaseException] = None
        self.status = None

    @property
    def done(self) -> bool:
        seg = self.segment
        if self.free:
            if seg.is_free(self.k):
                return True
        else:
            k = self.k
            words, at = seg.words, seg.seq_at
            for m in self.members:
                if words[at[m]] < k:
                    break
            else:
                return True
        self.error = seg.failure(self.ch, self.members)
        return self.error is not None

    def missing(self) -> int:
        """The first member (communicator rank) the wait still waits for (-1: none)."""
        seg = self.segment
        words = seg.done_words if self.free else seg.seqs
        return next((m for m in self.members if words[m] < self.k), -1)

    @property
    def description(self) -> tuple:
        return (self.ch.call, "source", self.missing(), 0, self.ch.ep.name)

    @property
    def world(self) -> Optional[int]:
        """The world rank of the member the wait still waits for (the deadlock report's
        wait-for edge), None when it waits for no one."""
        m = self.missing()
        return self.segment.ep.group[m] if m >= 0 else None

    def wait(self) -> None:
        if self.error is not None:
            raise self.error


class HostSegment:
    """The segment of one communicator whose members all run on this host (module
    docstring). ``ep``: the communicator's endpoint; made by :meth:`of`. ``slot``: the
    bytes each member may write per call; larger data goes through in pieces, one call of
    the segment each (:func:`pieces`)."""

    __slots__ = ("ep", "p", "rank", "key", "mem", "seqs", "sigs", "done_words", "wants",
                 "areas", "calls", "published", "_finished", "_mapped", "_released", "others",
                 "slot", "_mine", "words", "seq_at", "sig_at", "done_at", "wants_at",
                 "_transport", "__weakref__")

    def __init__(self, ep: Any, mem: memoryview, key: str, slot: int) -> None:
        self.ep = ep
        self.p = p = ep.size
        self.rank = ep.rank
        self.key = key
        self.mem = mem
        self.slot = slot
        raw = np.frombuffer(mem, dtype=np.uint8)
        head = raw[:_HEADER].view(np.uint64)
        flags_at = _HEADER
        slots_at = flags_at + (p + 63) // 64 * 64
        stride = _CTL + 2 * slot
        ctl = np.lib.stride_tricks.as_strided(
            raw[slots_at:].view(np.uint64), shape=(p, _CTL // 8), strides=(stride, 8))
        #: every member's last published call, and the signed calls (:func:`signed_call`)
        #: of its calls of each parity (live views)
        self.seqs = ctl[:, _SEQ]
        self.sigs = ctl[:, _SIG:_SIG + 2]
        #: the last call each member finished reading; whether it waits for the others' reads
        self.done_words = ctl[:, _DONE]
        self.wants = ctl[:, _WANTS]
        #: the same control words as Python integers (``words[seq_at[m]]``...): a small
        #: segment's calls read a few words each, and a numpy call costs ~1 us where a
        #: memoryview index costs ~50 ns
        self.words = mem.cast("Q")
        base, step = slots_at // 8, stride // 8
        self.seq_at = tuple(base + i * step + _SEQ for i in range(p))
        self.sig_at = tuple(tuple(base + i * step + _SIG + a for i in range(p)) for a in (0, 1))
        self.done_at = tuple(base + i * step + _DONE for i in range(p))
        self.wants_at = tuple(base + i * step + _WANTS for i in range(p))
        #: areas[i][a]: member i's data area a (uint8)
        self.areas = [[raw[slots_at + i * stride + _CTL + a * slot:
                           slots_at + i * stride + _CTL + (a + 1) * slot] for a in (0, 1)]
                      for i in range(p)]
        #: how many call numbers this member took (all members alike), the last it published,
        #: and the calls it finished reading beyond its ``done`` word (out of order)
        self.calls = 0
        self.published = 0
        self._finished: set = set()
        #: this member's last call of each parity: (signature, signed tag, mismatch
        #: bookkeeping), checked against the others' when the parity comes round again
        self._mine: List[Any] = [None, None]
        #: the other members, as world ranks (whom a publish may wake)
        self.others = [w for i, w in enumerate(ep.group) if i != ep.rank]
        #: the transport that made the memory (it fences and wakes for it: a router's
        #: member, asked once)
        transport = ep.engine.transport
        self._transport = transport.host_memory() or transport
        self._mapped = raw[flags_at:flags_at + p]
        self._released = False
        if head[0] == 0 and self.rank == 0:
            head[1], head[2], head[3] = p, os.getpid(), 0
            head[0] = _MAGIC
        self._mapped[self.rank] = 1

    @classmethod
    def of(cls, ep: Any, slot: int = SLOT_BYTES) -> Optional["HostSegment"]:
        """The segment of the communicator of endpoint ``ep`` (made once for its life: a
        plan that replaces another takes its segment over - the call numbers go on)."""
        seg = cls._make(ep, slot)
        if seg is not None:
            _SEGMENTS.setdefault(id(ep.engine), weakref.WeakSet()).add(seg)
        return seg

    def close(self) -> None:
        """The communicator was freed: its transport forgets the segment (a new communicator
        with the same context gets new memory); calls still in flight keep this one."""
        if self.others:
            self.ep.engine.transport.forget_segment(self.key, self.mem)

    @classmethod
    def _make(cls, ep: Any, slot: int) -> Optional["HostSegment"]:
        """The communicator's segment, mapped on first use (None: its transport has no
        shared memory)."""
        # the context and the first member: the communicators Split makes share a
        # context, and their groups are disjoint
        key = f"c{ep.context}r{ep.group[0]}"
        nbytes = segment_bytes(ep.size, slot)
        if ep.size == 1:                  # alone: memory of its own
            return cls(ep, memoryview(bytearray(nbytes)), key, slot)
        mem = ep.engine.transport.shared_segment(key, nbytes) \
            if ep.engine.transport is not None else None
        if mem is None:
            return None
        return cls(ep, mem, key, slot)

    # -- a call ------------------------------------------------------------------------------
    def reserve(self, count: int) -> range:
        """The numbers of a collective call's ``count`` pieces (at least one), taken when the
        call starts: every member starts its collectives on the communicator in the same
        order, so they number alike."""
        first = self.calls + 1
        self.calls += max(1, count)
        if not self._released and self.others and bool(self._mapped.all()):
            self._released = True         # every member has it mapped: drop the name
            self.ep.engine.transport.release_segment(self.key)
        return range(first, self.calls + 1)

    def area(self, member: int, k: int, nbytes: int) -> np.ndarray:
        """The first ``nbytes`` of member ``member``'s area for call ``k`` (uint8)."""
        return self.areas[member][k & 1][:nbytes]

    def all_done(self, k: int) -> bool:
        """Whether every member finished reading call ``k``."""
        # (the looks at every member's words are plain loops, here and in the fused calls:
        # ``min(map(words.__getitem__, ...))`` costs ~0.7 us at p = 2 - a memoryview's
        # method wrapper per item -, a loop 0.1-0.2 us, and the repeated small collective
        # does several such looks per call)
        words = self.words
        for at in self.done_at:
            if words[at] < k:
                return False
        return True

    def free_for(self, ch: Any, k: int) -> MemoryWait:
        """What a member waits for before it writes (and publishes) call ``k``: it published
        k - 1, and every member finished reading call k - 2, the last that used the area
        k uses (usually true at once)."""
        return MemoryWait(self, ch, k, range(self.p), free=True)

    def is_free(self, k: int) -> bool:
        """Whether this member may write call ``k`` now (see :meth:`free_for`)."""
        if self.published != k - 1:
            return False
        words, wants = self.words, self.wants_at[self.rank]
        if self.all_done(k - 2):
            if words[wants]:
                words[wants] = 0
            return True
        # about to wait (maybe sleep) for the others' reads: say so first, then look again
        # (a reader stores its done word, fences, then looks at who wants it)
        words[wants] = 1
        if self.others and self._transport.needs_fence:
            self._transport.fence()
        return self.all_done(k - 2)

    def finished(self, k: int) -> None:
        """This member finished reading the slots of call ``k`` (or had none to read):
        advance its ``done`` word over every call finished in order, and wake the members
        that wait for it."""
        words, mine = self.words, self.done_at[self.rank]
        done = words[mine]
        if k != done + 1:
            self._finished.add(k)
            return                        # an earlier call is still being read
        done = k
        if self._finished:
            while done + 1 in self._finished:
                done += 1
                self._finished.discard(done)
        words[mine] = done
        if self.others:
            transport = self._transport
            if transport.needs_fence:
                transport.fence()         # our done word first, then who wants it
            for at in self.wants_at:
                if words[at]:
                    # only the members that wait for the area (not every sleeper: on a
                    # full host most of them sleep for something else and would wake for
                    # nothing)
                    group = self.ep.group
                    transport.wake_peers([group[m] for m, at in enumerate(self.wants_at)
                                          if words[at] and m != self.rank])
                    break

    def publish(self, k: int, sig: int, root: bool = False, call: Any = None,
                quiet: bool = False, finished: bool = False) -> None:
        """This member's data for call ``k`` is written: publish it (signature ``sig``).
        First, the call that used this parity before (k - 2) is checked against every
        member that has not gone past it: a rooted call whose ranks did not all wait for
        each other (two ranks that both took themselves for the root of a Bcast) is caught
        here, one or two calls later, never left silent. Then wake the members that sleep
        if this may have ended their wait: when every member has now published ``k`` (the
        call's last writer: whatever anyone waits for in a call - all members, the root,
        the members before it - is complete), or ``root`` (a root whose data the others wait
        for alone). ``call``: the call's channel (its tag and mismatch bookkeeping).
        ``quiet``: no member's wait can end with this publish - a ``Bcast``'s non-root, whose
        slot nobody waits for - so it wakes no one (and spends no fence on looking).
        ``finished`` (with ``root``): this member reads nothing of call ``k`` - a ``Bcast``'s
        root - so it is done with it too (:meth:`finished`, in the same fence: the root wakes
        every member that sleeps, those that wait for its done word among them).

        The check of call k - 2 looks further (:meth:`_cross_check`) only when a member's
        word is neither that call's, as this member signed it, nor call k's, as this member
        signs it now (a member that went on to call k alike cannot have signed k - 2
        otherwise in a way the look could still see: its word is overwritten)."""
        parity = k & 1
        earlier = self._mine[parity]
        word = (k & SIG_MASK) << CALL_SHIFT | sig          # signed_call(k, sig), inline
        if earlier is not None:
            words = self.words
            theirs = [words[at] for at in self.sig_at[parity]]
            if theirs.count(earlier[0]) + theirs.count(word) != self.p:
                self._cross_check(k, parity, *earlier)
        self._mine[parity] = (word, call.tag, call.watch) if call is not None else None
        words = self.words
        words[self.sig_at[parity][self.rank]] = word
        words[self.seq_at[self.rank]] = k
        self.published = k
        if finished:
            at = self.done_at[self.rank]
            if words[at] == k - 1 and not self._finished:
                words[at] = k
            else:
                self.finished(k)            # (out of order: the general bookkeeping)
        if quiet or not self.others:
            return
        transport = self._transport
        if not root:
            if transport.needs_fence:
                transport.fence()           # our seq first, then the others'
            for at in self.seq_at:
                if words[at] < k:
                    return
        transport.wake_peers(self.others, fenced=not root)

    def _cross_check(self, k: int, parity: int, word: int, tag: int, watch: Any,
                     members: Sequence[int] = ()) -> None:
        """Raise the mismatch of this member's call ``k - 2`` (signed call ``word``) with a
        member that published that call with another signature. A member whose word already
        names a later call (it is publishing call ``k`` this moment: the word is stored
        before its seq) is passed over - call k's own checks compare that one."""
        words, sig_at, seq_at = self.words, self.sig_at[parity], self.seq_at
        call = word >> CALL_SHIFT
        for m in members or range(self.p):
            theirs = words[sig_at[m]]
            if (theirs != word and theirs >> CALL_SHIFT == call and m != self.rank
                    and k - 2 <= words[seq_at[m]] < k):
                self._mine[parity] = None
                raise self.mismatch(watch, tag, m, theirs & SIG_MASK)

    def leftovers(self, finished: Sequence[int]) -> Tuple[List[str], List[str]]:
        """At finalize, what the slots of the members in ``finished`` (they made all their
        calls) say this rank's collectives missed: (errors: one of this rank's last two calls
        that such a member made differently; warnings: calls such a member made that this
        rank never made - the last ones of a rank that ended early)."""
        errors, fewer = [], []
        nxt = self.published + 1
        for parity in (0, 1):
            earlier = self._mine[parity]
            if earlier is not None:
                k = nxt if nxt & 1 == parity else nxt + 1
                try:
                    self._cross_check(k, parity, *earlier, members=finished)
                except CollectiveMismatchError as exc:
                    errors.append(str(exc))
        for m in finished:
            theirs = self.words[self.seq_at[m]]
            if m != self.rank and theirs > self.published:
                fewer.append(f"rank {m} made {theirs - self.published} more collective "
                             f"call(s) on {self.ep.name} than rank {self.rank}, the last "
                             f"{describe_signature(self.words[self.sig_at[theirs & 1][m]] & SIG_MASK)}; every rank "
                             f"of a communicator must call the same collectives in the same "
                             f"order")
        return errors, fewer

    def verified(self, k: int) -> None:
        """Every member signed call ``k`` alike (the call checked it after all of them
        published): nothing of it is left to cross-check when its parity comes round again
        (:meth:`publish`)."""
        self._mine[k & 1] = None

    def wait_for(self, ch: Any, k: int, members: Sequence[int]) -> MemoryWait:
        """The step's wait: until ``members`` published call ``k``."""
        return MemoryWait(self, ch, k, members)

    def check(self, k: int, sig: int, members: Sequence[int], call: Any) -> None:
        """After the wait: every one of ``members`` called the same collective (signature)
        as this one, else the :class:`CollectiveMismatchError` a message of theirs would
        have caused (``call``: the call's channel - its tag and mismatch bookkeeping)."""
        words, at, word = self.words, self.sig_at[k & 1], signed_call(k, sig)
        for m in members:
            if words[at[m]] != word:
                raise self.mismatch(call.watch, call.tag, m, words[at[m]] & SIG_MASK)

    def mismatch(self, watch: Any, tag: int, member: int, theirs: int) -> BaseException:
        """The error of this rank's call (signed ``tag``) against member ``member``'s call of
        signature ``theirs``, worded as the message-based check words it."""
        low = tag & SEQ_MASK
        mine = watch.call(low) if watch is not None else None
        if mine is None:
            return CollectiveMismatchError(
                f"collective mismatch: rank {self.rank}'s collective #{low} on {self.ep.name} "
                f"differs from rank {member}'s {describe_signature(theirs)}")
        return watch.error_for(mine, member, low | theirs << SEQ_BITS, 0, False)

    # -- why a wait must end -----------------------------------------------------------------
    def failure(self, ch: Any, members: Sequence[int]) -> Optional[BaseException]:
        """The error a wait of channel ``ch``'s call on ``members`` must end with now (None:
        keep waiting): another rank's failure aborted the call, a message showed a
        mismatch, or a member is gone."""
        watch = ch.watch
        if watch is not None:
            if watch.aborted:
                err = watch.aborted.get(ch.tag & SEQ_MASK)
                if err is not None:
                    return err
            if watch.error is not None:
                err, watch.error = watch.error, None
                return err
        engine = self.ep.engine
        if engine.revoked and engine.is_revoked(self.ep.coll_context):
            return RevokedError(f"rank {self.rank}: a collective on {self.ep.name} cannot "
                                f"complete: the communicator was revoked (MPI.ERR_REVOKED)")
        if engine.lost_peers:   # (under fault tolerance, ERR_PROC_FAILED as every call)
            gone = [w for w in self.ep.group if w in engine.lost_peers] \
                if engine.fault_tolerant else \
                [self.ep.group[m] for m in members if self.ep.group[m] in engine.lost_peers]
            if gone:
                return engine.lost_error(gone[0], f"a collective on {self.ep.name}",
                                         collective=True)
        return None


__all__: List[str] = ["HostSegment", "MemoryWait", "SLOT_BYTES", "segment_bytes", "pieces", "reduce_slots", "signed_call",
                      "CALL_SHIFT", "SIG_MASK"]
