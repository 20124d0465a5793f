"""MPI-4 sessions (``MPI.Session``): a handle on this process's MPI without ``COMM_WORLD``.

``Session.Init()`` starts the runtime if it is not running yet (as a first use of
``COMM_WORLD`` would) and gives a session. A session knows two process sets, as every MPI
does: ``mpi://WORLD`` (every process of the job) and ``mpi://SELF`` (this process alone).
``Create_group(pset)`` gives the group of one, and ``Intracomm.Create_from_group(group)``
the communicator, without any parent communicator. A session has its own info (the thread
level), error handler (``ERRORS_RETURN`` unless ``Init`` is given one; its errors go
through it like a communicator's) and buffer for buffered sends. ``Finalize`` ends the
session (the handle becomes ``SESSION_NULL``); the runtime itself ends at exit, as in MPI,
where the last session's finalize and ``MPI_Finalize`` are the same moment.
"""
from __future__ import annotations

from typing import Any, Optional

from ..comm.errhandlers import call_errhandler, handle_error
from ..comm.handle_types import (
    ERRORS_RETURN,
    INFO_NULL,
    Errhandler,
    Info,
    IntHandles,
    checked_errhandler,
    create_errhandler,
)
from ..comm.pt2pt import flush_buffered
from ..constants import THREAD_MULTIPLE
from ..data.memory import attachable_buffer
from ..errors import ArgumentError, MinimpiError
from ..front import Fronted
from ..p2p.request import Request
from . import world

#: error class of a bad session (MPI 4's MPI_ERR_SESSION, as MPI.ERR_SESSION)
ERR_SESSION = 75

#: the process sets every session knows, in the order Get_nth_pset gives them
PSETS = ("mpi://WORLD", "mpi://SELF")
_THREAD_LEVELS = {0: "MPI_THREAD_SINGLE", 1: "MPI_THREAD_FUNNELED",
                  2: "MPI_THREAD_SERIALIZED", 3: "MPI_THREAD_MULTIPLE"}


class SessionError(MinimpiError):
    """A call on a finalized or null session."""

    error_class = ERR_SESSION


class _State:
    """What the handles of one session share."""

    __slots__ = ("info", "errhandler", "buffer", "live")

    def __init__(self, info: Info, errhandler: Errhandler) -> None:
        self.info = info
        self.errhandler = errhandler
        self.buffer: Any = None
        self.live = True


