"""``MPI.Win``'s synchronisation: Fence, post/start/complete/wait, Lock/Unlock, Lock_all,
Flush and Sync - the epochs the operations run in."""
from __future__ import annotations

from typing import Any, List, Sequence

from ..comm.group import Group
from ..constants import (
    LOCK_EXCLUSIVE,
    LOCK_SHARED,
    MODE_NOCHECK,
    MODE_NOSUCCEED,
    PROC_NULL,
)
from ..errors import ArgumentError, MinimpiError, PeerLostError, ProcFailedError
from . import direct
from .am import COMPLETE, POST_TAG, UNLOCK
from .errors import ERR_LOCKTYPE
from .state import WinHandle, _check_int, _EpochWait, _State


class Synchronisation(WinHandle):
    """Epochs and completion (mixed into ``MPI.Win``)."""

    __slots__ = ()

    # -- active target: Fence ---------------------------------------------------------------
    def Fence(self, assertion: int = 0) -> None:
        """End the fence epoch (every rank's operations complete) and - unless
        ``MODE_NOSUCCEED`` - start the next (collective)."""
        s = self._call("Fence")
        assertion = _check_int(assertion, "Fence", "assertion")
        s.epochs.check_fence()
        with s.epoch_call("Win.Fence", "fence", collective=True):
            s.origin.complete_remote(s.origin.targets(), "Win.Fence")
            s.comm.Barrier()
        s.epochs.fence_open = not assertion & MODE_NOSUCCEED

    # -- active target: post/start/complete/wait -----------------------------------------------
    def _ranks_of(self, s: _State, group: Any, call: str) -> List[int]:
        if not isinstance(group, Group):
            raise TypeError(f"Win.{call}: expected an MPI.Group, got {type(group).__name__}")
        if group.Get_size() == 0:
            return []
        ranks = Group.Translate_ranks(group, None, s.comm.Get_group())
        bad = [r for r in ranks if r < 0]
        if bad:
            raise ArgumentError(f"rank {s.rank}: Win.{call}: the group has ranks that are not "
                                f"in window {s.label}'s group")
        return ranks

    def Post(self, group: Group, assertion: int = 0) -> None:
        """Expose this rank's window to the ranks of ``group`` (they ``Start`` then)."""
        s = self._call("Post")
        ranks = self._ranks_of(s, group, "Post")
        if s.epochs.exposure is not None:
            raise s.epochs._error("Post", "an exposure epoch is already open (Wait first)")
        s.epochs.exposure = ranks
        for r in ranks:
            s.endpoint.isend([], 0, r, POST_TAG, 0, "Win.Post")

    def Start(self, group: Group, assertion: int = 0) -> None:
        """Begin an access epoch to the ranks of ``group`` (waits for their ``Post``)."""
        s = self._call("Start")
        ranks = self._ranks_of(s, group, "Start")
        if s.epochs.access is not None:
            raise s.epochs._error("Start", "an access epoch is already open (Complete first)")
        reqs = [s.endpoint.irecv(None, r, POST_TAG, "Win.Start") for r in ranks]
        with s.epoch_call("Win.Start", "access (post/start/complete/wait)", ranks):
            s.endpoint.engine.wait_all(reqs)
        s.epochs.access = ranks

    def Complete(self) -> None:
        """End the access epoch begun by ``Start``: this rank's operations complete."""
        s = self._call("Complete")
        ranks = s.epochs.access
        if ranks is None:
            raise s.epochs._error("Complete", "no access epoch is open (Complete without Start)")
        with s.epoch_call("Win.Complete", "access (post/start/complete/wait)", ranks):
            if s.rdma.targets:      # RDMA writes land before the target hears COMPLETE
                s.origin.complete_local(ranks)
            for r in ranks:
                s.origin.send(r, (COMPLETE,), None, "Win.Complete")
            s.origin.complete_local(ranks)
        s.epochs.access = None

    def _exposure_done(self, s: _State) -> bool:
        return s.exposed.completions >= len(s.epochs.exposure or ())

    def _end_exposure(self, s: _State) -> None:
        s.exposed.consume_completions(s.epochs.exposure)
        s.epochs.exposure = None

    def _gone_origins(self, s: _State) -> List[int]:
        """Origins of the exposure epoch that are gone before their ``Complete`` came:
        their notice can never come."""
        lost = s.endpoint.engine.lost_peers
        if not lost:
            return []
        return [r for r in s.epochs.exposure or () if s.endpoint.group[r] in lost
                and not s.exposed.completed_by.get(r)]

    def Wait(self) -> None:
        """End the exposure epoch begun by ``Post``: wait until every origin completed. An
        origin that is gone first (its process failed) ends the epoch with
        ``ERR_PROC_FAILED`` (``PeerLostError`` without ``--fault-tolerant``)."""
        s = self._call("Wait")
        if s.epochs.exposure is None:
            raise s.epochs._error("Wait", "no exposure epoch is open (Wait without Post)")
        if not self._exposure_done(s):
            waits = [_EpochWait("Win.Wait", r, s.label, s.endpoint.group[r])
                     for r in s.epochs.exposure]
            with s.epoch_call("Win.Wait", "exposure (post/start/complete/wait)",
                              s.epochs.exposure):
                s.endpoint.engine.wait_until(
                    lambda: self._exposure_done(s) or bool(self._gone_origins(s)), waits)
            gone = self._gone_origins(s)
            if gone and not self._exposure_done(s):
                self._end_exposure(s)
                raise gone_error(s, "Wait", gone, "before it called Win.Complete")
        self._end_exposure(s)

    def Test(self) -> bool:
        """``Wait`` without blocking: True (and the epoch ended) once every origin completed."""
        s = self._call("Test")
        if s.epochs.exposure is None:
            raise s.epochs._error("Test", "no exposure epoch is open (Test without Post)")
        if not self._exposure_done(s):
            s.endpoint.engine.poll()
        if not self._exposure_done(s):
            gone = self._gone_origins(s)
            if gone:
                self._end_exposure(s)
                raise gone_error(s, "Test", gone, "before it called Win.Complete")
            return False
        self._end_exposure(s)
        return True

    # -- passive target ----------------------------------------------------------------------
    def Lock(self, rank: int, lock_type: int = LOCK_EXCLUSIVE, assertion: int = 0) -> None:
        """Begin a passive-target epoch on ``rank``.

        Where this rank can load and store ``rank``'s window memory (its own window, any
        rank of a window in shared memory: ``Shared_query``) it waits until the lock is
        granted, so the lock protects those loads and stores as MPI requires: an exclusive
        lock excludes every other rank's epoch on ``rank`` (the owner's own included), a
        shared one excludes the exclusive ones. Elsewhere it returns at once; the
        operations of the epoch wait at the target behind the grant."""
        s = self._call("Lock")
        rank = self._target_rank(s, rank, "Lock")
        lock_type = _lock_type(s, lock_type)
        if rank == PROC_NULL:
            return
        s.epochs.check_lock(rank, lock_type, "Lock")
        nocheck = bool(_check_int(assertion, "Lock", "assertion") & MODE_NOCHECK)
        if not nocheck:
            with s.epoch_call(f"Win.Lock({rank})", "passive target (lock)", [rank]):
                s.origin.lock(rank, lock_type, "Win.Lock")
                if s.loads_and_stores(rank):    # they may follow at once: wait for it now
                    s.origin.granted(rank)
        s.epochs.locks[rank] = (lock_type, nocheck)

    def Unlock(self, rank: int) -> None:
        """End the passive-target epoch on ``rank``: its operations are complete there."""
        s = self._call("Unlock")
        rank = self._target_rank(s, rank, "Unlock")
        if rank == PROC_NULL:
            return
        _, nocheck = s.epochs.check_unlock(rank, "Unlock")
        del s.epochs.locks[rank]
        with s.epoch_call(f"Win.Unlock({rank})", "passive target (lock)", [rank]):
            self._release(s, [rank], nocheck, "Win.Unlock")

    def _release(self, s: _State, ranks: Sequence[int], nocheck: bool, call: str) -> None:
        if nocheck:
            s.origin.complete_remote(ranks, call)
            return
        s.origin.complete_local(ranks)      # fetched data in, sends out
        for r in ranks:
            if r in s.origin.dirty:          # writes to acknowledge: Unlock waits for them
                s.origin.ask(r, (UNLOCK,), None, call)
                s.origin.dirty.discard(r)
            else:                            # all complete already: just give the lock back
                s.origin.release_lock(r, call)
        s.origin.complete_local(ranks)

    def Lock_all(self, assertion: int = 0) -> None:
        """A shared lock on every rank of the window."""
        s = self._call("Lock_all")
        if s.epochs.lock_all is not None or s.epochs.locks:
            raise s.epochs._error("Lock_all", "this rank already holds locks on this window")
        nocheck = bool(_check_int(assertion, "Lock_all", "assertion") & MODE_NOCHECK)
        if not nocheck:
            with s.epoch_call("Win.Lock_all", "passive target (lock_all)",
                              list(range(s.size))):
                for r in range(s.size):
                    s.origin.lock(r, LOCK_SHARED, "Win.Lock_all")
                for r in range(s.size):
                    if s.loads_and_stores(r):
                        s.origin.granted(r)
        s.epochs.lock_all = nocheck

    def Unlock_all(self) -> None:
        s = self._call("Unlock_all")
        if s.epochs.lock_all is None:
            raise s.epochs._error("Unlock_all", "this rank holds no Lock_all (Unlock_all "
                                                "without Lock_all)")
        nocheck, s.epochs.lock_all = s.epochs.lock_all, None
        with s.epoch_call("Win.Unlock_all", "passive target (lock_all)", list(range(s.size))):
            self._release(s, range(s.size), nocheck, "Win.Unlock_all")

    def Flush(self, rank: int) -> None:
        """Complete this rank's operations to ``rank``, at the target too."""
        if direct.flush(self._s, rank):     # nothing outstanding: the epoch check only
            return
        s = self._call("Flush")
        rank = self._target_rank(s, rank, "Flush")
        if rank == PROC_NULL:
            return
        s.epochs.check_flush(rank, "Flush")
        if s.origin.idle(rank):     # everything went straight to memory: already complete
            return
        with s.epoch_call(f"Win.Flush({rank})", "passive target", [rank]):
            s.origin.complete_remote([rank], "Win.Flush")

    def Flush_all(self) -> None:
        s = self._call("Flush_all")
        targets = list(s.origin.targets())
        with s.epoch_call("Win.Flush_all", "passive target", targets):
            s.origin.complete_remote(targets, "Win.Flush_all")

    def Flush_local(self, rank: int) -> None:
        """Complete this rank's operations to ``rank`` locally (buffers reusable)."""
        s = self._call("Flush_local")
        rank = self._target_rank(s, rank, "Flush_local")
        if rank == PROC_NULL:
            return
        s.epochs.check_flush(rank, "Flush_local")
        s.origin.complete_local([rank])

    def Flush_local_all(self) -> None:
        s = self._call("Flush_local_all")
        s.origin.complete_local(s.origin.targets())

    def Sync(self) -> None:
        """Synchronise the public and private copies of the window: minimpi's windows are
        unified (one copy), so there is nothing to do."""
        self._call("Sync")


