"""Straight ``Put``/``Get`` into a same-host peer's window with cross memory attach
(``process_vm_writev``/``process_vm_readv``, Linux): a ``Win.Create`` window on one host
needs no help from its target for them - one copy, no message.

Where the kernel refuses (another user, a ptrace policy, a container boundary) a target is
marked unreachable the first time and its operations go back to request messages
(:mod:`minimpi.rma.am`), which always work. ``MINIMPI_RMA_CMA=0`` turns the path off.
"""
from __future__ import annotations

import ctypes
import os
import sys
from typing import Optional

import numpy as np

from .layout import Layout

_IOV_MAX = 1024


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def _load() -> Optional[ctypes.CDLL]:
    if not sys.platform.startswith("linux") or os.environ.get("MINIMPI_RMA_CMA", "1") == "0":
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        for name in ("process_vm_readv", "process_vm_writev"):
            fn = getattr(libc, name)
            fn.restype = ctypes.c_ssize_t
            fn.argtypes = [ctypes.c_int, ctypes.POINTER(_Iovec), ctypes.c_ulong,
                           ctypes.POINTER(_Iovec), ctypes.c_ulong, ctypes.c_ulong]
    except (OSError, AttributeError):
        return None
    _let_siblings_in(libc)
    return libc


def _let_siblings_in(libc: ctypes.CDLL) -> None:
    """Under YAMA ptrace_scope=1 only ancestors may reach a process's memory; let the other
    ranks (siblings) do it, as MPI libraries' cross memory attach does."""
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            if f.read().strip() != "1":
                return
    except OSError:
        return
    libc.prctl(0x59616D61, ctypes.c_ulong(-1), 0, 0, 0)    # PR_SET_PTRACER, ANY


_libc = _load()


def available() -> bool:
    return _libc is not None


def transfer(pid: int, base: int, layout: Layout, local: np.ndarray, write: bool) -> bool:
    """Copy between ``local`` (contiguous uint8, layout.nbytes) and the layout's runs at
    address ``base`` of process ``pid``. False if the kernel refused before any byte moved."""
    fn = _libc.process_vm_writev if write else _libc.process_vm_readv
    here = int(local.ctypes.data)
    if layout.single:
        starts = np.array([base + layout.start], np.int64)
        lengths = np.array([layout.nbytes], np.int64)
    else:
        starts = base + layout.start + layout.offsets
        lengths = layout.lengths
    done = 0
    for first in range(0, len(starts), _IOV_MAX):
        s, n = starts[first:first + _IOV_MAX], lengths[first:first + _IOV_MAX]
        chunk = int(n.sum())
        while chunk:
            theirs = (_Iovec * len(s))(*[_Iovec(int(a), int(b)) for a, b in zip(s, n)])
            mine = _Iovec(here + done, chunk)
            moved = fn(pid, ctypes.byref(mine), 1, theirs, len(s), 0)
            if moved <= 0:
                if done == 0:
                    return False
                raise OSError(ctypes.get_errno(), f"process_vm_{'writev' if write else 'readv'}"
                              f" to pid {pid} stopped after {done} bytes: "
                              f"{os.strerror(ctypes.get_errno())}")
            done += moved
            chunk -= moved
            if chunk:       # partial: drop the runs already covered, cut the first one
                ends = np.cumsum(n)
                k = int(np.searchsorted(ends, moved, side="right"))
                cut = moved - (int(ends[k - 1]) if k else 0)
                s, n = s[k:].copy(), n[k:].copy()
                s[0] += cut
                n[0] -= cut
    return True
