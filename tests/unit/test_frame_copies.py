"""The small copies of the express receive (``minimpi.transports.frames``): ``filler`` and
``copy_into`` put a message's bytes into the start of any writable C-contiguous buffer -
bytearrays, byte views, numpy arrays of any shape and type - and nothing past them."""
from __future__ import annotations

import pytest

from minimpi.transports import frames


def test_filler_and_copy_into_fill_only_the_start_of_any_buffer():
    np = pytest.importorskip("numpy")
    data = bytes(range(1, 9))
    for make in (lambda: bytearray(12), lambda: memoryview(bytearray(12)),
                 lambda: np.zeros(3, np.float32), lambda: np.zeros((2, 3), np.int16)):
        for copy in (lambda t: frames.filler(8)(t, 0, data),
                     lambda t: frames.copy_into(t, data),
                     lambda t: frames.copy_into(t, memoryview(data)),
                     lambda t: frames.copy_into(t, np.frombuffer(data, np.uint16))):
            target = make()
            copy(target)
            raw = bytes(memoryview(target).cast("B"))
            assert raw == data + bytes(4), (type(target), raw)


def test_filler_keeps_structs_only_for_small_lengths():
    small, large = 24, frames.FILL_MAX + 1
    assert frames.filler(small) is frames.filler(small)
    assert frames.FILLERS[small] is frames.filler(small)
    frames.filler(large)
    assert large not in frames.FILLERS
    target = bytearray(large)
    frames.filler(large)(target, 0, b"\x07" * large)
    assert target == b"\x07" * large


def test_copy_into_refuses_a_read_only_or_short_buffer():
    with pytest.raises(TypeError):
        frames.copy_into(b"12345678", b"abc")
    with pytest.raises(ValueError):
        frames.copy_into(bytearray(2), b"abc")
