"""Fault tolerance as mpi4py exposes it (ULFM): ``Comm.Revoke``, ``Is_revoked``,
``Get_failed``, ``Ack_failed``, ``Agree``/``Iagree`` and ``Shrink``/``Ishrink``.

A process has *failed* when, under ``minimpi run --fault-tolerant``, the launcher told every
survivor that it ended abnormally (the runtime hands that to
:meth:`~minimpi.p2p.engine.Engine.notify_failed`); a peer a transport saw go is only *gone*
(it may have finished): operations that name it fail, and agreements do not wait for its
vote. Without the flag a failure ends the whole job, so these calls only ever see healthy
communicators there, where they still work (an agreement is then an allreduce-AND, a shrink
a ``Dup``).

**Revoke** marks the communicator's contexts revoked in this engine
(:meth:`~minimpi.p2p.engine.Engine.revoke_context`: pending and later operations raise
``RevokedError``, ``MPI.ERR_REVOKED``) and sends every other member a notice: an empty
message on one control context shared by the whole world (:data:`REVOKE_CONTEXT`) whose tag
names the communicator's context. Each engine watches that context
(:func:`install`), so a member learns it inside any progress, even while it waits on
something else.

**Agreement** (``Agree``, ``Shrink``): every member votes (its flag, the failures it knows
and has not acknowledged, its lowest free context id) to the *leader*, the lowest-ranked
member it does not know to have failed. The leader waits for one message from each member
it believes alive (a member that fails meanwhile drops out) and decides: the AND of the
flags, the union of the failures, the largest context id. A member that holds the decision
passes it to every member it believes alive before it returns (under fault tolerance), so a
leader that dies half-way through sending it cannot split the members: a member that
returned has handed the decision to everyone, the next leader included, who adopts it
rather than deciding anew. A member ignores a decision sent directly by an older leader
once it has voted for a newer one (that leader may decide from its vote). Failures come
only from the launcher or a transport that saw the process go, never from a timeout, so a
member is never wrongly left out (a gone one, that finished, cannot vote anyway). The
messages travel on the communicator's own control context (``context | FT_BIT``), tagged
with the agreement's number on that communicator.
"""
from __future__ import annotations

from typing import Any, Dict, FrozenSet, List, Optional, Sequence, Tuple

from ..constants import ANY_SOURCE
from ..data import serialization
from ..data.buffers import byte_view
from ..errors import ProcFailedError, RevokedError, UnsupportedError
from ..p2p.completion import Completion, LayeredRequest, hold
from ..p2p.endpoint import PARTITIONED_BIT
from ..p2p.engine import Engine
from ..p2p.request import CompletedRequest, Request
from ..transports.frames import F_OBJECT
from .group import Group, group_of

#: the bit that turns a communicator's point-to-point context into its agreements' context
FT_BIT = 1 << 30
#: the world's control context of revoke notices (tag: the revoked communicator's context,
#: +1 for an intercommunicator, whose four contexts are all revoked)
REVOKE_CONTEXT = 0x7FFFFFD0

Vote = Dict[str, Any]


# -- revoke notices ----------------------------------------------------------------------
def install(engine: Engine) -> None:
    """Let ``engine`` hear revoke notices (idempotent; the runtime calls it for every
    process, so a member that never made a ULFM call still learns of a revoke)."""
    if engine.unexpected_watcher(REVOKE_CONTEXT) is not None:
        return
    engine.register_context(REVOKE_CONTEXT, range(engine.size), "control")
    engine.watch_unexpected(REVOKE_CONTEXT, lambda message: _revoke_notice(engine, message))


def _contexts(p2p: int, inter: bool) -> List[int]:
    """The contexts a revoke covers: point-to-point, collectives, partitioned messages, and
    an intercommunicator's local pair."""
    return [p2p, p2p + 1, p2p | PARTITIONED_BIT] + ([p2p + 2, p2p + 3] if inter else [])


def _revoke_contexts(engine: Engine, p2p: int, inter: bool, why: str) -> None:
    for context in _contexts(p2p, inter):
        if engine.group_of(context) is not None:
            engine.revoke_context(context, why)


