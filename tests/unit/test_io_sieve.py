"""Data sieving of independent reads (minimpi/io/posix.py): runs close together are read with
one call and copied out; every byte lands where one call per run would put it, and the end
of the file stops the count at the same byte."""
from __future__ import annotations

import os

import numpy as np
import pytest

from minimpi.io import posix
from minimpi.io.posix import SIEVE_BUFFER, SIEVE_MAX_HOLE, Where, read_runs, sieve_groups


@pytest.fixture
def datafile(tmp_path):
    data = np.random.default_rng(5).integers(0, 256, 3 * SIEVE_BUFFER, dtype=np.uint8)
    path = tmp_path / "data.bin"
    path.write_bytes(data.tobytes())
    fd = os.open(path, os.O_RDONLY)
    yield fd, data
    os.close(fd)


def naive(data: np.ndarray, offsets, lengths, size: int):
    """What one read per run gives: the runs back to back, stopping at the end of the file."""
    out, pos = np.zeros(size, np.uint8), 0
    for off, n in zip(offsets, lengths):
        have = max(0, min(n, len(data) - off))
        out[pos:pos + have] = data[off:off + have]
        pos += have
        if have < n:
            break
    return out, pos


def read(fd, offsets, lengths, size):
    out = np.zeros(size, np.uint8)
    got = read_runs(fd, np.asarray(offsets, np.int64), np.asarray(lengths, np.int64),
                    memoryview(out), Where("File.Read", "data.bin", 0))
    return out, got


def count_calls(monkeypatch):
    calls = []
    real = os.preadv

    def counting(fd, buffers, offset):
        calls.append(offset)
        return real(fd, buffers, offset)
    monkeypatch.setattr(posix.os, "preadv", counting)
    return calls


def test_a_vector_of_small_runs_is_one_read(datafile, monkeypatch):
    fd, data = datafile
    offsets = list(range(100, 100 + 4000 * 1024, 1024))        # 4000 runs of 256 B
    lengths = [256] * len(offsets)
    calls = count_calls(monkeypatch)
    out, got = read(fd, offsets, lengths, 256 * len(offsets))
    assert (out, got)[1] == 256 * 4000
    assert np.array_equal(out, naive(data, offsets, lengths, len(out))[0])
    assert len(calls) == 1                   # 4 MiB of extent: one sieve group


def test_irregular_runs_large_holes_and_out_of_order_runs(datafile, monkeypatch):
    fd, data = datafile
    rng = np.random.default_rng(7)
    lengths = rng.integers(1, 3000, 600).tolist()
    holes = rng.choice([0, 10, 500, SIEVE_MAX_HOLE, SIEVE_MAX_HOLE + 1, 40_000], 600).tolist()
    offsets, pos = [], 17
    for n, h in zip(lengths, holes):
        offsets.append(pos)
        pos += n + h
    offsets[300], offsets[301] = offsets[301], offsets[300]     # one pair out of order
    lengths[300], lengths[301] = lengths[301], lengths[300]
    assert offsets[-1] + lengths[-1] < len(data)
    calls = count_calls(monkeypatch)
    out, got = read(fd, offsets, lengths, sum(lengths))
    want, want_got = naive(data, offsets, lengths, sum(lengths))
    assert got == want_got == sum(lengths)
    assert np.array_equal(out, want)
    groups = sieve_groups(np.asarray(offsets, np.int64), np.asarray(lengths, np.int64))
    assert len(calls) == len(groups) < 600


@pytest.mark.parametrize("stride", [1024, 1000])
def test_the_end_of_the_file_inside_a_group_stops_the_count_there(datafile, stride):
    fd, data = datafile
    n = 300
    start = len(data) - stride * (n // 2) - 37       # the file ends halfway through
    offsets = [start + i * stride for i in range(n)]
    lengths = [256 if stride == 1024 else 200 + i % 7 for i in range(n)]
    out, got = read(fd, offsets, lengths, sum(lengths))
    want, want_got = naive(data, offsets, lengths, sum(lengths))
    assert got == want_got < sum(lengths)
    assert np.array_equal(out, want)                  # the rest left as it was (zeros)


def test_groups_are_bounded_by_the_buffer_and_the_holes():
    offsets = np.arange(0, 3 * SIEVE_BUFFER, 4096, dtype=np.int64)
    lengths = np.full(len(offsets), 64, np.int64)
    groups = sieve_groups(offsets, lengths)
    assert len(groups) == 3                               # one per SIEVE_BUFFER of extent
    offsets = np.arange(0, 10, dtype=np.int64) * (SIEVE_MAX_HOLE + 65)
    lengths = np.full(10, 64, np.int64)                   # holes of SIEVE_MAX_HOLE + 1
    assert len(sieve_groups(offsets, lengths)) == 10
