"""``MPI.Win``: one-sided communication is out of scope; this is its null handle.

minimpi implements no RMA windows. ``MPI.Win()`` and ``MPI.WIN_NULL`` are null window
handles (falsy, equal to each other), so code written for mpi4py can test for them;
creating a window (``Win.Create``, ``Win.Allocate``...) and every window operation raise
:class:`~minimpi.errors.UnsupportedError` (a ``NotImplementedError`` naming the feature),
which mpi4py's own tests read as "not available". The data-movement calls (``Put``,
``Get``, ``Accumulate``...) first check their arguments as mpi4py does - a malformed
origin buffer or target spec is a ``ValueError``/``TypeError`` - so a program's mistakes
are reported before the missing feature.
"""
from __future__ import annotations

import operator
from typing import Any

from ..constants import PROC_NULL
from ..data.buffers import parse_buffer
from ..data.datatypes import Datatype
from .handles import refusing, unsupported

_FEATURE = "Win"


def _check_target(target: Any, call: str) -> None:
    """mpi4py's target spec: None, a displacement, or [disp[, count[, datatype]]]."""
    if target is None:
        return
    if isinstance(target, (list, tuple)):
        if not 1 <= len(target) <= 3:
            raise ValueError(f"Win.{call}: target must be [disp], [disp, count] or "
                             f"[disp, count, datatype], got {len(target)} items")
        for item in target[:2]:
            operator.index(item)     # TypeError for a non-integer, as mpi4py
        if len(target) == 3 and not isinstance(target[2], (Datatype, str)):
            raise TypeError(f"Win.{call}: target datatype must be an MPI datatype, got "
                            f"{type(target[2]).__name__}")
        return
    try:
        operator.index(target)
    except TypeError:
        raise ValueError(f"Win.{call}: target must be None, an int displacement or a "
                         f"list/tuple, got {type(target).__name__}") from None


def _data_call(name: str, origin_writable: bool):
    def call(self: "Win", origin: Any, target_rank: int, target: Any = None, *args: Any,
             **kwargs: Any) -> Any:
        if operator.index(target_rank) != PROC_NULL:
            parse_buffer(origin, writable=origin_writable, call=f"Win.{name}", arg="origin")
        _check_target(target, name)
        raise unsupported(_FEATURE, f"MPI.Win.{name}")
    call.__name__ = name
    call.__doc__ = ("Not implemented in minimpi (one-sided communication); the origin "
                    "and target arguments are checked first.")
    return call


class Win:
    """A null RMA window handle (``MPI.Win``); see the module docstring."""

    def __init__(self, win: Any = None) -> None:
        if win is not None and not isinstance(win, Win):
            raise TypeError(f"MPI.Win({win!r:.40}): expected a window or nothing")

    def __bool__(self) -> bool:
        return False

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Win) or NotImplemented

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "MPI.WIN_NULL"

    def __reduce__(self):
        return (Win, ())

    # window creation: the feature itself
    Create = staticmethod(refusing(_FEATURE, "MPI.Win.Create"))
    Allocate = staticmethod(refusing(_FEATURE, "MPI.Win.Allocate"))
    Allocate_shared = staticmethod(refusing(_FEATURE, "MPI.Win.Allocate_shared"))
    Create_dynamic = staticmethod(refusing(_FEATURE, "MPI.Win.Create_dynamic"))

    Put = _data_call("Put", False)
    Rput = _data_call("Rput", False)
    Accumulate = _data_call("Accumulate", False)
    Raccumulate = _data_call("Raccumulate", False)
    Get = _data_call("Get", True)
    Rget = _data_call("Rget", True)

    for _name in ("Get_accumulate", "Rget_accumulate", "Fetch_and_op", "Compare_and_swap",
                  "Fence", "Start", "Complete", "Post", "Wait", "Test", "Lock", "Unlock",
                  "Lock_all", "Unlock_all", "Flush", "Flush_all", "Flush_local",
                  "Flush_local_all", "Sync", "Free", "Attach", "Detach", "Shared_query",
                  "Get_group", "Get_attr", "Set_attr", "Get_info", "Set_info", "Get_name",
                  "Set_name", "tomemory"):
        locals()[_name] = refusing(_FEATURE, f"MPI.Win.{_name}")
    del _name


WIN_NULL = Win()
