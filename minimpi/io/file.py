"""``MPI.File``: opening, closing and managing a file, and the mpi4py-facing data calls.

``File.Open`` is collective over a communicator: the group's rank 0 creates the file
(``MODE_CREATE``, ``MODE_EXCL``), then every rank opens it with ``os.open`` and keeps the
descriptor; data moves with ``os.pwrite``/``os.preadv`` (posix.py). The data calls here
only check the handle and hand over to independent.py (explicit offsets, individual and
shared pointers) and two_phase.py (collective ``*_all``).

Nonblocking calls (``Iread_at``, ``Iwrite_all``...) do their I/O when called and return
a completed request (MPI lets an operation complete at any time before its wait);
split collectives (``*_begin``/``*_end``) do theirs in ``*_begin`` and ``*_end`` returns
its status, which the standard also allows.

Access modes: ``MODE_RDONLY``/``WRONLY``/``RDWR`` (exactly one), ``MODE_CREATE``,
``MODE_EXCL`` (an existing file is ``ERR_FILE_EXISTS``), ``MODE_DELETE_ON_CLOSE`` (rank 0
removes the file after everyone closed it), ``MODE_UNIQUE_OPEN`` (a promise minimpi
needs nothing from), ``MODE_SEQUENTIAL`` (only shared-pointer calls may access the file;
``Set_view`` accepts ``DISPLACEMENT_CURRENT``), ``MODE_APPEND`` (both file pointers
start at the end of the file).
"""
from __future__ import annotations

import os
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
from ..constants import (
    DISPLACEMENT_CURRENT,
    MODE_APPEND,
    MODE_CREATE,
    MODE_DELETE_ON_CLOSE,
    MODE_EXCL,
    MODE_RDONLY,
    MODE_RDWR,
    MODE_SEQUENTIAL,
    MODE_WRONLY,
    SEEK_SET,
)
from ..data.datatypes import BYTE, PREDEFINED, Datatype, resolve_datatype
from ..errors import ERR_AMODE, ERR_FILE, ArgumentError, FileError, MinimpiError
from ..front import Fronted
from ..p2p.request import CompletedRequest, Request, Status, assign_status
from . import independent as ind
from . import two_phase
from .datarep import lookup as lookup_datarep
from .datarep import type_extent
from .open_file import OpenFile, agree
from .posix import os_error
from .shared_pointer import UnavailablePointer, shared_pointer
from .view import FileView

_default_errhandler = [ERRORS_RETURN]     # what FILE_NULL.Set_errhandler changes


def _amode_problem(amode: int) -> Optional[str]:
    access = [m for m in (MODE_RDONLY, MODE_WRONLY, MODE_RDWR) if amode & m]
    if len(access) != 1:
        return "exactly one of MODE_RDONLY, MODE_WRONLY and MODE_RDWR"
    if amode & MODE_RDONLY and amode & (MODE_CREATE | MODE_EXCL):
        return "no MODE_CREATE or MODE_EXCL with MODE_RDONLY"
    if amode & MODE_RDWR and amode & MODE_SEQUENTIAL:
        return "no MODE_SEQUENTIAL with MODE_RDWR"
    return None


def _os_flags(amode: int) -> int:
    if amode & MODE_RDONLY:
        return os.O_RDONLY
    return os.O_WRONLY if amode & MODE_WRONLY else os.O_RDWR


def _info_dict(info: Any) -> dict:
    if info is None or info is INFO_NULL:
        return {}
    return {k: info.Get(k) for k in info}


