"""Dynamic processes without processes: universe ids, the launcher's decisions (commands,
ports, names), Spawn's argument checks, and mpi4py.futures' helpers on threads."""
from __future__ import annotations

import concurrent.futures as cf
import io
import os
import sys
import time

import pytest
from minimpi.launcher.coordinator import CoordEvent
from minimpi.launcher.dynamic import DynamicProcesses, SpawnRefused
from minimpi.launcher.job import Job, JobSpec
from minimpi.launcher.run import START_SCRIPT, rank_start

from minimpi._shim.mpi4py.futures.util import collect, compose
from minimpi._shim.mpi4py.util.pool import ThreadPool
from minimpi.dynamic.link import LauncherLink, describe_uid, peer_of, uid_of
from minimpi.dynamic.spawn import _app, _apps_multiple
from minimpi.p2p.engine import Engine
from minimpi.transports.tcp import UID_SHIFT, TcpTransport


# -- universe ids ----------------------------------------------------------------------------
def test_tcp_hello_ids_translate_to_peer_ids():
    t = TcpTransport(1, 4, b"s" * 32, job_number=0)
    assert t.uid == (1 << UID_SHIFT) | 1
    assert t.peer_of((1 << UID_SHIFT) | 3) == 3              # same job: its world rank
    assert t.peer_of((1 << UID_SHIFT) | 1) is None           # ourselves
    assert t.peer_of((1 << UID_SHIFT) | 9) is None           # outside this job's size
    other = (3 << UID_SHIFT) | 0                             # job 2, rank 0
    assert t.peer_of(other) == other
    assert t.peer_of(5) is None                              # no job at all
    t.close()


def test_link_translates_both_ways():
    link = LauncherLink()
    link.job_number = 2
    assert uid_of(link, 1) == (3 << UID_SHIFT) | 1
    assert peer_of(link, (3 << UID_SHIFT) | 1) == 1
    foreign = (1 << UID_SHIFT) | 4
    assert uid_of(link, foreign) == foreign and peer_of(link, foreign) == foreign
    assert describe_uid(foreign) == "job 0, rank 4"


def test_engine_knows_the_host_of_foreign_peers():
    engine = Engine(0, 2, None)
    engine.set_hosts(["a", "b"])
    foreign = (2 << UID_SHIFT) | 1
    engine.add_foreign_peers({foreign: "b", foreign + 1: "c"})
    assert engine.hosts[1] == engine.hosts[foreign] == 1
    assert engine.hosts[foreign + 1] == 2
    assert tuple(engine.hosts) == (0, 1)
    assert hash(engine.hosts) != hash((0, 1))      # layouts cached per table stay apart


# -- Spawn's arguments (checked at the root as mpi4py checks them) -----------------------------
def test_spawn_arguments():
    app = _app("prog", ["a", 1], 3, {"wdir": "/tmp", "other": "x"}, "Spawn")
    assert app == {"cmd": "prog", "args": ["a", "1"], "maxprocs": 3, "info": {"wdir": "/tmp"}}
    with pytest.raises(ValueError, match="maxprocs=0"):
        _app("prog", None, 0, None, "Spawn")
    with pytest.raises(ValueError, match="not one string"):
        _app("prog", "a b", 1, None, "Spawn")
    apps = _apps_multiple(["a", "b"], [["1"], []], 2, None, "Spawn_multiple")
    assert [a["maxprocs"] for a in apps] == [2, 2]
    with pytest.raises(ValueError):
        _apps_multiple("a", [[]], [1], None, "Spawn_multiple")      # not a sequence
    with pytest.raises(ValueError):
        _apps_multiple(["a"], [[], []], [1], None, "Spawn_multiple")
    with pytest.raises(ValueError):
        _apps_multiple(["a"], [[]], [1, 1], None, "Spawn_multiple")


# -- the launcher's side ---------------------------------------------------------------------
class _Coord:
    def __init__(self):
        self.sent = []

    def send(self, rank, message):
        self.sent.append((rank, message))


def _dynamic(**spec) -> DynamicProcesses:
    job = Job(JobSpec(nprocs=2, program="x.py", rank_start=rank_start, **spec), io.BytesIO(),
              io.BytesIO())
    return job.dynamic


def test_commands_start_through_the_rank_start_script(tmp_path):
    dyn = _dynamic()
    script = tmp_path / "w.py"
    script.write_text("pass\n")
    argv, cwd = dyn._resolve({"cmd": sys.executable, "args": [str(script), "x"], "info": {}})
    assert argv[:3] == [sys.executable, START_SCRIPT, str(script)] and argv[3:] == ["x"]
    argv, _ = dyn._resolve({"cmd": "python3", "args": ["-m", "json.tool"], "info": {}})
    assert argv[1:4] == [START_SCRIPT, "-m", "json.tool"]
    shebang = tmp_path / "tool"
    shebang.write_text(f"#!{sys.executable}\nprint(1)\n")
    shebang.chmod(0o755)
    argv, _ = dyn._resolve({"cmd": str(shebang), "args": [], "info": {}})
    assert argv[1:3] == [START_SCRIPT, str(shebang)]
    argv, cwd = dyn._resolve({"cmd": "true", "args": [], "info": {"wdir": str(tmp_path)}})
    assert os.path.basename(argv[0]) == "true" and cwd == str(tmp_path)


