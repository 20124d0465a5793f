"""The dashboard's parts, in this process (the fast tier): the rank's sampler and message
counter on ranks run as threads, the launcher's aggregation of rank states, the web server's
refusals, and the replay of a trace."""
from __future__ import annotations

import argparse
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from types import SimpleNamespace

import numpy as np
import pytest
from minimpi.launcher.coordinator import RankState
from minimpi.launcher.dashboard import port_number
from minimpi.launcher.dashboard.live import LiveState
from minimpi.launcher.dashboard.pictures import Pictures, split_call
from minimpi.launcher.dashboard.replay import TraceReplay
from minimpi.launcher.dashboard.web import DashboardServer, Hub
from minimpi.launcher.run import add_arguments, split_argv

from minimpi.comm.communicator import endpoint_of
from minimpi.runtime.dashboard import MessageCounter, Sampler
from minimpi.runtime.inproc import run_threads

pytestmark = pytest.mark.fast


# ---- rank side ----------------------------------------------------------------------------
def _sample_until(sampler: Sampler, check, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        entry, channel = sampler.frames()
        call = sampler.call(entry, time.monotonic())
        if check(call, channel):
            return call, channel
        time.sleep(0.01)
    raise AssertionError(f"the sampler never saw it; last: {call!r}, {channel!r}")


def test_sampler_names_the_blocking_call_its_peer_tag_and_size():
    seen = {}

    def body(comm):
        ep = endpoint_of(comm)
        if comm.rank == 1:
            sampler = Sampler(ep.engine, threading.get_ident())
            seen["sampler"] = sampler
            buf = np.zeros(3)
            comm.Recv(buf, source=2, tag=5)      # waits until rank 0 saw it
            return None
        if comm.rank == 0:
            while "sampler" not in seen:
                time.sleep(0.01)
            sampler = seen["sampler"]
            # sample rank 1's thread from this one, as the reporter thread does
            seen["call"], _ = _sample_until(
                sampler, lambda call, ch: call is not None and call["call"] == "Recv")
            seen["computing"] = sampler.frames()
            comm.send("go", dest=2, tag=9)
            return None
        comm.recv(source=0, tag=9)
        comm.Send(np.ones(3), dest=1, tag=5)
        return None

    run_threads(3, body, timeout=20)
    call = seen["call"]
    assert call["on"] == "Intracomm"
    assert call["comm"] == "COMM_WORLD"
    assert call["peers"] == [["source", 2, 2]]
    assert call["tag"] == 5
    assert call["nbytes"] == 24


def test_sampler_gives_the_collective_its_algorithm_and_step():
    seen = {}

    def body(comm):
        ep = endpoint_of(comm)
        if comm.rank == 0:
            seen["sampler"] = Sampler(ep.engine, threading.get_ident())
            seen["ep"] = ep
        if comm.rank == 2:      # the late rank samples rank 0, which waits in the ring
            while "sampler" not in seen:
                time.sleep(0.01)
            seen["call"], ch = _sample_until(
                seen["sampler"], lambda call, ch: ch is not None and ch.step_index >= 1)
            seen["coll"] = seen["sampler"].collective(ch, True, seen["call"])
        out = np.empty(5)
        comm.Allreduce(np.ones(5), out)
        return out[0]

    import os
    old = os.environ.get("MINIMPI_ALLREDUCE")
    os.environ["MINIMPI_ALLREDUCE"] = "ring"
    try:
        assert run_threads(3, body, timeout=20) == [3.0, 3.0, 3.0]
    finally:
        if old is None:
            os.environ.pop("MINIMPI_ALLREDUCE", None)
        else:
            os.environ["MINIMPI_ALLREDUCE"] = old
    coll = seen["coll"]
    assert coll["call"] == "Allreduce[ring]"
    assert coll["comm"] == "COMM_WORLD" and coll["size"] == 3 and coll["rank"] == 0
    assert coll["group"] == [0, 1, 2] and coll["step"] >= 1 and coll["blocking"]
    assert seen["call"]["call"] == "Allreduce" and seen["call"]["nbytes"] == 40
    assert seen["sampler"].comms[0][0] == "COMM_WORLD"


def test_message_counter_counts_each_send_once_per_destination():
    counters = {}

    def body(comm):
        counter = MessageCounter()
        endpoint_of(comm).engine.bus.subscribe(counter)
        counters[comm.rank] = counter
        if comm.rank == 0:
            for _ in range(3):
                comm.Send(np.zeros(4), dest=1, tag=1)
            comm.send("x", dest=2, tag=2)
        elif comm.rank == 1:
            for _ in range(3):
                comm.Recv(np.zeros(4), source=0, tag=1)
        else:
            comm.recv(source=0, tag=2)

    run_threads(3, body, timeout=20)
    table = {(c, d): (m, b) for c, d, m, b in counters[0].table()}
    assert table[(0, 1)] == (3, 96)
    assert table[(0, 2)][0] == 1 and set(table) == {(0, 1), (0, 2)}
    assert counters[1].table() == [] and counters[2].table() == []
    big = MessageCounter()
    big.message_sent(0x7FFF_FFF0, (3 << 20) | 5, 0, 0, (), 9, 1)   # another job's process
    assert big.table() == [(0x7FFF_FFF0, (3 << 20) | 5, 1, 9)]


# ---- launcher side: the aggregation ---------------------------------------------------------
class _Rank:
    def __init__(self, returncode=None):
        self.returncode = returncode

    @property
    def alive(self):
        return self.returncode is None


def _job(states, ranks, failure=None, timeout=5.0):
    coord = SimpleNamespace(ranks=states, table_sent=True)
    return SimpleNamespace(coord=coord, ranks=ranks, failure=failure,
                           spec=SimpleNamespace(deadlock_timeout=timeout),
                           forward=SimpleNamespace(tap=None))


def _blocked_on(peer: int, tag: int = 1) -> dict:
    return {"blocked": True, "where": "pair.py:5", "code": "comm.recv(source=1 - r)",
            "items": [{"call": "recv", "dir": "recv", "peer": peer, "world": peer, "tag": tag,
                       "comm": "COMM_WORLD", "nbytes": None, "proto": None, "any": None}]}


def _live(call=None, sent=(), colls=()) -> dict:
    return {"pid": 100, "host": "h", "cpu": 50.0, "rss": 1 << 20, "call": call,
            "colls": list(colls), "sent": [list(s) for s in sent],
            "comms": {"0": ["COMM_WORLD", [0, 1, 2]]}}


def test_rows_say_what_each_rank_is_doing():
    now = time.monotonic()
    states = [RankState(r, registered=True) for r in range(4)]
    for st in states:
        st.live_time = now
    states[0].live = _live()
    states[1].live = _live(call={"call": "Send", "comm": "COMM_WORLD", "peers": [["dest", 2, 2]],
                                 "tag": 3, "nbytes": 8, "for": 0.5})
    states[2].live = _live()
    states[2].state, states[2].state_time = _blocked_on(0), now
    states[3].exit_status = "exited with code 7"
    live = LiveState("prog.py", 4, 0.25)
    live.attach(_job(states, [_Rank(), _Rank(), _Rank(), _Rank(7)]))
    doc = live.view()
    assert [r["state"] for r in doc["ranks"]] == ["computing", "mpi", "blocked", "failed"]
    assert doc["ranks"][1]["call"]["tag"] == 3
    assert doc["ranks"][2]["text"].startswith("blocked in recv(source=0, tag=1) on COMM_WORLD")
    assert doc["ranks"][3]["exit"] == "exited with code 7" and doc["ranks"][3]["code"] == 7
    assert doc["job"]["status"] == "running" and doc["summary"] is None
    # only rank 2 is blocked, on rank 0 that is not: an edge, no cycle, no diagnosis
    assert doc["waitfor"]["edges"][0][:2] == [2, 0] and doc["waitfor"]["cycle"] == []
    assert doc["diagnosis"] is None


def test_a_cycle_of_blocked_ranks_is_found_and_diagnosed_at_once():
    now = time.monotonic()
    states = [RankState(r, registered=True) for r in range(3)]
    for r, peer in ((0, 1), (1, 0)):
        states[r].state, states[r].state_time = _blocked_on(peer), now
    states[2].finalized = True
    live = LiveState("pair.py", 3, 0.25)
    live.attach(_job(states, [_Rank(), _Rank(), _Rank()]))
    doc = live.view()
    assert sorted(e[:2] for e in doc["waitfor"]["edges"]) == [[0, 1], [1, 0]]
    assert all(e[3] for e in doc["waitfor"]["edges"])
    assert doc["waitfor"]["cycle"] == [0, 1]
    diagnosis = doc["diagnosis"]
    assert diagnosis["final"] is False
    assert "if nothing moves for 5 s (--deadlock-timeout)" in diagnosis["summary"]
    assert any(line.startswith("  wait-for cycle: rank 0 waits for rank 1")
               for line in diagnosis["lines"])
    assert doc["ranks"][2]["state"] == "finished"
    # declared: the launcher's report, and the cycle stays while the ranks are ended
    failure = SimpleNamespace(kind="deadlock", summary="minimpi: deadlock: ...",
                              details=["  rank 0: ..."], rank=None)
    job = _job(states, [_Rank(-15), _Rank(-15), _Rank(0)], failure)
    live.attach(job)
    live.ended(3)
    doc = live.view()
    assert doc["diagnosis"] == {"final": True, "summary": "minimpi: deadlock: ...",
                                "lines": ["  rank 0: ..."]}
    assert doc["waitfor"]["cycle"] == [0, 1]
    assert doc["summary"]["code"] == 3 and doc["job"]["status"] == "ended"


def test_matrix_sums_the_senders_counters_per_communicator():
    now = time.monotonic()
    states = [RankState(r, registered=True, live_time=now) for r in range(3)]
    states[0].live = _live(sent=[(0, 1, 5, 40), (1, 2, 2, 16), (4, 2, 7, 70)])
    states[0].live["comms"]["4"] = ["COMM_WORLD.split(0)", [0, 2]]
    states[1].live = _live(sent=[(0, 2, 1, 8), (0x7FFF_FFF0, 0, 9, 9)])   # clock sync: not shown
    states[2].live = _live()
    live = LiveState("p", 3, 0.25)
    live.attach(_job(states, [_Rank(), _Rank(), _Rank()]))
    comms = {c["name"]: c for c in live.view()["matrix"]["comms"]}
    assert comms["all communicators"]["cells"] == [[0, 1, 5, 40], [0, 2, 9, 86], [1, 2, 1, 8]]
    assert comms["COMM_WORLD"]["cells"] == [[0, 1, 5, 40], [0, 2, 2, 16], [1, 2, 1, 8]]
    assert comms["COMM_WORLD.split(0)"]["ranks"] == [0, 2]
    assert comms["COMM_WORLD.split(0)"]["messages"] == 7


def test_output_lines_and_the_exit_summary():
    states = [RankState(0, registered=True)]
    live = LiveState("p", 1, 0.25)
    live.attach(_job(states, [_Rank(0)]))
    live.on_output(0, "stdout", [b"hello", b"world"])
    live.on_output(None, "launcher", [b"minimpi: rank 0 did a thing\n"])
    live.ended(0)
    doc = live.view()
    assert [o[1:] for o in doc["output"]] == [[0, "stdout", "hello"], [0, "stdout", "world"]]
    assert doc["summary"]["lines"] == ["minimpi: rank 0 did a thing"]
    assert doc["summary"]["counts"] == [["exit code 0", 1]]


def test_collectives_in_progress_with_each_ranks_step_and_the_schedule():
    now = time.monotonic()
    states = [RankState(r, registered=True, live_time=now) for r in range(3)]
    for r, step in ((0, 2), (1, 1)):
        states[r].live = _live(colls=[{"call": "Allreduce[ring]", "comm": "COMM_WORLD",
                                       "ctx": 0, "tag": 9, "rank": r, "size": 3, "step": step,
                                       "group": [0, 1, 2], "root": None, "nbytes": 24,
                                       "blocking": True}])
    states[2].live = _live()
    pictures = Pictures()
    live = LiveState("p", 3, 0.25, pictures)
    live.attach(_job(states, [_Rank(), _Rank(), _Rank()]))
    key = Pictures.key("Allreduce[ring]", 3, None, 24, None)
    pictures.get_now(key)
    (coll,) = live.view()["collectives"]
    assert (coll["collective"], coll["algorithm"], coll["comm"]) == ("allreduce", "ring",
                                                                    "COMM_WORLD")
    assert coll["steps"] == {"0": 2, "1": 1}
    assert coll["picture"]["steps"] == 4            # ring allreduce on 3 ranks: 2 + 2 steps
    assert len(coll["picture"]["rank_columns"]) == 3


def test_picture_keys():
    assert split_call("Allreduce[ring]") == ("allreduce", "ring")
    assert Pictures.key("Ibcast[binomial]", 4, 1, None, None)[:4] == ("bcast", "binomial", 4, 1)
    assert Pictures.key("Allreduce[ring]", 17, None, None, None) is None   # too many to draw
    assert Pictures.key("Frobnicate[x]", 4, None, None, None) is None
    assert Pictures.key("Allreduce", 4, None, None, None) is None


# ---- the web server ---------------------------------------------------------------------------
@pytest.fixture
def server():
    hub = Hub()
    hub.publish(b'{"n": 1}')
    s = DashboardServer("127.0.0.1", 0, "t0ken-Abc_123", hub, meta=lambda: {"mode": "live"})
    s.serve_in_thread()
    yield s
    s.close(drain=0.5)


def _get(url: str, method: str = "GET"):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=5) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


