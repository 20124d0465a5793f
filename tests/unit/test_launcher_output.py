"""The launcher's output path without processes: lines cut at LINE_LIMIT, back-pressure when
a destination is full, a reader that goes away, and stdout and stderr that are one pipe."""
from __future__ import annotations

import io
import os
import select
import threading
import time

from minimpi.launcher.output import LINE_LIMIT, OutputForwarder
from minimpi.launcher.writer import OutputWriters


class _Pipe:
    """A rank's pipe as the forwarder sees it (it closes the descriptor itself)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def fileno(self) -> int:
        return self.fd


def _forwarder_on_pipe(limit: int = 1 << 16):
    """A forwarder whose stdout is a pipe nobody reads yet, fed by one rank's pipe."""
    out_r, out_w = os.pipe()
    sink = os.fdopen(out_w, "wb")
    fwd = OutputForwarder(sink, io.BytesIO())
    fwd.writers.limit = limit
    rank_r, rank_w = os.pipe()
    fd = fwd.add(0, "stdout", _Pipe(rank_r))
    return fwd, fd, rank_w, out_r, sink


def test_a_line_longer_than_the_limit_is_cut_and_each_byte_is_looked_at_once():
    out = io.BytesIO()
    fwd = OutputForwarder(out, io.BytesIO())
    r, w = os.pipe()
    fd = fwd.add(3, "stdout", _Pipe(r))
    chunk = b"z" * 65536
    started = time.process_time()
    for _ in range(160):                # 10 MiB without a newline
        fwd._take(fwd.streams[fd], chunk)
    fwd._take(fwd.streams[fd], b"\nshort\n")
    took = time.process_time() - started
    os.close(w)
    fwd.close_all()
    lines = out.getvalue().split(b"\n")
    assert lines[-2:] == [b"[3] short", b""]
    assert lines[:-2] == [b"[3] " + b"z" * LINE_LIMIT] * (160 * 65536 // LINE_LIMIT)
    assert took < 5.0, f"{took:.1f} s of CPU for 10 MiB: not linear"


def test_a_line_of_exactly_the_limit_stays_one_line():
    out = io.BytesIO()
    fwd = OutputForwarder(out, io.BytesIO(), prefix=False)
    r, w = os.pipe()
    fd = fwd.add(0, "stdout", _Pipe(r))
    fwd._take(fwd.streams[fd], b"a" * (LINE_LIMIT - 1))
    fwd._take(fwd.streams[fd], b"a\nb" + b"c" * LINE_LIMIT + b"\n")
    os.close(w)
    fwd.close_all()
    assert out.getvalue().split(b"\n") == [b"a" * LINE_LIMIT, b"b" + b"c" * (LINE_LIMIT - 1),
                                           b"c", b""]


def test_a_full_destination_stops_reading_its_pipes_until_the_reader_catches_up():
    fwd, fd, rank_w, out_r, sink = _forwarder_on_pipe(limit=1 << 16)
    os.set_blocking(rank_w, False)
    line = b"x" * 1023 + b"\n"
    written = 0
    deadline = time.monotonic() + 10
    while fd in fwd.readable_fds():      # the loop reads while there is room
        assert time.monotonic() < deadline, "the destination never filled"
        try:
            written += os.write(rank_w, line * 16)
        except BlockingIOError:
            pass
        fwd.read(fd)
    assert fwd.full() and fd not in fwd.readable_fds()
    got = b""
    while fd not in fwd.readable_fds():   # the reader wakes up: room again, and a wake-up
        # (the writer thread may count its last write a moment after the pipe was emptied:
        # a blocking read there would wait forever)
        if select.select([out_r], [], [], 0.05)[0]:
            got += os.read(out_r, 1 << 16)
        assert time.monotonic() < deadline, "no room after the reader caught up"
    # the writer thread makes room, then (out of its lock) writes the wake-up: wait for it
    assert select.select([fwd.writers.wake_fd], [], [], 10)[0], "room, but no wake-up"
    assert os.read(fwd.writers.wake_fd, 16)
    os.close(rank_w)
    while fwd.read(fd):
        pass
    os.set_blocking(out_r, False)
    rest = []   # close_all waits until the reader took everything: read meanwhile
    t = threading.Thread(target=lambda: rest.append(_read_all(out_r)))
    t.start()
    fwd.close_all()
    sink.close()
    t.join(10)
    total = got + rest[0]
    assert len(total) == written + written // len(line) * len(b"[0] ")
    assert set(total.split(b"\n")[:-1]) == {b"[0] " + b"x" * 1023}
    os.close(out_r)


def _read_all(fd: int) -> bytes:
    data = b""
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            time.sleep(0.01)
            continue
        if not chunk:
            return data
        data += chunk


def test_a_reader_that_went_away_marks_stdout_broken_and_wakes_the_loop():
    r, w = os.pipe()
    os.close(r)
    writers = OutputWriters(os.fdopen(w, "wb"), io.BytesIO())
    writers.write(writers.stdout, b"hello\n")
    deadline = time.monotonic() + 5
    while not writers.stdout_broken:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert os.read(writers.wake_fd, 16)
    writers.write(writers.stdout, b"dropped\n")   # never blocks, never raises
    assert writers.drain(1.0)
    writers.close()


def test_stdout_and_stderr_on_one_pipe_share_one_writer_and_keep_their_order():
    r, w = os.pipe()
    out = os.fdopen(w, "wb")
    err = os.fdopen(os.dup(w), "wb")
    writers = OutputWriters(out, err)
    assert writers.destination(out) is writers.destination(err)
    for i in range(200):
        writers.write(out if i % 2 else err, b"%d\n" % i)
    assert writers.drain(5.0)
    writers.close()
    out.close()
    err.close()
    assert _read_all(r).split(b"\n")[:-1] == [b"%d" % i for i in range(200)]
