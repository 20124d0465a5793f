"""Errors for the mix-ups between Python-object and buffer messages, with the fix.

mpi4py has two families: lowercase methods move Python objects (pickled), Capitalized ones
move buffers. Students mix them up in three ways that otherwise end in an unhelpful error
(or, in real MPI, garbage):

* ``data = {}; comm.recv(data, source=0)`` - a receive "into" an object. mpi4py 4 takes
  ``recv``'s ``buf`` as the memory to receive the pickle into: it warns that the argument is
  deprecated and then raises ``TypeError`` for anything that is not a writable buffer
  (``message.recv_capacity``). The ``TypeError`` here also says that ``recv`` returns the
  object (:func:`recv_buf_error`).
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


def recv_buf_error(comm: Any, buf: Any, call: str, source: int, tag: int,
                   cause: TypeError) -> TypeError:
    """``recv``/``irecv``'s ``buf`` that is neither a writable buffer nor a byte count (mpi4py
    passes it to MPI as the memory the pickle lands in): the same error, saying that the
    lowercase receive returns the object."""
    text = (f"rank {comm.rank}: {call}(buf={type(buf).__name__}, {_args(source, tag)}) on "
            f"{comm.name}: buf must be a writable buffer (the memory a pickled message is "
            f"received into) or a byte count, not a {type(buf).__name__}; the lowercase "
            f"{call} returns the object it receives, so write: data = "
            f"comm.{call}({_args(source, tag)})"
            + (" and data = req.wait()" if call == "irecv" else ""))
    return _same_kind(cause, text)


def _same_kind(cause: Exception, text: str) -> Exception:
    """``cause``'s exception class with ``text`` (callers may catch TypeError or MPI.Exception)."""
    try:
        return type(cause)(text)
    except Exception:   # a class that wants other arguments
        return TypeError(text) if isinstance(cause, TypeError) else BufferSpecError(text)


def recv_buffer_error(comm: Any, call: str, buf: Any, source: int, tag: int,
                      cause: BufferSpecError) -> BufferSpecError:
    """A buffer receive (``Recv``, ``Irecv``...) whose ``buf`` cannot be written into: the
    parser's reason, who and where, and the two ways to fix it."""
    lower = call[0].lower() + call[1:]
    reason = str(cause)
    reason = reason[len(call) + 2:] if reason.startswith(f"{call}: ") else reason
    shown = repr(buf) if isinstance(buf, (list, tuple, dict)) and len(repr(buf)) < 30 \
        else type(buf).__name__
    return _same_kind(cause,
        f"rank {comm.rank}: {call}(buf={shown}, {_args(source, tag)}) on {comm.name}: {reason}. "
        f"A buffer receive writes the message into memory you provide, sized for it: "
        f"buf = numpy.empty(count, dtype); comm.{call}(buf, {_args(source, tag)}) (or "
        f"[buf, MPI.DOUBLE]). To receive a Python object (a list, a dict...) use the "
        f"lowercase method, which returns it: data = comm.{lower}({_args(source, tag)})")


def looks_pickled(payload: Any) -> bool:
    """Whether a received payload is a pickled object: in the layout lowercase sends produce,
    or plain pickle bytes (``Send(pickle.dumps(obj))``, which mpi4py's ``recv`` accepts),
    which start with pickle's PROTO opcode. The bytes of an array practically never do."""
    view = memoryview(payload).cast("B")
    return serialization.in_layout(view) or (
        view.nbytes > 0 and view[0] == serialization.PICKLE_PROTO)


def not_an_object(rank: int, what: str, source: int, nbytes: int) -> str:
    """The explanation when an object receive got a message that is not a pickle."""
    return (f"rank {rank}: {what}: the {nbytes}-byte message from rank {source} is not a "
            f"pickled Python object, so it was sent as a buffer (Send, Isend, Sendrecv...); "
            f"receive it into a buffer of the same type and size, e.g. buf = "
            f"numpy.empty(count, dtype); comm.Recv(buf, source={source}) - or send it with the "
            f"lowercase comm.send(obj, dest) on the other side")