def _revoke_notice(engine: Engine, message: Any) -> None:
    """A member revoked a communicator: revoke it here (runs inside progress)."""
    tag = message.tag
    engine.drop_unexpected(REVOKE_CONTEXT, lambda t: t == tag)
    p2p, inter = tag & ~1, bool(tag & 1)
    groups = [engine.group_of(c) for c in (_contexts(p2p, inter)[::3] if inter else [p2p])]
    if any(g is not None and message.peer in g for g in groups):
        _revoke_contexts(engine, p2p, inter,
                         f"the communicator (context {p2p}) was revoked by world rank "
                         f"{message.peer} (Comm.Revoke; MPI.ERR_REVOKED)")


def revoke(comm: Any) -> None:
    """``Comm.Revoke``: this communicator is unusable for communication on every member;
    only ``Agree``/``Iagree``, ``Shrink``/``Ishrink``, ``Revoke`` and the local queries
    still work on it."""
    comm._alive("Revoke")
    ep = comm.endpoint
    engine = ep.engine
    install(engine)
    inter = comm.Is_inter()
    if engine.is_revoked(ep.context):
        return
    _revoke_contexts(engine, ep.context, inter,
                     f"{comm.name} was revoked by rank {comm.rank} (Comm.Revoke; "
                     f"MPI.ERR_REVOKED)")
    tag = ep.context + (1 if inter else 0)
    sends = [engine.isend(REVOKE_CONTEXT, w, engine.rank, tag, (), 0, 0,
                          f"Revoke of {comm.name} to world rank {w}")
             for w in _members(comm) if w != engine.rank]
    engine.wait_all(sends)   # (a send to a failed member fails at once: nothing to tell it)


def is_revoked(comm: Any) -> bool:
    """``Comm.Is_revoked``: whether any member revoked the communicator (as far as this
    process has heard)."""
    comm._alive("Is_revoked")
    engine = comm.endpoint.engine
    install(engine)
    engine.poll() if engine.transport is not None else None
    return engine.is_revoked(comm.endpoint.context)


def check_not_revoked(comm: Any, call: str) -> None:
    """Raise ``RevokedError`` if ``comm`` is revoked (calls that send nothing: PROC_NULL
    peers, a collective of one)."""
    ep = comm.endpoint
    if ep.engine.is_revoked(ep.context):
        raise RevokedError(f"rank {comm.rank}: {call} on {comm.name}: the communicator was "
                           f"revoked (Comm.Revoke; MPI.ERR_REVOKED)")


def check_probe(comm: Any, source: int, tag: int, call: str) -> None:
    """Raise what a probe that found nothing must raise now: the communicator is revoked,
    or (fault tolerance) its source failed, or a wildcard meets an unacknowledged failure."""
    engine = comm.endpoint.engine
    if engine.revoked or engine.lost_peers or engine.failed:
        refusal = engine.probe_refusal(comm.endpoint.context, source,
                                       f"{call}(source={source}, tag={tag}) on {comm.name}")
        if refusal is not None:
            raise refusal


# -- failed processes --------------------------------------------------------------------
def _members(comm: Any) -> Tuple[int, ...]:
    """Every process of the communicator (both groups of an intercommunicator), as world
    ranks in increasing order for an intercommunicator (both groups see the same list)."""
    if comm.Is_inter():
        return tuple(sorted(set(comm.Get_group().world_ranks) | set(comm.world_ranks)))
    return tuple(comm.world_ranks)


def _failed_members(comm: Any) -> List[int]:
    """The communicator's processes known to have failed, in the order they were found."""
    members = set(_members(comm))
    return [w for w in comm.endpoint.engine.failed_peers() if w in members]


def get_failed(comm: Any) -> Group:
    """``Comm.Get_failed``: the group of this communicator's processes this process knows
    to have failed (in the order they were found)."""
    comm._alive("Get_failed")
    engine = comm.endpoint.engine
    return group_of(_failed_members(comm), engine.rank, engine)