class File(IntHandles, metaclass=Fronted):
    """An MPI file handle (``MPI.File``); ``MPI.File()`` and ``MPI.FILE_NULL`` are null.
    ``handle``/``toint``/``py2f`` and ``fromhandle``/``fromint``/``f2py`` as in
    :class:`~minimpi.comm.handle_types.IntHandles`."""

    def __new__(cls, *args: Any, **kwargs: Any) -> "File":
        # mpi4py's subclassing idiom ``MPI.File.__new__(cls, file)``: the handle is made by
        # __init__, from the same argument
        return super().__new__(cls)

    def __init__(self, file: Optional["File"] = None) -> None:
        if file is not None and not isinstance(file, File):
            raise TypeError(f"MPI.File({file!r:.40}): expected a file or nothing")
        self._f: Optional[OpenFile] = file._f if file is not None else None
        self._errhandler: Errhandler = (file._errhandler if file is not None
                                        else _default_errhandler[0])

    # ------------------------------------------------------------------ handle basics
    def __bool__(self) -> bool:
        return self._f is not None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, File):
            return NotImplemented
        return self._f is other._f

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None  # type: ignore[assignment]   (handles are unhashable, as mpi4py's)

    def __repr__(self) -> str:
        return "MPI.FILE_NULL" if self._f is None else f"<MPI.File {self._f.path!r}>"

    def __reduce__(self):
        """mpi4py's rule: ``FILE_NULL`` pickles by name (to this process's own), another null
        handle to one of its class; an open file belongs to this process."""
        if self is FILE_NULL:
            return "FILE_NULL"
        if self._f is None:
            return (type(self), (FILE_NULL,))
        raise ValueError(f"cannot pickle {self!r}: an open file belongs to this process")

    def __enter__(self) -> "File":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._f is not None:
            self.Close()

    def _open(self, call: str) -> OpenFile:
        if self._f is None:
            raise FileError(f"File.{call}: the file handle is MPI.FILE_NULL (closed or never "
                            "opened)", ERR_FILE)
        return self._f

    # ------------------------------------------------------------------ open / close
    @classmethod
    def Open(cls, comm: Any, filename: Any, amode: int = MODE_RDONLY, info: Any = INFO_NULL
             ) -> "File":
        """Open ``filename`` on every process of ``comm`` (collective)."""
        call = "File.Open"
        if not hasattr(comm, "Get_group") or not comm:
            raise ArgumentError(f"{call}: comm must be a valid intracommunicator, got "
                                f"{comm!r:.40}")
        path = os.fsdecode(os.fspath(filename))
        amode = int(amode)
        fcomm = comm.Dup()
        rank = fcomm.Get_rank()
        err: Optional[BaseException] = None
        problem = _amode_problem(amode)
        if problem:
            err = FileError(f"{call} on rank {rank}: file {path!r}: amode {amode:#x} is "
                            f"invalid: MPI needs {problem}", ERR_AMODE)
        amodes = fcomm.allgather(amode)
        if err is None and len(set(amodes)) != 1:
            err = FileError(f"{call} on rank {rank}: file {path!r}: the ranks passed "
                            f"different amodes {amodes}", ERR_AMODE)
        fd = -1
        if err is None and rank == 0:        # rank 0 creates, the others open afterwards
            fd, err = cls._os_open(path, amode, create=True, rank=rank)
        try:
            agree(fcomm, err, call)
            if rank != 0:
                fd, err = cls._os_open(path, amode, create=False, rank=rank)
            agree(fcomm, err, call)
        except MinimpiError:
            if fd >= 0:
                os.close(fd)
            fcomm.Free()
            raise
        shared = shared_pointer(fcomm, path)
        state = OpenFile(fcomm, path, fd, amode, _info_dict(info), shared)
        if amode & MODE_APPEND:
            state.position = state.view.position_of_end(state.file_size(call))
            if rank == 0 and not isinstance(shared, UnavailablePointer):
                shared.set(state.position)
            fcomm.Barrier()
        handle = cls()
        handle._f = state
        return handle

    @staticmethod
    def _os_open(path: str, amode: int, create: bool, rank: int):
        flags = _os_flags(amode)
        if create and amode & MODE_CREATE:
            flags |= os.O_CREAT | (os.O_EXCL if amode & MODE_EXCL else 0)
        try:
            return os.open(path, flags, 0o666), None
        except OSError as err:
            return -1, os_error(err, call="File.Open", path=path, rank=rank)

    def free(self) -> None:
        """``Close`` unless the file is already null or closed (mpi4py 4's safe free)."""
        if self:
            self.Close()

    def Close(self) -> None:
        """Close the file on every process (collective); with ``MODE_DELETE_ON_CLOSE``
        rank 0 then removes it."""
        f = self._open("Close")
        err = None
        try:
            os.close(f.fd)
        except OSError as e:
            err = os_error(e, call="File.Close", path=f.path, rank=f.rank)
        self._f = None
        try:
            agree(f.comm, err, "File.Close")    # nobody uses the lock file past this point
        finally:
            f.shared.close(remove=f.rank == 0)
            if f.amode & MODE_DELETE_ON_CLOSE and f.rank == 0:
                try:
                    os.unlink(f.path)
                except FileNotFoundError:
                    pass
            f.comm.Barrier()
            f.comm.Free()

    @classmethod
    def Delete(cls, filename: Any, info: Any = INFO_NULL) -> None:
        """Remove a file (not collective)."""
        path = os.fsdecode(os.fspath(filename))
        try:
            os.unlink(path)
        except OSError as err:
            raise os_error(err, call="File.Delete", path=path, rank=None) from None

    # ------------------------------------------------------------------ size, info, sync
    def _collective_on_rank0(self, call: str, action) -> None:
        f = self._open(call)
        err = None
        if f.rank == 0:
            try:
                action(f)
            except OSError as e:
                err = os_error(e, call=f"File.{call}", path=f.path, rank=f.rank)
            except Exception as e:      # every rank hears of it (agree): none waits
                err = e
        agree(f.comm, err, f"File.{call}")

    def Set_size(self, size: int) -> None:
        """Truncate or extend the file to ``size`` bytes (collective)."""
        size = int(size)
        if size < 0:
            raise ArgumentError(f"File.Set_size: size must be >= 0 bytes, got {size}")
        self._open("Set_size").check_can_write("File.Set_size")
        self._collective_on_rank0("Set_size", lambda f: os.ftruncate(f.fd, size))

    def Preallocate(self, size: int) -> None:
        """Reserve storage for the first ``size`` bytes (collective; never shrinks)."""
        size = int(size)
        if size < 0:
            raise ArgumentError(f"File.Preallocate: size must be >= 0 bytes, got {size}")
        self._open("Preallocate").check_can_write("File.Preallocate")

        def grow(f: OpenFile) -> None:
            if size > os.fstat(f.fd).st_size:
                try:
                    os.posix_fallocate(f.fd, 0, size)
                except OSError as e:
                    if e.errno not in (95, 22):      # EOPNOTSUPP, EINVAL: no fallocate here
                        raise
                    os.ftruncate(f.fd, size)
        self._collective_on_rank0("Preallocate", grow)

    def Get_size(self) -> int:
        """The file's size in bytes."""
        return self._open("Get_size").file_size("File.Get_size")

    def Get_amode(self) -> int:
        """The access mode the file was opened with."""
        return self._open("Get_amode").amode

    def Get_group(self):
        """The group of the processes that opened the file."""
        return self._open("Get_group").comm.Get_group()

    def Get_info(self) -> Info:
        """The hints in use (a new Info)."""
        f = self._open("Get_info")
        return Info.Create(f.info)

    def Set_info(self, info: Any) -> None:
        """Add hints (``romio_cb_write``, ``romio_cb_read``, ``cb_nodes`` are read)."""
        f = self._open("Set_info")
        f.info.update(_info_dict(info))

    def Sync(self) -> None:
        """Flush this process's writes to storage (collective)."""
        f = self._open("Sync")
        err = None
        try:
            os.fsync(f.fd)
        except OSError as e:
            if e.errno != 22:      # EINVAL: a file that cannot be synced (a pipe...)
                err = os_error(e, call="File.Sync", path=f.path, rank=f.rank)
        agree(f.comm, err, "File.Sync")

    def Set_atomicity(self, flag: bool) -> None:
        """Atomic mode (collective): each access holds an fcntl lock on its byte range."""
        f = self._open("Set_atomicity")
        f.atomic = bool(flag)
        f.comm.Barrier()

    def Get_atomicity(self) -> bool:
        """Whether atomic mode is on."""
        return self._open("Get_atomicity").atomic

    # ------------------------------------------------------------------ views
    def Set_view(self, disp: int = 0, etype: Any = BYTE, filetype: Any = None,
                 datarep: str = "native", info: Any = INFO_NULL) -> None:
        """Set this process's view (collective); both file pointers go back to 0."""
        f = self._open("Set_view")
        call = "File.Set_view"
        err = None
        view = None
        try:
            etype = resolve_datatype(etype, call=call, arg="etype")
            filetype = etype if filetype is None else resolve_datatype(filetype, call=call,
                                                                        arg="filetype")
            disp = int(disp)
            if disp == DISPLACEMENT_CURRENT:
                if not f.amode & MODE_SEQUENTIAL:
                    raise ArgumentError(f"{call}: MPI.DISPLACEMENT_CURRENT needs a file "
                                        "opened with MODE_SEQUENTIAL")
                disp = f.view.byte_offset(f.shared.get())
            datarep = str(datarep)
            view = FileView(disp, etype, filetype, datarep, call, user=lookup_datarep(datarep))
        except Exception as e:      # every rank hears of it (agree): none waits
            err = e
        # The shared pointer goes back to 0 once, by rank 0, before anyone leaves the call:
        # before the agreement, unless the ranks read it for DISPLACEMENT_CURRENT (possible
        # in MODE_SEQUENTIAL only, the same on every rank) - then after it, and a barrier.
        sequential = bool(f.amode & MODE_SEQUENTIAL)
        resets = f.rank == 0 and not isinstance(f.shared, UnavailablePointer)
        if resets and not sequential and err is None:
            f.shared.set(0)
        agree(f.comm, err, call)
        f.view = view
        f.position = 0
        f.info.update(_info_dict(info))
        if sequential:
            if resets:
                f.shared.set(0)
            f.comm.Barrier()

    def Get_view(self) -> tuple:
        """``(disp, etype, filetype, datarep)``."""
        v = self._open("Get_view").view
        return (v.disp, _dup(v.etype), _dup(v.filetype), v.datarep)

    def Get_byte_offset(self, offset: int) -> int:
        """The absolute byte offset of view position ``offset`` (etypes)."""
        return self._open("Get_byte_offset").view.byte_offset(int(offset))

    def Get_type_extent(self, datatype: Datatype) -> int:
        """The extent of ``datatype`` in the file: its native extent, or for a basic type
        under a registered representation what its ``extent_fn`` says."""
        f = self._open("Get_type_extent")
        call = "File.Get_type_extent"
        return type_extent(f.view.converter, resolve_datatype(datatype, call=call),
                           f"{call} on rank {f.rank}")

    # ------------------------------------------------------------------ pointers
    def Seek(self, offset: int, whence: int = SEEK_SET) -> None:
        """Move the individual file pointer (``SEEK_SET``/``SEEK_CUR``/``SEEK_END``)."""
        ind.Seek(self._open("Seek"), offset, whence)

    def Get_position(self) -> int:
        """The individual file pointer, in etypes of the view."""
        return self._open("Get_position").position

    def Seek_shared(self, offset: int, whence: int = SEEK_SET) -> None:
        """Move the shared file pointer (collective; the same arguments on every rank)."""
        ind.Seek_shared(self._open("Seek_shared"), offset, whence)

    def Get_position_shared(self) -> int:
        """The shared file pointer, in etypes of the view."""
        return ind.Get_position_shared(self._open("Get_position_shared"))

    # ------------------------------------------------------------------ errhandlers
    @classmethod
    def Create_errhandler(cls, errhandler_fn: Any) -> Errhandler:
        """A user error handler: ``errhandler_fn(file, errorcode)`` runs on the errors of
        the files it is set on (which then raise ``MPI.Exception``)."""
        return create_errhandler("File", errhandler_fn)

    def Get_errhandler(self) -> Errhandler:
        """A new handle on this file's error handler (``ERRORS_RETURN`` unless set)."""
        return Errhandler(self._errhandler)

    def Set_errhandler(self, errhandler: Errhandler) -> None:
        """Handle this file's errors with ``errhandler``; on ``FILE_NULL`` it becomes the
        handler of files opened later."""
        self._errhandler = checked_errhandler(errhandler, "File", "File.Set_errhandler")
        if self._f is None:                  # FILE_NULL: the default of files opened later
            _default_errhandler[0] = self._errhandler

    def Call_errhandler(self, errorcode: int) -> None:
        """Run this file's error handler for ``errorcode`` (``ERRORS_RETURN``: nothing)."""
        call_errhandler(self, self._errhandler, errorcode, self._abort_on_error)

    def _current_errhandler(self) -> Errhandler:
        return self._errhandler

    _handle_error = handle_error     # what the API front does with an error (minimpi.front)

    def _abort_on_error(self, code: int) -> None:
        if self._f is not None:
            self._f.comm.Abort(code)
        else:   # FILE_NULL (a failed Open): the whole job, as MPI_Abort on COMM_WORLD
            raise SystemExit(code)

    # ------------------------------------------------------------------ Python properties
    amode = property(lambda self: self.Get_amode(), doc="access mode")
    size = property(lambda self: self.Get_size(), doc="size in bytes")
    group = property(lambda self: self.Get_group(), doc="group of the opening processes")
    group_size = property(lambda self: self._open("group_size").size)
    group_rank = property(lambda self: self._open("group_rank").rank)
    info = property(lambda self: self.Get_info(), lambda self, i: self.Set_info(i))
    atomicity = property(lambda self: self.Get_atomicity(),
                         lambda self, flag: self.Set_atomicity(flag))


