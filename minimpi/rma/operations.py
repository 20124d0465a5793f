"""``MPI.Win``'s data movement: Put, Get, the accumulates, Fetch_and_op, Compare_and_swap
and their request forms. Each picks its path per target: straight into memory (itself, a
shared segment, cross memory attach on one host) or a request to the target's server.
Accumulates applied straight into a shared segment hold its byte-range lock
(:meth:`_State.atomic`); their order per origin is the program's, since each is complete
before the call returns."""
from __future__ import annotations

import operator
from typing import Any, Tuple

import numpy as np

from ..constants import (
    PROC_NULL,
    WIN_FLAVOR_DYNAMIC,
)
from ..data.buffers import BufSpec, parse_buffer
from ..data.datatypes import Datatype, resolve_datatype
from ..data.ops import SUM, Op
from ..errors import CountError, DatatypeError, OpError
from ..p2p.request import CompletedRequest, Request
from . import am, cma, direct
from .am import ACC, CAS, GET, GET_ACC, PUT
from .errors import RmaRangeError
from .exposed import outside_text
from .layout import Layout, element_dtype, gather, origin_bytes, scatter, store_into_origin
from .state import WinHandle, _check_int, _State


class Operations(WinHandle):
    """One-sided operations (mixed into ``MPI.Win``)."""

    __slots__ = ()

    # -- argument handling shared by the operations -----------------------------------------
    def _layout(self, s: _State, target_rank: int, target: Any, default: BufSpec,
                call: str) -> Tuple[Layout, Datatype]:
        """The target layout of ``target`` (None, a displacement, or [disp, count, type]),
        checked against the target's window size."""
        disp, count, datatype = 0, default.count, default.datatype
        if target is not None:
            if isinstance(target, (list, tuple)):
                if not 1 <= len(target) <= 3:
                    raise ValueError(f"Win.{call}: target must be [disp], [disp, count] or "
                                     f"[disp, count, datatype], got {len(target)} items")
                disp = _check_int(target[0], call, "target displacement")
                if len(target) >= 2 and target[1] is not None:
                    count = _check_int(target[1], call, "target count")
                if len(target) == 3 and target[2] is not None:
                    if not isinstance(target[2], (Datatype, str)):
                        raise TypeError(f"Win.{call}: target datatype must be an MPI datatype, "
                                        f"got {type(target[2]).__name__}")
                    datatype = resolve_datatype(target[2], call=f"Win.{call}",
                                                arg="target datatype")
            else:
                try:
                    disp = operator.index(target)
                except TypeError:
                    raise ValueError(f"Win.{call}: target must be None, an int displacement or "
                                     f"a list/tuple, got {type(target).__name__}") from None
        if count < 0:
            raise CountError(f"Win.{call}: target count must be >= 0, got {count}")
        unit = 1 if s.flavor == WIN_FLAVOR_DYNAMIC else s.units[target_rank]
        layout = Layout.of(disp * unit, datatype, count)
        if s.flavor != WIN_FLAVOR_DYNAMIC and layout.nbytes and \
                (layout.low < 0 or layout.high > s.sizes[target_rank]):
            raise RmaRangeError(outside_text(s.rank, target_rank, s.label, call, layout.low,
                                             layout.high, s.sizes[target_rank]))
        return layout, datatype

    @staticmethod
    def _same_bytes(origin: BufSpec, layout: Layout, call: str, what: str = "origin") -> None:
        n = origin.count * origin.datatype.size
        if n != layout.nbytes:
            raise CountError(f"Win.{call}: the {what} buffer holds {n} bytes "
                             f"({origin.count} x {origin.datatype.name}) but the target "
                             f"layout holds {layout.nbytes}; they must match")

    @staticmethod
    def _check_op(op: Any, datatype: Datatype, call: str) -> np.dtype:
        if not isinstance(op, Op):
            raise OpError(f"Win.{call}: op must be an MPI.Op such as MPI.SUM, got "
                          f"{type(op).__name__}")
        if not op.is_predefined:
            raise OpError(f"Win.{call}: one-sided accumulates take predefined operations "
                          f"only (MPI.SUM, MPI.REPLACE, ...), not a user-defined Op")
        dtype = element_dtype(datatype)
        if dtype is None:
            raise DatatypeError(f"Win.{call}: target datatype {datatype.name} mixes basic "
                                f"types; accumulates need one basic type")
        op.check_datatype(datatype, f"Win.{call}")
        return dtype

    def _open(self, origin: Any, target_rank: Any, call: str,
              writable: bool) -> Tuple[_State, int, Any]:
        """What every Put, Get and Accumulate starts with: the window's state, the target
        rank (``PROC_NULL``: nothing to do) and the origin buffer, checked in that order;
        for a real target, that an access epoch to it is open."""
        s = self._call(call)
        rank = self._target_rank(s, target_rank, call)
        spec = parse_buffer(origin, writable=writable, call=f"Win.{call}", arg="origin")
        if rank != PROC_NULL:
            s.epochs.check_access(rank, call)
        return s, rank, spec

    # -- Put / Get ---------------------------------------------------------------------------
    def _put(self, origin: Any, target_rank: Any, target: Any, call: str) -> Request:
        s, rank, spec = self._open(origin, target_rank, call, False)
        if rank == PROC_NULL:
            return CompletedRequest()
        layout, _ = self._layout(s, rank, target, spec, call)
        self._same_bytes(spec, layout, call)
        data = origin_bytes(spec)
        memory = s.direct_memory(rank, call)
        if memory is not None:
            scatter(memory, layout, data)
            return CompletedRequest()
        if rank in s.reachable and layout.nbytes and \
                self._cross(s, rank, layout, np.frombuffer(data, np.uint8), True, call):
            return CompletedRequest()
        if rank in s.rdma.targets and layout.single and layout.nbytes:
            req = s.rdma.post(s, rank, layout.start, memoryview(data).cast("B"), True, call)
            if req is not None:
                return req
        return s.origin.send(rank, (PUT, layout.wire()), data, f"Win.{call}")

    def _get(self, origin: Any, target_rank: Any, target: Any, call: str) -> Request:
        s, rank, spec = self._open(origin, target_rank, call, True)
        if rank == PROC_NULL:
            return CompletedRequest()
        layout, _ = self._layout(s, rank, target, spec, call)
        self._same_bytes(spec, layout, call)
        memory = s.direct_memory(rank, call)
        if memory is not None:
            store_into_origin(spec, gather(memory, layout))    # one copy
            return CompletedRequest()
        if rank in s.reachable and layout.nbytes:
            # straight into the origin's bytes (a non-contiguous origin's are a temporary
            # that finish() scatters); a refused transfer moved nothing
            landing = np.frombuffer(spec.view, np.uint8, layout.nbytes)
            if self._cross(s, rank, layout, landing, False, call):
                spec.finish()
                return CompletedRequest()
        if rank in s.rdma.targets and layout.single and layout.nbytes:
            landing = memoryview(np.frombuffer(spec.view, np.uint8, layout.nbytes))
            req = s.rdma.post(s, rank, layout.start, landing, False, call, spec.finish)
            if req is not None:
                return req
        return s.origin.ask(rank, (GET, layout.wire()), None, f"Win.{call}",
                            lambda body: store_into_origin(spec, body))

    @staticmethod
    def _cross(s: _State, rank: int, layout: Layout, local: np.ndarray, write: bool,
               call: str) -> bool:
        """A straight copy to/from a same-host peer's window memory (cross memory attach);
        False - and that peer is reached by messages from now on - if the kernel refuses.
        Ordering: this rank's earlier requests to ``rank`` are completed first."""
        s.wait_for_grant(rank, call)
        if s.origin.pending.get(rank):
            s.origin.complete_local([rank])
        if rank in s.origin.dirty:
            s.origin.complete_remote([rank], "Win.Put")
        pid, address = s.reachable[rank]
        if cma.transfer(pid, address, layout, local, write):
            return True
        del s.reachable[rank]
        return False

    def Put(self, origin: Any, target_rank: int, target: Any = None) -> None:
        """Write ``origin`` into ``target_rank``'s window at ``target`` (a displacement in
        the target's disp_unit, or ``[disp, count, datatype]``); complete at the next
        Fence/Flush/Unlock/Complete."""
        if not direct.put(self._s, origin, target_rank, target):
            self._put(origin, target_rank, target, "Put")

    def Get(self, origin: Any, target_rank: int, target: Any = None) -> None:
        """Read ``target_rank``'s window into ``origin``; the data is there after the next
        Fence/Flush/Unlock/Complete."""
        if not direct.get(self._s, origin, target_rank, target):
            self._get(origin, target_rank, target, "Get")

    def Rput(self, origin: Any, target_rank: int, target: Any = None) -> Request:
        """``Put`` with a request (complete once ``origin`` may be reused)."""
        return self._put(origin, target_rank, target, "Rput")

    def Rget(self, origin: Any, target_rank: int, target: Any = None) -> Request:
        """``Get`` with a request (complete once the data is in ``origin``)."""
        return self._get(origin, target_rank, target, "Rget")

    # -- accumulates -------------------------------------------------------------------------
    def _accumulate(self, origin: Any, target_rank: Any, target: Any, op: Any, call: str
                    ) -> Request:
        s, rank, spec = self._open(origin, target_rank, call, False)
        if rank == PROC_NULL:
            return CompletedRequest()
        layout, datatype = self._layout(s, rank, target, spec, call)
        dtype = self._check_op(op, datatype, call)
        self._same_bytes(spec, layout, call)
        data = origin_bytes(spec)
        memory = s.direct_memory(rank, call)
        if memory is not None:       # itself, or a shared segment: applied here, atomically
            with s.atomic(rank, layout, op.name != "NO_OP"):
                am.accumulate(memory, layout, op.name, dtype, data)
            return CompletedRequest()
        return s.origin.send(rank, (ACC, layout.wire(), op.name, dtype), data, f"Win.{call}")

    def _get_accumulate(self, origin: Any, result: Any, target_rank: Any, target: Any,
                        op: Any, call: str) -> Request:
        s = self._call(call)
        rank = self._target_rank(s, target_rank, call)
        ospec = parse_buffer(origin, writable=False, call=f"Win.{call}", arg="origin")
        rspec = parse_buffer(result, writable=True, call=f"Win.{call}", arg="result")
        if rank == PROC_NULL:
            return CompletedRequest()
        s.epochs.check_access(rank, call)
        no_op = isinstance(op, Op) and op.name == "NO_OP"
        default = rspec if (no_op or not ospec.count) else ospec
        layout, datatype = self._layout(s, rank, target, default, call)
        dtype = self._check_op(op, datatype, call)
        self._same_bytes(rspec, layout, call, "result")
        if not no_op:
            self._same_bytes(ospec, layout, call)
        data = origin_bytes(ospec) if not no_op else memoryview(b"")
        memory = s.direct_memory(rank, call)
        if memory is not None:
            with s.atomic(rank, layout, not no_op):
                old = gather(memory, layout).tobytes()
                am.accumulate(memory, layout, op.name, dtype, data)
            store_into_origin(rspec, old)
            return CompletedRequest()
        return s.origin.ask(rank, (GET_ACC, layout.wire(), op.name, dtype), data,
                            f"Win.{call}", lambda body: store_into_origin(rspec, body))

    def Accumulate(self, origin: Any, target_rank: int, target: Any = None, op: Op = SUM
                   ) -> None:
        """``target = origin (op) target`` at ``target_rank`` (atomic per element against
        other accumulates); any predefined op, ``MPI.REPLACE`` and ``MPI.NO_OP`` included."""
        self._accumulate(origin, target_rank, target, op, "Accumulate")

    def Raccumulate(self, origin: Any, target_rank: int, target: Any = None, op: Op = SUM
                    ) -> Request:
        return self._accumulate(origin, target_rank, target, op, "Raccumulate")

    def Get_accumulate(self, origin: Any, result: Any, target_rank: int, target: Any = None,
                       op: Op = SUM) -> None:
        """Fetch the target's values into ``result``, then accumulate ``origin`` into them
        (one atomic step)."""
        self._get_accumulate(origin, result, target_rank, target, op, "Get_accumulate")

    def Rget_accumulate(self, origin: Any, result: Any, target_rank: int, target: Any = None,
                        op: Op = SUM) -> Request:
        return self._get_accumulate(origin, result, target_rank, target, op, "Rget_accumulate")

    @staticmethod
    def _single(spec: BufSpec, like: BufSpec, call: str, arg: str) -> None:
        if spec.count != 1:
            raise ValueError(f"Win.{call}: {arg} must hold exactly one element, got "
                             f"{spec.count} x {spec.datatype.name}")
        if spec.datatype.size != like.datatype.size or spec.datatype.dtype != like.datatype.dtype:
            raise ValueError(f"Win.{call}: {arg} is {spec.datatype.name} but origin is "
                             f"{like.datatype.name}; they must be the same type")

    def Fetch_and_op(self, origin: Any, result: Any, target_rank: int, target_disp: int = 0,
                     op: Op = SUM) -> None:
        """One element: fetch the target's value into ``result`` and combine ``origin`` into
        it with ``op``, atomically."""
        s = self._call("Fetch_and_op")
        ospec = parse_buffer(origin, writable=False, call="Win.Fetch_and_op", arg="origin")
        rspec = parse_buffer(result, writable=True, call="Win.Fetch_and_op", arg="result")
        self._single(ospec, ospec, "Fetch_and_op", "origin")
        self._single(rspec, ospec, "Fetch_and_op", "result")
        if self._target_rank(s, target_rank, "Fetch_and_op") == PROC_NULL:
            return
        self._get_accumulate(origin, result, target_rank,
                             [target_disp, 1, ospec.datatype], op, "Fetch_and_op").Wait()

    def Compare_and_swap(self, origin: Any, compare: Any, result: Any, target_rank: int,
                         target_disp: int = 0) -> None:
        """One element: fetch the target's value into ``result``; if it equals ``compare``,
        replace it with ``origin`` (atomically)."""
        call = "Compare_and_swap"
        s = self._call(call)
        ospec = parse_buffer(origin, writable=False, call=f"Win.{call}", arg="origin")
        cspec = parse_buffer(compare, writable=False, call=f"Win.{call}", arg="compare")
        rspec = parse_buffer(result, writable=True, call=f"Win.{call}", arg="result")
        self._single(ospec, ospec, call, "origin")
        self._single(cspec, ospec, call, "compare")
        self._single(rspec, ospec, call, "result")
        rank = self._target_rank(s, target_rank, call)
        if rank == PROC_NULL:
            return
        s.epochs.check_access(rank, call)
        layout, _ = self._layout(s, rank, [target_disp, 1, ospec.datatype], ospec, call)
        payload = memoryview(origin_bytes(ospec).tobytes() + origin_bytes(cspec).tobytes())
        memory = s.direct_memory(rank, call)
        if memory is not None:
            with s.atomic(rank, layout, True):
                old = am.compare_and_swap(memory, layout, payload)
            store_into_origin(rspec, old)
            return
        s.origin.ask(rank, (CAS, layout.wire()), payload, f"Win.{call}",
                     lambda body: store_into_origin(rspec, body)).Wait()
