"""Where this rank's point-to-point messages and nonblocking requests came from.

MPI programs are erroneous when they leave a message unreceived or a request never completed,
yet they usually end normally - with a wrong answer, or a hang elsewhere. At finalize
(:mod:`minimpi.runtime.leftovers`) minimpi reports such leftovers, as MPICH's and Open MPI's
debug modes do, naming the line of the script each one came from. This ledger is what makes
the line known:

* :meth:`Ledger.sent`: per (destination, communicator, tag), the user's file:line of the
  last send and how many there were - what a peer's leftover message is traced back to (the
  receiver has the message, the sender the line; the finalize exchange brings them together);
* :meth:`Ledger.started`: nonblocking requests (``isend``, ``Irecv``, ...) until a wait or test
  completes them (or ``Free``), with their line. Only weak references are kept, so a
  request's buffers and received object are never held longer than the program holds them;
  the price: a request the program dropped without completing it is not reported.

The runtime of a real job installs one on the engine (``engine.ledger``); worlds of threads
have none and skip this. It costs a dictionary update and a walk of two or three stack
frames per point-to-point call (a few tenths of a microsecond). Memory is bounded: at most
:data:`MAX_SITES` send sites (a program using ever new tags stops recording new ones), and
open requests are pruned (finished and dropped ones go) whenever the table has doubled, so
it never holds more than twice the requests the program itself holds open, plus 64 - a
weak reference and a line each, far less than each request holds. Every request keeps its
line, however many are in flight, so the report names exactly those never completed.
"""
from __future__ import annotations

import os
import sys
import threading
import weakref
from typing import Any, Dict, List, Optional, Tuple

MAX_SITES = 10_000

#: where a call came from: (code object, offset of the calling instruction) of the user's
#: frame; made into ``script.py:12`` only when a leftover is reported (see :func:`line_text`:
#: a frame's line number is worked out from its code's line table, which costs more than
#: the rest of the record on every send)
Site = Tuple[Any, int]

#: id of a code object -> whether it is the program's (not minimpi's, nor runpy's, which may
#: start it); by id, since a code object's hash is worked out from its whole contents each
#: time, and the code objects stay alive (_CODES), so an id is never another's
_USER_CODE: Dict[int, bool] = {}
_CODES: List[Any] = []


def _is_user_frame(f: Any) -> bool:
    code = f.f_code
    user = _USER_CODE.get(id(code))
    if user is None:
        name = f.f_globals.get("__name__", "")
        _CODES.append(code)
        user = _USER_CODE[id(code)] = (not name.startswith(("minimpi.", "runpy"))
                                       and name != "minimpi")
    return user


class SendSite:
    """The last send to one (destination, context, tag): its site (the code object and
    offset of a :data:`Site`) and call, and how many sends there were. Updated in place
    without a lock (it is on every send): a send made at the same moment by another thread
    may be missed in ``count``, nothing else."""

    __slots__ = ("code", "offset", "call", "count")

    def __init__(self, site: Site, call: str) -> None:
        self.code, self.offset = site
        self.call = call
        self.count = 1

    @property
    def site(self) -> Site:
        return self.code, self.offset

    def again(self, site: Site, call: str) -> None:
        """Another send to the same key."""
        self.code, self.offset = site
        self.call = call
        self.count += 1


#: the last send and how many, by (destination world rank, context, tag)
Sites = Dict[Tuple[int, int, int], SendSite]


def user_site() -> Site:
    """The innermost frame outside the minimpi package (and runpy, which may start it)."""
    f = sys._getframe(1)
    known = _USER_CODE.get
    while f is not None:
        user = known(id(f.f_code))          # (_is_user_frame, inline: a call per frame
        if user is None:                    # costs more than the look)
            user = _is_user_frame(f)
        if user:
            return f.f_code, f.f_lasti
        f = f.f_back
    return None, 0


def line_text(site: Site) -> str:
    code, offset = site
    if code is None:
        return "?"
    return f"{os.path.basename(code.co_filename)}:{line_of(code, offset)}"


def line_of(code: Any, offset: int) -> int:
    """The line of ``code`` that its instruction at byte ``offset`` (a frame's ``f_lasti``)
    belongs to."""
    import dis  # (only when a leftover is reported)

    line = code.co_firstlineno
    for start, lineno in dis.findlinestarts(code):
        if start > offset:
            break
        if lineno is not None:
            line = lineno
    return line


