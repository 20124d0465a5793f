"""The engine's public interface (minimpi.p2p.engine / minimpi.bus), on threads:
observers see every message and step, operations on a context's queues, what Free releases,
and a peer's protocol violation as a clear error."""
from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pytest

from minimpi.bus import Subscriber
from minimpi.constants import ANY_TAG
from minimpi.errors import ProtocolError
from minimpi.runtime.inproc import RankFailed, run_threads
from minimpi.transports import frames


def engine_of(comm):
    from minimpi.comm.communicator import endpoint_of
    return endpoint_of(comm).engine


class Log(Subscriber):
    def __init__(self):
        self.events = []

    def message_sent(self, context, dest, source, tag, payload, nbytes, msg_id):
        self.events.append(("sent", dest, tag, nbytes, msg_id))

    def receive_posted(self, context, source, tag, target):
        self.events.append(("posted", source, tag))

    def message_received(self, peer, context, tag, msg_id, nbytes):
        self.events.append(("received", peer, tag, nbytes, msg_id))

    def step_started(self, channel, index):
        self.events.append(("step", channel.call, index))

    def wait_ended(self, seconds):
        self.events.append(("waited",))


@pytest.mark.parametrize("nbytes", [8, 200_000])     # eager and rendezvous
def test_an_observer_sees_each_message_leave_and_arrive_once(nbytes):
    def body(comm):
        engine = engine_of(comm)
        log = Log()
        engine.bus.subscribe(log)
        n = nbytes // 8
        if comm.rank == 0:
            reqs = [comm.Isend(np.ones(n), dest=1, tag=5), comm.Isend(np.ones(n), dest=2, tag=6)]
            comm.Barrier()
            for r in reqs:
                r.Wait()
        elif comm.rank == 1:
            comm.Barrier()       # the message is unexpected by the time the receive is posted
            comm.Recv(np.zeros(n), source=0, tag=5)
        else:
            comm.Recv(np.zeros(n), source=0, tag=6)
            comm.Barrier()
        engine.bus.unsubscribe(log)
        comm.Barrier()           # not seen any more
        return [e for e in log.events if e[0] != "step" and e[0] != "waited" and e[2] in (5, 6)], \
            [e for e in log.events if e[0] == "step"]
    (sent0, steps0), (got1, _), (got2, _) = run_threads(3, body)
    sends = {e[1]: e for e in sent0}
    assert sorted(sends) == [1, 2] and all(e[3] == nbytes for e in sent0)
    assert got1 == [("posted", 0, 5), ("received", 0, 5, nbytes, sends[1][4])]
    assert got2 == [("posted", 0, 6), ("received", 0, 6, nbytes, sends[2][4])]
    assert steps0 and steps0[0][1].startswith("Barrier[") and steps0[0][2] == 0


def test_an_engine_nobody_observes_reports_no_steps():
    from minimpi.p2p.engine import Engine
    engine = Engine(0, 1, None)
    assert engine.bus.subscribers == () and engine.step_reporter() is None
    log = Log()
    engine.bus.subscribe(log)
    engine.bus.subscribe(log)               # once only
    assert engine.bus.subscribers == (log,) and engine.step_reporter() is not None
    engine.bus.unsubscribe(log)
    assert engine.bus.subscribers == () and engine.step_reporter() is None


