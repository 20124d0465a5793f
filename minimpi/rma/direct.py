"""The fused fast path of ``Put``, ``Get`` and ``Flush`` to memory this rank reaches
directly: any rank of a window in shared memory (``Allocate_shared``, ``Allocate`` on one
host) and this rank's own window.

The general path (:mod:`.operations`) parses the origin into a ``BufSpec``, builds a target
``Layout``, checks it and returns a request object, and every call runs a round of progress
first: about a hundred Python calls for an 8-byte Put + Flush. Here a contiguous origin of a
named datatype (a C-contiguous numpy array, or ``[array, count, datatype]``) and a target
given as nothing or a displacement take: the epoch check, one bounds check, one memoryview
slice copy, and no request; a ``Flush`` with nothing outstanding returns after its checks.
Anything else - another origin form, ``[disp, count, datatype]`` targets, a non-direct
target, ``PROC_NULL`` - answers ``False`` and the caller takes the general path, which also
raises the errors of malformed arguments. Errors found here are the general path's own: the
epoch (``MPI_ERR_RMA_SYNC``) and the bounds (``MPI_ERR_RMA_RANGE``, naming the rank, window,
offset and size).

Progress: the general path polls the engine on every call so that a rank whose one-sided
calls all complete locally still serves its peers (lock requests, other communicators). The
fast path polls once every :data:`POLL_EVERY` calls per window instead: a rank that spins on
``Get`` still makes progress, at a fraction of the cost.

Cost: O(1) Python work plus one copy of the bytes (memcpy speed).
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import numpy as np

from ..data.datatypes import Datatype
from .errors import RmaRangeError
from .exposed import outside_text

#: fast calls on a window between two rounds of progress
POLL_EVERY = 16

#: numpy type codes whose memoryview casts to bytes (struct's native single characters)
_CASTABLE = frozenset("?bBhHiIlLqQnNefd")

#: id of a named contiguous datatype handle -> (that handle, its size). The entry holds the
#: handle so that its id cannot be reused while the entry lives: besides the module's
#: constants, other handle objects on a named type (``MPI.Datatype(MPI.INT)``) come and go,
#: and a later one of another size may get a freed one's id.
_NAMED_SIZE: Dict[int, Tuple[Datatype, int]] = {}
_NAMED_SIZE_LIMIT = 256


def named_size(datatype: Any) -> Optional[int]:
    """The size of ``datatype`` if it is a named (predefined) contiguous type, else None."""
    known = _NAMED_SIZE.get(id(datatype))
    if known is not None and known[0] is datatype:
        return known[1]
    if type(datatype) is not Datatype or datatype.is_null or not datatype.is_named \
            or not datatype.is_contiguous:
        return None
    if len(_NAMED_SIZE) >= _NAMED_SIZE_LIMIT:
        _NAMED_SIZE.clear()
    size = datatype.size
    _NAMED_SIZE[id(datatype)] = (datatype, size)
    return size


def origin_view(origin: Any, writable: bool) -> Optional[memoryview]:
    """The origin's bytes as a 1-D byte memoryview (zero-copy) when it is a C-contiguous
    numpy array of a plain numeric type, or ``[array, count, datatype]`` with a named
    contiguous datatype whose ``count`` items fit in the array; None otherwise (the general
    path then parses it, errors included). ``writable``: a Get's destination."""
    t = type(origin)
    if t is np.ndarray:
        arr, n = origin, -1
    elif (t is list or t is tuple) and len(origin) == 3:
        arr, count, datatype = origin
        if type(arr) is not np.ndarray or type(count) is not int or count < 0:
            return None
        size = named_size(datatype)
        if size is None:
            return None
        n = count * size
        if n > arr.nbytes:
            return None
    else:
        return None
    if arr.dtype.char not in _CASTABLE or not arr.flags.c_contiguous or \
            (writable and not arr.flags.writeable) or not arr.dtype.isnative:
        return None
    view = memoryview(arr).cast("B")
    return view if n < 0 else view[:n]


def _displacement(s: Any, rank: int, target: Any) -> Optional[int]:
    if target is None:
        return 0
    if type(target) is int:
        return target * s.units[rank]
    return None


def _tick(s: Any) -> None:
    s.unpolled += 1
    if s.unpolled >= POLL_EVERY:
        s.unpolled = 0
        s.endpoint.engine.poll()


def _reach(s: Any, origin: Any, target_rank: Any, target: Any, call: str,
           lands: bool) -> "tuple[memoryview, memoryview, int] | None":
    """(window memory, origin memory, start byte) of a Put (``lands`` False) or Get into
    directly reachable memory, after the epoch and range checks and the lock's grant; None
    when it is not this path's case (nothing was done, nothing checked that the general path
    would not check again)."""
    views = s.direct_views if s is not None else None
    if not views or type(target_rank) is not int:
        return None
    window = views.get(target_rank)
    if window is None:
        return None
    data = origin_view(origin, lands)
    if data is None:
        return None
    start = _displacement(s, target_rank, target)
    if start is None:
        return None
    s.epochs.check_access(target_rank, call)
    if len(data):
        _check_range(s, target_rank, start, len(data), len(window), call)
        if s.origin.grants:
            s.wait_for_grant(target_rank, call)   # a lock asked of it must be ours first
    return window, data, start


def put(s: Any, origin: Any, target_rank: Any, target: Any) -> bool:
    """``Win.Put`` into directly reachable memory; False: not this path's case."""
    reached = _reach(s, origin, target_rank, target, "Put", False)
    if reached is None:
        return False
    window, data, start = reached
    if len(data):
        window[start:start + len(data)] = data
    _tick(s)
    return True


def get(s: Any, origin: Any, target_rank: Any, target: Any) -> bool:
    """``Win.Get`` from directly reachable memory; False: not this path's case."""
    reached = _reach(s, origin, target_rank, target, "Get", True)
    if reached is None:
        return False
    window, landing, start = reached
    if len(landing):
        landing[:] = window[start:start + len(landing)]
    _tick(s)
    return True


def flush(s: Any, rank: Any) -> bool:
    """``Win.Flush(rank)`` when nothing is outstanding towards ``rank`` (everything went
    straight to memory): the epoch check only. False: the general path's case."""
    if s is None or s.freed or type(rank) is not int or not 0 <= rank < s.size \
            or not s.origin.idle(rank):
        return False
    s.epochs.check_flush(rank, "Flush")
    _tick(s)
    return True


def _check_range(s: Any, rank: int, start: int, n: int, size: int, call: str) -> None:
    if start < 0 or start + n > size:
        raise RmaRangeError(outside_text(s.rank, rank, s.label, call, start, start + n, size))


def views_of(s: Any) -> Dict[int, memoryview]:
    """Target rank -> byte memoryview of its window memory, for every target this rank
    reaches directly (see :meth:`_State.direct_memory`)."""
    if s.segment is not None:
        return {r: memoryview(part) for r, part in enumerate(s.segment.parts)}
    if not s.exposed.dynamic:
        return {s.rank: memoryview(s.exposed.memory)}
    return {}
