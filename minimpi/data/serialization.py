"""Object serialization for the lowercase API: pickle protocol 5 with out-of-band buffers.

A message carrying a Python object is laid out as::

    u32 nbuffers | u64 pickle_len | u64 len(buffer_i) ... | pickle bytes | pad | buffer_0 | pad | buffer_1 ...

Large buffers inside the object (numpy arrays, bytearrays, PickleBuffer) are not copied into the
pickle: they travel as their own segments of one ``sendmsg`` call, and on the receiving side the
unpickled arrays are views of the single receive buffer. Each out-of-band buffer starts at a
16-byte aligned offset so that received numpy arrays are aligned.
"""
from __future__ import annotations

import pickle
import struct
from typing import Any, List, Tuple

from ..errors import SerializationError

_COUNT = struct.Struct("<IQ")
_LEN = struct.Struct("<Q")
_ALIGN = 16
_ZEROS = bytes(_ALIGN)


def _pad(offset: int) -> int:
    return (-offset) % _ALIGN


def dumps(obj: Any, *, rank: int = -1, call: str = "send") -> Tuple[List[memoryview], int]:
    """Serialize ``obj`` into a list of segments and their total length (no copies of big buffers).

    Raises :class:`SerializationError` at the sender, before anything is sent, when ``obj``
    cannot be pickled.
    """
    buffers: List[pickle.PickleBuffer] = []
    try:
        data = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    except Exception as exc:  # pickling can raise almost anything (TypeError, PicklingError, ...)
        where = f"rank {rank}: " if rank >= 0 else ""
        raise SerializationError(
            f"{where}{call}: cannot pickle object of type {type(obj).__name__}: {exc}"
        ) from exc
    if not buffers:   # the common small object: the head and the pickle, nothing to align
        return [memoryview(_COUNT.pack(0, len(data))), memoryview(data)], _COUNT.size + len(data)
    raws = []
    for b in buffers:
        try:
            raws.append(b.raw())
        except BufferError:
            # A non-contiguous buffer: pickle it in band instead (rare: numpy gives contiguous).
            raws.append(memoryview(bytes(memoryview(b))).cast("B"))
    head = bytearray(_COUNT.pack(len(raws), len(data)))
    for r in raws:
        head += _LEN.pack(r.nbytes)
    segments: List[memoryview] = [memoryview(head), memoryview(data)]
    total = len(head) + len(data)
    for r in raws:
        pad = _pad(total)
        if pad:
            segments.append(memoryview(_ZEROS)[:pad])
            total += pad
        segments.append(r)
        total += r.nbytes
    return segments, total


#: bytes of the fixed part of the layout (buffer count and pickle length)
HEAD_SIZE = _COUNT.size


def layout(payload: "bytearray | memoryview") -> Tuple[int, List[int], int]:
    """``(pickle_len, out-of-band buffer lengths, offset of the pickle)`` of a payload."""
    view = memoryview(payload)
    nbuf, plen = _COUNT.unpack_from(view, 0)
    offset = _COUNT.size
    lengths = [_LEN.unpack_from(view, offset + _LEN.size * i)[0] for i in range(nbuf)]
    return plen, lengths, offset + _LEN.size * nbuf


def loads(payload: "bytearray | memoryview", parts: "Tuple[int, List[int], int] | None" = None) -> Any:
    """Rebuild the object from a received payload; out-of-band buffers become views of it.
    ``parts``: its :func:`layout`, when the caller has it already."""
    view = memoryview(payload)
    plen, lengths, offset = layout(view) if parts is None else parts
    if not lengths:
        return pickle.loads(view[offset:offset + plen])
    pickled = view[offset:offset + plen]
    offset += plen
    bufs = []
    for n in lengths:
        offset += _pad(offset)
        bufs.append(view[offset:offset + n])
        offset += n
    return pickle.loads(pickled, buffers=bufs)
