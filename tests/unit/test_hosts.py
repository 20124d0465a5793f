"""Host lists, hostfiles, Slurm node lists and rank placement (minimpi.launcher.hosts)."""
from __future__ import annotations

import pytest
from minimpi.launcher.hosts import (
    MAX_EXPANSION,
    HostListError,
    HostSlots,
    expand_nodelist,
    expand_tasks_per_node,
    group_by_host,
    hosts_from_slurm_env,
    parse_hostfile,
    parse_hosts,
    parse_hosts_or_layout,
    parse_layout,
    place,
    total_slots,
)


def hs(*pairs):
    return [HostSlots(h, s) for h, s in pairs]


# ---- --hosts -------------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("a:4,b:4", hs(("a", 4), ("b", 4))),
    ("a,b", hs(("a", 1), ("b", 1))),
    ("node1", hs(("node1", 1))),
    (" a:2 , b ", hs(("a", 2), ("b", 1))),
    ("10.0.0.1:3,h2", hs(("10.0.0.1", 3), ("h2", 1))),
    ("a:2,b,a:3", hs(("a", 5), ("b", 1))),           # repeated host: slots add up
    ("[fe80::1]:2,[::1]", hs(("fe80::1", 2), ("::1", 1))),
    ("n-1.example_x:16", hs(("n-1.example_x", 16))),
])
def test_parse_hosts(text, expected):
    assert parse_hosts(text) == expected


@pytest.mark.parametrize("text, message", [
    ("", "empty host list"),
    ("a,,b", "entry 2 is empty"),
    ("a,", "entry 2 is empty"),
    ("a:0", "entry 1 'a:0': slots must be a positive integer, got 0"),
    ("a:x", "slots must be a positive integer, got 'x'"),
    ("a:", "slots must be a positive integer, got ''"),
    ("a:-2", "got '-2'"),
    (":4", "the host name is empty"),
    ("a b", "'a b' is not a host name"),
    ("fe80::1", "write it in brackets, e.g. [fe80::1]"),
    ("[fe80::1", "'[' without ']'"),
    ("[::1]4", "expected [::1] or [::1]:SLOTS"),
    ("b:2,a/b", "entry 2 'a/b'"),
])
def test_parse_hosts_errors(text, message):
    with pytest.raises(HostListError) as exc:
        parse_hosts(text)
    assert message in str(exc.value)
    assert "--hosts" in str(exc.value)
    assert isinstance(exc.value, ValueError)


# ---- layout (minimpi draw --hosts 2x4) -------------------------------------------------------
def test_parse_layout():
    assert parse_layout("2x4") == hs(("host0", 4), ("host1", 4))
    assert parse_layout("3X1", name="n{}") == hs(("n0", 1), ("n1", 1), ("n2", 1))
    assert parse_hosts_or_layout("2x4") == parse_layout("2x4")
    assert parse_hosts_or_layout("a:2,b") == hs(("a", 2), ("b", 1))


@pytest.mark.parametrize("text, message", [
    ("2x", "expected HOSTSxRANKS, e.g. 2x4"),
    ("x4", "expected HOSTSxRANKS"),
    ("0x4", "the number of hosts must be a positive integer, got 0"),
    ("2x0", "the number of ranks per host must be a positive integer, got 0"),
    ("2x4x1", "is not a layout"),
    (f"{MAX_EXPANSION + 1}x1", "more than"),
])
def test_parse_layout_errors(text, message):
    with pytest.raises(HostListError) as exc:
        parse_layout(text)
    assert message in str(exc.value)


# ---- hostfile ------------------------------------------------------------------------------
def test_parse_hostfile_all_forms():
    text = """\
# cluster A
node1 slots=4
node2            # one slot
node3:2

  node4 slots=2 max_slots=6
NODE5 SLOTS=3
[fe80::2] slots=2
"""
    assert parse_hostfile(text) == [
        HostSlots("node1", 4), HostSlots("node2", 1), HostSlots("node3", 2),
        HostSlots("node4", 2, 6), HostSlots("NODE5", 3), HostSlots("fe80::2", 2)]


def test_parse_hostfile_repeated_host_adds_slots():
    assert parse_hostfile("a slots=2\nb\na slots=3\n") == hs(("a", 5), ("b", 1))