def ack_failed(comm: Any, num_to_ack: Optional[int] = None) -> int:
    """``Comm.Ack_failed``: acknowledge the first ``num_to_ack`` failures (all, when None;
    mpi4py passes the size), so wildcard receives stop raising
    ``ERR_PROC_FAILED_PENDING`` for them; returns how many failures are acknowledged."""
    comm._alive("Ack_failed")
    if num_to_ack is None:
        num_to_ack = comm.Get_size()
    if not isinstance(num_to_ack, int) or num_to_ack < 0:
        raise ValueError(f"rank {comm.rank}: Ack_failed(num_to_ack={num_to_ack!r}) on "
                         f"{comm.name}: expected a count >= 0")
    state = _state(comm)
    failed = _failed_members(comm)
    count = max(len(state.acked), min(num_to_ack, len(failed)))
    state.acked = tuple(failed[:count])
    ep = comm.endpoint
    ep.engine.acknowledge_failures([ep.context, ep.partitioned_context], state.acked)
    return len(state.acked)


# -- agreement ---------------------------------------------------------------------------
class _State:
    """One communicator's ULFM bookkeeping: its agreement context and numbering, and the
    failures it acknowledged."""

    def __init__(self, comm: Any) -> None:
        ep = comm.endpoint
        self.engine: Engine = ep.engine
        self.name: str = comm.name
        self.members = _members(comm)
        self.me = self.members.index(self.engine.rank)
        self.context = ep.context | FT_BIT
        self.instances = 0
        self.finished: set = set()
        self.acked: Tuple[int, ...] = ()
        install(self.engine)
        self.engine.register_context(self.context, self.members, "control")
        self.engine.watch_unexpected(self.context, self._drop_stale)

    def _drop_stale(self, message: Any) -> None:
        """Copies of decisions that arrive after this member finished that agreement."""
        if message.tag in self.finished:
            self.engine.drop_unexpected(self.context, lambda tag: tag in self.finished)

    def next_tag(self) -> int:
        self.instances += 1
        return self.instances & 0x7FFFFFFF


def _state(comm: Any) -> _State:
    state = comm.__dict__.get("_ulfm")
    if state is None:
        state = comm.__dict__["_ulfm"] = _State(comm)
    return state