@pytest.mark.parametrize("app, words", [
    ({"cmd": "no-such-cmd-q", "args": []}, ["no-such-cmd-q", "not found"]),
    ({"cmd": "python", "args": ["missing.py"]}, ["missing.py", "not found"]),
    ({"cmd": "true", "args": [], "info": {"wdir": "/no/such/dir"}}, ["wdir", "/no/such/dir"]),
    ({"cmd": "true", "args": [], "info": {"host": "elsewhere-host"}}, ["elsewhere-host"]),
    ({"cmd": "true", "args": [], "info": {"path": "/nonexistent"}}, ["'path'", "true"]),
])
def test_commands_that_cannot_start_are_refused_by_name(app, words):
    with pytest.raises(SpawnRefused) as info:
        _dynamic()._resolve({"info": {}, **app})
    for word in words:
        assert word in str(info.value)


def test_spawn_refused_beyond_an_explicit_universe_and_without_a_local_loop():
    dyn = _dynamic(universe_size=3)
    coord = _Coord()
    request = {"n": 4, "apps": [{"cmd": "true", "args": [], "maxprocs": 2, "info": {}}],
               "parents": [], "leader": 0}
    dyn.on_request(coord, CoordEvent("spawn", 0, data=request))     # no loop yet
    assert "starts no processes" in coord.sent[-1][1]["error"]
    assert coord.sent[-1][1]["kind"] == "unsupported"      # NotImplementedError at the rank
    dyn.attach(object())
    dyn.job.ranks = []                        # (no rank processes in this test)
    dyn.jobs.clear()
    dyn.on_request(coord, CoordEvent("spawn", 0, data={**request, "apps": [
        {"cmd": "true", "args": [], "maxprocs": 4, "info": {}}]}))
    reply = coord.sent[-1][1]
    assert reply["ok"] is False and "--universe-size" in reply["error"] and reply["n"] == 4


def test_ports_pair_accept_with_connect_and_names_resolve():
    dyn, coord = _dynamic(), _Coord()

    def ask(kind, rank=0, **msg):
        dyn.on_request(coord, CoordEvent(kind, rank, data={"n": len(coord.sent), **msg}))
        return coord.sent[-1][1] if coord.sent else None

    port = ask("port", op="open")["port"]
    assert ask("publish", service="svc", port=port)["ok"]
    assert not ask("publish", service="svc", port=port)["ok"]          # twice
    assert ask("lookup", service="svc")["port"] == port
    assert ask("lookup", service="nope")["kind"] == "name"
    assert not ask("unpublish", service="svc", port="other")["ok"]
    assert ask("unpublish", service="svc", port=port)["ok"]
    before = len(coord.sent)
    ask("port", rank=1, op="connect", port=port)                       # waits
    assert len(coord.sent) == before
    ask("port", rank=0, op="accept", port=port, entry=[1 << UID_SHIFT, "h:1", "h"])
    (r_acc, accepted), (r_con, connected) = coord.sent[-2:]
    assert (r_acc, r_con) == (0, 1) and accepted["tag"] == connected["tag"]
    assert connected["accepter"] == [1 << UID_SHIFT, "h:1", "h"]
    assert ask("port", op="close", port=port)["ok"]
    assert ask("port", op="connect", port=port)["kind"] == "port"      # closed


# -- mpi4py.futures helpers and util.pool on threads -------------------------------------------
def test_collect_and_compose():
    with cf.ThreadPoolExecutor(2) as ex:
        assert collect([ex.submit(pow, 2, i) for i in range(4)]).result(5) == [1, 2, 4, 8]
        failed = collect([ex.submit(pow, 2, 1), ex.submit(int, "x")])
        assert isinstance(failed.exception(5), ValueError)
        assert compose(ex.submit(pow, 3, 2), lambda v: v + 1).result(5) == 10
        assert compose(ex.submit(int, "x"), excepthook=lambda e: "fixed").result(5) == "fixed"
    assert collect([]).result(1) == []


def test_thread_pool_has_multiprocessing_semantics():
    with ThreadPool(2) as pool:
        assert pool.map(abs, [-1, -2, 3], chunksize=2) == [1, 2, 3]
        assert pool.starmap(pow, [(2, 3), (3, 2)]) == [8, 9]
        assert sorted(pool.imap_unordered(abs, [-3, 1])) == [1, 3]
        slow = pool.apply_async(time.sleep, (0.3,))
        assert not slow.ready()
        with pytest.raises(ValueError):
            slow.successful()
        with pytest.raises(TimeoutError):
            slow.get(0.01)
        slow.wait()
        assert slow.successful()
    with pytest.raises(ValueError):
        ThreadPool(0)