@pytest.mark.parametrize("text, message", [
    ("", "hosts.txt: no hosts"),
    ("# only\n\n   # comments\n", "no hosts"),
    ("a slots=4\nb slots=0\n", "hosts.txt, line 2 'b slots=0': slots must be a positive"),
    ("a slots=four", "got 'four'"),
    ("a cpus=4", "line 1 'a cpus=4': unexpected 'cpus=4' (expected HOST, HOST slots=N"),
    ("a 4", "unexpected '4'"),
    ("a slots=2 slots=3", "the slots are given twice"),
    ("a:2 slots=3", "the slots are given twice"),
    ("a slots=4 max_slots=2", "max_slots=2 is less than slots=4"),
    ("\n\nx!y slots=1", "line 3 'x!y slots=1': 'x!y' is not a host name"),
])
def test_parse_hostfile_errors(text, message):
    with pytest.raises(HostListError) as exc:
        parse_hostfile(text, source="hosts.txt")
    assert message in str(exc.value)


# ---- Slurm ---------------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("vm", ["vm"]),
    ("node[01-04,07],gpu1", ["node01", "node02", "node03", "node04", "node07", "gpu1"]),
    ("n[8-11]", ["n8", "n9", "n10", "n11"]),
    ("n[098-101]", ["n098", "n099", "n100", "n101"]),
    ("a[1-2],b[3],c", ["a1", "a2", "b3", "c"]),
    ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
    ("gpu[1-2]-ib", ["gpu1-ib", "gpu2-ib"]),
    ("node-[1,3]", ["node-1", "node-3"]),
])
def test_expand_nodelist(text, expected):
    assert expand_nodelist(text) == expected


@pytest.mark.parametrize("text, message", [
    ("", "empty"),
    ("node[1-3", "'[' without a closing ']'"),
    ("node1-3]", "']' without '['"),
    ("n[1-[2]]", "nested '['"),
    ("n[3-1]", "the range '3-1' runs backwards"),
    ("n[a-b]", "'a-b' in [a-b] is not a number or a range"),
    ("n[]", "empty brackets"),
    ("a,,b", "empty entry between commas"),
    ("n[0-100000000]", f"more than {MAX_EXPANSION} names"),
])
def test_expand_nodelist_errors(text, message):
    with pytest.raises(HostListError) as exc:
        expand_nodelist(text)
    assert message in str(exc.value)
    assert "Slurm node list" in str(exc.value)


@pytest.mark.parametrize("text, expected", [
    ("4", [4]),
    ("2(x3),1", [2, 2, 2, 1]),
    ("1,2(x2)", [1, 2, 2]),
    (" 8(x1) ", [8]),
])
def test_expand_tasks_per_node(text, expected):
    assert expand_tasks_per_node(text) == expected


@pytest.mark.parametrize("text, message", [
    ("", "empty"),
    ("2(3)", "'2(3)' is not N or N(xREPEAT)"),
    ("2(x0)", "repeats 0 times"),
    ("a", "is not N or N(xREPEAT)"),
    ("1(x100001)", "more than"),
])
def test_expand_tasks_per_node_errors(text, message):
    with pytest.raises(HostListError) as exc:
        expand_tasks_per_node(text)
    assert message in str(exc.value)


def test_hosts_from_slurm_env_prefers_the_step():
    env = {"SLURM_JOB_NODELIST": "n[1-3]", "SLURM_TASKS_PER_NODE": "2(x3)",
           "SLURM_STEP_NODELIST": "n[1-2]", "SLURM_STEP_TASKS_PER_NODE": "2,1"}
    assert hosts_from_slurm_env(env) == hs(("n1", 2), ("n2", 1))
    del env["SLURM_STEP_NODELIST"]
    assert hosts_from_slurm_env(env) == hs(("n1", 2), ("n2", 2), ("n3", 2))
    # what srun -n 4 sets on a one-node cluster
    assert hosts_from_slurm_env({"SLURM_STEP_NODELIST": "vm",
                                 "SLURM_STEP_TASKS_PER_NODE": "4"}) == hs(("vm", 4))


