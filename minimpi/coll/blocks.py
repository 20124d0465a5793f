"""Small shared mechanics of the collective algorithms (never a schedule).

* :func:`even_bounds` - split ``n`` items into ``parts`` nearly equal blocks (offsets).
* :func:`fold_power_of_two` / :func:`unfold_rank` - the "fold" that lets power-of-two
  algorithms (recursive doubling / halving) run on any p: the first ``2*rem`` ranks pair up,
  each even one hands its data to the odd one above it and sits out, so ``2^k`` ranks remain,
  each standing for a *contiguous* range of real ranks (order-preserving).
* :func:`scratch_like` / :func:`received` - write an algorithm once for numpy buffers and
  Python objects: a receive goes into a preallocated temporary (buffers) or arrives as an
  object (``into is None``).
* :func:`combine` - one reduction step, in MPI operand order, in place for buffers.
* :class:`Blocks` - the p per-rank blocks of allgather/alltoall: views of a numpy buffer at
  (counts, displs), or the items of a Python list; ``pack``/``target``/``unpack`` turn a list
  of block indices into one message (zero-copy when the blocks lie back to back).
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from ..p2p.request import Request


def even_bounds(n: int, parts: int, unit: int = 1) -> List[int]:
    """Offsets (``parts + 1`` of them) splitting ``n`` items into ``parts`` blocks whose sizes
    differ by at most one item (the first ``n % parts`` get the extra one), scaled by ``unit``
    elements per item."""
    base, extra = divmod(n, parts)
    out, acc = [0], 0
    for i in range(parts):
        acc += base + (1 if i < extra else 0)
        out.append(acc * unit)
    return out


def running_sum(counts: Sequence[int]) -> List[int]:
    """``[0, c0, c0+c1, ...]`` (p + 1 offsets)."""
    out, acc = [0], 0
    for c in counts:
        acc += c
        out.append(acc)
    return out


def fold_power_of_two(rank: int, p: int) -> Tuple[int, int, int]:
    """``(pof2, rem, newrank)``: the largest power of two <= p, ``rem = p - pof2``, and this
    rank's number among the ``pof2`` ranks that remain after the fold (-1: sits out).

    Ranks below ``2*rem``: the odd one of each pair (2i, 2i+1) stays as newrank i and stands
    for both; ranks from ``2*rem`` on are newrank ``rank - rem``.
    """
    pof2 = 1 << (p.bit_length() - 1)
    rem = p - pof2
    if rank < 2 * rem:
        return pof2, rem, (rank // 2 if rank % 2 else -1)
    return pof2, rem, rank - rem


def unfold_rank(newrank: int, rem: int) -> int:
    """The real rank that plays ``newrank`` after the fold."""
    return 2 * newrank + 1 if newrank < rem else newrank + rem


def first_real(newrank: int, rem: int) -> int:
    """Lowest real rank that ``newrank`` stands for."""
    return 2 * newrank if newrank < rem else newrank + rem


def scratch_like(data: Any, size: Optional[int] = None) -> Optional[np.ndarray]:
    """A preallocated receive temporary for a numpy ``data`` (``size`` elements, default all);
    ``None`` in object mode (the message arrives as an object)."""
    if isinstance(data, np.ndarray):
        return np.empty(data.size if size is None else size, dtype=data.dtype)
    return None


def received(req: Request, into: Optional[np.ndarray]) -> Any:
    """What a completed receive delivered: the buffer it filled, or the object."""
    return req.wait() if into is None else into


def combine(op: Any, acc: Any, other: Any, other_is_lower: bool, datatype: Any = None,
            call: str = "reduce") -> Any:
    """One reduction step in MPI order; returns the new accumulator.

    ``other_is_lower``: ``other`` holds lower ranks than ``acc`` (``acc = other (op) acc``),
    else higher ones (``acc = acc (op) other``). Buffers are reduced in place into ``acc``
    (numpy ufuncs, no per-element Python); objects return ``op(lower, higher)``.
    """
    if isinstance(acc, np.ndarray):
        if other_is_lower:
            op.reduce_into(other, acc, datatype, call=call)
        else:
            op.reduce_into_lower(acc, other, datatype, call=call)
        return acc
    return op(other, acc) if other_is_lower else op(acc, other)


class Blocks:
    """The p blocks of an allgather/alltoall buffer, or of a list of Python objects.

    Buffer mode: ``array`` (flat numpy) with ``counts``/``displs`` in *elements* of
    ``array``. Object mode: ``items`` (a list of p objects). A message carrying several
    blocks is one numpy array (a view when the blocks are back to back in memory in that
    order, else a packed copy) or a list of the objects.
    """

    __slots__ = ("array", "counts", "displs", "items")

    def __init__(self, array: Optional[np.ndarray] = None, counts: Sequence[int] = (),
                 displs: Sequence[int] = (), items: Optional[List[Any]] = None) -> None:
        self.array = array
        self.counts = list(counts)
        self.displs = list(displs)
        self.items = items

    @classmethod
    def of_vbuffer(cls, spec: Any) -> "Blocks":
        """Blocks over a parsed :class:`~minimpi.buffers.VBufSpec` (counts in elements)."""
        k = spec.datatype.base_count
        return cls(spec.array, [c * k for c in spec.counts], [d * k for d in spec.displs])

    @classmethod
    def uniform(cls, array: np.ndarray, p: int) -> "Blocks":
        """p equal blocks back to back over ``array``."""
        b = array.size // p
        return cls(array, [b] * p, [i * b for i in range(p)])

    @property
    def is_object(self) -> bool:
        return self.items is not None

    def __len__(self) -> int:
        return len(self.items) if self.items is not None else len(self.counts)

    def view(self, i: int) -> np.ndarray:
        d = self.displs[i]
        return self.array[d:d + self.counts[i]]

    def get(self, i: int) -> Any:
        return self.items[i] if self.items is not None else self.view(i)

    def put(self, i: int, value: Any) -> None:
        """Store block ``i`` (an object, or a copy of an array's elements)."""
        if self.items is not None:
            self.items[i] = value
        else:
            self.view(i)[...] = value

    def _span(self, indices: Sequence[int]) -> Optional[Tuple[int, int]]:
        """(start, stop) when the blocks lie back to back in this order, else None."""
        start = stop = None
        for i in indices:
            c = self.counts[i]
            if c == 0:
                continue
            d = self.displs[i]
            if start is None:
                start, stop = d, d + c
            elif d == stop:
                stop += c
            else:
                return None
        return (0, 0) if start is None else (start, stop)

    def nelements(self, indices: Sequence[int]) -> int:
        return sum(self.counts[i] for i in indices)

    def pack(self, indices: Sequence[int], copy: bool = False) -> Any:
        """The message carrying these blocks, in this order. ``copy=True`` when the same
        blocks are received into while the message may still be in flight."""
        if self.items is not None:
            return [self.items[i] for i in indices]
        span = self._span(indices)
        if span is not None:
            view = self.array[span[0]:span[1]]
            return view.copy() if copy else view
        return np.concatenate([self.view(i) for i in indices])

    def target(self, indices: Sequence[int]) -> Optional[np.ndarray]:
        """Where to receive a message carrying these blocks (None: as an object)."""
        if self.items is not None:
            return None
        span = self._span(indices)
        if span is not None:
            return self.array[span[0]:span[1]]
        return np.empty(self.nelements(indices), dtype=self.array.dtype)

    def unpack(self, indices: Sequence[int], into: Optional[np.ndarray], req: Request) -> None:
        """Store a received message (from :meth:`target`'s ``into``) into its blocks."""
        if self.items is not None:
            values = req.wait()
            for i, v in zip(indices, values):
                self.items[i] = v
            return
        if self._span(indices) is not None:
            return  # received in place
        pos = 0
        for i in indices:
            c = self.counts[i]
            self.view(i)[...] = into[pos:pos + c]
            pos += c
