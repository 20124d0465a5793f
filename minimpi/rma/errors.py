"""The error classes of one-sided communication (MPI's numbers, as MPICH has them).

Each is an ``MPI.Exception`` (:class:`~minimpi.errors.MinimpiError`) whose
``Get_error_class()`` is the MPI class, so ``except MPI.Exception as e: e.Get_error_class()
== MPI.ERR_RMA_SYNC`` works as under a C MPI.
"""
from __future__ import annotations

from ..errors import MinimpiError

ERR_WIN = 45
ERR_BASE = 46
ERR_LOCKTYPE = 47
ERR_RMA_CONFLICT = 49
ERR_RMA_SYNC = 50
ERR_SIZE = 51
ERR_DISP = 52
ERR_ASSERT = 53
ERR_RMA_RANGE = 55
ERR_RMA_ATTACH = 56
ERR_RMA_SHARED = 57
ERR_RMA_FLAVOR = 58

ERROR_CLASSES = {
    "ERR_WIN": ERR_WIN, "ERR_BASE": ERR_BASE, "ERR_LOCKTYPE": ERR_LOCKTYPE,
    "ERR_RMA_CONFLICT": ERR_RMA_CONFLICT, "ERR_RMA_SYNC": ERR_RMA_SYNC, "ERR_SIZE": ERR_SIZE,
    "ERR_DISP": ERR_DISP, "ERR_ASSERT": ERR_ASSERT, "ERR_RMA_RANGE": ERR_RMA_RANGE,
    "ERR_RMA_ATTACH": ERR_RMA_ATTACH, "ERR_RMA_SHARED": ERR_RMA_SHARED,
    "ERR_RMA_FLAVOR": ERR_RMA_FLAVOR,
}


class WinError(MinimpiError):
    """A window used wrongly (freed, null, wrong flavor for the call)."""
    error_class = ERR_WIN


class RmaSyncError(MinimpiError):
    """An epoch misuse: an operation outside any access epoch, ``Unlock`` without ``Lock``,
    ``Complete`` without ``Start``..."""
    error_class = ERR_RMA_SYNC


class RmaRangeError(MinimpiError, ValueError):
    """An access outside the target's window (or outside every attached region)."""
    error_class = ERR_RMA_RANGE


class RmaAttachError(MinimpiError, ValueError):
    """``Attach``/``Detach`` misuse on a dynamic window."""
    error_class = ERR_RMA_ATTACH


class RmaSharedError(MinimpiError):
    """A shared-memory window that cannot be made (ranks on several hosts, no shared memory)."""
    error_class = ERR_RMA_SHARED


class RmaFlavorError(MinimpiError):
    """A call that the window's flavor does not allow (``Attach`` on a non-dynamic window)."""
    error_class = ERR_RMA_FLAVOR