def test_every_request_without_the_token_is_refused(server):
    base = f"http://127.0.0.1:{server.port}/"
    for path in ("", "?token=", "?token=t0ken-Abc_12", "?token=t0ken-Abc_1234", "state",
                 "events", "static/app.js", "nothing"):
        assert _get(base + path)[0] == 403, path
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        assert _get(base + "state", method)[0] == 403
        assert _get(base + "state?token=t0ken-Abc_123", method)[0] == 405
    assert server.refused >= 12
    status, headers, body = _get(base + "?token=t0ken-Abc_123")
    assert status == 200 and b"static/app.js?token=t0ken-Abc_123" in body
    assert headers["X-Frame-Options"] == "DENY" and headers["Cache-Control"] == "no-store"
    assert _get(base + "static/app.js?token=t0ken-Abc_123")[0] == 200
    assert _get(base + "static/../server.py?token=t0ken-Abc_123")[0] == 404
    assert json.loads(_get(base + "state?token=t0ken-Abc_123")[2]) == {"n": 1}


def test_the_event_stream_pushes_each_new_document_then_ends(server):
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    sock.sendall(b"GET /events?token=t0ken-Abc_123 HTTP/1.0\r\n\r\n")
    reader = sock.makefile("rb")

    def next_data() -> bytes:
        while True:
            line = reader.readline()
            assert line, "the stream ended"
            if line.startswith(b"data: "):
                return line[len(b"data: "):].strip()
    assert next_data() == b'{"n": 1}'
    server.hub.publish(b'{"n": 2}')
    assert next_data() == b'{"n": 2}'
    server.hub.close()
    assert next_data() == b"{}"        # the "end" event
    sock.close()


