"""The mpi4py-facing gather methods of ``Intracomm``: arguments, buffers, ``IN_PLACE``.

The algorithms they run are :mod:`minimpi.coll.gather`'s (chosen by the communicator's plan).
"""
from __future__ import annotations

from typing import Any

from ...coll.blocks import EqualBlocks, ListedBlocks, as_bytes
from ...coll.cost import default_model
from ...constants import IN_PLACE
from ...data.buffers import parse_buffer, parse_vbuffer
from .common import (
    Prepared,
    check_equal_blocks,
    check_root,
    collective,
    execute,
    in_place,
    nothing,
)


def Gather(comm, sendbuf: Any, recvbuf: Any, root: int = 0, algorithm: str = None) -> None:
    """Rank i's ``sendbuf`` lands in block i of the root's ``recvbuf`` (``MPI.IN_PLACE``
    as the root's ``sendbuf``: its block is already in place)."""
    _gather_buf(comm, sendbuf, recvbuf, root, algorithm, "Gather", False, False)


def Igather(comm, sendbuf: Any, recvbuf: Any, root: int = 0, algorithm: str = None):
    return _gather_buf(comm, sendbuf, recvbuf, root, algorithm, "Igather", False, True)


def Gatherv(comm, sendbuf: Any, recvbuf: Any, root: int = 0, algorithm: str = None) -> None:
    """Like Gather with per-rank counts: the root passes ``[buf, (counts, displs), TYPE]``."""
    _gather_buf(comm, sendbuf, recvbuf, root, algorithm, "Gatherv", True, False)


def Igatherv(comm, sendbuf: Any, recvbuf: Any, root: int = 0, algorithm: str = None):
    return _gather_buf(comm, sendbuf, recvbuf, root, algorithm, "Igatherv", True, True)


@collective
def _gather_buf(comm, sendbuf, recvbuf, root, algorithm, call, vector, nonblocking):
    return prepare_gather(comm, call, sendbuf, recvbuf, root, algorithm, vector).execute(
        comm, nonblocking)


def prepare_gather(comm, call: str, sendbuf: Any, recvbuf: Any, root: int = 0,
                   algorithm: str = None, vector: bool = False) -> Prepared:
    """The call parsed and checked (:class:`~minimpi.comm.collectives.common.Prepared`)."""
    root = check_root(comm, root, call)
    p, at_root = comm.size, comm.rank == root
    send = parse_buffer(in_place(sendbuf) if at_root else sendbuf, writable=False, call=call,
                        arg="sendbuf", allow_in_place=at_root)
    inplace = send is IN_PLACE
    recv = parse_vbuffer(recvbuf, p, writable=True, call=call, arg="recvbuf",
                         keep=inplace) if at_root else None
    if at_root and not vector:
        check_equal_blocks(comm, call, recv, "recvbuf", None if inplace else send, "sendbuf",
                           "Gatherv")
    model = default_model()
    if vector:
        known = {a: recv.block(a) for a in range(p)} if at_root else {}
        own = None if inplace else send.array  # the root's own is copied at the end
        nbytes = 0
        make = lambda ch: ListedBlocks(ch, root, known=known, own=own)
    else:
        nbytes = recv.block_nbytes(0) if inplace else send.nbytes
        everything = as_bytes(recv.array)[:p * nbytes] if at_root else None
        src = None if inplace else as_bytes(send.array)

        def make(ch):
            if at_root and src is not None:     # the root's own block: a local copy
                everything[root * nbytes:(root + 1) * nbytes] = src
            return EqualBlocks(ch, root, nbytes, everything=everything, src=src)
    return Prepared("gather", call, nbytes,
                    lambda alg, ch: alg(ch, make(ch), root, model.segment),
                    root=root, algorithm=algorithm,
                    finalize=(lambda _: recv.finish()) if at_root else nothing,
                    specs=((sendbuf, send), (recvbuf, recv)))


def gather(comm, sendobj: Any, root: int = 0, algorithm: str = None) -> Any:
    """The root returns the list of every rank's ``sendobj`` in rank order; others None."""
    return _gather_obj(comm, sendobj, root, algorithm, "gather", False)


def igather(comm, sendobj: Any, root: int = 0, algorithm: str = None):
    return _gather_obj(comm, sendobj, root, algorithm, "igather", True)


@collective
def _gather_obj(comm, sendobj, root, algorithm, call, nonblocking):
    root = check_root(comm, root, call)
    model = default_model()
    return execute(comm, "gather", call, 0,
                   lambda alg, ch: alg(ch, ListedBlocks(ch, root, own=sendobj, objects=True),
                                     root, model.segment),
                   root=root, algorithm=algorithm, objects=True, nonblocking=nonblocking)
