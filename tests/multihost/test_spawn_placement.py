"""Where Spawn puts new processes in a job on several hosts (launcher/multihost.AgentSpawns),
without hosts: the `host` info key, the free slots in host-list order, the refusals naming the
command, and --universe-size beyond the slots."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from minimpi.launcher.dynamic import SpawnRefused
from minimpi.launcher.hosts import HostSlots
from minimpi.launcher.multihost import AgentSpawns, HostPlan, LocalSpawner


def _job(slots: dict, running: dict, universe: int, spawned: dict = None):
    """A stand-in for MultiHostJob: ``running``/``spawned``: processes alive per host."""
    plan = HostPlan([], LocalSpawner(), hosts=[HostSlots(h, n) for h, n in slots.items()])

    def procs(per_host):
        return [SimpleNamespace(alive=True, agent=SimpleNamespace(host=h))
                for h, n in (per_host or {}).items() for _ in range(n)]

    started = []
    dyn = SimpleNamespace(universe_size=universe,
                          jobs={1: SimpleNamespace(processes=procs(spawned))})
    return SimpleNamespace(plan=plan, ranks=procs(running), dynamic=dyn,
                           agent_for=started.append, started=started)


def _app(n, host=None, cmd="w.py"):
    return {"cmd": cmd, "args": [], "maxprocs": n, "info": {"host": host} if host else {}}


def test_the_host_key_and_then_the_free_slots_in_order():
    job = _job({"a": 2, "b": 2, "c": 2}, {"a": 1}, 6)
    hosts = AgentSpawns(job).place([_app(2, "c"), _app(3)], "w.py")
    assert hosts == ["c", "c", "a", "b", "b"]
    assert job.started == ["c", "a", "b"]          # each host's agent, once


def test_spawned_processes_that_still_run_hold_their_slots():
    job = _job({"a": 2, "b": 2}, {"a": 1}, 4, spawned={"b": 1})
    assert AgentSpawns(job).place([_app(2)], "w.py") == ["a", "b"]
    with pytest.raises(SpawnRefused) as info:
        AgentSpawns(job).place([_app(3)], "w.py")
    assert "3 process(es) of `w.py`" in str(info.value)
    assert "a: 1 of 2, b: 1 of 2 free" in str(info.value)


def test_a_full_or_unknown_host_is_refused_by_name():
    job = _job({"a": 2, "b": 2}, {"a": 1}, 4)
    with pytest.raises(SpawnRefused) as info:
        AgentSpawns(job).place([_app(3, "b", "x.py")], "x.py")
    assert "`x.py` on host b (info 'host'): 2 of its 2 slot(s) free" in str(info.value)
    with pytest.raises(SpawnRefused) as info:
        AgentSpawns(job).place([_app(1, "zz")], "w.py")
    assert "'zz'" in str(info.value) and "not one of this job's hosts (a, b)" in str(info.value)
    assert job.started == []                       # nothing started for a refused spawn
    # a short name finds the host of a full name
    job = _job({"a.example.org": 1, "b.example.org": 1}, {}, 2)
    assert AgentSpawns(job).place([_app(1, "b")], "w.py") == ["b.example.org"]


def test_a_universe_beyond_the_slots_spreads_by_load():
    job = _job({"a": 1, "b": 2}, {"a": 1}, 7)
    assert AgentSpawns(job).place([_app(5)], "w.py") == ["b", "b", "a", "b", "b"]   # 2 per slot each