def _dup(datatype: Datatype) -> Datatype:
    """What ``Get_view`` hands out: a module constant itself, another handle on any other
    predefined type, a duplicate of a derived one (the program may free what it gets; the
    view keeps the handle its operations hold)."""
    if PREDEFINED.get(datatype.name) is datatype:
        return datatype
    return Datatype(datatype) if datatype.is_predefined else datatype.Dup()


def _fill(status: Optional[Status], result: Status) -> None:
    if status is not None:
        assign_status(status, result)


def _blocking(name: str, impl, with_offset: bool, doc: str):
    if with_offset:
        def call(self: File, offset: int, buf: Any, status: Optional[Status] = None) -> None:
            _fill(status, impl(self._open(name), int(offset), buf, f"File.{name}"))
    else:
        def call(self: File, buf: Any, status: Optional[Status] = None) -> None:
            _fill(status, impl(self._open(name), buf, f"File.{name}"))
    call.__name__ = name
    call.__doc__ = doc
    return call


def _nonblocking(name: str, impl, with_offset: bool, doc: str):
    if with_offset:
        def call(self: File, offset: int, buf: Any) -> Request:
            return CompletedRequest(impl(self._open(name), int(offset), buf, f"File.{name}"))
    else:
        def call(self: File, buf: Any) -> Request:
            return CompletedRequest(impl(self._open(name), buf, f"File.{name}"))
    call.__name__ = name
    call.__doc__ = doc + " Done at the call; the request is complete."
    return call


