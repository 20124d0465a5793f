"""Forwarding the ranks' stdout/stderr, line by line, with a ``[rank] `` prefix.

The job loop tells the :class:`OutputForwarder` which pipe is readable; it reads what is
there (never blocking), cuts complete lines and writes each one whole, so lines of
different ranks never interleave mid-line (one writer, whole lines). A last line without
a newline is written when its pipe reaches EOF, with a newline added.

With ``output_dir``, each rank's raw output (no prefix) is also written to
``DIR/rank.<N>.stdout`` and ``DIR/rank.<N>.stderr``.

Tracebacks are held back: from a stderr line ``Traceback (most recent call last):`` on, a
rank's stderr is kept (:meth:`OutputForwarder.held`) instead of written, so that when the
job fails the launcher can print its summary first, then the culprit's traceback, and
leave out the PeerLostError tracebacks of every rank that only failed because of it (they
stay in ``--output-dir``). A held traceback is written as it was when the job ends
without failing, or once it is :data:`HOLD_SECONDS` old while its rank still runs (the
program caught the error, printed it and went on), so no output is ever lost or delayed
for long.

The launcher never blocks on its own stdout or stderr: lines are queued with
:class:`~minimpi.launcher.writer.OutputWriters` (a thread per destination writes them). When
a destination's queue is full, :meth:`OutputForwarder.readable_fds` leaves out the pipes
that feed it, so the job loop stops reading them (the ranks' writes block) while it goes on
watching deadlines, signals and heartbeats. A line longer than :data:`LINE_LIMIT` is cut
into lines of that length (as a terminal wraps it), so a rank that writes without newlines
costs linear time and bounded memory.
"""
from __future__ import annotations

import os
import time
from collections import deque
from typing import BinaryIO, Callable, Optional

from .writer import OutputWriters

READ_SIZE = 65536
TAIL_LINES = 12
TRACEBACK = b"Traceback (most recent call last):"
IGNORED = b"Exception ignored in"   # Python's report of an error in atexit, __del__, ...
#: a held traceback of a rank that is still running is written after this many seconds
HOLD_SECONDS = 2.0
#: at most this many lines (and bytes) of one traceback are held (the rest is written through)
HOLD_LINES = 2000
HOLD_BYTES = 1 << 20
#: a line longer than this is forwarded as several lines of this length
LINE_LIMIT = 65536
#: at the end, at most this much is still read from one rank's pipe
FINAL_READ = 1 << 20


class _Stream:
    def __init__(self, rank: int, name: str, fd: int, sink: BinaryIO, prefix: bytes,
                 copy: Optional[BinaryIO]):
        self.rank = rank
        self.name = name           # "stdout" | "stderr"
        self.fd = fd
        self.sink = sink
        self.prefix = prefix
        self.copy = copy
        self.partial = bytearray()   # the start of a line (at most LINE_LIMIT bytes)
        self.tail: deque[bytes] = deque(maxlen=TAIL_LINES)
        self.open = True
        self.held: Optional[list[bytes]] = None   # a traceback being held back
        self.held_since = 0.0
        self.held_bytes = 0