def gone_error(s: _State, call: str, ranks: Sequence[int], what: str) -> PeerLostError:
    """The error of a window call that waited for ranks that are gone: ``ProcFailedError``
    (``MPI.ERR_PROC_FAILED``) under ``--fault-tolerant``, else ``PeerLostError``."""
    engine = s.endpoint.engine
    worlds = [s.endpoint.group[r] for r in ranks]
    reasons = [engine.failed.get(w) or engine.lost_peers.get(w) or "gone" for w in worlds]
    who = ", ".join(f"rank {r}" + (f" (world rank {w})" if w != r else "") + f": {why}"
                    for r, w, why in zip(ranks, worlds, reasons))
    text = (f"rank {s.rank}: Win.{call} on window {s.name or s.label} cannot complete: "
            f"{who} - gone {what}")
    if engine.fault_tolerant:
        return ProcFailedError(text + " (MPI.ERR_PROC_FAILED)")
    return PeerLostError(text)


def _lock_type(s: _State, lock_type: Any) -> int:
    t = _check_int(lock_type, "Lock", "lock_type")
    if t not in (LOCK_EXCLUSIVE, LOCK_SHARED):
        raise MinimpiError(f"rank {s.rank}: Win.Lock: lock_type must be MPI.LOCK_EXCLUSIVE or "
                           f"MPI.LOCK_SHARED, got {t}", ERR_LOCKTYPE)
    return t
