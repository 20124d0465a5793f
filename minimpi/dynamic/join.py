"""Joining two groups of processes that may belong to different jobs into an Intercomm.

Both groups do the same thing (:func:`join`, collective over each group's intracommunicator):
every member gathers at its group's leader its entry (universe id, address, host; see
:mod:`.link`) and its lowest free context id; the two leaders swap their groups' lists over a
*bridge* (:class:`Bridge`: one message each way on a context of its own, with a tag both
know); each leader broadcasts the other group's list in its group; every member makes those
processes reachable and builds the intercommunicator on the larger of the two groups' context
proposals (free in every process of both groups, as ``Create_intercomm`` agrees it).

The bridge is asymmetric because only one side knows the other's address beforehand: the
*caller* (a spawned job's leader, which was given its parents' addresses; or ``Connect``)
sends first, the *answerer* (the spawning root, or ``Accept``) receives first and then
learns where to answer.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

from ..comm.communicator import Intercomm, Intracomm
from ..comm.intercomm import CONTEXTS
from ..constants import ANY_SOURCE
from ..data import serialization
from ..errors import CommError, MinimpiError
from ..transports.frames import F_OBJECT
from .link import LauncherLink, peer_of

#: the context of the leaders' messages (never a communicator's: those count up from 4)
BRIDGE_CONTEXT = 0x7FFFFFE0


class Bridge:
    """One exchange between two leaders of different jobs (``tag`` tells concurrent ones
    apart: a spawned job's number, or a port's). ``remote`` is the other leader's universe
    id when this side calls, None when it answers."""

    def __init__(self, link: LauncherLink, engine: Any, tag: int, remote: Optional[int],
                 call: str) -> None:
        self.link, self.engine, self.tag, self.remote, self.call = link, engine, tag, remote, call
        engine.register_context(BRIDGE_CONTEXT, ())

    def _send(self, uid: int, value: Any) -> None:
        payload, nbytes = serialization.dumps(value)
        req = self.engine.isend(BRIDGE_CONTEXT, peer_of(self.link, uid), 0, self.tag, payload,
                                nbytes, F_OBJECT, (self.call, "dest", uid, self.tag, "bridge"))
        req.wait()

    def _receive(self) -> Any:
        req = self.engine.irecv(BRIDGE_CONTEXT, ANY_SOURCE, self.tag, None, True,
                                (self.call, "source", ANY_SOURCE, self.tag, "bridge"))
        req.wait()
        return serialization.loads(req.buffer)

    def __call__(self, value: dict) -> dict:
        if self.remote is not None:       # the caller: it knows where the other leader is
            self._send(self.remote, value)
            return self._receive()
        theirs = self._receive()
        if not isinstance(theirs, dict) or not theirs.get("peers"):
            raise CommError(f"{self.call}: a malformed answer from the other group's leader")
        leader = theirs["peers"][int(theirs.get("leader", 0))]
        self.link.add_peers([leader])
        self._send(leader[0], value)
        return theirs


def join(local_comm: Intracomm, leader: int, swap: Callable[[dict], dict], call: str,
         link: LauncherLink) -> Tuple[Intercomm, Any]:
    """The intercommunicator between ``local_comm``'s group and the group on the other end
    of ``swap`` (run at ``leader`` only), and the ``"extra"`` the swap's answer carried to
    every member (the launcher's reply to a spawn). An exception from the swap is raised
    at every member (at the others as an error naming the leader's), none waits."""
    engine = local_comm._ep.engine
    mine = (link.entry(), engine.free_context())
    gathered = local_comm.gather(mine, root=leader)
    outcome: Tuple[str, Any] = ("error", "")
    failure: Optional[BaseException] = None
    if local_comm.rank == leader:
        try:
            ours = max(c for _, c in gathered)
            theirs = swap({"peers": [e for e, _ in gathered], "max": ours, "leader": leader})
            outcome = ("ok", (theirs, ours))
        except Exception as exc:    # tell the group, then raise it here
            failure = exc
            outcome = ("error", (type(exc).__name__, str(exc), getattr(exc, "error_class", None)))
    kind, value = local_comm.bcast(outcome, root=leader)
    if failure is not None:
        raise failure
    if kind == "error":
        name, text, error_class = value
        raise MinimpiError(f"rank {local_comm.rank}: {call} failed at the root (rank "
                           f"{leader}): {text}", error_class)
    theirs, ours = value
    link.add_peers(theirs["peers"])
    remote = [peer_of(link, uid) for uid, _, _ in theirs["peers"]]
    local = list(local_comm.world_ranks)
    overlap = set(remote) & set(local)
    if overlap:
        raise CommError(f"rank {local_comm.rank}: {call}: the two groups share processes "
                        f"(world ranks {sorted(overlap)}); an intercommunicator needs "
                        f"disjoint groups")
    context = max(ours, int(theirs["max"]))
    engine.claim_contexts(context, CONTEXTS)
    comm = Intercomm._build(engine, local, remote, local_comm.rank, context,
                            f"{local_comm.name}.{call.lower()}")
    return comm, theirs.get("extra")
