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
"""
from __future__ import annotations

import os
import time
from collections import deque
from typing import BinaryIO, Optional

READ_SIZE = 65536
TAIL_LINES = 12
TRACEBACK = b"Traceback (most recent call last):"
IGNORED = b"Exception ignored in"   # Python's report of an error in atexit, __del__, ...
#: a held traceback of a rank that is still running is written after this many seconds
HOLD_SECONDS = 2.0
#: at most this many lines of one traceback are held (the rest is written through)
HOLD_LINES = 2000


class _Stream:
    def __init__(self, rank: int, name: str, fd: int, sink: BinaryIO, prefix: bytes,
                 copy: Optional[BinaryIO]):
        self.rank = rank
        self.name = name           # "stdout" | "stderr"
        self.fd = fd
        self.sink = sink
        self.prefix = prefix
        self.copy = copy
        self.partial = b""
        self.tail: deque[bytes] = deque(maxlen=TAIL_LINES)
        self.open = True
        self.held: Optional[list[bytes]] = None   # a traceback being held back
        self.held_since = 0.0


class OutputForwarder:
    def __init__(self, stdout: BinaryIO, stderr: BinaryIO, prefix: bool = True,
                 output_dir: Optional[str] = None, hold_tracebacks: bool = True):
        self.stdout = stdout
        self.stderr = stderr
        self.use_prefix = prefix
        self.output_dir = output_dir
        self.hold_tracebacks = hold_tracebacks
        self.streams: dict[int, _Stream] = {}
        self._sink_broken: set[int] = set()
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
        """Forward the complete lines in ``data``; keep a partial last line for later."""
        if s.copy is not None:
            s.copy.write(data)
        buf = s.partial + data
        cut = buf.rfind(b"\n")
        if cut < 0:
            s.partial = buf
            return
        s.partial = buf[cut + 1:]
        self._emit(s, buf[:cut].split(b"\n"))

    def _finish(self, s: _Stream) -> None:
        if s.partial:
            self._emit(s, [s.partial])
            s.partial = b""
        s.open = False
        try:
            os.close(s.fd)
        except OSError:
            pass
        if s.copy is not None:
            s.copy.close()
            s.copy = None

    def _emit(self, s: _Stream, lines: list[bytes]) -> None:
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
            s.held, s.held_since = [], time.monotonic()
            now, lines = lines[:start], lines[start:]
        else:
            now = []
        room = HOLD_LINES - len(s.held)
        s.held.extend(lines[:room])
        if room < len(lines):   # not a traceback any more, or a huge one: give it all back
            self.release(s.rank)
            now = now + lines[room:]
        return now

    def _write(self, s: _Stream, lines: list[bytes]) -> None:
        if not lines or id(s.sink) in self._sink_broken:
            return
        out = b"".join(s.prefix + line + b"\n" for line in lines)
        try:
            s.sink.write(out)
            s.sink.flush()
        except (BrokenPipeError, ValueError, OSError):
            self._sink_broken.add(id(s.sink))   # reader went away: keep draining, stop writing

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
        lines = s.held + ([s.partial] if s.partial and not s.open else [])
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

    def close_all(self) -> None:
        """Stop forwarding: flush partial lines and held tracebacks, close every pipe."""
        for s in list(self.streams.values()):
            if s.open:
                self._finish(s)
        self.release()

    def stderr_tail(self, rank: int) -> list[str]:
        s = self._stderr(rank)
        if s is None:
            return []
        lines = list(s.tail)
        if s.partial:
            lines.append(s.partial)
        return [ln.decode("utf-8", "replace") for ln in lines]