class Session(IntHandles, metaclass=Fronted):
    """An MPI-4 session (``MPI.Session``); ``MPI.Session()`` is ``SESSION_NULL``."""

    __slots__ = ("_s", "_int_handle", "__weakref__")

    def __init__(self, session: Optional["Session"] = None) -> None:
        if session is not None and not isinstance(session, Session):
            raise TypeError(f"MPI.Session({session!r:.40}): expected a session or nothing")
        self._s: Optional[_State] = session._s if session is not None else None
        self._int_handle = session._int_handle if session is not None else 0

    # -- handle basics -----------------------------------------------------------------
    def __bool__(self) -> bool:
        return self._s is not None and self._s.live

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Session):
            return NotImplemented
        return self._s is other._s or (not self and not other)

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None  # type: ignore[assignment]   (unhashable, as mpi4py's handles)

    def __reduce__(self) -> Any:
        if self is SESSION_NULL:
            return "SESSION_NULL"
        if not self:                        # another null handle: one of its class
            return (type(self), (SESSION_NULL,))
        raise ValueError(f"cannot pickle {self!r}: a session lives in one process")

    def __repr__(self) -> str:
        return "MPI.SESSION_NULL" if not self else f"<MPI.Session {self.handle}>"

    def _live(self, call: str) -> _State:
        if not self:
            raise SessionError(f"Session.{call}: the session is MPI.SESSION_NULL (finalized "
                               f"or never initialized)")
        return self._s  # type: ignore[return-value]

    # -- life --------------------------------------------------------------------------
    @classmethod
    def Init(cls, info: Info = INFO_NULL, errhandler: Optional[Errhandler] = None
             ) -> "Session":
        """A new session (starts the runtime if it is not running)."""
        if not isinstance(info, Info):
            raise TypeError(f"Session.Init(info={info!r:.40}): expected an MPI.Info")
        handler = ERRORS_RETURN if errhandler is None else \
            checked_errhandler(errhandler, "Session", "Session.Init")
        world.world_state()
        hints = Info.Create(info) if info else Info.Create()
        level = hints.Get("thread_level") or _THREAD_LEVELS[THREAD_MULTIPLE]
        hints.Set("thread_level", level)
        session = cls()
        session._s = _State(hints, handler)
        return session

    def Finalize(self) -> None:
        """End the session: every handle on it becomes ``SESSION_NULL``."""
        self._live("Finalize").live = False

    def free(self) -> None:
        """``Finalize`` unless null (mpi4py 4)."""
        if self:
            self.Finalize()

    # -- process sets ------------------------------------------------------------------
    def Get_num_psets(self, info: Info = INFO_NULL) -> int:
        """How many process sets the session knows (``mpi://WORLD``, ``mpi://SELF``)."""
        self._live("Get_num_psets")
        return len(PSETS)

    def Get_nth_pset(self, n: int, info: Info = INFO_NULL) -> str:
        """The name of process set ``n`` (0-based)."""
        self._live("Get_nth_pset")
        if not isinstance(n, int) or not 0 <= n < len(PSETS):
            raise ArgumentError(f"Session.Get_nth_pset({n!r}): expected 0..{len(PSETS) - 1}")
        return PSETS[n]

    def _pset_comm(self, name: Any, call: str) -> Any:
        self._live(call)
        if name == "mpi://WORLD":
            return world.comm_world()
        if name == "mpi://SELF":
            return world.comm_self()
        raise ArgumentError(f"Session.{call}({name!r}): no such process set; this session "
                            f"knows {', '.join(PSETS)}")

    def Get_pset_info(self, pset_name: str) -> Info:
        """The process set's info: ``mpi_size``, its number of processes."""
        return Info.Create({"mpi_size": str(self._pset_comm(pset_name, "Get_pset_info").size)})

    def Create_group(self, pset_name: str) -> Any:
        """The group of the process set (give it to ``Intracomm.Create_from_group``)."""
        return self._pset_comm(pset_name, "Create_group").Get_group()

    def Get_info(self) -> Info:
        """The session's info (a copy): the hints given to ``Init`` and ``thread_level``."""
        return self._live("Get_info").info.Dup()

    # -- buffered sends (a session's buffer: minimpi's buffered sends copy their data) ---
    def Attach_buffer(self, buf: Any) -> None:
        """Attach ``buf`` (a buffer or ``MPI.BUFFER_AUTOMATIC``) for buffered sends."""
        self._live("Attach_buffer").buffer = attachable_buffer(buf, "Session.Attach_buffer")

    def Detach_buffer(self) -> Any:
        """Wait for the process's buffered sends, then return the buffer attached."""
        s = self._live("Detach_buffer")
        self.Flush_buffer()
        buf, s.buffer = s.buffer, None
        return buf

    def Flush_buffer(self) -> None:
        """Wait until the process's buffered sends have been delivered."""
        self.Iflush_buffer().Wait()

    def Iflush_buffer(self) -> Request:
        """A request complete once the process's buffered sends have been delivered."""
        self._live("Iflush_buffer")
        return flush_buffered()

    # -- error handlers ------------------------------------------------------------------
    @classmethod
    def Create_errhandler(cls, errhandler_fn: Any) -> Errhandler:
        """A user error handler: ``errhandler_fn(session, errorcode)``."""
        return create_errhandler("Session", errhandler_fn)

    def Get_errhandler(self) -> Errhandler:
        """A new handle on the session's error handler."""
        return Errhandler(self._live("Get_errhandler").errhandler)

    def Set_errhandler(self, errhandler: Errhandler) -> None:
        """Handle the session's errors with ``errhandler``."""
        self._live("Set_errhandler").errhandler = checked_errhandler(
            errhandler, "Session", "Session.Set_errhandler")

    def Call_errhandler(self, errorcode: int) -> None:
        """Run the session's error handler for ``errorcode`` (``ERRORS_RETURN``: nothing)."""
        call_errhandler(self, self._live("Call_errhandler").errhandler, errorcode,
                        self._abort_on_error)

    def _current_errhandler(self) -> Errhandler:
        return self._s.errhandler if self._s is not None else ERRORS_RETURN

    _handle_error = handle_error     # what the API front does with an error (minimpi.front)

    def _abort_on_error(self, code: int) -> None:
        world.comm_world().Abort(code)


SESSION_NULL = Session()

__all__ = ["Session", "SESSION_NULL", "SessionError", "PSETS", "ERR_SESSION"]
