"""The p2p conformance suite over the verbs transport, ranks as threads on the in-memory RC
fabric of fake_verbs.py.

Every test of tests/unit/test_p2p_engine.py that takes its ``run`` fixture runs here unchanged,
twice: with the default sizes, and with tiny ones (4 slots of 256 bytes, rendezvous above
1 KiB) so that credit exhaustion, fragmentation and zero-copy writes happen in almost every test.
"""
from __future__ import annotations

from conformance import conformance_fixture, conformance_tests
from fake_verbs import make_transports

from minimpi.transports.verbs import VerbsConfig

CONFIGS = {
    "default": VerbsConfig(),
    "tiny": VerbsConfig(slots=4, slot_size=256, rndv_threshold=1024, reg_cache_entries=4),
}

TESTS = conformance_tests()
globals().update(TESTS)
run = conformance_fixture(lambda size, name: make_transports(size, config=CONFIGS[name]),
                          sorted(CONFIGS))


def test_the_whole_conformance_suite_is_taken():
    # A rename in the suite must not silently shrink what runs over verbs.
    assert len(TESTS) >= 18, sorted(TESTS)
