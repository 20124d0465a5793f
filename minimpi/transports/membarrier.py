"""Process-wide memory barriers: the slow half of an asymmetric fence (Linux ``membarrier``).

A shared-memory writer publishes (stores a ring's tail, a segment's sequence word) and then
looks at whether the reader sleeps; the reader raises its sleeping flag and then looks at
what was published. Each side must make its store visible before its load (Dekker), or both
may miss the other and the reader sleeps through the message. A full fence on both sides
costs the writer a locked instruction and two Python calls on every message.

With ``membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)`` the cost moves to the rare side: the
sleeper calls :func:`barrier` between its store and its load, and the kernel runs a full
memory barrier on every CPU that runs a thread of a *registered* process (a process that is
not running went through the scheduler's barrier already). For a registered writer this
turns the program order of its store and load into a fenced order wherever the barrier
falls: before its store, its load comes after the sleeper's store; after its load, its
store was visible before the sleeper looks. Either way one of them sees the other. So a
writer needs no fence of its own toward a peer that calls :func:`barrier` before it sleeps,
as long as the writer is registered (:func:`register`); both facts are per process and are
announced in shared memory by the transport that relies on them.

Linux 4.16 or later; where the call is missing or forbidden (a seccomp filter), or on an
architecture this module has no system call number for, :func:`register` is False and the
writers keep their fences.
"""
from __future__ import annotations

import ctypes
import os
import platform
import sys
from typing import Any, Optional

#: the membarrier system call's number, per machine
_SYSCALL = {"x86_64": 324, "amd64": 324, "aarch64": 283, "arm64": 283}
_CMD_QUERY = 0
_CMD_GLOBAL_EXPEDITED = 1 << 1
_CMD_REGISTER_GLOBAL_EXPEDITED = 1 << 2

_libc: Optional[Any] = None
_number: Optional[int] = None
_registered_pid = 0     # the process that registered (registration is not inherited by fork)


def _call(command: int) -> int:
    return _libc.syscall(ctypes.c_long(_number), ctypes.c_long(command), ctypes.c_long(0),
                         ctypes.c_long(0))


def supported() -> bool:
    """Whether this kernel offers the expedited global barrier to this process."""
    global _libc, _number
    if _number is None:
        number = _SYSCALL.get(platform.machine().lower())
        if number is None or not sys.platform.startswith("linux"):
            return False
        try:
            _libc = ctypes.CDLL(None, use_errno=True)
            _libc.syscall.restype = ctypes.c_long
        except (OSError, AttributeError):
            return False
        _number = number
    mask = _call(_CMD_QUERY)
    needed = _CMD_GLOBAL_EXPEDITED | _CMD_REGISTER_GLOBAL_EXPEDITED
    return mask >= 0 and mask & needed == needed


def register() -> bool:
    """Register this process for :func:`barrier`'s barriers (once per process; a forked
    child registers again): True if it is, and a barrier issued now succeeds."""
    global _registered_pid
    pid = os.getpid()
    if _registered_pid == pid:
        return True
    if not supported() or _call(_CMD_REGISTER_GLOBAL_EXPEDITED) != 0 \
            or _call(_CMD_GLOBAL_EXPEDITED) != 0:
        return False
    _registered_pid = pid
    return True


def barrier() -> None:
    """A full memory barrier on this CPU and on every CPU running a registered process
    (about a microsecond, more when it interrupts others): only where a process is about
    to sleep, never per message. Raises OSError if the kernel refuses it (after
    :func:`register` said True it does not)."""
    if _call(_CMD_GLOBAL_EXPEDITED) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"membarrier: {os.strerror(err)}")