def test_dashboard_option_takes_a_port_only_with_an_equals_sign():
    p = argparse.ArgumentParser()
    add_arguments(p)
    own, rest = split_argv(p, ["-n", "2", "--dashboard", "prog.py", "--dashboard=1"])
    assert own == ["-n", "2", "--dashboard"] and rest == ["prog.py", "--dashboard=1"]
    assert p.parse_args(own).dashboard == 0
    assert p.parse_args(["-n", "2", "--dashboard=8787"]).dashboard == 8787
    assert p.parse_args(["-n", "2"]).dashboard is None
    with pytest.raises(argparse.ArgumentTypeError, match="port number"):
        port_number("http")
    with pytest.raises(argparse.ArgumentTypeError, match="0-65535"):
        port_number("70000")


# ---- replay --------------------------------------------------------------------------------
def _trace() -> dict:
    us = 1e6
    ev = [{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "minimpi job: x"}}]
    # rank 0: Send to 1 at [0.1, 0.2] s, then Allreduce[ring] [0.3, 0.6] s with 2 steps
    ev.append({"ph": "X", "cat": "mpi", "name": "Send 8 B", "ts": 0.1 * us, "dur": 0.1 * us,
               "tid": 0, "pid": 0, "args": {"dest": 1, "tag": 4, "comm": "COMM_WORLD"}})
    ev.append({"ph": "s", "cat": "msg", "id": 1, "ts": 0.15 * us, "tid": 0, "pid": 0,
               "args": {"bytes": 8, "tag": 4, "context": 0, "peer": 1}})
    ev.append({"ph": "X", "cat": "mpi", "name": "Recv 8 B", "ts": 0.05 * us, "dur": 0.2 * us,
               "tid": 1, "pid": 0, "args": {"source": 0, "tag": 4, "comm": "COMM_WORLD"}})
    for r in (0, 1):
        ev.append({"ph": "X", "cat": "mpi", "name": "Allreduce[ring] 16 B", "ts": 0.3 * us,
                   "dur": 0.3 * us, "tid": r, "pid": 0, "args": {"comm": "COMM_WORLD"}})
        for k, t in ((1, 0.35), (2, 0.45)):
            ev.append({"ph": "X", "cat": "step", "name": f"step {k}", "ts": t * us,
                       "dur": 0.1 * us, "tid": r, "pid": 0})
    return {"traceEvents": ev, "otherData": {"ranks": 2, "ranks_without_trace": []}}


