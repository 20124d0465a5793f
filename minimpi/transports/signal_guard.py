"""Hold back Python signal handlers while frames are delivered.

A Python signal handler runs in the main thread between two bytecodes, wherever the main
thread happens to be. A handler that raises (``KeyboardInterrupt``, a ``SIGALRM`` timeout,
``sys.exit`` in a ``SIGTERM`` handler) in the middle of delivering a frame would leave the
stream half-consumed: a header taken but not its payload, a receive matched but not filled.
The program may catch that exception and call MPI again, so a half-delivered frame would
become a duplicated, lost or garbled message - a wrong answer.

So a transport delivers frames inside :func:`hold` ... :func:`release`: the process's
asynchronous signals are blocked in the main thread for those microseconds, stay pending
in the kernel, and their handlers run as soon as :func:`release` unblocks them - between
two frames, with every queue consistent. Waiting (the transport's ``poll``) is never inside
a hold, so Ctrl-C still interrupts a blocked receive at once.

Costs one pair of ``pthread_sigmask`` calls per round that delivers something (about
1-2 us where system calls are slow, well under 1 us on bare metal); nothing while idle,
nothing in threads other than the main one (only the main thread runs Python handlers).
A blocking receive holds them for its whole call (see ``comm.pt2pt.blocking_recv``);
transports sleep through :func:`interruptible`, so a signal still ends the sleep at once.
The express receive needs no hold: it takes a frame through the transport's eager reader,
in one step a handler cannot split (:meth:`minimpi.transports.base.Transport.eager_reader`).

Threads minimpi starts itself are started with these signals blocked
(:func:`start_thread_blocked`), so the kernel never hands a process-directed signal to one of
them (which would let the main thread run the handler while it holds them back). A thread of
the program that waits in MPI (``MPI.THREAD_MULTIPLE``) blocks them in itself on its first
wait (:func:`block_in_this_thread`): it may be the one delivering frames while the main
thread holds them back, and a signal the kernel gave it would run its handler in the main
thread at once. Python runs handlers in the main thread only, so nothing else changes.
Synchronous faults (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS) are never blocked.
"""
from __future__ import annotations

import contextlib
import ctypes
import signal
import threading
from typing import Any, Callable, Iterator, Optional

_SYNCHRONOUS = {"SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGTRAP", "SIGABRT", "SIGSYS",
                "SIGKILL", "SIGSTOP"}
#: every signal a handler could be run for, except the synchronous faults
ASYNC_SIGNALS = frozenset(
    s for s in (signal.valid_signals() if hasattr(signal, "valid_signals") else ())
    if getattr(s, "name", None) not in _SYNCHRONOUS)

_MAIN = threading.main_thread().ident
_SIG_BLOCK, _SIG_SETMASK = 0, 2     # Linux values, only used with the libc path below


def _libc_masker() -> Optional[Callable[[], Any]]:
    """A fast path through libc's pthread_sigmask (Python's own builds a set per call)."""
    try:
        libc = ctypes.PyDLL(None)   # PyDLL: keep the GIL, a few hundred ns cheaper
        psm = libc.pthread_sigmask
        sigemptyset, sigaddset = libc.sigemptyset, libc.sigaddset
    except (OSError, AttributeError):
        return None
    if getattr(signal, "SIG_BLOCK", None) != _SIG_BLOCK or \
            getattr(signal, "SIG_SETMASK", None) != _SIG_SETMASK:
        return None
    psm.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    psm.restype = ctypes.c_int
    block = ctypes.create_string_buffer(128)     # sigset_t is at most 128 bytes
    sigemptyset(block)
    for sig in ASYNC_SIGNALS:
        sigaddset(block, int(sig))
    return psm, block


_LIBC = _libc_masker() if ASYNC_SIGNALS else None
_HAS_SIGMASK = hasattr(signal, "pthread_sigmask") and bool(ASYNC_SIGNALS)


