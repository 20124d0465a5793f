"""Multi-host plans from `minimpi run` options (which spawner, which ranks where, what the
agents are started with), the agent wire format, and the coordinator probe of the agent."""
from __future__ import annotations

import argparse
import shlex
import socket
import struct
import sys

import pytest
from minimpi.launcher import run as run_cmd
from minimpi.launcher.agent import FrameReader, ProtocolError, encode, probe
from minimpi.launcher.hosts import HostListError
from minimpi.launcher.multihost import plan_from_args
from minimpi.launcher.spawners import LocalSpawner, RshSpawner, SrunSpawner


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    run_cmd.add_arguments(p)
    own, rest = run_cmd.split_argv(p, list(argv) + ["prog.py"])
    return p.parse_args(own)


ALLOC = {"SLURM_JOB_ID": "12", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_TASKS_PER_NODE": "4(x2)",
         "SLURM_JOB_CPUS_PER_NODE": "8(x2)", "SLURM_NTASKS": "8"}


def test_no_hosts_is_the_local_fast_path():
    assert plan_from_args(parse("-n", "4"), 4, environ={}) is None


def test_hosts_place_ranks_in_blocks_over_ssh():
    plan = plan_from_args(parse("-n", "6", "--hosts", "a:4,b:4"), 6, environ={})
    assert plan.placement == ["a"] * 4 + ["b"] * 2
    assert plan.by_host == {"a": [0, 1, 2, 3], "b": [4, 5]}
    assert isinstance(plan.spawner, RshSpawner) and plan.multihost
    assert plan.python == sys.executable


def test_hostfile(tmp_path):
    f = tmp_path / "hosts"
    f.write_text("# two nodes\nn1 slots=2\nn2   # one slot\n")
    plan = plan_from_args(parse("-n", "3", "--hostfile", str(f)), 3, environ={})
    assert plan.placement == ["n1", "n1", "n2"]


@pytest.mark.parametrize("argv,environ,expected", [
    (["--hosts", "a:1", "--hostfile", "x"], {}, "either --hosts or --hostfile"),
    (["--hosts", "a:2,b:2"], {}, "do not fit in the 4 slots.*--oversubscribe"),
    (["--hosts", "localhost:2,b:2"], {}, "mixes localhost with other hosts"),
    (["--launcher", "local", "--hosts", "a:8"], {}, "--launcher local"),
    (["--launcher", "ssh"], {}, "needs --hosts or --hostfile"),
    (["--launcher", "slurm"], {}, "not inside a Slurm allocation"),
    (["--hosts", "a:4,b:4", "--bind", "10.0.0.1"], {}, "use --iface"),
    (["--iface", "eth0"], {}, "--iface applies to jobs on several hosts"),
    (["--hosts", "a:8", "--remote-python", "python3"], {}, "absolute path"),
    (["--hostfile", "/nonexistent/hosts"], {}, "--hostfile /nonexistent/hosts"),
])
def test_impossible_plans_are_usage_errors(argv, environ, expected):
    with pytest.raises(HostListError, match=expected):
        plan_from_args(parse("-n", "5", *argv), 5, environ=environ)


def test_oversubscribe_spreads_by_slots():
    plan = plan_from_args(parse("-n", "6", "--hosts", "a:2,b:1", "--oversubscribe"), 6,
                          environ={})
    assert plan.placement == ["a"] * 4 + ["b"] * 2


def test_localhost_runs_agents_here_without_ssh():
    plan = plan_from_args(parse("-n", "4", "--hosts", "localhost:2,127.0.0.1:2"), 4, environ={})
    assert isinstance(plan.spawner, LocalSpawner)
    assert plan.spawner.argv("localhost", "/py") == ["/py", "-m", "minimpi.launcher.agent",
                                                     "--host", "localhost"]