class Agreement:
    """One fault-tolerant agreement of one member (see the module docstring), run by
    :meth:`advance` - again and again until it returns True - from a blocking call's wait
    or, for ``Iagree``, from the engine's progress."""

    def __init__(self, state: _State, flag: int, free_context: int, call: str) -> None:
        self.state = state
        self.call = call
        self.tag = state.next_tag()
        self.flag = int(flag)
        self.free_context = free_context
        self.decision: Optional[Vote] = None
        self.waiting: List[Request] = []
        self._steps = self._run()

    def advance(self) -> bool:
        """Go as far as the messages that arrived allow; True once decided and handed on."""
        if self.decision is not None and not self.waiting:
            return True
        try:
            next(self._steps)
            return False
        except StopIteration:
            return True

    def _vote(self) -> Vote:
        """This member's vote: its flag, the members it knows are gone (failed, or ended:
        left out of a shrink either way), those that failed unacknowledged (an ``Agree``
        reports them), its lowest free context id."""
        engine, state = self.state.engine, self.state
        members = set(state.members)
        failed = frozenset(w for w in engine.failed_peers() if w in members)
        gone = frozenset(w for w in engine.gone_peers() if w in members)
        return {"flag": self.flag, "failed": gone | failed,
                "unacked": failed - frozenset(state.acked), "context": self.free_context}

    def _describe(self, what: str, peer: Any) -> Tuple[str, str, Any, int, str]:
        return (f"{self.call}[agreement]", what, peer, self.tag, self.state.name)

    def _send(self, message: Any, index: int) -> Request:
        st = self.state
        payload, nbytes = serialization.dumps(message)
        return st.engine.isend(st.context, st.members[index], st.me, self.tag, payload, nbytes,
                               F_OBJECT, self._describe("dest", index))

    def _run(self):
        st = self.state
        engine, members, me = st.engine, st.members, st.me
        stash: Dict[int, Any] = {}      # member index -> the message it sent here
        voted_for: Optional[int] = None
        recv: Optional[Request] = None
        sends: List[Request] = []
        decision: Optional[Vote] = None
        while decision is None:
            gone = set(engine.gone_peers())
            live = [i for i, w in enumerate(members) if w not in gone]
            decision = _accepted(stash, voted_for)
            if decision is not None:
                break
            leader = live[0]
            if leader == me:
                others = [i for i in live if i != me]
                if all(i in stash for i in others):
                    votes = [self._vote()] + [stash[i][1] for i in others]
                    decision = _decide(votes)
                    decision["maker"] = me
                    break
            elif voted_for != leader:
                sends.append(self._send(("vote", self._vote()), leader))
                voted_for = leader
            if recv is None:
                recv = engine.irecv(st.context, ANY_SOURCE, self.tag, None, True,
                                    self._describe("source", ANY_SOURCE))
            if not recv.done:
                self.waiting = [recv]
                before = len(engine.gone_peers())
                while not recv.done and len(engine.gone_peers()) == before:
                    yield
                continue
            if recv.error is not None:   # (its sender failed mid-message: it counts as failed)
                recv = None
                continue
            message, source = serialization.loads(recv.buffer), recv.status.source
            recv = None
            stash[source] = message
        if recv is not None and not recv.done:
            engine.cancel(recv)
        # hand the decision on: under fault tolerance every holder tells everyone it
        # believes alive; otherwise (no process can fail and the job go on) the leader does
        maker = decision["maker"]
        if engine.fault_tolerant or maker == me:
            gone = set(engine.gone_peers())
            sends += [self._send(("decision", decision), i) for i, w in enumerate(members)
                      if i != me and w not in gone and not _has(stash.get(i), decision)]
        self.decision = decision
        st.finished.add(self.tag)
        engine.drop_unexpected(st.context, lambda tag: tag == self.tag)
        self.waiting = [s for s in sends if not s.done]
        while self.waiting:   # (sends to a member that failed meanwhile fail: that is fine)
            yield
            self.waiting = [s for s in self.waiting if not s.done]

    def result(self) -> Vote:
        """The decision; ``ProcFailedError`` on every member alike when some member's
        failure was not acknowledged by all (the flag is on the error as ``flag``)."""
        decision = self.decision
        if decision["unacked"]:
            ranks = ", ".join(str(self.state.members.index(w)) for w in sorted(decision["unacked"]))
            exc = ProcFailedError(
                f"rank {self.state.me}: {self.call} on {self.state.name}: rank(s) {ranks} of "
                f"the communicator failed and not every member acknowledged it "
                f"(Comm.Ack_failed); the agreed flag is {decision['flag']} (MPI.ERR_PROC_FAILED)")
            exc.flag = decision["flag"]
            raise exc
        return decision


def _accepted(stash: Dict[int, Any], voted_for: Optional[int]) -> Optional[Vote]:
    """A decision among the messages received, unless it came straight from a leader older
    than the one this member voted for last (that one may decide from this member's vote)."""
    for source, message in stash.items():
        if message[0] != "decision":
            continue
        maker = message[1]["maker"]
        if source == maker and voted_for is not None and maker < voted_for:
            continue
        return message[1]
    return None


def _has(message: Any, decision: Vote) -> bool:
    """Whether the member that sent ``message`` already holds ``decision``."""
    return message is not None and message[0] == "decision" and message[1] == decision


def _decide(votes: Sequence[Vote]) -> Vote:
    flag = -1
    failed: FrozenSet[int] = frozenset()
    unacked: FrozenSet[int] = frozenset()
    for vote in votes:
        flag &= vote["flag"]
        failed |= vote["failed"]
        unacked |= vote["unacked"]
    return {"flag": flag, "failed": failed, "unacked": unacked,
            "context": max(v["context"] for v in votes)}


def _run_blocking(agreement: Agreement) -> Vote:
    engine = agreement.state.engine
    if not agreement.advance():
        engine.wait_until(agreement.advance, agreement.waiting)
    return agreement.result()


def _flag(comm: Any, flag: Any, call: str) -> int:
    if isinstance(flag, bool) or not isinstance(flag, int):
        try:
            import operator
            flag = operator.index(flag)
        except TypeError:
            raise TypeError(f"rank {comm.rank}: {call}(flag={flag!r}) on {comm.name}: expected "
                            f"an int, not {type(flag).__name__}") from None
    return int(flag)