def test_queues_can_be_peeked_dropped_and_failed_through_the_interface():
    def body(comm):
        engine = engine_of(comm)
        context = 0        # COMM_WORLD's point-to-point context
        if comm.rank == 0:
            for tag in (1, 2, 3):
                comm.send(tag, dest=1, tag=tag)
            comm.Barrier()
            return None
        comm.Barrier()
        stats = engine.match_stats()
        tags = [m.tag for m in engine.unexpected_messages(context)]
        peeked = engine.peek_message(context, 0, 2).tag
        dropped = engine.drop_unexpected(context, lambda tag: tag == 2)
        left = [m.tag for m in engine.unexpected_messages(context)]
        req = comm.irecv(source=0, tag=9)
        posted = len(engine.posted_receives(context))
        failed = engine.fail_pending(context, RuntimeError("stop"), lambda tag: tag == 9)
        with pytest.raises(RuntimeError, match="stop"):
            req.wait()
        rest = [comm.recv(source=0, tag=ANY_TAG) for _ in range(2)]
        return (stats.unexpected, tags, peeked, dropped, left, posted, failed, rest,
                engine.match_stats().posted)
    assert run_threads(2, body)[1] == (3, [1, 2, 3], 2, 1, [1, 3], 1, True, [1, 3], 0)


def test_free_releases_everything_the_communicator_owned():
    def body(comm):
        engine = engine_of(comm)
        comm.Barrier()
        before = (engine.contexts(), engine.unexpected_watchers().keys())
        for i in range(300):
            dup = comm.Dup()
            dup.Barrier()
            dup.Free()
            part = comm.Split(i % 2, comm.rank)
            part.Allreduce(np.ones(1), np.zeros(1))
            part.Free()
        comm.Barrier()
        after = (engine.contexts(), engine.unexpected_watchers().keys())
        return sorted(before[0]) == sorted(after[0]) and set(before[1]) == set(after[1]), \
            len(after[0]), len(after[1])
    for same, contexts, watchers in run_threads(3, body):
        assert same, (contexts, watchers)


def test_memory_stays_flat_over_dup_split_free():
    def churn(comm, n):
        for i in range(n):
            dup = comm.Dup()
            dup.Barrier()
            dup.Free()
            part = comm.Split(i % 2, comm.rank)
            part.Barrier()
            part.Free()

    def body(comm):
        churn(comm, 200)                       # warm up every cache
        comm.Barrier()
        gc.collect()
        start = tracemalloc.get_traced_memory()[0]
        churn(comm, 1000)
        comm.Barrier()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - start
    tracemalloc.start()
    try:
        growth = max(run_threads(2, body, timeout=120))
    finally:
        tracemalloc.stop()
    # a leak of one communicator's bookkeeping per Dup/Split is several hundred KB here
    assert growth < 150_000, f"{growth} bytes kept after 1000 Dup/Split/Free"


def test_a_bogus_clear_to_send_is_a_protocol_error_naming_the_peer():
    def body(comm):
        engine = engine_of(comm)
        if comm.rank == 1:
            # a clear-to-send for a message rank 0 never offered
            engine.transport.send(0, frames.pack(frames.CTS, 0, 0, 0, 0, 424242, 0), (), None)
            comm.recv(source=0, tag=3)
            return None
        with pytest.raises(ProtocolError, match=r"rank 0: protocol error: world rank 1 sent a "
                                                r"clear-to-send frame for message #424242"):
            comm.recv(source=1, tag=3)
        comm.send("still works", dest=1, tag=3)
        return "ok"
    try:
        assert run_threads(2, body, transport="tcp", timeout=30)[0] == "ok"
    except RankFailed as exc:   # pragma: no cover - show what rank failed and how
        raise AssertionError(str(exc)) from exc


def test_a_bogus_data_frame_is_a_protocol_error_and_the_stream_stays_in_step():
    def body(comm):
        engine = engine_of(comm)
        if comm.rank == 1:
            payload = memoryview(b"x" * 16)
            engine.transport.send(0, frames.pack(frames.DATA, 0, 0, 1, 3, 777, 16), (payload,),
                                  None)
            comm.send("after", dest=0, tag=4)
            return None
        with pytest.raises(ProtocolError, match=r"world rank 1 sent a data frame for message "
                                                r"#777, but no receive of this rank asked"):
            comm.recv(source=1, tag=3)
        return comm.recv(source=1, tag=4)
    assert run_threads(2, body, transport="tcp", timeout=30)[0] == "after"