def test_ssh_command_line_has_the_users_options_first_and_no_secret():
    ns = parse("-n", "2", "--hosts", "a,b", "--rsh", "ssh -p 2222 -o ConnectTimeout=3",
               "--remote-python", "/opt/py/bin/python3")
    plan = plan_from_args(ns, 2, environ={})
    argv = plan.spawner.argv("b", plan.python)
    assert argv[:5] == ["ssh", "-p", "2222", "-o", "ConnectTimeout=3"]
    # ssh keeps the first value of an option: the user's ConnectTimeout wins over ours
    assert argv.index("ConnectTimeout=3") < argv.index("ConnectTimeout=10")
    assert "BatchMode=yes" in argv and "-tt" not in argv
    assert argv[-2] == "b"
    assert shlex.split(argv[-1]) == ["/opt/py/bin/python3", "-m", "minimpi.launcher.agent",
                                     "--host", "b"]
    assert not any("secret" in a.lower() for a in argv)


def test_rsh_from_the_environment_and_other_remote_shells():
    plan = plan_from_args(parse("-n", "2", "--hosts", "a:2"), 2,
                          environ={"MINIMPI_RSH": "rsh -l me"})
    argv = plan.spawner.argv("a", "/py")
    assert argv[:4] == ["rsh", "-l", "me", "a"] and "BatchMode=yes" not in argv


def test_inside_an_allocation_agents_go_through_srun():
    plan = plan_from_args(parse("-n", "8"), 8, environ=ALLOC)
    assert isinstance(plan.spawner, SrunSpawner)
    assert plan.by_host == {"n1": [0, 1, 2, 3], "n2": [4, 5, 6, 7]}
    argv = plan.spawner.argv("n2", "/py")
    for opt in ("--nodes=1", "--ntasks=1", "--nodelist=n2", "--overlap",
                "--kill-on-bad-exit=1", "--cpus-per-task=8", "--unbuffered"):
        assert opt in argv
    assert argv[-5:] == ["/py", "-m", "minimpi.launcher.agent", "--host", "n2"]
    # inside a step (srun ... minimpi run), or when asked: run locally
    step = {**ALLOC, "SLURM_PROCID": "0", "SLURM_STEP_ID": "0"}
    assert plan_from_args(parse("-n", "8"), 8, environ=step) is None
    assert plan_from_args(parse("-n", "8", "--launcher", "local"), 8, environ=ALLOC) is None
    with pytest.raises(HostListError, match="9 ranks do not fit"):
        plan_from_args(parse("-n", "9"), 9, environ=ALLOC)


# ---- the agent's wire format ----------------------------------------------------------------
def test_frames_survive_any_cut():
    msgs = [{"t": "out", "r": 3, "s": 1, "d": bytes(range(256)) * 50}, {"t": "bye"}]
    stream = b"".join(encode(m) for m in msgs)
    for cut in (1, 3, 4, 5, 1000, len(stream)):
        reader, got = FrameReader(), []
        for i in range(0, len(stream), cut):
            got += reader.feed(stream[i:i + cut])
        assert got == msgs


def test_garbage_frames_are_protocol_errors():
    with pytest.raises(ProtocolError, match="at most"):
        FrameReader().feed(b"\xff\xff\xff\xff")
    with pytest.raises(ProtocolError, match="not a map"):
        FrameReader().feed(struct.pack(">I", 1) + b"\x05")        # msgpack's 5
    with pytest.raises(ProtocolError, match="not msgpack"):
        FrameReader().feed(struct.pack(">I", 1) + b"\xc1")        # a byte msgpack never uses


def test_probe_prefers_the_first_reachable_candidate():
    srv = socket.create_server(("", 0))             # every address, 127.0.0.2 included
    port = srv.getsockname()[1]
    only = socket.create_server(("127.0.0.1", 0))   # 127.0.0.1 only
    only_port = only.getsockname()[1]
    closed = socket.create_server(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    try:
        assert probe(["127.0.0.1"], port) == ("127.0.0.1", [])
        # both answer: the first in order of preference wins
        assert probe(["127.0.0.2", "127.0.0.1"], port, timeout=2)[0] == "127.0.0.2"
        # the first is refused: the next one that answers
        assert probe(["127.0.0.2", "127.0.0.1"], only_port, timeout=2)[0] == "127.0.0.1"
        host, errors = probe(["127.0.0.1"], closed_port, timeout=1)
        assert host is None and f"127.0.0.1:{closed_port}" in errors[0]
        assert "refused" in errors[0].lower()
    finally:
        srv.close()
        only.close()
