"""Per-peer routing: shared memory to the ranks on this host, the network to the others.

A process's engine drives one :class:`RouterTransport`. It owns the real transports
(``members``, in order of preference, e.g. shm then tcp) and behaves as one transport:

- ``listen()`` publishes this rank's host identity and every member's address in one string,
  ``host=H;shm=A1;tcp=A2``, which the rendezvous hands to every rank unchanged;
- ``set_peers()`` picks, for each peer, the first member that the peer also offers and that
  can reach it - a member of scope ``"host"`` (shared memory) only when both ranks have the
  same host identity and the member agrees (``reaches``: the same /dev/shm and network
  namespace) - and hands each member the addresses of its peers (None for the rest). Both
  ends of a pair see the same two strings, so they always agree on the route;
- ``send()`` goes to the peer's member; ``progress()`` polls every member, and when nothing
  is ready sleeps on all their file descriptors in one ``poll`` (after each member armed its
  wake-ups with ``prepare_sleep``), so a rank waiting on a TCP peer still wakes at once for a
  shared-memory message and the other way round.

Adding a transport is one module and one name in ``transports.AUTO`` (auto offers shm,
then verbs, then tcp; a member that cannot run on this host is left out, and the host's lowest
rank says why in one line when its peers on other hosts then go over a later one).

The host identity comes from the runtime (``runtime.bootstrap.host_identity``: host name
and boot id), the same one the rendezvous gives the topology-aware collectives, so the
ranks that share shared memory are exactly those the collectives count as one host.
"""
from __future__ import annotations

import select
import sys
import urllib.parse
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..errors import TransportError
from . import signal_guard
from .base import FrameSink, OnSent, Transport

#: the router wakes at least this often while it sleeps (TCP times out handshakes, shared
#: memory looks for peers that died without a pidfd to tell)
MAX_SLEEP = 0.25


def _escape(text: str) -> str:
    """A member's address as one field (verbs addresses have ";" and "=" of their own)."""
    return text.replace("%", "%25").replace(";", "%3B").replace("=", "%3D")


def parse_address(address: str) -> Tuple[str, Dict[str, str]]:
    """``host=H;shm=A1;tcp=A2`` -> (H, {"shm": A1, "tcp": A2})."""
    fields = dict(part.split("=", 1) for part in address.split(";") if "=" in part)
    fields = {name: urllib.parse.unquote(value) for name, value in fields.items()}
    return fields.pop("host", ""), fields