def _split(name: str, impl, with_offset: bool):
    """``<name>_begin``/``<name>_end``: the I/O happens in begin, end returns its status."""
    def begin_common(self: File, args: tuple) -> None:
        f = self._open(f"{name}_begin")
        if f.split is not None:
            raise ArgumentError(f"File.{name}_begin on rank {f.rank}: {f.split[0]}_begin is "
                                "still open; call its _end first (one split collective at "
                                "a time per file)")
        f.split = (name, impl(f, *args, f"File.{name}_begin"))

    if with_offset:
        def begin(self: File, offset: int, buf: Any) -> None:
            begin_common(self, (int(offset), buf))
    else:
        def begin(self: File, buf: Any) -> None:
            begin_common(self, (buf,))

    def end(self: File, buf: Any, status: Optional[Status] = None) -> None:
        f = self._open(f"{name}_end")
        if f.split is None or f.split[0] != name:
            raise ArgumentError(f"File.{name}_end on rank {f.rank}: no {name}_begin is open")
        result = f.split[1]
        f.split = None
        _fill(status, result)
    begin.__name__, end.__name__ = f"{name}_begin", f"{name}_end"
    begin.__doc__ = f"Start a split collective {name}: the I/O is done here."
    end.__doc__ = f"Finish a split collective {name}; fills ``status``."
    return begin, end


