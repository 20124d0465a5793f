"""``minimpi.launch``: start a job from inside a Python program and get its results back.

    import minimpi

    def work(scale):                       # module level: the ranks import it
        from minimpi import MPI
        comm = MPI.COMM_WORLD
        return comm.allreduce(comm.rank * scale)

    if __name__ == "__main__":             # the ranks import this file too: guard the caller
        print(minimpi.launch(work, n=4, args=(10,)))                     # [60, 60, 60, 60]
        print(minimpi.launch(work, n=8, args=(1,), hosts="a:4,b:4"))     # over ssh

Each rank runs ``python -m minimpi.launcher.embed``, which reads the function (by reference:
its module and name), the arguments (pickled) from its stdin, calls it, and writes the pickled
result, or the exception with its traceback, to a pipe of its own that the agent forwards to
the launcher. The job runs like ``minimpi run``'s: the same agents (also on this host), job
secret, output forwarding with ``[rank]`` prefixes, failure policy and teardown; a failing
rank's exception is re-raised here, naming the rank, with the remote traceback as its cause.

A function defined in the caller's main script is found the way ``multiprocessing`` finds it:
the ranks run that script as ``__mp_main__`` (so its ``if __name__ == "__main__":`` part does
not run again) and take the function from there.
"""
from __future__ import annotations

import argparse
import io
import os
import pickle
import struct
import sys
import traceback
import types
from typing import Any, BinaryIO, Callable, Mapping, Optional, Sequence, Union

from minimpi.errors import MinimpiError

from .agent import ENV_RESULT_FD

__all__ = ["launch", "JobFailedError", "RemoteTraceback"]


