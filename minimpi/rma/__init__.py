"""One-sided communication (RMA windows): ``MPI.Win``.

One module per concern: :mod:`.window` (the ``Win`` object: creation, attributes, memory),
:mod:`.operations` (Put, Get, the accumulates), :mod:`.synchronisation` (Fence, PSCW, locks,
flushes), :mod:`.state` (a window's shared state and the handle base), :mod:`.am` (operations as active messages served by the target's
progress), :mod:`.shared` (windows in shared memory on one host: straight ``Put``/``Get``),
:mod:`.cma` (straight ``Put``/``Get`` into a same-host peer's ``Win.Create`` memory),
:mod:`.layout` (target byte runs from datatypes), :mod:`.exposed` (a rank's side of a
window), :mod:`.locks` (a target's lock table), :mod:`.epochs` (ERR_RMA_SYNC checks),
:mod:`.finish` (windows still live at finalize: served until their other ranks finish).
"""
from .errors import ERROR_CLASSES
from .finish import finish_wait, finish_windows, lock_reports, serving_receives, stop_serving
from .window import WIN_NULL, Win

__all__ = ["Win", "WIN_NULL", "ERROR_CLASSES", "finish_windows", "finish_wait",
           "lock_reports", "serving_receives", "stop_serving"]