def agree(comm: Any, flag: Any) -> int:
    """``Comm.Agree``: the bitwise AND of every live member's ``flag``, the same on all."""
    comm._alive("Agree")
    flag = _flag(comm, flag, "Agree")
    agreement = Agreement(_state(comm), flag, 0, "Agree")
    return int(_run_blocking(agreement)["flag"])


class AgreementRequest(LayeredRequest):
    """``Comm.Iagree``'s request: the agreement advances within the engine's progress; on
    completion the agreed flag is written into the caller's int buffer."""

    __slots__ = ("_agreement", "_target_view")

    def __init__(self, agreement: Agreement, target: memoryview) -> None:
        engine = agreement.state.engine
        hold(self, Completion(engine), f"Iagree on {agreement.state.name}")
        self._agreement = agreement
        self._target_view = target
        engine.add_active(self)

    def advance(self) -> bool:
        if self.done:
            return True
        if not self._agreement.advance():
            return False
        decision = self._agreement.decision
        self._target_view[0] = decision["flag"]
        try:
            self._agreement.result()
        except ProcFailedError as exc:
            self.completion.fail(exc)
            return True
        self.completion.complete()
        return True


def iagree(comm: Any, flag: Any) -> Request:
    """``Comm.Iagree``: ``Agree`` started; ``flag`` is a C int buffer of one item (mpi4py:
    ``TypeError`` for what is no buffer, ``ValueError`` for another length), which holds
    the agreed value once the request completes."""
    comm._alive("Iagree")
    try:
        memoryview(flag)
    except TypeError:
        raise TypeError(f"rank {comm.rank}: Iagree(flag={flag!r}) on {comm.name}: expected a "
                        f"buffer of one C int, not {type(flag).__name__}") from None
    raw, _ = byte_view(flag, True, "Iagree")
    if raw.nbytes != 4:
        raise ValueError(f"rank {comm.rank}: Iagree(flag=...) on {comm.name}: flag: expecting "
                         f"int buffer of length one (got {raw.nbytes} bytes)")
    target = raw.cast("B").cast("i")   # (a view of the caller's memory: written at the end)
    agreement = Agreement(_state(comm), int(target[0]), 0, "Iagree")
    return AgreementRequest(agreement, target)


# -- shrink ------------------------------------------------------------------------------
def shrink(comm: Any) -> Any:
    """``Comm.Shrink``: a new communicator of the members not known to have failed, the same
    on every survivor (they agree on the failures and the new context first); works on a
    revoked communicator."""
    return _shrink(comm, "Shrink")


def _shrink(comm: Any, call: str) -> Any:
    """``Comm.Shrink``: a new communicator of the members not known to have failed, the same
    on every survivor (they agree on the failures and the new context first); works on a
    revoked communicator."""
    comm._alive(call)
    state = _state(comm)
    engine = state.engine
    agreement = Agreement(state, -1, comm._free_context(), call)
    if not agreement.advance():
        engine.wait_until(agreement.advance, agreement.waiting)
    decision = agreement.decision
    failed = decision["failed"]
    if comm.Is_inter():
        if failed:
            raise UnsupportedError(
                f"rank {comm.rank}: {call} on {comm.name}: shrinking an intercommunicator "
                f"that lost processes is not implemented in minimpi (world rank(s) "
                f"{', '.join(map(str, sorted(failed)))} failed); Merge it first, or shrink "
                f"the intracommunicators it was made from")
        return comm.Dup()
    survivors = [w for w in state.members if w not in failed]
    context = comm._agree_context([decision["context"]])   # (free on every survivor)
    name = f"{comm.name}.shrink"
    return comm._derive(survivors, survivors.index(engine.rank), context, name)


def ishrink(comm: Any) -> Tuple[Any, Request]:
    """``Comm.Ishrink``: as ``Shrink``, which minimpi completes at the call (like ``Idup``);
    the request is already complete."""
    return _shrink(comm, "Ishrink"), CompletedRequest()