class JobFailedError(MinimpiError):
    """The job ended without every rank returning a result; ``exit_code`` and ``rank`` (the
    culprit, when one is known) tell what the launcher found."""

    def __init__(self, message: str, exit_code: int, rank: Optional[int] = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.rank = rank


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a rank (set as the re-raised one's cause)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text


class _TextSink:
    """Bytes -> a text stream without a ``buffer`` (a notebook's sys.stdout, StringIO)."""

    def __init__(self, stream) -> None:
        self.stream = stream

    def write(self, data: bytes) -> int:
        self.stream.write(data.decode("utf-8", "replace"))
        return len(data)

    def flush(self) -> None:
        self.stream.flush()


def _binary(stream) -> BinaryIO:
    if isinstance(stream, (io.RawIOBase, io.BufferedIOBase)):
        return stream
    buffer = getattr(stream, "buffer", None)
    return buffer if buffer is not None else _TextSink(stream)


def _payload(fn: Callable, args: tuple, kwargs: dict) -> bytes:
    name = getattr(fn, "__qualname__", repr(fn))
    if not callable(fn):
        raise TypeError(f"minimpi.launch: fn must be a function, got {type(fn).__name__}")
    if "<locals>" in name or name == "<lambda>":
        raise TypeError(f"minimpi.launch: fn must be a module-level function the ranks can "
                        f"import, got {name} (a lambda or a function defined inside another)")
    header: dict[str, Any] = {"main_path": None,
                              "sys_path": [p for p in sys.path if p and os.path.isdir(p)]}
    if getattr(fn, "__module__", None) == "__main__":
        main_path = getattr(sys.modules["__main__"], "__file__", None)
        if not main_path:
            raise TypeError(
                f"minimpi.launch: {name} is defined in an interactive session or notebook, "
                f"which the ranks cannot import; move it into a module (a .py file)")
        header["main_path"] = os.path.abspath(main_path)
    try:
        body = pickle.dumps((fn, tuple(args), dict(kwargs)), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        raise TypeError(f"minimpi.launch: cannot send {name} and its arguments to the ranks: "
                        f"{exc}") from None
    head = pickle.dumps(header, protocol=pickle.HIGHEST_PROTOCOL)
    return struct.pack(">I", len(head)) + head + body


def launch(fn: Callable, n: int = 1, args: Sequence = (), kwargs: Optional[Mapping] = None, *,
           hosts: Union[str, Sequence[str], None] = None, hostfile: Optional[str] = None,
           launcher: str = "auto", rsh: Optional[str] = None, python: Optional[str] = None,
           iface: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
           timeout: Optional[float] = None, startup_timeout: float = 60.0,
           deadlock_timeout: float = 5.0, prefix: bool = True,
           output_dir: Optional[str] = None, oversubscribe: bool = False,
           stdout=None, stderr=None) -> list:
    """Run ``fn(*args, **kwargs)`` on ``n`` ranks; returns ``[result of rank 0, rank 1, ...]``.

    ``hosts``: None (this host), ``"a:4,b:4"`` or ``["a:4", "b:4"]`` (one agent per host over
    ``rsh``, default ssh); ``hostfile``: an MPI hostfile; ``launcher="slurm"``: srun on the
    nodes of the Slurm allocation. Output of the ranks goes to ``stdout``/``stderr`` (default
    this process's), each line prefixed with ``[rank] ``. If a rank raises, that exception is
    raised here (cause: the rank's traceback; attribute ``minimpi_rank``); other failures
    (a rank killed, a lost host, a timeout) raise :class:`JobFailedError`; Ctrl-C raises
    KeyboardInterrupt once the job has ended.
    """
    from .hosts import HostListError
    from .job import JobSpec
    from .multihost import MultiHostJob, plan_from_args
    from .run import extra_env

    if not isinstance(n, int) or n < 1:
        raise ValueError(f"minimpi.launch: n must be a positive integer, got {n!r}")
    payload = _payload(fn, tuple(args), dict(kwargs or {}))
    if hosts is not None and not isinstance(hosts, str):
        hosts = ",".join(hosts)
    if hosts is None and hostfile is None and launcher in ("auto", "local"):
        hosts, launcher = f"localhost:{n}", "auto"     # through a local agent
    ns = argparse.Namespace(hosts=hosts, hostfile=hostfile, launcher=launcher, rsh=rsh,
                            remote_python=python, iface=iface, oversubscribe=oversubscribe,
                            bind=None, eager_limit=None, coll=[],
                            env=[(str(k), str(v)) for k, v in (env or {}).items()],
                            mpi4py_shim=True)
    try:
        plan = plan_from_args(ns, n)
    except HostListError as exc:
        raise ValueError(f"minimpi.launch: {exc}") from None
    spec = JobSpec(nprocs=n, module="minimpi.launcher.embed", env=extra_env(ns),
                   timeout=timeout, startup_timeout=startup_timeout,
                   deadlock_timeout=deadlock_timeout, prefix=prefix, output_dir=output_dir)
    for stream in (stdout or sys.stdout, stderr or sys.stderr):
        stream.flush()   # what the caller printed comes first (the job writes below the text layer)
    job = MultiHostJob(spec, plan, _binary(stdout or sys.stdout), _binary(stderr or sys.stderr),
                       rank_stdin=payload, collect_results=True)
    code = job.run()
    outcomes = {}
    for rank, data in job.results.items():
        try:
            outcomes[rank] = pickle.loads(bytes(data))
        except Exception as exc:
            outcomes[rank] = ("undecodable", f"{type(exc).__name__}: {exc}")
    failure = job.failure
    if code == 0 and failure is None:
        missing = [r for r in range(n) if outcomes.get(r, ("",))[0] != "ok"]
        if not missing:
            return [outcomes[r][1] for r in range(n)]
        raise JobFailedError(f"minimpi.launch: rank(s) {', '.join(map(str, missing))} exited "
                             f"without returning a result (sys.exit inside fn?)", code,
                             missing[0])
    if failure is not None and failure.kind == "interrupt":
        raise KeyboardInterrupt(failure.summary)
    culprit = failure.rank if failure is not None else None
    summary = failure.summary if failure is not None else f"the job ended with code {code}"
    if culprit is not None and outcomes.get(culprit, ("",))[0] == "error":
        _, exc, tb = outcomes[culprit]
        if isinstance(exc, BaseException):
            exc.__cause__ = RemoteTraceback(f"\n\nrank {culprit} of {n} raised:\n{tb}")
            try:
                exc.minimpi_rank = culprit
                if hasattr(exc, "add_note"):
                    exc.add_note(f"(raised by rank {culprit} of {n} in minimpi.launch)")
            except Exception:
                pass
            raise exc
        raise JobFailedError(f"minimpi.launch: rank {culprit} raised:\n{tb}", code, culprit)
    raise JobFailedError(summary.replace("minimpi:", "minimpi.launch:", 1), code, culprit)


# ---- the rank's side ---------------------------------------------------------------------------
def _load_main(path: str) -> None:
    """Make the caller's main script importable as ``__main__`` (run as ``__mp_main__``)."""
    module = types.ModuleType("__mp_main__")
    module.__file__ = path
    sys.modules["__mp_main__"] = module
    with open(path, "rb") as f:
        code = compile(f.read(), path, "exec")
    sys.path.insert(0, os.path.dirname(path))
    exec(code, module.__dict__)
    sys.modules["__main__"] = module


def _write_result(fd: int, outcome: tuple) -> None:
    data = pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def rank_main() -> None:
    data = sys.stdin.buffer.read()
    (head_len,) = struct.unpack(">I", data[:4])
    header = pickle.loads(data[4:4 + head_len])
    for path in reversed(header.get("sys_path", [])):
        if path not in sys.path:
            sys.path.insert(0, path)
    if header.get("main_path"):
        _load_main(header["main_path"])
    fn, args, kwargs = pickle.loads(data[4 + head_len:])
    fd = int(os.environ[ENV_RESULT_FD])
    try:
        result = fn(*args, **kwargs)
        try:
            _write_result(fd, ("ok", result))
        except Exception as exc:
            raise TypeError(f"the result of {fn.__qualname__} cannot be sent back: {exc}") \
                from None
    except Exception as exc:     # SystemExit and Ctrl-C are how the rank ends, not results
        tb = traceback.format_exc()
        try:
            _write_result(fd, ("error", exc, tb))
        except Exception:   # an exception that does not pickle: its text still does
            _write_result(fd, ("error", None, tb))
        raise            # the runtime's excepthook reports it, as for any failing rank
    finally:
        os.close(fd)


if __name__ == "__main__":
    rank_main()