@pytest.mark.parametrize("env, message", [
    ({}, "not inside a Slurm job"),
    ({"SLURM_JOB_NODELIST": "n[1-2]"}, "SLURM_JOB_NODELIST is set but SLURM_TASKS_PER_NODE"),
    ({"SLURM_JOB_NODELIST": "n[1-3]", "SLURM_TASKS_PER_NODE": "2(x2)"},
     "names 3 nodes but SLURM_TASKS_PER_NODE='2(x2)' gives 2 counts"),
])
def test_hosts_from_slurm_env_errors(env, message):
    with pytest.raises(HostListError) as exc:
        hosts_from_slurm_env(env)
    assert message in str(exc.value)


# ---- placement -----------------------------------------------------------------------------
def test_place_fills_each_host_in_order():
    hosts = hs(("a", 4), ("b", 4))
    assert place(8, hosts) == ["a"] * 4 + ["b"] * 4
    assert place(6, hosts) == ["a"] * 4 + ["b"] * 2
    assert place(3, hosts) == ["a"] * 3           # b gets no rank
    assert place(1, hs(("a", 1))) == ["a"]
    assert place(5, hs(("a", 1), ("b", 3), ("c", 2))) == ["a", "b", "b", "b", "c"]


def test_place_refuses_oversubscription_naming_hosts_and_slots():
    with pytest.raises(HostListError) as exc:
        place(9, hs(("a", 4), ("b", 4)))
    msg = str(exc.value)
    assert "9 ranks do not fit in the 8 slots of a:4, b:4" in msg
    assert "--oversubscribe" in msg


def test_place_error_lists_many_hosts_briefly():
    hosts = [HostSlots(f"n{i}", 1) for i in range(20)]
    with pytest.raises(HostListError) as exc:
        place(21, hosts)
    assert "n0:1, n1:1" in str(exc.value) and "(20 hosts)" in str(exc.value)
    assert "n19" not in str(exc.value)


def test_place_oversubscribed_keeps_blocks_in_proportion_to_slots():
    assert place(6, hs(("a", 2), ("b", 2)), oversubscribe=True) == ["a"] * 3 + ["b"] * 3
    assert place(3, hs(("a", 1), ("b", 1)), oversubscribe=True) == ["a", "a", "b"]
    assert place(10, hs(("a", 1), ("b", 3)), oversubscribe=True) == ["a"] * 3 + ["b"] * 7
    # within the slots, --oversubscribe changes nothing
    assert place(4, hs(("a", 4), ("b", 4)), oversubscribe=True) == ["a"] * 4


def test_place_oversubscribed_respects_max_slots():
    hosts = [HostSlots("a", 2, 2), HostSlots("b", 2)]
    assert place(7, hosts, oversubscribe=True) == ["a"] * 2 + ["b"] * 5
    with pytest.raises(HostListError) as exc:
        place(5, [HostSlots("a", 2, 2), HostSlots("b", 2, 2)], oversubscribe=True)
    assert "5 ranks exceed the max_slots of a:2, b:2 (4 in all)" in str(exc.value)


@pytest.mark.parametrize("n", range(1, 40))
def test_place_invariants(n):
    hosts = [HostSlots("a", 3), HostSlots("b", 1, 9), HostSlots("c", 5)]
    placement = place(n, hosts, oversubscribe=True)
    assert len(placement) == n
    groups = group_by_host(placement)
    # blocks: each host's ranks are consecutive and hosts keep their order
    assert [r for ranks in groups.values() for r in ranks] == list(range(n))
    assert list(groups) == [h for h in "abc" if h in groups]
    assert len(groups.get("b", [])) <= 9
    if n <= total_slots(hosts):
        assert all(len(groups.get(h.host, [])) <= h.slots for h in hosts)


def test_place_argument_errors():
    with pytest.raises(HostListError, match="at least 1, got 0"):
        place(0, hs(("a", 1)))
    with pytest.raises(HostListError, match="no hosts"):
        place(1, [])


def test_place_merges_repeated_hosts():
    assert place(3, hs(("a", 1), ("b", 1), ("a", 1))) == ["a", "a", "b"]


def test_group_by_host():
    assert group_by_host(["a", "a", "b", "c", "c"]) == {"a": [0, 1], "b": [2], "c": [3, 4]}
    assert group_by_host([]) == {}