def _collective_write_at(f, offset, buf, call):
    return two_phase.collective_write(f, offset, buf, call)


def _collective_read_at(f, offset, buf, call):
    return two_phase.collective_read(f, offset, buf, call)


def _collective_write(f, buf, call):
    return two_phase.collective_write(f, None, buf, call)


def _collective_read(f, buf, call):
    return two_phase.collective_read(f, None, buf, call)


_CALLS = {
    # name: (implementation, takes an offset, what it does)
    "Read_at": (ind.Read_at, True, "Read at an explicit offset (etypes of the view)."),
    "Write_at": (ind.Write_at, True, "Write at an explicit offset (etypes of the view)."),
    "Read_at_all": (_collective_read_at, True, "Collective Read_at."),
    "Write_at_all": (_collective_write_at, True, "Collective Write_at."),
    "Read": (ind.Read, False, "Read at the individual file pointer, advancing it."),
    "Write": (ind.Write, False, "Write at the individual file pointer, advancing it."),
    "Read_all": (_collective_read, False, "Collective Read."),
    "Write_all": (_collective_write, False, "Collective Write."),
    "Read_shared": (ind.Read_shared, False, "Read at the shared file pointer."),
    "Write_shared": (ind.Write_shared, False, "Write at the shared file pointer."),
    "Read_ordered": (ind.Read_ordered, False, "Collective read at the shared pointer, in "
                     "rank order."),
    "Write_ordered": (ind.Write_ordered, False, "Collective write at the shared pointer, in "
                      "rank order."),
}

for _name, (_impl, _offset, _doc) in _CALLS.items():
    setattr(File, _name, _blocking(_name, _impl, _offset, _doc))
    if "ordered" not in _name:
        setattr(File, "I" + _name[0].lower() + _name[1:],
                _nonblocking("I" + _name[0].lower() + _name[1:], _impl, _offset, _doc))
    if _name.endswith(("_all", "_ordered")):
        _b, _e = _split(_name, _impl, _offset)
        setattr(File, _b.__name__, _b)
        setattr(File, _e.__name__, _e)
del _name, _impl, _offset, _doc

#: ``MPI.FILE_NULL``
FILE_NULL = File()