class Ledger:
    """(Threads of the program record at once: one lock makes each record one step.)"""

    def __init__(self) -> None:
        self.sites: Sites = {}
        self.open: Dict[int, Tuple[Any, Site]] = {}   # serial -> (weakref to request, site)
        self._serial = 0
        self._prune_at = 64
        self._lock = threading.Lock()

    def sent(self, dest: int, context: int, tag: int, call: str, site: Site) -> None:
        """A send to world rank ``dest`` on ``context`` with ``tag``, from ``site``."""
        key = (dest, context, tag)
        rec = self.sites.get(key)
        if rec is None:
            self.first_send(key, site, call)
        else:
            rec.again(site, call)

    def first_send(self, key: Tuple[int, int, int], site: Site, call: str) -> None:
        """The first send to ``key`` (destination, context, tag): a new record, unless the
        table is full (:data:`MAX_SITES`)."""
        with self._lock:
            if key not in self.sites and len(self.sites) < MAX_SITES:
                self.sites[key] = SendSite(site, call)
            elif key in self.sites:
                self.sites[key].again(site, call)

    def started(self, req: Any, site: Site) -> None:
        """A nonblocking request the user must complete with a wait or test."""
        with self._lock:
            if len(self.open) >= self._prune_at:      # amortized: the table at most doubles
                self.open = {k: v for k, v in self.open.items() if _pending(v[0])}
                self._prune_at = max(64, 2 * len(self.open))
            self._serial += 1
            self.open[self._serial] = (weakref.ref(req), site)

    def sites_for(self, dest: int) -> Dict[Tuple[int, int], Tuple[str, str, int]]:
        """(context, tag) -> (file:line, call, count) of the sends to world rank ``dest``."""
        with self._lock:
            sites = list(self.sites.items())
        return {(c, t): (line_text(rec.site), rec.call, rec.count)
                for (d, c, t), rec in sites if d == dest}

    def never_completed(self) -> List[Tuple[Any, str]]:
        """Requests still alive that no wait or test completed (nor Free), with their
        file:line."""
        with self._lock:
            entries = list(self.open.values())
        return [(ref(), line_text(site)) for ref, site in entries if _pending(ref)]

    def line_of(self, req: Any) -> Optional[str]:
        """The file:line a request was started at, if this ledger has it."""
        with self._lock:
            entries = list(self.open.values())
        for ref, site in entries:
            if ref() is req:
                return line_text(site)
        return None


def _pending(ref: Any) -> bool:
    """Whether a weakly referenced request is alive and not yet completed by a wait or test
    (a request is falsy - mpi4py's REQUEST_NULL - once completed or freed)."""
    req = ref()
    return req is not None and bool(req)


def note_send(ledger: Ledger, dest: int, context: int, tag: int, call: str) -> None:
    """Record a blocking send of the express lane to world rank ``dest`` (called by
    ``pt2pt.Send`` or ``send``, hand-written front methods called by the program: the
    caller's frame is two up, so the site costs a frame look, not a walk)."""
    f = sys._getframe(2)
    key = (dest, context, tag)
    rec = ledger.sites.get(key)     # (Ledger.sent, inline: this is on every express send)
    if rec is not None and rec.code is f.f_code and rec.call is call:
        # the same code as the last send to this key: the program's (it was when
        # recorded), so no look at whose frame it is
        rec.offset = f.f_lasti
        rec.count += 1
        return
    user = _USER_CODE.get(id(f.f_code))          # (_is_user_frame, inline)
    if user is None:
        user = _is_user_frame(f)
    site = (f.f_code, f.f_lasti) if user else user_site()
    if rec is None:
        ledger.first_send(key, site, call)
    else:
        rec.again(site, call)


def note(ep: Any, req: Any, peer: int, tag: int, call: str, sending: bool) -> Any:
    """Record a point-to-point call of the comm layer (``peer``: the communicator rank sent
    to, for sends) in the engine's ledger, if it has one; returns ``req``."""
    ledger: Optional[Ledger] = ep.engine.ledger
    if ledger is not None:
        record_send = sending and 0 <= peer < len(ep.group)
        must_complete = call[:1] in ("i", "I")   # isend, Irecv, ...: the user completes it
        if record_send or must_complete:         # a blocking receive has nothing to record
            site = user_site()
            if record_send:
                ledger.sent(ep.group[peer], ep.context, tag, call, site)
            if must_complete:
                ledger.started(req, site)
    return req
