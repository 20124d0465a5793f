"""Message matching for one communicator context: posted receives and unexpected messages.

Both queues are kept in order (posting order, arrival order), and each search takes the
earliest entry that matches, so ``ANY_SOURCE``/``ANY_TAG`` receive in arrival order and two
messages from one sender with one tag are never overtaken (their frames arrive in order on
one connection).
"""
from __future__ import annotations

from typing import List, Optional

from ..constants import ANY_SOURCE, ANY_TAG
from .request import RecvRequest


class Incoming:
    """A message that arrived (or is arriving) before a receive matched it."""

    __slots__ = ("peer", "context", "source", "tag", "flags", "msg_id", "length",
                 "rendezvous", "buffer", "arrived", "waiting")

    def __init__(self, peer: int, context: int, source: int, tag: int, flags: int, msg_id: int,
                 length: int, rendezvous: bool) -> None:
        self.peer = peer
        self.context = context
        self.source = source
        self.tag = tag
        self.flags = flags
        self.msg_id = msg_id
        self.length = length
        self.rendezvous = rendezvous
        self.buffer: Optional[bytearray] = None   # (numpy uint8 from 64 KiB on)
        self.arrived = False
        self.waiting: Optional[RecvRequest] = None


class MatchQueues:
    __slots__ = ("posted", "unexpected")

    def __init__(self) -> None:
        self.posted: List[RecvRequest] = []
        self.unexpected: List[Incoming] = []

    def take_posted(self, source: int, tag: int) -> Optional[RecvRequest]:
        """The earliest posted receive that accepts a message from ``source`` with ``tag``."""
        posted = self.posted
        for i, req in enumerate(posted):
            if (req.source == source or req.source == ANY_SOURCE) and (req.tag == tag or req.tag == ANY_TAG):
                del posted[i]
                return req
        return None

    def find_unexpected(self, source: int, tag: int, remove: bool) -> Optional[Incoming]:
        """The earliest unexpected message a receive for (``source``, ``tag``) would match."""
        unexpected = self.unexpected
        for i, inc in enumerate(unexpected):
            if (source == inc.source or source == ANY_SOURCE) and (tag == inc.tag or tag == ANY_TAG):
                if remove:
                    del unexpected[i]
                return inc
        return None
