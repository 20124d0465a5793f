"""The parts of pyverbs whose shape changed between rdma-core releases, behind one small API.

The verbs transport (:mod:`minimpi.transports.verbs`) talks to pyverbs only through
:class:`Pyverbs` (from :func:`load`), so the differences live here:

- **Enums.** Up to rdma-core 58 they are flat names in ``pyverbs.enums``
  (``enums.IBV_ACCESS_LOCAL_WRITE``); from 59 that module is gone and the same names are
  attributes of per-enum classes in ``pyverbs.libibverbs_enums``
  (``libibverbs_enums.ibv_access_flags.IBV_ACCESS_LOCAL_WRITE``). :meth:`Pyverbs.const` finds a
  name in either layout.
- **The completion channel's file descriptor**, which the transport must ``poll`` instead of
  parking a thread in ``get_cq_event`` (that call keeps the GIL). ``CompChannel.fd`` exists only
  from rdma-core 57; on older releases :meth:`Pyverbs.open_channel` finds the descriptor the
  channel opened by comparing this process's open descriptors before and after creating it.
- **Work-request helpers.** Until a recent fix, ``SGE``/``SendWR``/``RecvWR`` never freed their
  C scatter lists (their destructor was misspelt), and the fixed ``close()`` is safe to call
  twice; so :meth:`Pyverbs.release` calls ``close()`` explicitly, which is right on every release.
- **Import side effect.** ``pyverbs.base`` calls ``logging.basicConfig(level=INFO)`` at import,
  which would start printing the user's own INFO log records; :func:`load` puts the root
  logger's handlers and level back as they were.
"""
from __future__ import annotations

import logging
import os
import threading
import types
from typing import Any, Iterable, Optional, Tuple

#: how a missing pyverbs is reported (one line, also used by the availability probe)
INSTALL_HINT = ("install Debian's python3-pyverbs (it is built for /usr/bin/python3) and run "
                "minimpi with that interpreter or a venv made with --system-site-packages; "
                "the PyPI sdist 'pyverbs' only works against exactly matching rdma-core")

_EVENT_FD_LINK = "anon_inode:[infinibandevent]"
_fd_scan_lock = threading.Lock()


class Pyverbs:
    """The pyverbs modules of one installation plus the helpers that hide version differences."""

    def __init__(self, modules: types.SimpleNamespace, flat_enums: Optional[Any],
                 grouped_enums: Optional[Any]) -> None:
        self.m = modules
        self._flat = flat_enums
        self._grouped = grouped_enums
        self._consts: dict = {}
        self.RDMAError = modules.pyverbs_error.PyverbsRDMAError
        self.Error = modules.pyverbs_error.PyverbsError

    def const(self, name: str) -> int:
        """The integer value of a libibverbs enum member, e.g. ``const("IBV_QPT_RC")``."""
        value = self._consts.get(name)
        if value is not None:
            return value
        if self._flat is not None and hasattr(self._flat, name):
            value = int(getattr(self._flat, name))
        elif self._grouped is not None:
            for group in vars(self._grouped).values():
                if isinstance(group, type) and hasattr(group, name):
                    value = int(getattr(group, name))
                    break
        if value is None:
            raise AttributeError(f"this pyverbs has no enum member {name}")
        self._consts[name] = value
        return value

    def open_channel(self, context: Any) -> Tuple[Any, int]:
        """Create a completion channel on ``context``; return it and its (pollable) fd."""
        channel_class = self.m.cq.CompChannel
        if _has_fd_attribute(channel_class):
            channel = channel_class(context)
            return channel, int(channel.fd)
        # rdma-core < 57: the fd is not exposed. Creating the channel opens exactly one new
        # descriptor of this kind; the lock keeps two transports of one process (ranks as
        # threads) from creating channels between each other's before/after snapshots.
        with _fd_scan_lock:
            before = _event_fds()
            channel = channel_class(context)
            new = sorted(_event_fds() - before)
        if len(new) != 1:
            channel.close()
            raise RuntimeError(
                f"cannot find the completion channel's file descriptor (this pyverbs has no "
                f"CompChannel.fd and {len(new)} new '{_EVENT_FD_LINK}' descriptors appeared)")
        return channel, new[0]

    @staticmethod
    def release(objects: Iterable[Any]) -> None:
        """Free the C memory of posted work-request helpers (SGE, SendWR, RecvWR)."""
        for obj in objects:
            obj.close()


def _has_fd_attribute(channel_class: type) -> bool:
    return "fd" in dir(channel_class)


def _event_fds() -> set:
    found = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") == _EVENT_FD_LINK:
                found.add(int(name))
        except OSError:   # closed between listdir and readlink
            continue
    return found


_loaded: Optional[Pyverbs] = None
_load_lock = threading.Lock()


def load() -> Pyverbs:
    """Import pyverbs once (raises ImportError with an install hint when it is missing)."""
    global _loaded
    with _load_lock:
        if _loaded is not None:
            return _loaded
        root = logging.getLogger()
        handlers, level = list(root.handlers), root.level
        try:
            import pyverbs.pyverbs_error as pyverbs_error
            from pyverbs import addr, cq, device, mr, pd, qp, wr
        except ImportError as exc:
            raise ImportError(f"pyverbs is not importable ({exc}); {INSTALL_HINT}") from exc
        finally:
            root.handlers[:] = handlers
            root.setLevel(level)
        try:
            import pyverbs.enums as flat
            grouped = None
        except ImportError:
            import pyverbs.libibverbs_enums as grouped
            flat = None
        modules = types.SimpleNamespace(addr=addr, cq=cq, device=device, mr=mr, pd=pd, qp=qp,
                                        wr=wr, pyverbs_error=pyverbs_error)
        _loaded = Pyverbs(modules, flat, grouped)
        return _loaded
