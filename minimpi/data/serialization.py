"""Object serialization for the lowercase API: pickle protocol 5 with out-of-band buffers.

A message carrying a Python object is laid out as::

    u32 nbuffers | u64 pickle_len | u64 len(buffer_i) ... | pickle bytes | pad | buffer_0 | pad | buffer_1 ...

Large buffers inside the object (numpy arrays, bytearrays, PickleBuffer) are not copied into the
pickle: they travel as their own segments of one ``sendmsg`` call, and on the receiving side the
unpickled arrays are views of the single receive buffer. Each out-of-band buffer starts at a
16-byte aligned offset so that received numpy arrays are aligned.

An object with no out-of-band buffer (most small ones: numbers, strings, lists, dicts) is
sent as its bare pickle, without that head: one segment, nothing to pack, and the receiver
unpickles the payload as it is.

What a lowercase receive accepts besides that layout (mpi4py's rules, so a message sent with
``Send`` can be received with ``recv``): an empty message is ``None``, and a message that is
plain pickle bytes (``MPI.pickle.dumps(obj)``, ``pickle.dumps(obj)``, or minimpi's own bare
pickle) is unpickled as such. A payload in minimpi's layout never starts with pickle's PROTO
opcode (0x80) - at most 127 buffers go out of band - and its lengths must add up exactly, so
the two cannot be confused.
"""
from __future__ import annotations

import pickle
import struct
from typing import Any, List, Tuple

from ..errors import SerializationError

_COUNT = struct.Struct("<IQ")
_MAX_OOB = 127
#: pickle's PROTO opcode, the first byte of every protocol >= 2 pickle (never of a payload in
#: minimpi's layout)
PICKLE_PROTO = 0x80
#: bytes of the fixed part of the layout (buffer count and pickle length)
HEAD_SIZE = _COUNT.size
_LEN = struct.Struct("<Q")
_ALIGN = 16
_ZEROS = bytes(_ALIGN)
#: types whose pickles never have out-of-band buffers
IN_BAND = frozenset((bytes, str, int, float, bool, complex, type(None)))
_NO_BUFFERS: Tuple[int, ...] = ()


def _pad(offset: int) -> int:
    return (-offset) % _ALIGN


def dumps(obj: Any, *, rank: int = -1, call: str = "send") -> Tuple[List[memoryview], int]:
    """Serialize ``obj`` into a list of segments and their total length (no copies of big buffers).

    Raises :class:`SerializationError` at the sender, before anything is sent, when ``obj``
    cannot be pickled.
    """
    segments, nbytes, _ = encode(obj, rank, call)
    return segments, nbytes


def encode(obj: Any, rank: int = -1, call: str = "send") -> Tuple[List[memoryview], int, bool]:
    """:func:`dumps`, and whether the payload is the bare pickle (no out-of-band buffer, so no
    layout head): a point-to-point send says so in its frame (``F_PICKLE``), which lets a
    probe count a message whose payload has not arrived yet."""
    if type(obj) in IN_BAND:      # (their pickles never have out-of-band buffers)
        data = pickle.dumps(obj, 5)
        return [memoryview(data)], len(data), True
    buffers: List[pickle.PickleBuffer] = []
    try:
        data = pickle.dumps(obj, 5, buffer_callback=buffers.append)
    except Exception as exc:  # pickling can raise almost anything (TypeError, PicklingError, ...)
        where = f"rank {rank}: " if rank >= 0 else ""
        raise SerializationError(
            f"{where}{call}: cannot pickle object of type {type(obj).__name__}: {exc}"
        ) from exc
    if not buffers:   # the common small object: its pickle is the whole payload
        return [memoryview(data)], len(data), True
    if len(buffers) > _MAX_OOB:     # keep the first byte (buffer count) below 0x80
        data = pickle.dumps(obj, protocol=5)
        return [memoryview(data)], len(data), True
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
    return segments, total, False


def layout(payload: "bytearray | memoryview") -> Tuple[int, List[int], int]:
    """``(pickle_len, out-of-band buffer lengths, offset of the pickle)`` of a payload."""
    view = memoryview(payload)
    nbuf, plen = _COUNT.unpack_from(view, 0)
    offset = _COUNT.size
    lengths = [_LEN.unpack_from(view, offset + _LEN.size * i)[0] for i in range(nbuf)]
    return plen, lengths, offset + _LEN.size * nbuf


def in_layout(view: memoryview) -> bool:
    """Whether a payload is in minimpi's layout (not plain pickle bytes)."""
    if view.nbytes < HEAD_SIZE or view[0] >= PICKLE_PROTO:
        return False
    nbuf, plen = _COUNT.unpack_from(view, 0)
    end = HEAD_SIZE + _LEN.size * nbuf
    if nbuf > _MAX_OOB or end > view.nbytes:
        return False
    total = end + plen
    for i in range(nbuf):
        total += _pad(total) + _LEN.unpack_from(view, HEAD_SIZE + _LEN.size * i)[0]
    return total == view.nbytes


