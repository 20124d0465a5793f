"""Errors for the mix-ups between Python-object and buffer messages, with the fix.

mpi4py has two families: lowercase methods move Python objects (pickled), Capitalized ones
move buffers. Students mix them up in three ways that otherwise end in an unhelpful error
(or, in real MPI, garbage):

* ``data = {}; comm.recv(data, source=0)`` - a receive "into" an object. mpi4py 4 takes
  ``recv``'s ``buf`` as the memory to receive the pickle into: it warns that the argument is
  deprecated and then raises ``TypeError`` for anything that is not a writable buffer. We
  raise the ``TypeError`` too, saying that ``recv`` returns the object
  (:func:`check_object_recv_buf`).
* ``comm.Recv([], source=0)`` - a buffer receive given nothing to write into
  (:func:`recv_buffer_error`).
* ``comm.Send(array)`` on one side, ``comm.recv()`` on the other: the bytes of the array
  are not a pickle (:func:`not_an_object`).
"""
from __future__ import annotations

from typing import Any

from ..constants import ANY_SOURCE, ANY_TAG
from ..data import serialization
from ..errors import BufferSpecError


def _args(source: int, tag: int) -> str:
    src = "MPI.ANY_SOURCE" if source == ANY_SOURCE else str(source)
    return f"source={src}" + ("" if tag == ANY_TAG else f", tag={tag}")


def check_object_recv_buf(comm: Any, buf: Any, call: str, source: int, tag: int) -> None:
    """``recv``/``irecv``'s optional ``buf`` must be a writable buffer or a byte count, as in
    mpi4py (which passes it to MPI as the memory the pickle lands in)."""
    if buf is None or isinstance(buf, int):
        return
    try:
        view = memoryview(buf)
    except TypeError:
        raise TypeError(
            f"rank {comm.rank}: {call}(buf={type(buf).__name__}, {_args(source, tag)}) on "
            f"{comm.name}: buf must be a writable buffer (the memory a pickled message is "
            f"received into), not a {type(buf).__name__}; the lowercase {call} returns the "
            f"object it receives, so write: data = comm.{call}({_args(source, tag)})"
            + (" and data = req.wait()" if call == "irecv" else "")) from None
    if view.readonly:
        raise BufferError(
            f"rank {comm.rank}: {call}(buf=..., {_args(source, tag)}) on {comm.name}: buf is "
            f"read-only ({type(buf).__name__}); pass a writable buffer such as a bytearray, "
            f"or no buf at all: data = comm.{call}({_args(source, tag)})")


def recv_buffer_error(comm: Any, call: str, buf: Any, source: int, tag: int,
                      cause: BufferSpecError) -> BufferSpecError:
    """A buffer receive (``Recv``, ``Irecv``...) whose ``buf`` cannot be written into: the
    parser's reason, who and where, and the two ways to fix it."""
    lower = call[0].lower() + call[1:]
    reason = str(cause)
    reason = reason[len(call) + 2:] if reason.startswith(f"{call}: ") else reason
    shown = repr(buf) if isinstance(buf, (list, tuple, dict)) and len(repr(buf)) < 30 \
        else type(buf).__name__
    return BufferSpecError(
        f"rank {comm.rank}: {call}(buf={shown}, {_args(source, tag)}) on {comm.name}: {reason}. "
        f"A buffer receive writes the message into memory you provide, sized for it: "
        f"buf = numpy.empty(count, dtype); comm.{call}(buf, {_args(source, tag)}) (or "
        f"[buf, MPI.DOUBLE]). To receive a Python object (a list, a dict...) use the "
        f"lowercase method, which returns it: data = comm.{lower}({_args(source, tag)})")


def looks_pickled(payload: Any) -> bool:
    """Whether a received payload has the layout lowercase sends produce (a header, then a
    pickle starting with protocol 5's opcode). Raw buffer bytes practically never do."""
    view = memoryview(payload).cast("B")
    try:
        plen, lengths, offset = serialization.layout(view)
    except Exception:   # shorter than the header
        return False
    return (offset + plen + sum(lengths) <= view.nbytes and plen >= 2
            and bytes(view[offset:offset + 2]) == b"\x80\x05")


def not_an_object(rank: int, what: str, source: int, nbytes: int) -> str:
    """The explanation when an object receive got a message that is not a pickle."""
    return (f"rank {rank}: {what}: the {nbytes}-byte message from rank {source} is not a "
            f"pickled Python object, so it was sent as a buffer (Send, Isend, Sendrecv...); "
            f"receive it into a buffer of the same type and size, e.g. buf = "
            f"numpy.empty(count, dtype); comm.Recv(buf, source={source}) - or send it with the "
            f"lowercase comm.send(obj, dest) on the other side")
