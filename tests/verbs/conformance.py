"""The p2p conformance suite (tests/unit/test_p2p_engine.py), taken for another transport.

    globals().update(conformance_tests())          # every test that runs over `run`
    run = conformance_fixture(build, params=[...])  # build(size, param) -> connected transports

``minimpi.runtime.inproc.run_threads`` builds only inproc and tcp transports by name, so the fixture
extends its builder for the duration of each test.
"""
from __future__ import annotations

import importlib.util
import inspect
import pathlib
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import pytest

from minimpi.runtime import inproc

SUITE_PATH = pathlib.Path(__file__).resolve().parents[1] / "unit" / "test_p2p_engine.py"
KIND = "verbs-under-test"


def conformance_tests() -> Dict[str, Callable]:
    spec = importlib.util.spec_from_file_location("p2p_conformance_suite", SUITE_PATH)
    suite = sys.modules.get(spec.name)
    if suite is None:
        suite = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = suite     # its objects must pickle by module name
        spec.loader.exec_module(suite)
    return {name: fn for name, fn in vars(suite).items()
            if name.startswith("test_") and callable(fn)
            and "run" in inspect.signature(fn).parameters}


def conformance_fixture(build: Callable[[int, Any], List[Any]], params: Sequence[Any],
                        run_timeout: Optional[float] = None):
    """``run_timeout``: the limit of a run that names none (the suite's default is 30 s; an
    emulated guest on a busy host needs more). Runs that set their own keep it."""
    @pytest.fixture(params=list(params))
    def run(request, monkeypatch):
        built = inproc._transports
        made: List[Any] = []

        def transports(kind, size, *rest):
            if kind == KIND:
                made.extend(build(size, request.param))
                return made[-size:]
            return built(kind, size, *rest)

        monkeypatch.setattr(inproc, "_transports", transports)

        def runner(*args, **kwargs):
            if run_timeout is not None:
                kwargs.setdefault("timeout", run_timeout)
            return inproc.run_threads(*args, transport=KIND, **kwargs)
        yield runner
        # run_threads leaves the transports of a timed-out run open, with rank threads that
        # leave within a poll interval of the abort: let them go, then close (idempotent).
        deadline = time.monotonic() + 10
        for thread in threading.enumerate():
            if thread.name.startswith("minimpi-rank-"):
                thread.join(max(0.0, deadline - time.monotonic()))
        for transport in made:
            transport.close()
    return run
