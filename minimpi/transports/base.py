"""The one interface every transport implements (tcp, inproc; later shm and verbs).

A transport moves *frames* (a packed 32-byte header plus payload segments) between ranks of
one job and knows nothing about matching, tags or requests. The engine drives it:

- ``send(peer, header, payload, on_sent)`` queues a frame; ``on_sent(None)`` runs once every byte
  has been handed off (so the caller's buffer may be reused), ``on_sent(reason)`` if it never can be.
- ``progress(timeout)`` performs I/O on every connection and blocks at most ``timeout``
  seconds when nothing can move (``None``: until something happens). It is the only place a
  rank sleeps, so an idle rank costs no CPU.
- For each arriving frame the transport calls its :class:`FrameSink` (the engine):
  ``frame_arrived(peer, header)`` returns where the payload must go (a writable memoryview of
  exactly ``header.length`` bytes, e.g. the user's posted receive buffer, so data is received
  straight into it), then ``payload_arrived(peer, header, buffer)`` once it is all there.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable, Optional, Sequence

from .frames import Header

#: called with None once a frame is handed off, or with the reason it never can be
OnSent = Optional[Callable[[Optional[str]], None]]


class FrameSink(ABC):
    """What a transport delivers incoming frames to (implemented by the engine)."""

    @abstractmethod
    def frame_arrived(self, peer: int, header: Header) -> Optional[memoryview]:
        """A header arrived; return the writable destination of its payload (or None for none)."""

    @abstractmethod
    def payload_arrived(self, peer: int, header: Header, buffer: Optional[memoryview]) -> None:
        """The whole frame (header and payload) has arrived."""

    @abstractmethod
    def peer_lost(self, peer: int, reason: str) -> None:
        """The connection from ``peer`` closed (it exited) or failed; nothing more will come.

        Called only after every frame that arrived before the close has been delivered."""


class Transport(ABC):
    """Frames between the ranks of one job."""

    #: short name used in logs, traces and ``minimpi explain``
    name = "base"

    @abstractmethod
    def attach(self, sink: FrameSink) -> None:
        """Set the engine that receives incoming frames."""

    @abstractmethod
    def listen(self) -> str:
        """Start accepting connections; return this rank's address for the rendezvous table."""

    @abstractmethod
    def set_peers(self, addresses: Sequence[str]) -> None:
        """The address of every rank (index = world rank), from the rendezvous."""

    @abstractmethod
    def send(self, peer: int, header: bytes, payload: Sequence[memoryview], on_sent: OnSent) -> None:
        """Queue one frame for ``peer``; may write some or all of it at once."""

    @abstractmethod
    def progress(self, timeout: Optional[float]) -> bool:
        """Move data; block at most ``timeout`` s if nothing is ready. True if anything happened."""

    def pending_sends(self) -> int:
        """Number of frames queued but not yet handed off (used to flush at exit)."""
        return 0

    def close(self) -> None:
        """Close every connection (queued frames are dropped; flush first with progress)."""
