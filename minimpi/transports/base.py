"""The one interface every transport implements (tcp, shm, inproc; later verbs).

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

A process reaches its peers through several transports at once (shared memory for ranks on
its host, TCP for the rest): :class:`~minimpi.transports.router.RouterTransport` owns them and
waits on all of them in one poll. For that, a transport says what to wait on
(``wait_fds``) and may arm its wake-ups before the caller sleeps (``prepare_sleep`` /
``end_sleep``); the defaults suit a transport whose fds alone say when there is work.

Threads: one thread at a time runs a transport's ``progress`` (the engine's progress owner;
see :mod:`minimpi.p2p.engine`). Where it blocks - the ``poll`` of its sleep, and nothing
else - it calls ``sink.sleep(wait, *args)``, which runs the wait with the engine's lock
released: meanwhile other threads of the process may call ``send`` (and read
``pending_sends``), never ``progress``. So ``send`` must be safe beside a thread blocked in
the transport's poll (registering or modifying descriptors of an epoll set is; a
``select.poll`` object must not be polled twice at once), and ``wake()`` ends that sleep
early when such a thread left work the sleeper must see (a frame queued for want of room,
a request completed outside progress).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable, Optional, Sequence

from .frames import F_SYNC, Header, copy_into

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

    def eager_arrived(self, peer: int, header: Header, payload: memoryview) -> None:
        """A whole eager frame whose ``payload`` is readable now: ``frame_arrived``, the
        copy, ``payload_arrived`` in one call (a sink may do it with fewer steps)."""
        target = self.frame_arrived(peer, header)
        if header.length:
            target[:header.length] = payload
        self.payload_arrived(peer, header, target)

    @abstractmethod
    def peer_lost(self, peer: int, reason: str) -> None:
        """The connection from ``peer`` closed (it exited) or failed; nothing more will come.

        Called only after every frame that arrived before the close has been delivered."""

    def sleep(self, wait: Callable[..., Any], *args: Any) -> Any:
        """Run the transport's blocking ``wait(*args)`` (its poll) and return what it
        returns. The engine releases its lock for the duration, so that the process's other
        threads may use it meanwhile; the transport touches none of its own state inside
        ``wait``."""
        return wait(*args)


class Transport(ABC):
    """Frames between the ranks of one job."""

    #: short name used in logs, traces and ``minimpi explain``
    name = "base"
    #: which peers it can reach: "network" (any rank) or "host" (ranks on this host only)
    scope = "network"

    @abstractmethod
    def attach(self, sink: FrameSink) -> None:
        """Set the engine that receives incoming frames."""

    @abstractmethod
    def listen(self) -> str:
        """Start accepting connections; return this rank's address for the rendezvous table."""

    @abstractmethod
    def set_peers(self, addresses: Sequence[Optional[str]]) -> None:
        """The address of every rank (index = world rank), from the rendezvous; None for the
        ranks a router sends to through another transport (never used here)."""

    @abstractmethod
    def send(self, peer: int, header: bytes, payload: Sequence[memoryview], on_sent: OnSent) -> None:
        """Queue one frame for ``peer``; may write some or all of it at once."""

    def send_now(self, peer: int, header: bytes, payload: Sequence[memoryview],
                 nbytes: int) -> bool:
        """Hand one small frame (``header`` and ``payload``, ``nbytes`` in all) to ``peer`` now,
        whole, with nothing queued: True if done (the frame is on its way, nothing to wait
        for), False if it cannot (queued frames, no room, no such fast path) - then the caller
        uses :meth:`send`. The express lane of the engine (:meth:`Engine.send_now`).
        ``payload``: byte-format memoryviews, or one C-contiguous buffer of any kind (a
        pickle as ``pickle.dumps`` made it, the numpy array of a ``Send``), here and in the
        eager writer's ``send_eager``."""
        return False

    def eager_writer(self, peer: int) -> Any:
        """For the engine's express send to ``peer``, an object whose ``send_eager(flags,
        context, source, tag, msg_id, payload, nbytes)`` does what :meth:`send_now` does
        with an EAGER header of those fields, the header made where the frame goes, and
        whose ``send_express(gate, context, source, tag, buf, nbytes)`` is a whole
        blocking ``Send`` of one buffer in one call, under the engine's
        :class:`ExpressGate` (its lock, whether express sends may run, the eager limit, the
        message numbers): True if the frame is on its way, False if the engine must send
        it (the gate closed, too large, queued frames, no room, ``buf`` not C-contiguous -
        nothing is published then). None where this transport has none (then
        :meth:`send_now` is used). Asked once per peer: it stays valid while the peer is
        not lost."""
        return None

    def eager_reader(self, peer: int) -> Any:
        """For a blocking receive from ``peer``, an object to read that peer's frames with,
        one at a time and without a signal mask, or None (this transport has none: the
        receive waits through :meth:`progress`). Its ``take_matching(context, source, tag,
        target, times)`` takes the frame at the head of ``peer``'s stream if it is the one
        the receive wants (:func:`take_matching` says what it returns), in one step - one
        store of a ring's head word, one ``recv`` of exactly that frame - which a signal
        handler raising before it leaves undone: the message stays whole for the next
        receive. Frames it does not hand over are :meth:`progress`'s, in order. The
        engine's express receive (:meth:`Engine.receive_now`).
        """
        return None

    @abstractmethod
    def progress(self, timeout: Optional[float]) -> bool:
        """Move data; block at most ``timeout`` s if nothing is ready. True if anything happened."""

    def reaches(self, address: str) -> bool:
        """Whether this transport can reach the rank that published ``address`` (asked of a
        ``"host"``-scope transport for a peer on the same host; both ends answer alike)."""
        return True

    def wait_fds(self) -> Sequence[int]:
        """File descriptors that become readable when ``progress(0)`` may find work, so that
        a router can sleep on several transports in one poll."""
        raise NotImplementedError(f"the {self.name} transport cannot be combined with others")

    def prepare_sleep(self) -> bool:
        """Called before the caller blocks on ``wait_fds()``: arm wake-ups. Returns False
        (with nothing left armed) when work is already waiting, so the caller must not block."""
        return True

    def end_sleep(self) -> None:
        """Called after that poll returned (whatever woke it)."""

    def set_sleep_check(self, check: Optional[Callable[[], bool]]) -> None:
        """While a wait lasts, ``check()`` says whether what it waits for is already done by
        other means than frames (memory a peer writes: a collective's shared segment).
        A transport that sleeps consults it after arming its wake-up (so a peer that writes
        and then wakes whoever sleeps cannot be missed), and does not sleep when it says
        True. None: no check. Transports that never sleep on memory ignore it."""

    def shared_segment(self, key: str, nbytes: int) -> Optional[memoryview]:
        """A segment of ``nbytes`` shared with the job's other processes on this host that
        ask for the same ``key`` (zero-filled when made; None: this transport has none).
        :meth:`release_segment` with the same key once every process has it mapped."""
        return None

    def release_segment(self, key: str) -> None:
        """Remove the name of segment ``key`` (the memory lives on while mapped)."""

    def forget_segment(self, key: str, mem: memoryview) -> None:
        """This process is done with segment ``key`` (its communicator was freed; ``mem``:
        what :meth:`shared_segment` gave it): a later ``shared_segment(key)`` - a new
        communicator that got the same context - maps new memory. What still uses ``mem``
        keeps it mapped."""

    #: whether :meth:`fence` does anything now (it may turn True as peers connect): a caller
    #: that fences on every call tests this first and spends no call on a fence that is none
    needs_fence: bool = False

    def host_memory(self) -> Optional["Transport"]:
        """The transport that shares memory with this host's ranks - its segments
        (:meth:`shared_segment`), :meth:`fence` and :meth:`wake_peers` -: this one, a
        router's member, or None. What uses them on every call asks once, and calls them
        without a router's forwarding between."""
        return None

    def fence(self) -> None:
        """Order this process's stores to memory shared with its peers before its loads
        after it, as far as a peer that may sleep needs (a writer of shared memory between
        publishing and looking at whether a peer waits for it or sleeps; a waiter between
        saying so and looking again): a full memory fence, or nothing where every peer on
        this host issues a process-wide barrier before it sleeps and re-checks what it
        waits for after it (shm's membarrier: that barrier orders both sides then)."""

    def wake_peers(self, peers: Sequence[int], fenced: bool = False) -> None:
        """Wake those of ``peers`` (world ranks on this host) that sleep in this transport,
        after this process wrote memory they may wait for (see :meth:`set_sleep_check`).
        ``fenced``: the caller called :meth:`fence` after its last store (it is not
        repeated)."""

    def pending_sends(self) -> int:
        """Number of frames queued but not yet handed off (used to flush at exit)."""
        return 0

    def wake(self) -> None:
        """End, soon, a sleep another thread of this process is in inside :meth:`progress`
        (safe from any thread, also while nobody sleeps: the next sleep then ends at once).
        The default does nothing: the sleep ends at its timeout."""

    def close(self) -> None:
        """Close every connection (queued frames are dropped; flush first with progress)."""


