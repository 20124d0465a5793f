"""Independent data access: explicit offsets, individual and shared file pointers.

Every access is: the user's buffer as packed bytes (userbuf.py) -> the view's file runs
for those bytes (view.py) -> one ``pwrite``/``preadv`` per run (posix.py). Positions and
offsets count etypes of the view. A read that reaches the end of the file stops there;
its status counts the bytes read.

The shared file pointer lives where shared.py says (in memory for a file opened on one
process, else in a lock file); ``Read_ordered``/``Write_ordered`` are collective: the
group's rank 0 advances the pointer once by everybody's total and each rank accesses at
the pointer plus the data of the ranks before it.
"""
from __future__ import annotations

from typing import Any

from ..constants import ANY_SOURCE, ANY_TAG, SEEK_CUR, SEEK_END, SEEK_SET
from ..errors import ArgumentError
from ..p2p.request import Status
from .datarep import from_file, to_file
from .open_file import OpenFile, agree
from .posix import read_runs, write_runs
from .userbuf import Incoming, Outgoing


def io_status(nbytes: int) -> Status:
    """The status of a data access: its byte count (source and tag mean nothing here)."""
    return Status(ANY_SOURCE, ANY_TAG, nbytes)


# --------------------------------------------------------------------- the two primitives
def write_at(f: OpenFile, offset: int, buf: Any, call: str) -> int:
    """Write ``buf`` at view position ``offset``; returns the etypes written."""
    f.check_can_write(call)
    out = Outgoing(buf, call, f.rank)
    etypes = f.etypes_of(out.nbytes, out.datatype, call)
    write_packed(f, offset, out, call)
    return etypes


def write_packed(f: OpenFile, offset: int, out: Outgoing, call: str) -> None:
    offs, lens = f.view.runs(f.start_of(offset, call), out.nbytes)
    data = to_file(f.view.converter, out.data, out.datatype, f"{call} on rank {f.rank}")
    with f.atomic_range(offs, lens, write=True):
        write_runs(f.fd, offs, lens, memoryview(data), f.where(call))


def read_at(f: OpenFile, offset: int, buf: Any, call: str) -> int:
    """Read into ``buf`` from view position ``offset``; returns the bytes read."""
    f.check_can_read(call)
    inc = Incoming(buf, call, f.rank)
    f.etypes_of(inc.nbytes, inc.datatype, call)
    nread = read_packed(f, offset, inc, call)
    inc.finish(nread)
    return nread


def read_packed(f: OpenFile, offset: int, inc: Incoming, call: str) -> int:
    offs, lens = f.view.runs(f.start_of(offset, call), inc.nbytes)
    with f.atomic_range(offs, lens, write=False):
        nread = read_runs(f.fd, offs, lens, memoryview(inc.data), f.where(call))
    from_file(f.view.converter, inc.data[:nread], inc.datatype, f"{call} on rank {f.rank}")
    return nread


# --------------------------------------------------------------------- explicit offsets
def Write_at(f: OpenFile, offset: int, buf: Any, call: str = "File.Write_at") -> Status:
    f.check_not_sequential(call)
    etypes = write_at(f, int(offset), buf, call)
    return io_status(etypes * f.view.esize)


def Read_at(f: OpenFile, offset: int, buf: Any, call: str = "File.Read_at") -> Status:
    f.check_not_sequential(call)
    return io_status(read_at(f, int(offset), buf, call))


# --------------------------------------------------------------------- individual pointer
def Write(f: OpenFile, buf: Any, call: str = "File.Write") -> Status:
    f.check_not_sequential(call)
    etypes = write_at(f, f.position, buf, call)
    f.position += etypes
    return io_status(etypes * f.view.esize)


def Read(f: OpenFile, buf: Any, call: str = "File.Read") -> Status:
    f.check_not_sequential(call)
    nread = read_at(f, f.position, buf, call)
    f.position += nread // f.view.esize
    return io_status(nread)


def Seek(f: OpenFile, offset: int, whence: int, call: str = "File.Seek") -> None:
    f.check_not_sequential(call)
    f.position = _seek_target(f, f.position, int(offset), whence, call)


def _seek_target(f: OpenFile, current: int, offset: int, whence: int, call: str) -> int:
    if whence == SEEK_SET:
        target = offset
    elif whence == SEEK_CUR:
        target = current + offset
    elif whence == SEEK_END:
        target = f.view.position_of_end(f.file_size(call)) + offset
    else:
        raise ArgumentError(f"{call} on rank {f.rank}: whence must be MPI.SEEK_SET, "
                            f"SEEK_CUR or SEEK_END, got {whence!r}")
    if target < 0:
        raise ArgumentError(f"{call} on rank {f.rank}: the position would be {target} "
                            "etypes, before the start of the view")
    return target


# --------------------------------------------------------------------- shared pointer
def Write_shared(f: OpenFile, buf: Any, call: str = "File.Write_shared") -> Status:
    f.check_can_write(call)
    out = Outgoing(buf, call, f.rank)
    etypes = f.etypes_of(out.nbytes, out.datatype, call)
    start = f.shared.fetch_add(etypes)
    write_packed(f, start, out, call)
    return io_status(out.nbytes)


def Read_shared(f: OpenFile, buf: Any, call: str = "File.Read_shared") -> Status:
    f.check_can_read(call)
    inc = Incoming(buf, call, f.rank)
    etypes = f.etypes_of(inc.nbytes, inc.datatype, call)
    start = f.shared.fetch_add(etypes)
    nread = read_packed(f, start, inc, call)
    inc.finish(nread)
    return io_status(nread)


def Seek_shared(f: OpenFile, offset: int, whence: int, call: str = "File.Seek_shared"
                ) -> None:
    """Collective: every rank passes the same offset and whence."""
    err = None
    try:
        if f.rank == 0:
            f.shared.set(_seek_target(f, f.shared.get(), int(offset), whence, call))
    except Exception as e:      # every rank hears of it (agree): none waits
        err = e
    agree(f.comm, err, call)      # (also orders the update before anyone's next access)


def Get_position_shared(f: OpenFile) -> int:
    return f.shared.get()


def _ordered(f: OpenFile, buf: Any, call: str, write: bool) -> Status:
    """Collective shared-pointer access in rank order."""
    err = None
    side = None
    etypes = 0
    try:
        (f.check_can_write if write else f.check_can_read)(call)
        side = Outgoing(buf, call, f.rank) if write else Incoming(buf, call, f.rank)
        etypes = f.etypes_of(side.nbytes, side.datatype, call)
    except Exception as e:      # every rank hears of it (agree): none waits
        err = e
    counts = f.comm.allgather(None if err else etypes)
    agree_failed = any(c is None for c in counts)
    if agree_failed:
        agree(f.comm, err, call)
    base = f.shared.fetch_add(sum(counts)) if f.rank == 0 else None
    base = f.comm.bcast(base, 0)
    start = base + sum(counts[:f.rank])
    err = None
    nbytes = 0
    try:
        if write:
            write_packed(f, start, side, call)
            nbytes = side.nbytes
        else:
            nbytes = read_packed(f, start, side, call)
            side.finish(nbytes)
    except Exception as e:      # every rank hears of it (agree): none waits
        err = e
    agree(f.comm, err, call)
    return io_status(nbytes)


def Write_ordered(f: OpenFile, buf: Any, call: str = "File.Write_ordered") -> Status:
    return _ordered(f, buf, call, write=True)


def Read_ordered(f: OpenFile, buf: Any, call: str = "File.Read_ordered") -> Status:
    return _ordered(f, buf, call, write=False)
