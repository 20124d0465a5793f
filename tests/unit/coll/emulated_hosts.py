"""Slow links between pretend hosts, for the in-process transport (a test helper only).

    links = SlowLinks(hosts="aabb", alpha=5e-3, beta=1e-7)
    run_threads(4, body, hosts=list("aabb"), recorder=links)

``run_threads(hosts=...)`` tells the ranks where they run; it does not make any link slower.
:class:`SlowLinks` does, as the fabric's frame recorder (called in the sending rank's thread
for every frame it puts on the wire): a frame between two hosts holds the sender for
``alpha`` (every frame: eager messages, the rendezvous handshake, data) plus ``beta`` per
payload byte, and for the ``beta`` part the ranks of one host take turns (one lock per
host: they share its network link, as ranks behind one NIC do). Frames inside a host pass
at once. (A sender waits out the latency itself, where a real NIC would let it go on: a
rank that posts several messages at once pays their latencies one after the other.) So a
collective pays, per message that crosses hosts, about what the cost model's inter-host
link says - which lets the unit tests check the model's ranking of flat and hierarchical
algorithms against measured times on one machine.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Dict, Sequence

from minimpi.transports.frames import HAS_PAYLOAD


class SlowLinks:
    """A frame recorder that delays frames between different hosts (see the module doc)."""

    def __init__(self, hosts: Sequence[Any], alpha: float, beta: float) -> None:
        self.hosts = list(hosts)
        self.alpha = alpha
        self.beta = beta
        self.nic: Dict[Any, threading.Lock] = {h: threading.Lock() for h in self.hosts}
        #: frames that crossed hosts, and their payload bytes
        self.frames = 0
        self.bytes = 0
        self._count = threading.Lock()

    def __call__(self, src: int, dest: int, header: Any) -> None:
        if self.hosts[src] == self.hosts[dest]:
            return
        payload = header.length if header.kind in HAS_PAYLOAD else 0
        with self._count:
            self.frames += 1
            self.bytes += payload
        time.sleep(self.alpha)                  # latency: frames of a host overlap in it
        with self.nic[self.hosts[src]]:         # bandwidth: they take turns on the wire
            time.sleep(payload * self.beta)