class ExpressGate:
    """What an eager writer's ``send_express`` (:meth:`Transport.eager_writer`) asks of the
    engine that owns it, in one object the engine makes once: the engine's lock (bound
    ``acquire``, ``release`` and ``held`` - taken as :meth:`Engine.send_now` takes it, the
    acquire inside the try, released only if held), whether express sends may run at all
    (``open``: no abort, lost peer or revoked communicator - the engine closes it when one
    comes, under its lock), its eager limit, and its message numbers (``msg_ids``: one
    iterator for every send of the engine, so numbers stay unique)."""

    __slots__ = ("acquire", "release", "held", "open", "eager_limit", "msg_ids")

    def __init__(self, lock: Any, eager_limit: int, msg_ids: Any) -> None:
        self.acquire = lock.acquire
        self.release = lock.release
        self.held = lock._is_owned
        self.open = False
        self.eager_limit = eager_limit
        self.msg_ids = msg_ids


def take_matching(reader: Any, context: int, source: int, tag: int,
                  target: Any, times: int) -> Optional[tuple]:
    """An eager reader's ``take_matching`` (:meth:`Transport.eager_reader`) for a reader
    that shows a frame and takes it in two steps: ``look(times)`` (the next frame if it is
    a whole eager one - its header's fields as a tuple in
    :class:`~minimpi.transports.frames.Header`'s order, its payload where it lies, and where
    the stream's head goes once it is taken -; None if nothing is there; ``()`` if something
    is there that progress must deliver) and ``take(end, length)`` (True if it took it,
    False if something else took it first). The frame at the head of the peer's stream is
    taken if a blocking receive for (``context``, ``source``, ``tag``; a negative tag: any)
    gets it - a whole eager frame, not synchronous, fitting ``target`` (a writable
    C-contiguous buffer it is copied into, a numpy array too; None: the bytes are
    returned). Returns ``(source, tag, length, data)`` when taken - the receive's answer
    as the engine gives it (data: the bytes when ``target`` is None, else None); None when
    nothing is there (after ``times`` looks); ``()`` when something is there that is not
    taken (progress delivers it)."""
    ahead = reader.look(times)
    if not ahead:
        return ahead
    header, payload, end = ahead
    n = header[7]
    if (header[3] != context or header[4] != source or header[5] != tag and tag >= 0
            or header[1] & F_SYNC or target is not None and n > target.nbytes):
        return ()
    if target is None:
        data = bytearray(payload)
    else:
        data = None
        if n:
            copy_into(target, payload)
    return (source, header[5], n, data) if reader.take(end, n) else ()
