"""A strided filetype for the I/O tests: the real ``Create_vector`` once the datatype seam
(``Datatype.blocks``) is there, else ``SeamVector``, a stand-in that answers the seam
(size, extent, blocks) for a vector of ``count`` blocks of ``blocklen`` bytes every
``stride`` bytes - so the strided view and the two-phase path are exercised either way."""
from __future__ import annotations

import numpy as np
from mpi4py import MPI

HAVE_SEAM = hasattr(MPI.Datatype, "blocks")


class SeamVector(MPI.Datatype):
    def __init__(self, count: int, blocklen: int, stride: int) -> None:
        super().__init__("SEAM_VECTOR", np.uint8, base=MPI.BYTE, base_count=count * blocklen)
        self._vec = (count, blocklen, stride)

    size = property(lambda self: self._vec[0] * self._vec[1])
    extent = property(lambda self: (self._vec[0] - 1) * self._vec[2] + self._vec[1])
    ub = extent
    is_contiguous = property(lambda self: self._vec[1] == self._vec[2] or self._vec[0] == 1)

    def blocks(self, count: int):
        n, blen, stride = self._vec
        one = np.arange(n, dtype=np.int64) * stride
        offs = (np.arange(count, dtype=np.int64)[:, None] * self.extent + one).ravel()
        return offs, np.full(len(offs), blen, np.int64)


def strided_bytes(count: int, blocklen: int, stride: int):
    """A filetype of ``count`` blocks of ``blocklen`` bytes, ``stride`` bytes apart,
    resized so that consecutive tiles follow each other at ``count * stride``."""
    if HAVE_SEAM:
        vec = MPI.BYTE.Create_vector(count, blocklen, stride)
        return vec.Create_resized(0, count * stride).Commit()
    t = SeamVector(count, blocklen, stride)
    return t
