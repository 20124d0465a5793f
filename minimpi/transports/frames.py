"""The fixed binary frame header of the point-to-point protocol.

Every frame starts with a 32-byte little-endian header::

    kind u8 | flags u8 | extra u16 | context u32 | source i32 | tag i32 | msg_id u64 | length u64

``source`` is the sender's rank *in the communicator* named by ``context``; ``length`` is
64-bit so buffers and objects above 2 GiB travel as one message; ``extra`` belongs to the
transport (0 from the engine; shm marks a payload it sends by reference there). Frame kinds:

- ``EAGER``: the payload (``length`` bytes) follows at once.
- ``RTS`` (request to send): a large message waits for its receive; no payload, ``length`` is
  the message size, ``msg_id`` names it.
- ``CTS`` (clear to send): the receiver matched ``msg_id``; the sender may stream the data.
- ``DATA``: the payload of a rendezvous message, ``msg_id`` says which.
- ``SYNC_ACK``: a synchronous-mode (``Ssend``) eager message was matched.
"""
from __future__ import annotations

import struct
from typing import Any, Callable, Dict, NamedTuple

HEADER = struct.Struct("<BBHIiiQQ")
HEADER_SIZE = HEADER.size  # 32
#: the header without its msg_id (skipped), its kind, flags and extra as one word (kind
#: | flags << 8 | extra << 16): what an express receive reads - five small ints, where a
#: msg_id soon is a new int object, and one test of the word for what it must not be
MATCH_FIELDS = struct.Struct("<IIii8xQ")
#: receive buffers up to this many bytes read a frame's match fields and payload in one
#: unpack (:data:`MATCH_AND_PAYLOAD`)
PAYLOAD_WITH_MATCH_MAX = 64
#: by a receive buffer's size m: :data:`MATCH_FIELDS` and the m bytes after the header as
#: one bytes object - a small express receive's header and payload in one call, where the
#: payload's own slice costs about as much as the unpack (the bytes past a shorter
#: frame's end are read and dropped)
MATCH_AND_PAYLOAD = {m: struct.Struct(f"<IIii8xQ{m}s")
                     for m in range(PAYLOAD_WITH_MATCH_MAX + 1)}

EAGER = 1
RTS = 2
CTS = 3
DATA = 4
SYNC_ACK = 5

# flags
F_OBJECT = 1  # payload is a serialized Python object (see minimpi.data.serialization)
F_SYNC = 2    # synchronous send: the receiver acknowledges the match
F_PICKLE = 4  # an object's payload is its bare pickle, without the layout's head

#: frames that carry ``length`` bytes of payload after the header
HAS_PAYLOAD = frozenset((EAGER, DATA))

#: length -> ``pack_into(target, 0, data)`` of a struct of one ``length``-byte string, for
#: lengths up to :data:`FILL_MAX` (``FILLERS.get(n) or filler(n)``: the copy of an express
#: receive, without a call when it is cached)
FILLERS: Dict[int, Callable[..., None]] = {}
FILL_MAX = 4096


def filler(n: int) -> Callable[..., None]:
    """``fill(target, 0, data)``: copies the ``n`` bytes ``data`` (a bytes object) into the
    start of ``target``, any writable C-contiguous buffer - a numpy array too, without a
    memoryview made of it (which costs more than the copy of a small message)."""
    fill = FILLERS.get(n)
    if fill is None:
        fill = struct.Struct(f"{n}s").pack_into
        if n <= FILL_MAX:
            FILLERS[n] = fill
    return fill


def copy_into(target: Any, data: Any) -> None:
    """The bytes of ``data`` (any bytes-like object) into the start of ``target``, any
    writable C-contiguous buffer at least as long (a byte memoryview, a numpy array...)."""
    src = data if type(data) is bytes or type(data) is bytearray else \
        memoryview(data).cast("B")
    dst = target if type(target) is memoryview and target.format == "B" else \
        memoryview(target).cast("B")
    dst[:len(src)] = src


class Header(NamedTuple):
    """A frame header, field for field as on the wire (so a reader builds it straight from
    the unpacked bytes: ``tuple.__new__(Header, HEADER.unpack_from(buf, offset))``)."""

    kind: int
    flags: int
    extra: int
    context: int
    source: int
    tag: int
    msg_id: int
    length: int

    def pack(self) -> bytes:
        return HEADER.pack(*self)


def pack(kind: int, flags: int, context: int, source: int, tag: int, msg_id: int, length: int) -> bytes:
    return HEADER.pack(kind, flags, 0, context, source, tag, msg_id, length)


def unpack(buf, offset: int = 0) -> Header:
    return tuple.__new__(Header, HEADER.unpack_from(buf, offset))
