"""The launcher's own output, written by threads so that a slow reader never stalls the loop.

``minimpi run ... | less`` (or a reader that stops reading for a while) must not freeze the
launcher: while it sat in a blocking ``write`` it could not notice a rank's failure,
``--timeout``, Ctrl-C or heartbeats. So the loop only *queues* bytes here (never blocks) and
one thread per destination does the blocking writes. A destination is a file: when our
stdout and stderr are one file (``2>&1 | ...``) they share one thread, so that lines of the
two never interleave mid-line and keep their order.

What a destination holds is bounded: once :data:`QUEUE_LIMIT` bytes wait, :meth:`full` says
so and the loop stops reading the ranks' pipes for it (their own writes then block: back-
pressure on the ranks, never on the loop); when the queue is back under half, the thread
wakes the loop through :attr:`OutputWriters.wake_fd`. The launcher's own messages are always
queued (they are few), so they stay in order with the ranks' output.

A reader that went away (``| head -1``: EPIPE) marks its destination broken; bytes for it
are dropped from then on and the loop is woken to end the job (see README, Reliability).
"""
from __future__ import annotations

import os
import threading
from collections import deque
from typing import BinaryIO, Optional

#: bytes that may wait for one destination before the ranks' pipes are no longer read
QUEUE_LIMIT = 4 << 20
#: beyond this many, rank output is dropped (counted) rather than queued: only reached while
#: the job ends, when the loop reads everything left whatever the reader does
DROP_LIMIT = 4 * QUEUE_LIMIT
#: the most bytes handed to one write() call (whole queued chunks are joined up to this)
WRITE_BATCH = 1 << 20


def _file_key(stream: BinaryIO) -> object:
    """What identifies the file behind ``stream``: stdout and stderr that are one pipe,
    terminal or file (``2>&1``) share a key, and so one writing thread that keeps their
    order; a stream without a file is its own."""
    try:
        st = os.fstat(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return ("object", id(stream))
    return ("file", st.st_dev, st.st_ino)


class _Destination:
    """One file's queue and the thread that writes it."""

    def __init__(self, writers: "OutputWriters", name: str) -> None:
        self._writers = writers
        self._queue: deque[tuple[BinaryIO, bytes]] = deque()
        self.queued = 0              # bytes waiting
        self.broken = False          # its reader went away (or the stream was closed)
        self.stalled_loop = False    # the loop saw it full: wake it when there is room again
        self.dropped = 0             # bytes of rank output given up beyond DROP_LIMIT
        self._closing = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._main, name=f"minimpi-{name}-writer",
                                        daemon=True)
        self._thread.start()

    def put(self, stream: BinaryIO, data: bytes, droppable: bool) -> None:
        with self._cond:
            if self.broken or self._closing:
                return
            if droppable and self.queued >= DROP_LIMIT:
                self.dropped += len(data)
                return
            self._queue.append((stream, data))
            self.queued += len(data)
            self._cond.notify()

    def full(self) -> bool:
        with self._cond:
            if self.queued >= self._writers.limit:
                self.stalled_loop = True
                return True
            return False

    def _main(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    return
                stream, first = self._queue.popleft()
                batch = [first]
                size = len(first)
                while self._queue and self._queue[0][0] is stream and size < WRITE_BATCH:
                    data = self._queue.popleft()[1]
                    batch.append(data)
                    size += len(data)
            try:
                _write(stream, b"".join(batch))
            except (OSError, ValueError):   # EPIPE (SIGPIPE is ignored in Python), closed
                with self._cond:
                    self.broken = True
                    self._queue.clear()
                    self.queued = 0
                    self._cond.notify_all()
                self._writers.wake()
                continue
            with self._cond:
                self.queued -= size
                wake = self.stalled_loop and self.queued <= self._writers.limit // 2
                if wake:
                    self.stalled_loop = False
                if not self._queue:
                    self._cond.notify_all()   # drain() waits for this
            if wake:
                self._writers.wake()

    def drain(self, timeout: Optional[float]) -> bool:
        """Wait until everything queued is written (or the reader is gone); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and self.queued <= 0
                                       or self.broken, timeout)

    def close(self, timeout: float) -> bool:
        """Stop the thread once the queue is empty; False if it is still writing."""
        with self._cond:
            self._closing = True
            self._queue.clear()
            self._cond.notify_all()
        self._thread.join(timeout)
        return not self._thread.is_alive()


def _write(stream: BinaryIO, data: bytes) -> None:
    """Write all of ``data``: straight to the file where there is one (so no Python-level
    buffer lock is held while a reader stalls: an abandoned write must not stop the
    interpreter from exiting), else through the stream."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        stream.write(data)
        stream.flush()
        return
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class OutputWriters:
    """The launcher's stdout and stderr as queues the loop never blocks on.

    ``wake_fd`` becomes readable when a full destination has room again or one broke; the
    loop polls it and calls :meth:`clear_wake`.
    """

    def __init__(self, stdout: BinaryIO, stderr: BinaryIO, limit: int = QUEUE_LIMIT) -> None:
        self.stdout = stdout
        self.stderr = stderr
        self.limit = limit
        for stream in (stdout, stderr):   # what was written through them goes first
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        out_key, err_key = _file_key(stdout), _file_key(stderr)
        self._out = _Destination(self, "stdout")
        self._err = self._out if err_key == out_key else _Destination(self, "stderr")
        self._closed = False

    @property
    def wake_fd(self) -> int:
        return self._wake_r

    def wake(self) -> None:
        try:
            os.write(self._wake_w, b"w")
        except OSError:   # full (the loop will look anyway) or closed at the very end
            pass

    def clear_wake(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except OSError:
            pass

    def destination(self, stream: BinaryIO) -> _Destination:
        return self._err if stream is self.stderr else self._out

    def write(self, stream: BinaryIO, data: bytes, droppable: bool = False) -> None:
        """Queue ``data`` for ``stream`` (our stdout or stderr); never blocks. ``droppable``
        (the ranks' output) is given up when DROP_LIMIT bytes already wait."""
        if data:
            self.destination(stream).put(stream, data, droppable)

    @property
    def dropped(self) -> int:
        """Bytes of rank output given up (see DROP_LIMIT)."""
        return self._out.dropped + (self._err.dropped if self._err is not self._out else 0)

    def full(self, stream: BinaryIO) -> bool:
        """Whether ``stream``'s destination holds as much as it may (stop reading for it)."""
        return self.destination(stream).full()

    @property
    def stdout_broken(self) -> bool:
        """Whether our stdout's reader went away (EPIPE)."""
        return self._out.broken

    def drain(self, timeout: Optional[float] = None) -> bool:
        """Wait until both destinations wrote everything queued; False on timeout."""
        ok = self._out.drain(timeout)
        return (self._err is self._out or self._err.drain(timeout)) and ok

    def close(self) -> None:
        """Stop the threads: call after :meth:`drain` (what is still queued then is given up;
        a thread still blocked in a write is left to end with the process)."""
        if self._closed:
            return
        self._closed = True
        stopped = True
        for dest in {id(self._out): self._out, id(self._err): self._err}.values():
            stopped = dest.close(timeout=0.5) and stopped
        if stopped:   # a thread still writing may still wake us: keep its pipe then
            os.close(self._wake_r)
            os.close(self._wake_w)
