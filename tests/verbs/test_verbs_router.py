"""The verbs transport as one member of a rank's router (what ``--transport auto`` builds).

Two pretend hosts over the in-memory RC fabric (fake_verbs.py) and real TCP sockets: peers
whose host offers verbs are reached over verbs, the others over TCP, a host without verbs says
why in one line, and a rank sleeping on both members wakes for either.
"""
from __future__ import annotations

import os
import threading
import time

from fake_verbs import FakeFabric
from jobhelpers import progress_until

from minimpi.transports import frames
from minimpi.transports.base import FrameSink
from minimpi.transports.router import RouterTransport
from minimpi.transports.tcp import TcpTransport
from minimpi.transports.verbs import VerbsConfig, VerbsTransport

TINY = VerbsConfig(slots=4, slot_size=256, rndv_threshold=1024)


class Inbox(FrameSink):
    def __init__(self) -> None:
        self.got = []                     # (peer, msg_id, payload)

    def frame_arrived(self, peer, header):
        return memoryview(bytearray(header.length)).cast("B")

    def payload_arrived(self, peer, header, buffer):
        self.got.append((peer, header.msg_id, bytes(buffer)))

    def peer_lost(self, peer, reason):
        raise AssertionError(f"peer {peer} lost: {reason}")


def build(hosts, without_verbs=()):
    """One router per rank: verbs (unless the rank is in ``without_verbs``, as ``auto`` leaves
    out a member that cannot start) then TCP."""
    fabric, secret, size = FakeFabric(), os.urandom(32), len(hosts)
    routers = []
    for r, host in enumerate(hosts):
        members, skipped = [], {}
        if r in without_verbs:
            skipped["verbs"] = f"rank {r}: verbs: no RDMA device"
        else:
            members.append(VerbsTransport(r, size, fabric.ops(), TINY, host=host))
        members.append(TcpTransport(r, size, secret))
        routers.append(RouterTransport(r, size, members, host, optional=("verbs",),
                                       skipped=skipped))
    inboxes = [Inbox() for _ in routers]
    for t, box in zip(routers, inboxes):
        t.attach(box)
    addresses = [t.listen() for t in routers]
    for t in routers:
        t.set_peers(addresses)
    return routers, inboxes


def send(t, peer, msg_id, payload):
    header = frames.pack(frames.EAGER, 0, 0, t.rank, 0, msg_id, len(payload))
    t.send(peer, header, [memoryview(payload)], lambda failure=None: None)


def test_peers_offering_verbs_get_verbs_the_others_tcp_and_the_host_without_says_why(capfd):
    routers, inboxes = build(["a", "a", "b", "b"], without_verbs=(2,))
    try:
        assert routers[0].routes() == [None, "verbs", "tcp", "verbs"]
        assert routers[2].routes() == ["tcp", "tcp", None, "tcp"]
        assert routers[3].routes() == ["verbs", "verbs", "tcp", None]
        err = capfd.readouterr().err
        # one line, from host b's lowest rank, naming what carries its peers instead and why
        assert err.count("\n") == 1 and "host b: tcp between hosts, not verbs" in err
        assert "no RDMA device" in err
        expected = []
        for src in range(4):
            for dst in range(4):
                if src != dst:
                    payload = bytes([src, dst]) * 300     # above a slot: fragments over verbs
                    send(routers[src], dst, 10 * src + dst, payload)
                    expected.append((dst, src, 10 * src + dst, payload))
        progress_until(routers, lambda: sum(len(b.got) for b in inboxes) == len(expected), 10.0)
        for dst, src, msg_id, payload in expected:
            assert (src, msg_id, payload) in inboxes[dst].got
    finally:
        for t in routers:
            t.close()


def test_every_rank_on_one_host_with_verbs_prints_nothing(capfd):
    routers, _ = build(["a", "a", "a"])
    try:
        assert routers[1].routes() == ["verbs", None, "verbs"]
        assert capfd.readouterr().err == ""
    finally:
        for t in routers:
            t.close()


def test_a_rank_sleeping_on_verbs_and_tcp_wakes_for_either():
    routers, inboxes = build(["a", "b", "b"], without_verbs=(2,))
    try:
        assert routers[1].routes() == ["verbs", None, "tcp"]
        # open TCP connections first, so the wake-up below is only the frame's
        send(routers[2], 1, 1, b"warm")
        progress_until(routers, lambda: len(inboxes[1].got) == 1, 10.0)
        for msg_id, (src, delay) in enumerate([(0, 0.3), (2, 0.3)], start=2):
            timer = threading.Timer(delay, send, (routers[src], 1, msg_id, b"x" * 40))
            timer.start()
            t0 = time.monotonic()
            while len(inboxes[1].got) < msg_id and time.monotonic() - t0 < 5:
                routers[1].progress(2.0)       # sleeps in one poll on both members' fds
            timer.join()
            assert len(inboxes[1].got) == msg_id, f"rank 1 missed the frame from rank {src}"
            assert time.monotonic() - t0 < 2.0
    finally:
        for t in routers:
            t.close()