_held = False        # a hold is in force in the main thread (holds do not nest)
_saved_libc = ctypes.create_string_buffer(128)
_NOTHING = object()


def _handlers_run_here() -> None:
    """An empty call: the interpreter runs handlers whose signals arrived earlier at
    function calls like this one."""


def hold() -> Any:
    """Block asynchronous signals in the main thread; returns what :func:`release` needs
    (None when nothing was blocked: another thread, a hold already in force, or a
    platform without signal masks).

    A signal that arrived just before the block already waits for its handler; that
    handler runs inside this function, and if it raises, the mask is restored and the
    exception leaves ``hold`` before the caller has touched anything.
    """
    global _held
    if _held or threading.get_ident() != _MAIN:
        return None
    if _LIBC is None and not _HAS_SIGMASK:
        return None
    saved: Any = None
    try:
        if _LIBC is not None:
            if _LIBC[0](_SIG_BLOCK, _LIBC[1], _saved_libc) != 0:
                return None
            saved = _NOTHING
        else:
            saved = signal.pthread_sigmask(signal.SIG_BLOCK, ASYNC_SIGNALS)
        _held = True
        _handlers_run_here()
    except BaseException:
        _restore(saved)
        raise
    return saved


def release(saved: Any) -> None:
    """Restore the mask :func:`hold` replaced; handlers of signals that arrived meanwhile
    run right after (and may raise from here: everything is consistent by then)."""
    if saved is not None:
        _restore(saved)


def _restore(saved: Any) -> None:
    global _held
    _held = False
    if saved is _NOTHING:
        _LIBC[0](_SIG_SETMASK, _saved_libc, None)
    elif saved is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, saved)
    elif _LIBC is not None:      # the block itself was interrupted: undo whatever it did
        _LIBC[0](_SIG_SETMASK, _saved_libc, None)


@contextlib.contextmanager
def threads_started_blocked() -> Iterator[None]:
    """Block asynchronous signals in this thread for the ``with`` body: every thread
    started inside it (by Python or by a C library) inherits the blocked mask."""
    if not _HAS_SIGMASK:
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, ASYNC_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def interruptible(wait: Callable[..., Any], *args: Any) -> Any:
    """Run a blocking wait (a transport's ``poll``) so that signals interrupt it, also
    inside a :func:`hold`: the held signals are let through for the wait alone and held
    back again before anything else runs (also when a handler raised during the wait).
    Only the main thread's mask changes (a hold is the main thread's)."""
    if not _held or threading.get_ident() != _MAIN:
        return wait(*args)
    try:
        if _LIBC is not None:
            _LIBC[0](_SIG_SETMASK, _saved_libc, None)
        else:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, ASYNC_SIGNALS)
        return wait(*args)
    finally:
        if _LIBC is not None:
            _LIBC[0](_SIG_BLOCK, _LIBC[1], None)
        else:
            signal.pthread_sigmask(signal.SIG_BLOCK, ASYNC_SIGNALS)


def let_handlers_run() -> None:
    """Inside a :func:`hold`, a point where the caller's state is consistent: the handlers
    of signals that arrived meanwhile run now (and may raise from here); signals are held
    back again before this returns. Nothing happens outside a hold or in another thread."""
    interruptible(_handlers_run_here)


def block_in_this_thread() -> None:
    """Block asynchronous signals in the calling thread for the rest of its life, unless it
    is the main thread (which takes them): process-directed signals then go to the main
    thread, whose :func:`hold` can hold them back."""
    if _HAS_SIGMASK and threading.get_ident() != _MAIN:
        signal.pthread_sigmask(signal.SIG_BLOCK, ASYNC_SIGNALS)


def start_thread_blocked(thread: threading.Thread) -> None:
    """Start ``thread`` with asynchronous signals blocked in it (a new thread inherits the
    mask of the thread that starts it), so that process signals go to the main thread."""
    if not _HAS_SIGMASK:
        thread.start()
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, ASYNC_SIGNALS)
    try:
        thread.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