def layout_if_ours(payload: "bytearray | memoryview | None") -> "Tuple[int, List[int], int] | None":
    """The payload's :func:`layout` when it is in minimpi's layout; None for plain bytes
    (a buffer sent with ``Send``) or no payload."""
    if payload is None:
        return None
    if type(payload) is bytearray:     # what a receive gives: the common small object first
        n = len(payload)
        if n < HEAD_SIZE or payload[0] >= PICKLE_PROTO:
            return None
        nbuf, plen = _COUNT.unpack_from(payload, 0)
        if not nbuf:
            return (plen, _NO_BUFFERS, HEAD_SIZE) if HEAD_SIZE + plen == n else None
    view = memoryview(payload)
    return layout(view) if in_layout(view) else None


#: what :func:`loads_plain` returns for a payload it leaves to :func:`loads`
NOT_PLAIN = object()


def loads_plain(payload: Any) -> Any:
    """The object of a received payload (a ``bytearray``) that is a bare pickle or in
    minimpi's layout without out-of-band buffers - the common small object - or
    :data:`NOT_PLAIN` for anything else (then :func:`loads` decodes it). Raises what
    unpickling raises."""
    if type(payload) is not bytearray or not payload:
        return NOT_PLAIN
    if payload[0] == PICKLE_PROTO:
        return pickle.loads(payload)
    n = len(payload)
    if n < HEAD_SIZE or payload[0] > PICKLE_PROTO:
        return NOT_PLAIN
    nbuf, plen = _COUNT.unpack_from(payload, 0)
    if nbuf or HEAD_SIZE + plen != n:
        return NOT_PLAIN
    return pickle.loads(memoryview(payload)[HEAD_SIZE:])


def loads(payload: "bytearray | memoryview | None",
          parts: "Tuple[int, List[int], int] | None" = None) -> Any:
    """Rebuild the object from a received payload; out-of-band buffers become views of it.

    An empty payload is ``None``; plain pickle bytes (sent by ``Send``) are unpickled.
    ``parts``: the payload's :func:`layout`, when the caller has checked it already.
    """
    if payload is None:
        return None
    view = memoryview(payload)
    if parts is None:
        if view.nbytes == 0:
            return None
        parts = layout_if_ours(view)
        if parts is None:
            return pickle.loads(view)
    plen, lengths, offset = parts
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


class Pickle:
    """``MPI.pickle``: how mpi4py code pickles objects (``MPI.pickle.dumps(obj)`` gives
    bytes that ``Send`` can carry and ``recv`` unpickles; ``loads`` reverses it).

    ``Pickle(dumps, loads, protocol)`` swaps the functions used by *these* methods; minimpi's
    own lowercase calls always use protocol 5 with out-of-band buffers.
    """

    def __init__(self, dumps: Any = None, loads: Any = None,
                 protocol: int | None = None) -> None:
        self._dumps = dumps if dumps is not None else pickle.dumps
        self._loads = loads if loads is not None else pickle.loads
        self._protocol = pickle.HIGHEST_PROTOCOL if protocol is None else protocol
        self._threshold = 256 * 1024

    # properties, as in mpi4py (where ``MPI.Pickle.PROTOCOL`` exists on the class too)
    @property
    def PROTOCOL(self) -> int:
        """The pickle protocol ``dumps`` uses."""
        return self._protocol

    @PROTOCOL.setter
    def PROTOCOL(self, protocol: int | None) -> None:
        self._protocol = pickle.HIGHEST_PROTOCOL if protocol is None else int(protocol)

    @property
    def THRESHOLD(self) -> int:
        """mpi4py's size above which buffers go out of band (kept; minimpi's own calls
        always send large buffers out of band)."""
        return self._threshold

    @THRESHOLD.setter
    def THRESHOLD(self, threshold: int | None) -> None:
        self._threshold = 256 * 1024 if threshold is None else int(threshold)

    def dumps(self, obj: Any) -> bytes:
        """Serialize ``obj`` to plain pickle bytes."""
        if self._dumps is pickle.dumps:
            return pickle.dumps(obj, self.PROTOCOL)
        return self._dumps(obj)

    def loads(self, data: Any) -> Any:
        """Deserialize plain pickle bytes."""
        return self._loads(data)

    def dumps_oob(self, obj: Any) -> Tuple[bytes, List[memoryview]]:
        """``(pickle bytes, out-of-band buffers)`` with pickle protocol 5."""
        bufs: List[pickle.PickleBuffer] = []
        data = pickle.dumps(obj, protocol=5, buffer_callback=bufs.append)
        return data, [b.raw() for b in bufs]

    def loads_oob(self, data: Any, buffers: Any) -> Any:
        return pickle.loads(data, buffers=buffers)
