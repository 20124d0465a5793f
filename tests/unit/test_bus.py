"""The instrumentation bus (minimpi/bus.py): routing per event, and the API's call events."""
from __future__ import annotations

import numpy as np
import pytest

from minimpi.bus import Bus, Subscriber
from minimpi.data import ops
from minimpi.errors import MinimpiError
from minimpi.runtime.inproc import run_threads


class Calls(Subscriber):
    def __init__(self):
        self.log = []

    def call_entered(self, call, target, args):
        self.log.append(("enter", call, sorted(args)))

    def call_left(self, call, error):
        self.log.append(("leave", call, type(error).__name__ if error else None))


class Messages(Subscriber):
    def message_sent(self, *args):
        pass


def test_each_event_reaches_only_those_that_listen():
    bus = Bus()
    calls, messages = Calls(), Messages()
    bus.subscribe(calls)
    bus.subscribe(messages)
    bus.subscribe(calls)                      # once only
    assert bus.subscribers == (calls, messages)
    assert bus.calls == (calls,) and bus.sent == (messages,)
    assert bus.posted == () and bus.steps == () and bus.step_reporter() is None
    bus.unsubscribe(calls)
    assert bus.calls == () and bus.subscribers == (messages,)
    bus.unsubscribe(calls)                    # not subscribed: nothing happens


def test_subscribing_something_else_is_a_clear_error():
    with pytest.raises(TypeError, match="Subscriber"):
        Bus().subscribe(object())


def test_outermost_calls_are_published_with_their_arguments_and_errors():
    def body(comm):
        calls = Calls()
        comm.endpoint.engine.bus.subscribe(calls)
        a, b = np.ones(3), np.empty(3)
        comm.Allreduce(a, b, op=ops.SUM)
        comm.Sendrecv(a, (comm.rank + 1) % comm.size, 0, b, (comm.rank - 1) % comm.size, 0)
        with pytest.raises(MinimpiError):
            comm.Send(a, dest=comm.size + 5)
        comm.endpoint.engine.bus.unsubscribe(calls)
        comm.Barrier()                        # no longer told
        return calls.log

    for log in run_threads(3, body, timeout=60):
        assert log[0] == ("enter", "Intracomm.Allreduce", ["algorithm", "op", "recvbuf", "sendbuf"])
        assert log[1] == ("leave", "Intracomm.Allreduce", None)
        # Sendrecv posts an Irecv and an Isend inside: one call on the bus
        assert log[2][:2] == ("enter", "Intracomm.Sendrecv") and log[3][:2] == (
            "leave", "Intracomm.Sendrecv")
        assert log[4][:2] == ("enter", "Intracomm.Send")
        assert log[5][0] == "leave" and log[5][2] is not None
        assert len(log) == 6
