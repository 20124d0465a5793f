"""Compiled collectives: a call signature is built once, and a repeat only runs it.

The first call of a signature on a communicator - which collective, which call
(``Allreduce``, ``Iallreduce``...), the byte count, the op, the datatype, the root, the
``algorithm=`` argument, buffer or object form - makes a :class:`CompiledCall`:

* the **algorithm**, chosen by the communicator's plan (:mod:`.plan`) from values every
  member has, so every member compiles the same;
* the **mismatch signature** of the call and the communicator's mismatch bookkeeping
  (:mod:`.mismatch`), worked out once;
* a **channel** (:class:`~minimpi.coll.schedule.Channel`) with its working buffers
  (:mod:`.scratch`): a repeat reopens it (a new slot of the communicator's sequence) and the
  algorithm takes the same buffers again - no allocation, no new channel;
* the op and datatype it was compiled for, by weak reference (a user op may go - mpi4py
  allows 32 at once - and a new object may later get its id).

A repeat runs :meth:`CompiledCall.run` (blocking) or :meth:`CompiledCall.start` (the
nonblocking forms, and each ``Start`` of a persistent collective, which compiles at
``*_init``). Two nonblocking calls of one signature may be in flight at once: the second
gets a channel of its own (and keeps it for later, until the table is full). This is gloo's
idea - build the algorithm once, repeat only ``run()`` - with minimpi's generator schedules
kept as they are, readable and drawable.
"""
from __future__ import annotations

import weakref
from typing import Any, Callable, List, Optional

from .mismatch import call_fields, op_name, open_recorded, signature, type_name, watch_of
from .registry import Algorithm
from .schedule import Channel, Schedule, run, start

#: how many idle channels a signature keeps for nonblocking calls in flight at once
IDLE_CHANNELS = 4
#: the working-buffer bytes a communicator's compiled calls keep between calls: a job whose
#: calls see ever-new sizes must not grow without bound (the plan counts them, and lets the
#: least recently used go first); one call's buffers larger than this are still kept, alone
KEEP_BYTES = 32 << 20


class CompiledCall:
    """One call signature of one collective on one communicator (module docstring)."""

    __slots__ = ("ep", "plan", "collective", "call", "algorithm", "label", "sig", "watch",
                 "root", "opname", "nbytes", "objects", "typename", "op_ref", "datatype_ref",
                 "fields", "_idle")

    def __init__(self, ep: Any, plan: Any, collective: str, call: str, nbytes: int, op: Any,
                 requested: Optional[str], objects: bool, root: Optional[int],
                 datatype: Any) -> None:
        self.ep = ep
        self.plan = plan
        self.collective = collective
        self.call = call
        alg = self.algorithm = plan.algorithm(collective, nbytes, op, requested, objects, call)
        self.label = f"{call}[{alg.name}]"
        self.root = root
        self.nbytes = nbytes
        self.objects = objects
        self.typename = None if objects else type_name(datatype)
        self.opname = op_name(op)
        self.sig = signature(collective, alg.name, root, self.opname, nbytes, objects,
                             self.typename)
        self.watch = watch_of(ep)
        #: what the mismatch bookkeeping records of each call (the same for every call)
        self.fields = call_fields(self.sig, collective, call, alg.name, root, self.opname,
                                  nbytes, objects, self.typename)
        self.op_ref = None if op is None else weakref.ref(op)
        self.datatype_ref = None if datatype is None else weakref.ref(datatype)
        self._idle: List[Channel] = []

    def channel(self) -> Channel:
        """The channel of the next call, holding its slot: an idle one reopened, or a new
        one (then :meth:`sign` it)."""
        if self._idle:
            ch = self._idle.pop()
            self.plan.kept_bytes -= ch.temps.nbytes
            ch.reopen()
            return ch
        bus = self.ep.engine.bus
        return Channel(self.ep, self.label, bus.step_reporter() if bus.steps else None,
                       self.objects, self.plan)

    def sign(self, ch: Channel) -> None:
        """Give ``ch`` the call's signed tag and check it against what already arrived
        (:func:`~minimpi.coll.mismatch.open_slot`: a mismatch raises here)."""
        ch.watch = self.watch
        ch.tag = open_recorded(self.ep, self.watch, ch.tag, self.fields)

    def release(self, ch: Channel) -> None:
        """``ch``'s call is over: keep it (and its working buffers) for the next one. The
        communicator keeps at most :data:`KEEP_BYTES` of them (or one call's, if larger):
        the idle channels of the calls used least recently are let go to make room."""
        if len(self._idle) < IDLE_CHANNELS:
            kept = ch.temps.nbytes
            plan = self.plan
            if plan.kept_bytes + kept > KEEP_BYTES:
                plan.make_room(KEEP_BYTES - kept, self)
            plan.kept_bytes += kept
            self._idle.append(ch)
            plan.keeping(self)

    def let_go(self) -> int:
        """Drop this call's idle channels (the plan makes room); the bytes they kept."""
        freed = sum(ch.temps.nbytes for ch in self._idle)
        self._idle.clear()
        return freed

    def run(self, ch: Channel, invoke: Callable[[Algorithm, Channel], Schedule]) -> Any:
        """Run the call on ``ch`` (from :meth:`channel`) to the end; the algorithm's result."""
        try:
            return run(ch, invoke(self.algorithm, ch))
        finally:
            self.release(ch)

    def start(self, ch: Channel, invoke: Callable[[Algorithm, Channel], Schedule],
              finalize: Optional[Callable[[Any], Any]] = None) -> Any:
        """Start the call on ``ch`` as a nonblocking collective (its request)."""
        return start(ch, invoke(self.algorithm, ch), finalize, self.release)
