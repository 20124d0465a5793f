"""mpi4py communicator features beyond plain point-to-point (a mixin of ``Comm``).

Groups and ``Create``/``Create_group`` (:mod:`minimpi.comm.group`), Cartesian topologies
(:mod:`minimpi.comm.topology`), persistent requests (:mod:`minimpi.comm.persistent`), matched
probes (:mod:`minimpi.comm.message`), buffered sends, error handlers, and clear refusals for
features minimpi does not implement. Kept apart from :mod:`minimpi.comm.communicator` so that the core
communicator stays about messages.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

from ..constants import ANY_SOURCE, ANY_TAG, CART, DIST_GRAPH, GRAPH, UNDEFINED
from ..data.attributes import Attributed
from ..data.buffers import persistent_buffer
from ..data.memory import attachable_buffer
from ..errors import CommError
from ..p2p.request import CombinedRequest, CompletedRequest, Request, Status
from ..transports.frames import F_SYNC
from . import ulfm
from .collectives.common import collective
from .errhandlers import call_errhandler
from .graph import (
    cart_map,
    create_dist_graph,
    create_dist_graph_adjacent,
    create_graph,
    graph_map,
)
from .group import comm_group, create, create_group
from .handles import (
    ERRORS_RETURN,
    INFO_NULL,
    Errhandler,
    Info,
    checked_errhandler,
    create_errhandler,
    refusing,
    unsupported,
)
from .message import mprobe
from .partitioned import PartitionedRequest
from .persistent import Prequest
from .persistent_coll import PersistentCollectives
from .topology import create_cart

#: the dynamic-process calls (``spawn``, ``spawn_multiple``, ``accept``, ``connect``,
#: ``join``, ``get_parent``), installed by minimpi.dynamic, a layer above this one
_DYNAMIC: dict = {}


def set_dynamic_calls(**calls: Any) -> None:
    """Install the functions behind ``Spawn``, ``Accept``, ``Get_parent``... (by name)."""
    _DYNAMIC.update(calls)


def dynamic_call(name: str) -> Any:
    """The installed dynamic-process function ``name`` (None: not installed)."""
    return _DYNAMIC.get(name)


def _dynamic(name: str, call: str) -> Any:
    fn = _DYNAMIC.get(name)
    if fn is None:
        raise unsupported("Spawn", call)
    return fn


#: buffered sends of every communicator not yet delivered (MPI.Flush_buffer waits for them)
PENDING_BSENDS: list = []


def flush_buffered() -> Request:
    """A request complete once every buffered send of this process has been delivered."""
    pending = [r for r in PENDING_BSENDS if not r.done]
    PENDING_BSENDS[:] = []
    return CombinedRequest(pending, "Iflush_buffer") if pending else CompletedRequest()


class CommExtras(PersistentCollectives, Attributed):
    """Mixed into :class:`minimpi.comm.communicator.Comm`."""

    # -- groups ----------------------------------------------------------------------------
    def Get_group(self) -> Any:
        self._alive("Get_group")
        return comm_group(self)

    @property
    def group(self) -> Any:
        return self.Get_group()

    @collective
    def Create(self, group: Any) -> Any:
        """A communicator of ``group``'s members (collective over this communicator; ranks
        may pass different groups if those are disjoint: one communicator each)."""
        return create(self, group)

    def Create_group(self, group: Any, tag: int = 0) -> Any:
        """A communicator of ``group``'s members (collective over the members only)."""
        return create_group(self, group, tag)

    # -- topologies ------------------------------------------------------------------------
    @collective   # bad arguments on one rank: the others raise too, none waits
    def Create_cart(self, dims: Sequence[int], periods: Optional[Sequence[bool]] = None,
                    reorder: bool = False) -> Any:
        return create_cart(self, dims, periods, reorder)

    def Get_topology(self) -> int:
        """``MPI.CART``, ``MPI.GRAPH``, ``MPI.DIST_GRAPH``, or ``MPI.UNDEFINED`` (none)."""
        self._alive("Get_topology")
        for attr, kind in (("_dims", CART), ("_index", GRAPH), ("_sources", DIST_GRAPH)):
            if attr in self.__dict__:     # any handle on a topology communicator
                return kind
        return UNDEFINED

    @property
    def topology(self) -> int:
        return self.Get_topology()

    @property
    def is_topo(self) -> bool:
        """Whether this communicator has a process topology."""
        return self.Get_topology() != UNDEFINED

    @collective
    def Create_graph(self, index: Sequence[int], edges: Sequence[int],
                     reorder: bool = False) -> Any:
        """A graph communicator (``MPI.Graphcomm``; collective; see minimpi.comm.graph)."""
        return create_graph(self, index, edges, reorder)

    @collective
    def Create_dist_graph_adjacent(self, sources: Sequence[int], destinations: Sequence[int],
                                   sourceweights: Any = None, destweights: Any = None,
                                   info: Any = None, reorder: bool = False) -> Any:
        """A distributed-graph communicator from each rank's own in- and out-neighbours."""
        return create_dist_graph_adjacent(self, sources, destinations, sourceweights,
                                          destweights, info, reorder)

    @collective
    def Create_dist_graph(self, sources: Sequence[int], degrees: Sequence[int],
                          destinations: Sequence[int], weights: Any = None, info: Any = None,
                          reorder: bool = False) -> Any:
        """A distributed-graph communicator from edges any rank may name."""
        return create_dist_graph(self, sources, degrees, destinations, weights, info, reorder)

    def Cart_map(self, dims: Sequence[int], periods: Any = None) -> int:
        """This rank's rank in a Cartesian grid of ``dims`` (``MPI.UNDEFINED``: outside)."""
        return cart_map(self, dims, periods)

    def Graph_map(self, index: Sequence[int], edges: Sequence[int]) -> int:
        """This rank's rank in the graph (``MPI.UNDEFINED``: outside)."""
        return graph_map(self, index, edges)

    # -- persistent requests ---------------------------------------------------------------
    def _persistent(self, start, call: str, peer_name: str, peer: int, tag: int) -> Request:
        self._alive(call)
        return Prequest._create(start, self._ep.engine, (call, peer_name, peer, tag, self.name))

    # (each *_init keeps its buffer argument through persistent_buffer: a Start after the
    # program freed the datatype still uses it, as MPI binds the datatype at *_init)

    def Send_init(self, buf: Any, dest: int, tag: int = 0) -> Request:
        dest = self._check_dest(dest, "Send_init")
        tag = self._check_send_tag(tag, "Send_init")
        buf = persistent_buffer(buf, "Send_init")
        return self._persistent(lambda: self._send_buf(buf, dest, tag, "Send_init"),
                                "Send_init", "dest", dest, tag)

    def Ssend_init(self, buf: Any, dest: int, tag: int = 0) -> Request:
        dest = self._check_dest(dest, "Ssend_init")
        tag = self._check_send_tag(tag, "Ssend_init")
        buf = persistent_buffer(buf, "Ssend_init")
        return self._persistent(lambda: self._send_buf(buf, dest, tag, "Ssend_init", F_SYNC),
                                "Ssend_init", "dest", dest, tag)

    def Bsend_init(self, buf: Any, dest: int, tag: int = 0) -> Request:
        dest = self._check_dest(dest, "Bsend_init")
        tag = self._check_send_tag(tag, "Bsend_init")
        buf = persistent_buffer(buf, "Bsend_init")
        return self._persistent(lambda: self.Ibsend(buf, dest, tag), "Bsend_init", "dest", dest, tag)

    def Rsend_init(self, buf: Any, dest: int, tag: int = 0) -> Request:
        dest = self._check_dest(dest, "Rsend_init")
        tag = self._check_send_tag(tag, "Rsend_init")
        buf = persistent_buffer(buf, "Rsend_init")
        return self._persistent(lambda: self._send_buf(buf, dest, tag, "Rsend_init"),
                                "Rsend_init", "dest", dest, tag)

    def Recv_init(self, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Request:
        source = self._check_source(source, "Recv_init")
        tag = self._check_recv_tag(tag, "Recv_init")
        buf = persistent_buffer(buf, "Recv_init")
        return self._persistent(lambda: self._recv_buf(buf, source, tag, "Recv_init"),
                                "Recv_init", "source", source, tag)

    # -- partitioned point-to-point (MPI-4; minimpi.comm.partitioned) -----------------------
    def Psend_init(self, buf: Any, partitions: int, dest: int, tag: int = 0,
                   info: Info = INFO_NULL) -> Prequest:
        """A partitioned send of ``buf`` cut into ``partitions`` equal parts: ``Start``,
        then ``Pready(k)`` for each part, then ``Wait``."""
        self._alive("Psend_init")
        return PartitionedRequest.make(self, buf, partitions, dest, tag, info, True)

    def Precv_init(self, buf: Any, partitions: int, source: int = ANY_SOURCE,
                   tag: int = ANY_TAG, info: Info = INFO_NULL) -> Prequest:
        """A partitioned receive into ``buf`` (``partitions`` equal parts; ``Parrived(k)``
        tells whether part k is in). ``source`` and ``tag`` must be named (no wildcards)."""
        self._alive("Precv_init")
        return PartitionedRequest.make(self, buf, partitions, source, tag, info, False)

    # -- buffered sends: the data is copied at once, the call completes locally -------------
    def _bsend_bytes(self, payload: Sequence[memoryview], nbytes: int, dest: int, tag: int,
                     flags: int, call: str) -> Request:
        data = bytearray().join(payload)   # one copy of every segment
        # The engine delivers it in the background (and before exit); the caller's request is
        # complete now, as a buffered send's is once the data sits in the attached buffer.
        req = self._ep.isend((memoryview(data),), nbytes, dest, tag, flags, call)
        if not req.done:   # Flush_buffer waits for these
            for pending in (self._attrs.setdefault("__bsends__", []), PENDING_BSENDS):
                pending[:] = [r for r in pending if not r.done]
                pending.append(req)
        return CompletedRequest()

    # The buffer for buffered sends (MPI 4.1 per-communicator form; MPI.Attach_buffer is the
    # process-wide one). minimpi's buffered sends copy their data themselves, so any buffer -
    # or MPI.BUFFER_AUTOMATIC - is accepted and handed back by Detach_buffer.
    def Attach_buffer(self, buf: Any) -> None:
        """Attach ``buf`` (a buffer, ``MPI.BUFFER_AUTOMATIC`` or None) for buffered sends."""
        self._alive("Attach_buffer")
        self._attrs["__bsend_buffer__"] = attachable_buffer(buf, "Comm.Attach_buffer")

    def Detach_buffer(self) -> Any:
        """Wait until the buffered sends of this communicator are delivered, then return
        the buffer ``Attach_buffer`` attached (None if none)."""
        self.Flush_buffer()
        return self._attrs.pop("__bsend_buffer__", None)

    def Flush_buffer(self) -> None:
        """Wait until the buffered sends of this communicator have been delivered."""
        self.Iflush_buffer().Wait()

    def Iflush_buffer(self) -> Request:
        """A request that completes once this communicator's buffered sends are delivered."""
        self._alive("Iflush_buffer")
        pending = [r for r in self._attrs.pop("__bsends__", []) if not r.done]
        if not pending:
            return CompletedRequest()
        return CombinedRequest(pending, "Iflush_buffer")

    def Bsend(self, buf: Any, dest: int, tag: int = 0) -> None:
        self._send_buf(buf, dest, tag, "Bsend", buffered=True)

    def Ibsend(self, buf: Any, dest: int, tag: int = 0) -> Request:
        return self._send_buf(buf, dest, tag, "Ibsend", buffered=True)

    def bsend(self, obj: Any, dest: int, tag: int = 0) -> None:
        self._send_obj(obj, dest, tag, "bsend", buffered=True)

    def ibsend(self, obj: Any, dest: int, tag: int = 0) -> Request:
        return self._send_obj(obj, dest, tag, "ibsend", buffered=True)

    # -- matched probes ----------------------------------------------------------------------
    def Mprobe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG,
               status: Optional[Status] = None) -> Any:
        return mprobe(self, source, tag, status, True, "Mprobe")

    def Improbe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG,
                status: Optional[Status] = None) -> Any:
        return mprobe(self, source, tag, status, False, "Improbe")

    def mprobe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG,
               status: Optional[Status] = None) -> Any:
        return mprobe(self, source, tag, status, True, "mprobe")

    def improbe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG,
                status: Optional[Status] = None) -> Any:
        return mprobe(self, source, tag, status, False, "improbe")

    # -- error handlers, info ----------------------------------------------------------------
    @classmethod
    def Create_errhandler(cls, errhandler_fn: Any) -> Errhandler:
        """A user error handler: ``errhandler_fn(comm, errorcode)`` runs on the errors of
        the communicators it is set on (which then raise ``MPI.Exception``)."""
        return create_errhandler("Comm", errhandler_fn)

    def Set_errhandler(self, errhandler: Errhandler) -> None:
        """Handle this communicator's errors with ``errhandler`` (kept by its duplicates)."""
        self._alive("Set_errhandler")
        self._attrs["__errhandler__"] = checked_errhandler(errhandler, "Comm",
                                                           f"rank {self.rank}: Set_errhandler")

    def Get_errhandler(self) -> Errhandler:
        """A new handle on this communicator's error handler (``ERRORS_RETURN`` unless set)."""
        self._alive("Get_errhandler")
        return Errhandler(self._current_errhandler())

    def Call_errhandler(self, errorcode: int) -> None:
        """Run this communicator's error handler for ``errorcode`` (``ERRORS_RETURN``:
        nothing happens)."""
        self._alive("Call_errhandler")
        call_errhandler(self, self._current_errhandler(), errorcode, self._abort_on_error)

    def _current_errhandler(self) -> Errhandler:
        return self._attrs.get("__errhandler__", ERRORS_RETURN)

    def _abort_on_error(self, code: int) -> None:
        self._ep.engine.abort_job(code, f"rank {self.rank}: an error on {self.name} with "
                                        f"a fatal error handler")

    def Set_info(self, info: Info) -> None:
        """Keep ``info`` as this communicator's hints. The keys ``minimpi_<collective>`` (an
        algorithm name, or ``auto``) and ``minimpi_cost_<field>`` (``minimpi_cost_alpha``...)
        change how its collectives choose from the next call on; like ``Set_info`` in MPI it
        is collective: every member must pass the same of these, or members could choose
        differently (a ``CollectiveMismatchError`` names it then)."""
        kept = info.Dup() if info else Info.Create()
        hints = {key: kept.Get(key) for key in kept}
        settings = self.__dict__.get("_settings")
        if settings is not None:
            new = settings.with_hints(hints, f"rank {self.rank}: Set_info")
            if new != settings:
                self._settings, self._plan = new, None
        self._attrs["__info__"] = kept

    def Get_info(self) -> Info:
        return self._attrs.get("__info__", Info.Create()).Dup()

    @property
    def info(self) -> Info:
        """The communicator's hints (a copy); assigning it is ``Set_info``."""
        return self.Get_info()

    @info.setter
    def info(self, info: Info) -> None:
        self.Set_info(info)

    def Dup_with_info(self, info: Info) -> Any:
        """``Dup`` whose new communicator keeps ``info`` as its hints."""
        return self.Dup(info)

    # -- fault tolerance (ULFM: minimpi/comm/ulfm.py) ---------------------------------------
    def Revoke(self) -> None:
        """Make this communicator unusable for communication on every member (pending and
        later operations raise ``MPI.ERR_REVOKED``); ``Agree``/``Shrink`` still work."""
        ulfm.revoke(self)

    def Is_revoked(self) -> bool:
        """Whether some member revoked this communicator."""
        return ulfm.is_revoked(self)

    def Get_failed(self) -> Any:
        """The group of this communicator's processes known to have failed."""
        return ulfm.get_failed(self)

    def Ack_failed(self, num_to_ack: Optional[int] = None) -> int:
        """Acknowledge the first ``num_to_ack`` failures (default: all); returns how many are
        acknowledged. Wildcard receives then stop raising ``MPI.ERR_PROC_FAILED_PENDING``."""
        return ulfm.ack_failed(self, num_to_ack)

    def Agree(self, flag: int) -> int:
        """Fault-tolerant agreement: the bitwise AND of the flags of the live members."""
        return ulfm.agree(self, flag)

    def Iagree(self, flag: Any) -> Request:
        """Nonblocking ``Agree`` on a one-int buffer, which holds the result at completion."""
        return ulfm.iagree(self, flag)

    def Shrink(self) -> Any:
        """A new communicator of the members that have not failed (agreed by all of them)."""
        return ulfm.shrink(self)

    def Ishrink(self) -> Any:
        """``(newcomm, request)``: ``Shrink``, completed at the call (as ``Idup``)."""
        return ulfm.ishrink(self)

    # -- dynamic processes (minimpi/dynamic installs them: set_dynamic_calls) ---------------
    def Spawn(self, command: Any, args: Any = None, maxprocs: int = 1, info: Any = None,
              root: int = 0, errcodes: Optional[list] = None) -> Any:
        """Start ``maxprocs`` processes of ``command args`` (collective; only ``root``'s
        arguments count) and return the intercommunicator to them."""
        return _dynamic("spawn", "Intracomm.Spawn")(self, command, args, maxprocs, info,
                                                     root, errcodes)

    def Spawn_multiple(self, command: Any, args: Any = None, maxprocs: Any = None,
                       info: Any = None, root: int = 0, errcodes: Optional[list] = None) -> Any:
        """As ``Spawn`` for several commands at once: one new job, one intercommunicator."""
        return _dynamic("spawn_multiple", "Intracomm.Spawn_multiple")(
            self, command, args, maxprocs, info, root, errcodes)

    def Accept(self, port_name: str, info: Any = None, root: int = 0) -> Any:
        """Wait (collective) for a group that calls ``Connect`` on ``port_name``; the
        intercommunicator to it."""
        return _dynamic("accept", "Intracomm.Accept")(self, port_name, info, root)

    def Connect(self, port_name: str, info: Any = None, root: int = 0) -> Any:
        """Join (collective) the group that calls ``Accept`` on ``port_name``."""
        return _dynamic("connect", "Intracomm.Connect")(self, port_name, info, root)

    @classmethod
    def Join(cls, fd: int) -> Any:
        """The intercommunicator between two processes connected by socket ``fd``."""
        return _dynamic("join", "Comm.Join")(fd)

    def Disconnect(self) -> None:
        """Wait for the communicator's pending messages, then free it (an intracommunicator
        has no other processes' connection to wait for: as ``Free``)."""
        self.Free()
    Create_intercomm = refusing("Intercomm", "Intracomm.Create_intercomm")

    def Get_remote_group(self) -> Any:
        """Only an intercommunicator has a remote group: ``CommError`` (MPI_ERR_COMM)."""
        raise CommError(f"rank {self.rank}: Get_remote_group on {self.name}: an "
                        f"intracommunicator has no remote group (MPI_ERR_COMM)")

    def Get_remote_size(self) -> int:
        """Only an intercommunicator has a remote group: ``CommError`` (MPI_ERR_COMM)."""
        raise CommError(f"rank {self.rank}: Get_remote_size on {self.name}: an "
                        f"intracommunicator has no remote group (MPI_ERR_COMM)")
