"""The p2p conformance suite (tests/unit/test_p2p_engine.py) over the verbs transport, with
ranks as threads on the in-memory RC fabric of fake_verbs.py.

Every test of that suite that takes its ``run`` fixture runs here unchanged, twice: with the
default sizes, and with tiny ones (4 slots of 256 bytes, rendezvous above 1 KiB) so that credit
exhaustion, fragmentation and zero-copy writes happen in almost every test.
"""
from __future__ import annotations

import importlib.util
import inspect
import pathlib
import sys

import pytest

from fake_verbs import make_transports
from minimpi import inproc
from minimpi.transports.verbs import VerbsConfig

CONFIGS = {
    "default": VerbsConfig(),
    "tiny": VerbsConfig(slots=4, slot_size=256, rndv_threshold=1024, reg_cache_entries=4),
}

_SUITE_PATH = pathlib.Path(__file__).resolve().parents[1] / "unit" / "test_p2p_engine.py"
_spec = importlib.util.spec_from_file_location("p2p_conformance_suite", _SUITE_PATH)
_suite = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _suite      # its objects must pickle by module name, as in the suite
_spec.loader.exec_module(_suite)

# Take every conformance test (those that run over the suite's `run` fixture).
CONFORMANCE = [name for name, fn in vars(_suite).items()
               if name.startswith("test_") and callable(fn)
               and "run" in inspect.signature(fn).parameters]
globals().update({name: getattr(_suite, name) for name in CONFORMANCE})


def test_the_whole_conformance_suite_is_taken():
    # A rename in the suite must not silently shrink what runs over verbs.
    assert len(CONFORMANCE) >= 18, CONFORMANCE


@pytest.fixture(params=sorted(CONFIGS))
def run(request, monkeypatch):
    """run_threads over fake-backed verbs transports (it knows only inproc and tcp by name,
    so its transport builder is extended for the duration of the test)."""
    config = CONFIGS[request.param]
    built = inproc._transports

    def transports(kind, size, recorder):
        if kind == "verbs-fake":
            return make_transports(size, config=config)
        return built(kind, size, recorder)

    monkeypatch.setattr(inproc, "_transports", transports)

    def runner(*args, **kwargs):
        return inproc.run_threads(*args, transport="verbs-fake", **kwargs)
    return runner