def test_replay_of_a_trace_moment_by_moment():
    replay = TraceReplay(_trace(), title="x.json")
    assert replay.meta() == {"mode": "replay", "title": "x.json", "nprocs": 2,
                             "duration": pytest.approx(0.6)}
    early = replay.frame(0.12)
    rank0, rank1 = early["ranks"]
    assert rank0["state"] == "mpi" and rank0["call"]["call"] == "Send"
    assert rank0["call"]["peers"] == [["dest", 1, None]] and rank0["call"]["nbytes"] == 8
    assert rank1["call"]["call"] == "Recv"
    assert sorted(e[:2] for e in early["waitfor"]["edges"]) == [[0, 1], [1, 0]]
    assert early["waitfor"]["cycle"] == []       # a replay never claims a deadlock
    assert early["matrix"]["comms"][0]["cells"] == []
    later = replay.frame(0.5)
    assert later["matrix"]["comms"][0]["cells"] == [[0, 1, 1, 8]]
    (coll,) = later["collectives"]
    assert coll["call"] == "Allreduce[ring]" and coll["steps"] == {"0": 2, "1": 2}
    assert coll["nbytes"] == 16
    assert replay.frame(10)["ranks"][0]["state"] == "finished"
    assert replay.frame(0.0)["ranks"][0]["state"] == "starting"


def test_view_says_what_is_wrong_with_its_file(tmp_path, capsys):
    from minimpi.launcher.dashboard import view_cmd
    args = argparse.Namespace(trace=str(tmp_path / "none.json"), port=0, bind="127.0.0.1")
    assert view_cmd.main(args) == 2
    assert "none.json: No such file or directory" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text('{"events": []}')
    args.trace = str(bad)
    assert view_cmd.main(args) == 2
    assert "not a trace of minimpi run --trace" in capsys.readouterr().err
