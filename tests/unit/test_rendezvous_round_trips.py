"""The rendezvous costs each rank a constant number of coordinator round trips, whatever p.

A rank sends ``hello`` (answered with its connection's challenge) and ``register`` (answered,
once every rank registered, with the whole address table): two round trips for 3 ranks as
for 9, so start-up does not grow by a round trip per peer.
"""
from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
import zmq
from minimpi.launcher.coordinator import Coordinator

from minimpi.runtime.bootstrap import CoordinatorClient

SECRET = bytes(range(32))


class CountingCoordinator(Coordinator):
    """A coordinator that counts the authentic messages each rank sent it."""

    def __init__(self, size: int) -> None:
        super().__init__(size, SECRET, "job", log=lambda text: None)
        self.sent_by: Counter = Counter()

    def _handle(self, ident, msg, events) -> None:
        self.sent_by[msg.get("r")] += 1
        super()._handle(ident, msg, events)


def _rendezvous(size: int) -> Counter:
    coord = CountingCoordinator(size)
    stop = threading.Event()

    def serve() -> None:
        poller = zmq.Poller()
        poller.register(coord.socket, zmq.POLLIN)
        while not stop.is_set():
            if poller.poll(50):
                coord.receive()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    clients = [CoordinatorClient(coord.address, SECRET, r, size, "job") for r in range(size)]
    tables = [None] * size
    try:
        def go(r: int) -> None:
            tables[r] = clients[r].exchange_addresses(f"addr-{r}", timeout=20)

        threads = [threading.Thread(target=go, args=(r,)) for r in range(size)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        assert tables == [[f"addr-{r}" for r in range(size)]] * size
        return coord.sent_by
    finally:
        for c in clients:
            c.close()
        stop.set()
        server.join(5)
        coord.close()


@pytest.mark.parametrize("size", [3, 5, 9])
def test_each_rank_needs_two_round_trips(size):
    sent = _rendezvous(size)
    assert sent == Counter({r: 2 for r in range(size)})