class RouterTransport(Transport):
    """Several transports behind one, chosen per peer (see the module docstring)."""

    def __init__(self, rank: int, size: int, members: Sequence[Transport], host: str,
                 optional: Sequence[str] = (), skipped: Optional[Dict[str, str]] = None,
                 network: Optional[Callable[[], Transport]] = None) -> None:
        if not members:
            raise TransportError(f"rank {rank}: no transport to route through")
        self.rank = rank
        self.size = size
        self.members: List[Transport] = list(members)
        # (";" and "=" separate the fields of an address)
        self.host = host.replace(";", "_").replace("=", "_")
        #: members that may be left out when they cannot start here (``auto``)
        self.optional = set(optional)
        #: members ``auto`` left out because they cannot run here, and why
        self.skipped: Dict[str, str] = dict(skipped or {})
        self._route: List[Optional[Transport]] = [None] * size
        #: world ranks on this host, this one included (known after set_peers)
        self.local_ranks: List[int] = [rank]
        self._poller = select.poll()
        self._fds: Tuple[int, ...] = ()
        #: makes a TCP transport when processes of other jobs must be reached and no member
        #: reaches the network (a one-host job kept only shared memory)
        self._make_network = network
        #: the member that carries messages to processes of other jobs (Spawn, Connect)
        self._foreign: Optional[Transport] = None

    @property
    def name(self) -> str:
        return "+".join(t.name for t in self.members)

    def member(self, name: str) -> Optional[Transport]:
        """The member transport called ``name`` ("tcp", "shm"), if this router has it."""
        for t in self.members:     # (a loop, not a generator: fence() asks on every call)
            if t.name == name:
                return t
        return None

    def routes(self) -> List[Optional[str]]:
        """The member that carries messages to each peer (None for this rank itself)."""
        return [t.name if t is not None else None for t in self._route]

    def route_name(self, peer: int) -> Optional[str]:
        """The member that carries messages to ``peer``: a world rank, or the universe id
        of a process of another job (``Spawn``, ``Connect``: always the network member)."""
        if peer >= self.size:
            return self._foreign.name if self._foreign is not None else None
        t = self._route[peer]
        return t.name if t is not None else None

    def attach(self, sink: FrameSink) -> None:
        self._sink = sink
        for t in self.members:
            t.attach(sink)

    def listen(self) -> str:
        parts = [f"host={self.host}"]
        for t in list(self.members):
            try:
                parts.append(f"{t.name}={_escape(t.listen())}")
            except TransportError as exc:
                if t.name not in self.optional or len(self.members) == 1:
                    raise
                # auto: this host cannot run it; peers see it missing and route around it
                rest = "+".join(m.name for m in self.members if m is not t)
                print(f"minimpi rank {self.rank}: not using {t.name} ({rest} instead): {exc}",
                      file=sys.stderr, flush=True)
                t.close()
                self.members.remove(t)
        return ";".join(parts)

    def set_peers(self, addresses: Sequence[Optional[str]]) -> None:
        parsed = [parse_address(a) if a else ("", {}) for a in addresses]
        per_member: Dict[int, List[Optional[str]]] = {id(t): [None] * self.size for t in self.members}
        self.local_ranks = [r for r, (host, _) in enumerate(parsed) if host == self.host]
        for peer, (host, offered) in enumerate(parsed):
            if peer == self.rank:
                for t in self.members:
                    per_member[id(t)][peer] = addresses[peer]
                continue
            for t in self.members:
                if t.name in offered and (t.scope != "host" or host == self.host
                                          and t.reaches(offered[t.name])):
                    self._route[peer] = t
                    per_member[id(t)][peer] = offered[t.name]
                    break
            else:
                where = "this host" if host == self.host else f"host {host or '?'}"
                raise TransportError(
                    f"rank {self.rank}: no transport reaches rank {peer} on {where}: it offers "
                    f"{', '.join(offered) or 'none'}, this rank uses {self.name} "
                    f"(shm reaches only ranks on the same host; use --transport auto or tcp)")
        for t in self.members:
            t.set_peers(per_member[id(t)])
        self._say_what_was_left_out(parsed)
        # A member that no peer uses is closed: polling it would cost a syscall in every
        # spin for nothing, and its listener would only ever meet strangers.
        used = {id(t) for t in self._route if t is not None}
        for t in [t for t in self.members if id(t) not in used][:len(self.members) - 1]:
            t.close()
            self.members.remove(t)
        if len(self.members) == 1:
            # One wire for every peer (a single host, or --transport): the engine's calls go
            # straight to it - a small message is a few microseconds, a call level is not free.
            self.send = self.members[0].send
            self.send_now = self.members[0].send_now
            self.progress = self.members[0].progress
        shm = self.member("shm")
        if shm is not None:
            # the segment collectives fence and wake through the shared-memory member on
            # every call: bound once, not looked up per call
            self.fence = shm.fence
            self.wake_peers = shm.wake_peers

    def _say_what_was_left_out(self, parsed: Sequence[Tuple[str, Dict[str, str]]]) -> None:
        """One line per host (from its lowest rank) when a network transport that ``auto``
        prefers could not run here and peers on other hosts are reached by a later one."""
        if not self.skipped or self.rank != min(self.local_ranks):
            return
        fallback = sorted({t.name for peer, t in enumerate(self._route)
                           if t is not None and parsed[peer][0] != self.host})
        for name, why in self.skipped.items():
            if fallback and name not in fallback:
                print(f"minimpi: host {self.host.split('/')[0]}: {' and '.join(fallback)} between "
                      f"hosts, not {name}: {why}", file=sys.stderr, flush=True)

    def connect_all(self, timeout: float = 60.0) -> None:
        """Open every connection now for the members that connect lazily (TCP)."""
        for t in self.members:
            if hasattr(t, "connect_all"):
                t.connect_all(timeout)

    def foreign_address(self) -> str:
        """This process's address for processes of other jobs (``Spawn``, ``Connect``): the
        TCP member's, started here if this job did not need one."""
        if self._foreign is None:
            member = self.member("tcp")
            if member is None:
                if self._make_network is None:
                    raise TransportError(f"rank {self.rank}: this transport ({self.name}) "
                                         f"cannot reach processes of another job")
                member = self._make_network()
                member.attach(self._sink)
                member.listen()
                member.set_peers([None] * self.size)
                self.members.append(member)
                # several members now: go through the router again (set_peers may have
                # bound send/progress straight to the only member)
                self.__dict__.pop("send", None)
                self.__dict__.pop("send_now", None)
                self.__dict__.pop("progress", None)
            self._foreign = member
        return self._foreign.address

    def add_foreign(self, addresses: Dict[int, str]) -> None:
        """Processes of other jobs (universe id -> :meth:`foreign_address`) that this
        process may now exchange messages with."""
        self.foreign_address()
        self._foreign.add_foreign(addresses)

    def send(self, peer: int, header: bytes, payload: Sequence[memoryview], on_sent: OnSent) -> None:
        if peer >= self.size:
            return self._foreign.send(peer, header, payload, on_sent)
        t = self._route[peer]
        if t is None:
            raise TransportError(f"rank {self.rank}: no route to rank {peer} (rendezvous not done)")
        t.send(peer, header, payload, on_sent)

    def set_sleep_check(self, check) -> None:
        for t in self.members:
            t.set_sleep_check(check)

    def shared_segment(self, key: str, nbytes: int) -> Optional[memoryview]:
        member = self.member("shm")
        return member.shared_segment(key, nbytes) if member is not None else None

    def release_segment(self, key: str) -> None:
        member = self.member("shm")
        if member is not None:
            member.release_segment(key)

    def forget_segment(self, key: str, mem: memoryview) -> None:
        member = self.member("shm")
        if member is not None:
            member.forget_segment(key, mem)

    def host_memory(self) -> Optional[Transport]:
        member = self.member("shm")
        return None if member is None else member.host_memory()

    @property
    def needs_fence(self) -> bool:        # type: ignore[override]
        member = self.member("shm")
        return member is not None and member.needs_fence

    def fence(self) -> None:
        member = self.member("shm")
        if member is not None:
            member.fence()

    def wake_peers(self, peers: Sequence[int], fenced: bool = False) -> None:
        member = self.member("shm")
        if member is not None:
            member.wake_peers(peers, fenced)

    def send_now(self, peer: int, header: bytes, payload: Sequence[memoryview],
                 nbytes: int) -> bool:
        t = self._route[peer] if peer < self.size else self._foreign
        return t is not None and t.send_now(peer, header, payload, nbytes)

    def eager_writer(self, peer: int) -> Any:
        t = self._route[peer] if peer < self.size else self._foreign
        return None if t is None else t.eager_writer(peer)

    def eager_reader(self, peer: int) -> Any:
        t = self._route[peer] if peer < self.size else self._foreign
        return None if t is None else t.eager_reader(peer)

    def progress(self, timeout: Optional[float]) -> bool:
        members = self.members
        if len(members) == 1:
            return members[0].progress(timeout)
        moved = False
        for t in members:
            if t.progress(0):
                moved = True
        if moved or timeout == 0:
            return moved
        armed = []
        for t in members:
            if not t.prepare_sleep():
                for a in armed:
                    a.end_sleep()
                return self.progress(0)
            armed.append(t)
        fds = tuple(fd for t in members for fd in t.wait_fds())
        if fds != self._fds:
            self._poller = select.poll()
            for fd in fds:
                self._poller.register(fd, select.POLLIN)
            self._fds = fds
        limit = MAX_SLEEP if timeout is None else min(timeout, MAX_SLEEP)
        try:
            self._sink.sleep(signal_guard.interruptible, self._poller.poll, int(limit * 1000))
        except InterruptedError:
            pass
        for t in armed:
            t.end_sleep()
        return self.progress(0)

    def wake(self) -> None:
        # every member's descriptors are in the one poll (or the only member sleeps itself)
        for t in self.members:
            t.wake()

    def wait_fds(self) -> List[int]:
        return [fd for t in self.members for fd in t.wait_fds()]

    def prepare_sleep(self) -> bool:
        armed = []
        for t in self.members:
            if not t.prepare_sleep():
                for a in armed:
                    a.end_sleep()
                return False
            armed.append(t)
        return True

    def end_sleep(self) -> None:
        for t in self.members:
            t.end_sleep()

    @property
    def interrupted(self) -> bool:
        """A member was left half-way through a send or receive by an exception (a signal
        handler's exit): nothing more may be sent (see the runtime's finalize)."""
        return any(getattr(t, "interrupted", False) for t in self.members)

    def pending_sends(self) -> int:
        return sum(t.pending_sends() for t in self.members)

    def close(self) -> None:
        for t in self.members:
            t.close()