class OutputForwarder:
    def __init__(self, stdout: BinaryIO, stderr: BinaryIO, prefix: bool = True,
                 output_dir: Optional[str] = None, hold_tracebacks: bool = True):
        self.stdout = stdout
        self.stderr = stderr
        self.use_prefix = prefix
        self.output_dir = output_dir
        self.hold_tracebacks = hold_tracebacks
        self.streams: dict[int, _Stream] = {}
        self.writers = OutputWriters(stdout, stderr)
        self.closed = False   # close_all() done: the launcher writes its messages directly
        #: who else sees every line (``minimpi run --dashboard``): called on the job's loop
        #: as ``tap(rank, "stdout" | "stderr", lines)`` for the ranks' complete lines and
        #: ``tap(None, "launcher", [text])`` for the launcher's own messages; it only records
        self.tap: Optional[Callable[[object, str, list], None]] = None
        if output_dir:
            os.makedirs(output_dir, exist_ok=True)

    def add(self, rank: int, name: str, pipe) -> int:
        fd = pipe.fileno()
        os.set_blocking(fd, False)
        sink = self.stdout if name == "stdout" else self.stderr
        prefix = f"[{rank}] ".encode() if self.use_prefix else b""
        copy = None
        if self.output_dir:
            copy = open(os.path.join(self.output_dir, f"rank.{rank}.{name}"), "wb")
        self.streams[fd] = _Stream(rank, name, fd, sink, prefix, copy)
        return fd

    def open_fds(self) -> list[int]:
        return [fd for fd, s in self.streams.items() if s.open]

    def readable_fds(self) -> list[int]:
        """The open pipes to read now: those whose destination has room (back-pressure)."""
        return [fd for fd, s in self.streams.items()
                if s.open and not self.writers.full(s.sink)]

    def full(self) -> bool:
        """Whether our stdout or stderr holds as much queued output as it may."""
        return self.writers.full(self.stdout) or self.writers.full(self.stderr)

    def log(self, text: bytes) -> None:
        """The launcher's own message on stderr, in order with the ranks' output."""
        if self.tap is not None:
            self.tap(None, "launcher", [text])
        self.writers.write(self.stderr, text)

    def read(self, fd: int) -> bool:
        """Read what is available on ``fd``; False once it reached EOF (and was closed)."""
        s = self.streams[fd]
        if not s.open:
            return False
        try:
            data = os.read(fd, READ_SIZE)
        except BlockingIOError:
            return True
        except OSError:
            data = b""
        if not data:
            self._finish(s)
            return False
        self._take(s, data)
        return True

    def _take(self, s: _Stream, data: bytes) -> None:
        """Forward the complete lines in ``data``; keep a partial last line for later.
        Every byte is looked at once (a long line costs linear time), and a line longer
        than LINE_LIMIT is cut, so what is kept stays small."""
        if s.copy is not None:
            s.copy.write(data)
        pieces = data.split(b"\n")
        lines: list[bytes] = []
        if len(pieces) > 1:
            s.partial += pieces[0]
            first = bytes(s.partial)
            s.partial.clear()
            for line in [first] + pieces[1:-1]:
                lines.extend(_cut(line))
        s.partial += pieces[-1]
        while len(s.partial) > LINE_LIMIT:
            lines.append(bytes(s.partial[:LINE_LIMIT]))
            del s.partial[:LINE_LIMIT]
        if lines:
            self._emit(s, lines)

    def _finish(self, s: _Stream) -> None:
        if s.partial:
            self._emit(s, [bytes(s.partial)])
            s.partial.clear()
        s.open = False
        try:
            os.close(s.fd)
        except OSError:
            pass
        if s.copy is not None:
            s.copy.close()
            s.copy = None

    def _emit(self, s: _Stream, lines: list[bytes]) -> None:
        if self.tap is not None:
            self.tap(s.rank, s.name, lines)
        if s.name == "stderr":
            s.tail.extend(lines)
            if self.hold_tracebacks:
                lines = self._hold(s, lines)
        self._write(s, lines)

    def _hold(self, s: _Stream, lines: list[bytes]) -> list[bytes]:
        """Keep a traceback (and what follows it) back; return the lines to write now."""
        if s.held is None:
            start = next((i for i, ln in enumerate(lines)
                          if ln == TRACEBACK or ln.startswith(IGNORED)), None)
            if start is None:
                return lines
            s.held, s.held_since, s.held_bytes = [], time.monotonic(), 0
            now, lines = lines[:start], lines[start:]
        else:
            now = []
        room = HOLD_LINES - len(s.held)
        if s.held_bytes + sum(len(ln) for ln in lines) > HOLD_BYTES:
            room = 0
        s.held.extend(lines[:room])
        s.held_bytes += sum(len(ln) for ln in lines[:room])
        if room < len(lines):   # not a traceback any more, or a huge one: give it all back
            self.release(s.rank)
            now = now + lines[room:]
        return now

    def _write(self, s: _Stream, lines: list[bytes]) -> None:
        if lines:   # (once a reader went away, its destination drops what comes)
            self.writers.write(s.sink, b"".join(s.prefix + line + b"\n" for line in lines),
                               droppable=True)

    # -- held tracebacks ---------------------------------------------------------------------
    def _stderr(self, rank: int) -> Optional[_Stream]:
        for s in self.streams.values():
            if s.rank == rank and s.name == "stderr":
                return s
        return None

    def held(self, rank: int) -> list[str]:
        """The traceback rank ``rank`` wrote and that is being held back (empty if none)."""
        s = self._stderr(rank)
        if s is None or s.held is None:
            return []
        lines = s.held + ([bytes(s.partial)] if s.partial and not s.open else [])
        return [ln.decode("utf-8", "replace") for ln in lines]

    def discard(self, rank: int) -> int:
        """Drop rank ``rank``'s held traceback unwritten (it is still in --output-dir);
        returns how many lines were dropped."""
        s = self._stderr(rank)
        if s is None or s.held is None:
            return 0
        n = len(s.held)
        s.held = None
        return n

    def release(self, rank: Optional[int] = None) -> None:
        """Write the held traceback of ``rank`` (of every rank if None) as it was."""
        for s in self.streams.values():
            if s.held is not None and (rank is None or s.rank == rank):
                lines, s.held = s.held, None
                self._write(s, lines)

    def release_stale(self, now: float, alive) -> Optional[float]:
        """Write held tracebacks older than HOLD_SECONDS whose rank still runs
        (``alive(rank)``); returns when the next one will be due, or None."""
        due = None
        for s in self.streams.values():
            if s.held is None or not alive(s.rank):
                continue
            if now - s.held_since >= HOLD_SECONDS:
                self.release(s.rank)
            else:
                when = s.held_since + HOLD_SECONDS
                due = when if due is None else min(due, when)
        return due

    def close_all(self, give_up: Callable[[], bool] = lambda: False) -> None:
        """Stop forwarding: read what is left in the pipes (the loop may have stopped reading
        them for a slow reader), flush partial lines and held tracebacks, close every pipe;
        then wait until our stdout and stderr took everything, as long as that takes - or
        one more second once ``give_up()`` (a signal to the launcher)."""
        for s in list(self.streams.values()):
            if s.open:
                self._read_rest(s)
                self._finish(s)
        self.release()
        if self.writers.dropped:
            self.log(f"minimpi: {self.writers.dropped} bytes of the ranks' output were dropped: "
                     f"the reader of our output did not keep up while the job ended\n".encode())
        while not self.writers.drain(0.2):
            if give_up():
                self.writers.drain(1.0)
                break
        self.writers.close()
        self.closed = True

    def _read_rest(self, s: _Stream) -> None:
        if s.fd < 0:   # fed by frames (multihost), not a pipe
            return
        left = FINAL_READ
        while left > 0:
            try:
                data = os.read(s.fd, min(READ_SIZE, left))
            except OSError:   # nothing more now (a leftover may hold the pipe open)
                return
            if not data:
                return
            left -= len(data)
            self._take(s, data)

    def stderr_tail(self, rank: int) -> list[str]:
        s = self._stderr(rank)
        if s is None:
            return []
        lines = list(s.tail)
        if s.partial:
            lines.append(bytes(s.partial))
        return [ln.decode("utf-8", "replace") for ln in lines]


def _cut(line: bytes) -> list[bytes]:
    """``line`` as lines of at most LINE_LIMIT bytes."""
    if len(line) <= LINE_LIMIT:
        return [line]
    return [line[i:i + LINE_LIMIT] for i in range(0, len(line), LINE_LIMIT)]
