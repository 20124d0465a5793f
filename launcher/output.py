"""Forwarding the ranks' stdout/stderr, line by line, with a ``[rank] `` prefix.

The job loop tells the :class:`OutputForwarder` which pipe is readable; it reads what is
there (never blocking), cuts complete lines and writes each one whole, so lines of
different ranks never interleave mid-line (one writer, whole lines). A last line without
a newline is written when its pipe reaches EOF, with a newline added.

With ``output_dir``, each rank's raw output (no prefix) is also written to
``DIR/rank.<N>.stdout`` and ``DIR/rank.<N>.stderr``.
"""
from __future__ import annotations

import os
from collections import deque
from typing import BinaryIO, Optional

READ_SIZE = 65536
TAIL_LINES = 12


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


class OutputForwarder:
    def __init__(self, stdout: BinaryIO, stderr: BinaryIO, prefix: bool = True,
                 output_dir: Optional[str] = None):
        self.stdout = stdout
        self.stderr = stderr
        self.use_prefix = prefix
        self.output_dir = output_dir
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
        if s.copy is not None:
            s.copy.write(data)
        buf = s.partial + data
        cut = buf.rfind(b"\n")
        if cut < 0:
            s.partial = buf
            return True
        s.partial = buf[cut + 1:]
        lines = buf[:cut].split(b"\n")
        self._emit(s, lines)
        return True

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
        if id(s.sink) in self._sink_broken:
            return
        out = b"".join(s.prefix + line + b"\n" for line in lines)
        try:
            s.sink.write(out)
            s.sink.flush()
        except (BrokenPipeError, ValueError, OSError):
            self._sink_broken.add(id(s.sink))   # reader went away: keep draining, stop writing

    def close_all(self) -> None:
        """Stop forwarding: flush partial lines and close every pipe."""
        for s in list(self.streams.values()):
            if s.open:
                self._finish(s)

    def stderr_tail(self, rank: int) -> list[str]:
        for s in self.streams.values():
            if s.rank == rank and s.name == "stderr":
                lines = list(s.tail)
                if s.partial:
                    lines.append(s.partial)
                return [ln.decode("utf-8", "replace") for ln in lines]
        return []
