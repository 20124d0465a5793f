"""mpi4py communicator features beyond plain point-to-point (a mixin of ``Comm``).

Groups and ``Create``/``Create_group`` (:mod:`minimpi.comm.group`), Cartesian topologies
(:mod:`minimpi.comm.topology`), persistent requests (:mod:`minimpi.comm.persistent`), matched
probes (:mod:`minimpi.comm.message`), buffered sends, error handlers, and clear refusals for
features minimpi does not implement. Kept apart from :mod:`minimpi.comm.communicator` so that the core
communicator stays about messages.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

from ..constants import ANY_SOURCE, ANY_TAG, UNDEFINED
from ..errors import MinimpiError
from ..p2p.request import CompletedRequest, Request, Status
from ..transports.frames import F_SYNC
from .group import comm_group, create, create_group
from .handles import ERRORS_RETURN, Errhandler, Info, refusing
from .message import mprobe
from .null import COMM_NULL
from .persistent import Prequest
from .topology import create_cart


class CommExtras:
    """Mixed into :class:`minimpi.comm.communicator.Comm`."""

    # -- groups ----------------------------------------------------------------------------
    def Get_group(self) -> Any:
        self._alive("Get_group")
        return comm_group(self)

    @property
    def group(self) -> Any:
        return self.Get_group()

    def Create(self, group: Any) -> Any:
        """A communicator of ``group``'s members (collective over this communicator)."""
        return create(self, group)

    def Create_group(self, group: Any, tag: int = 0) -> Any:
        """A communicator of ``group``'s members (collective over the members only)."""
        return create_group(self, group, tag)

    # -- topologies ------------------------------------------------------------------------
    def Create_cart(self, dims: Sequence[int], periods: Optional[Sequence[bool]] = None,
                    reorder: bool = False) -> Any:
        return create_cart(self, dims, periods, reorder)

    def Get_topology(self) -> int:
        return UNDEFINED

    @property
    def topology(self) -> int:
        return self.Get_topology()

    Create_graph = refusing("Graph", "Intracomm.Create_graph")
    Create_dist_graph = refusing("Graph", "Intracomm.Create_dist_graph")
    Create_dist_graph_adjacent = refusing("Graph", "Intracomm.Create_dist_graph_adjacent")

    # -- persistent requests ---------------------------------------------------------------
    def _persistent(self, start, call: str, peer_name: str, peer: int, tag: int) -> Request:
        self._alive(call)
        return Prequest._create(start, self._ep.engine, (call, peer_name, peer, tag, self.name))

    def Send_init(self, buf: Any, dest: int, tag: int = 0) -> Request:
        self._check_dest(dest, "Send_init")
        self._check_send_tag(tag, "Send_init")
        return self._persistent(lambda: self._send_buf(buf, dest, tag, "Send_init"),
                                "Send_init", "dest", dest, tag)

    def Ssend_init(self, buf: Any, dest: int, tag: int = 0) -> Request:
        self._check_dest(dest, "Ssend_init")
        self._check_send_tag(tag, "Ssend_init")
        return self._persistent(lambda: self._send_buf(buf, dest, tag, "Ssend_init", F_SYNC),
                                "Ssend_init", "dest", dest, tag)

    def Bsend_init(self, buf: Any, dest: int, tag: int = 0) -> Request:
        self._check_dest(dest, "Bsend_init")
        self._check_send_tag(tag, "Bsend_init")
        return self._persistent(lambda: self.Ibsend(buf, dest, tag), "Bsend_init", "dest", dest, tag)

    def Rsend_init(self, buf: Any, dest: int, tag: int = 0) -> Request:
        self._check_dest(dest, "Rsend_init")
        self._check_send_tag(tag, "Rsend_init")
        return self._persistent(lambda: self._send_buf(buf, dest, tag, "Rsend_init"),
                                "Rsend_init", "dest", dest, tag)

    def Recv_init(self, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Request:
        self._check_source(source, "Recv_init")
        self._check_recv_tag(tag, "Recv_init")
        return self._persistent(lambda: self._recv_buf(buf, source, tag, "Recv_init"),
                                "Recv_init", "source", source, tag)

    # -- buffered sends: the data is copied at once, the call completes locally -------------
    def _bsend_bytes(self, payload: Sequence[memoryview], nbytes: int, dest: int, tag: int,
                     flags: int, call: str) -> Request:
        data = bytearray().join(payload)   # one copy of every segment
        # The engine delivers it in the background (and before exit); the caller's request is
        # complete now, as a buffered send's is once the data sits in the attached buffer.
        self._ep.isend((memoryview(data),), nbytes, dest, tag, flags, call)
        return CompletedRequest()

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
    def Set_errhandler(self, errhandler: Errhandler) -> None:
        self._attrs["__errhandler__"] = errhandler

    def Get_errhandler(self) -> Errhandler:
        return self._attrs.get("__errhandler__", ERRORS_RETURN)

    def Call_errhandler(self, errorcode: int) -> None:
        raise MinimpiError(int(errorcode))

    def Set_info(self, info: Info) -> None:
        self._attrs["__info__"] = info.Dup() if info else Info.Create()

    def Get_info(self) -> Info:
        return self._attrs.get("__info__", Info.Create()).Dup()

    @property
    def info(self) -> Info:
        return self.Get_info()

    def Dup_with_info(self, info: Info) -> Any:
        return self.Dup()

    # -- out of scope ------------------------------------------------------------------------
    @classmethod
    def Get_parent(cls) -> Any:
        """Never spawned: ``MPI.COMM_NULL`` (as mpi4py answers in a process not spawned)."""
        return COMM_NULL

    Spawn = refusing("Spawn", "Intracomm.Spawn")
    Spawn_multiple = refusing("Spawn", "Intracomm.Spawn_multiple")
    Accept = refusing("Spawn", "Intracomm.Accept")
    Connect = refusing("Spawn", "Intracomm.Connect")
    Join = refusing("Spawn", "Comm.Join")

    def Disconnect(self) -> None:
        """As ``Free`` (there are no pending intercommunicator connections to wait for)."""
        self.Free()
    Create_intercomm = refusing("Intercomm", "Intracomm.Create_intercomm")
    Get_remote_group = refusing("Intercomm", "Comm.Get_remote_group")
    Get_remote_size = refusing("Intercomm", "Comm.Get_remote_size")
