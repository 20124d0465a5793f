"""The mpi4py-facing scatter methods of ``Intracomm``: arguments, buffers, ``IN_PLACE``.

The algorithms they run are :mod:`minimpi.coll.scatter`'s (chosen by the communicator's plan).
"""
from __future__ import annotations

from typing import Any

from ...coll.blocks import EqualBlocks, ListedBlocks, as_bytes
from ...coll.cost import default_model
from ...constants import IN_PLACE
from ...data.buffers import parse_buffer, parse_vbuffer
from ...errors import CountError
from .common import (
    Prepared,
    check_equal_blocks,
    check_root,
    collective,
    execute,
    in_place,
)


def Scatter(comm, sendbuf: Any, recvbuf: Any, root: int = 0, algorithm: str = None) -> None:
    """Send block i of the root's ``sendbuf`` to rank i's ``recvbuf`` (``MPI.IN_PLACE``
    as the root's ``recvbuf`` leaves its block where it is)."""
    _scatter_buf(comm, sendbuf, recvbuf, root, algorithm, "Scatter", False, False)


def Iscatter(comm, sendbuf: Any, recvbuf: Any, root: int = 0, algorithm: str = None):
    return _scatter_buf(comm, sendbuf, recvbuf, root, algorithm, "Iscatter", False, True)


def Scatterv(comm, sendbuf: Any, recvbuf: Any, root: int = 0, algorithm: str = None) -> None:
    """Like Scatter with per-rank counts: the root passes ``[buf, (counts, displs), TYPE]``."""
    _scatter_buf(comm, sendbuf, recvbuf, root, algorithm, "Scatterv", True, False)


def Iscatterv(comm, sendbuf: Any, recvbuf: Any, root: int = 0, algorithm: str = None):
    return _scatter_buf(comm, sendbuf, recvbuf, root, algorithm, "Iscatterv", True, True)


@collective
def _scatter_buf(comm, sendbuf, recvbuf, root, algorithm, call, vector, nonblocking):
    return prepare_scatter(comm, call, sendbuf, recvbuf, root, algorithm, vector).execute(
        comm, nonblocking)


def prepare_scatter(comm, call: str, sendbuf: Any, recvbuf: Any, root: int = 0,
                    algorithm: str = None, vector: bool = False) -> Prepared:
    """The call parsed and checked (:class:`~minimpi.comm.collectives.common.Prepared`)."""
    root = check_root(comm, root, call)
    p, at_root = comm.size, comm.rank == root
    recv = parse_buffer(in_place(recvbuf) if at_root else recvbuf, writable=True, call=call,
                        arg="recvbuf", allow_in_place=at_root)
    inplace = recv is IN_PLACE
    send = parse_vbuffer(sendbuf, p, writable=False, call=call, arg="sendbuf") if at_root else None
    if at_root and not vector:
        check_equal_blocks(comm, call, send, "sendbuf", None if inplace else recv, "recvbuf",
                           "Scatterv")
    model = default_model()
    if vector:
        known = {} if inplace else {comm.rank: recv.array}
        items = [send.block(a) for a in range(p)] if at_root else None
        if at_root and inplace:
            items[root] = None
        nbytes = 0
        make = lambda ch: ListedBlocks(ch, root, items=items, known=known)
    else:
        nbytes = send.block_nbytes(0) if inplace else recv.nbytes
        everything = as_bytes(send.array)[:p * nbytes] if at_root else None
        dst = None if inplace else as_bytes(recv.array)
        make = lambda ch: EqualBlocks(ch, root, nbytes, everything=everything, dst=dst)
    return Prepared("scatter", call, nbytes,
                    lambda alg, ch: alg(ch, make(ch), root, model.segment),
                    root=root, algorithm=algorithm,
                    finalize=(lambda _: None) if inplace else (lambda _: recv.finish()),
                    specs=((sendbuf, send), (recvbuf, recv)))


def scatter(comm, sendobj: Any = None, root: int = 0, algorithm: str = None) -> Any:
    """The root's ``sendobj`` is a sequence of p objects; rank i returns item i."""
    return _scatter_obj(comm, sendobj, root, algorithm, "scatter", False)


def iscatter(comm, sendobj: Any = None, root: int = 0, algorithm: str = None):
    return _scatter_obj(comm, sendobj, root, algorithm, "iscatter", True)


@collective
def _scatter_obj(comm, sendobj, root, algorithm, call, nonblocking):
    root = check_root(comm, root, call)
    items = None
    if comm.rank == root:
        try:
            # As in mpi4py, None stands for a None to every rank.
            items = [None] * comm.size if sendobj is None else list(sendobj)
        except TypeError:
            items = None
        if items is None or len(items) != comm.size:
            what = (f"{len(items)} items" if items is not None else
                    f"{type(sendobj).__name__}, not a sequence")
            raise CountError(
                f"rank {comm.rank}: {call}(root={root}): sendobj must be a sequence of "
                f"{comm.size} objects (one per rank), got {what}")
    model = default_model()
    return execute(comm, "scatter", call, 0,
                   lambda alg, ch: alg(ch, ListedBlocks(ch, root, items=items, objects=True),
                                     root, model.segment),
                   root=root, algorithm=algorithm, objects=True, nonblocking=nonblocking)
