"""Which CPUs a rank binds to under --bind-to / --map-by (minimpi/_start/binding.py), on a
made-up topology: 2 sockets x 2 cores x 2 hardware threads, numbered as Linux numbers them
(CPUs 0-3 the first thread of each core, 4-7 their siblings)."""
from __future__ import annotations

import pytest

from minimpi._start.binding import (
    BindingError,
    Topology,
    cpus_for,
    default_bind_for_map,
    format_cpulist,
    local_index,
    parse_bind,
    parse_cpulist,
    sharing,
)

# cpu -> (socket, core)
LAYOUT = {0: (0, 0), 1: (0, 1), 2: (1, 0), 3: (1, 1), 4: (0, 0), 5: (0, 1), 6: (1, 0), 7: (1, 1)}


@pytest.fixture
def topo(tmp_path):
    cpu_dir, node_dir = tmp_path / "cpu", tmp_path / "node"
    for cpu, (socket, core) in LAYOUT.items():
        d = cpu_dir / f"cpu{cpu}" / "topology"
        d.mkdir(parents=True)
        (d / "physical_package_id").write_text(f"{socket}\n")
        (d / "core_id").write_text(f"{core}\n")
    for node, cpus in ((0, "0-1,4-5"), (1, "2-3,6-7")):
        (node_dir / f"node{node}").mkdir(parents=True)
        (node_dir / f"node{node}" / "cpulist").write_text(cpus + "\n")

    def make(allowed=tuple(LAYOUT)):
        return Topology(set(allowed), sys_cpu=str(cpu_dir), sys_node=str(node_dir))
    return make


def test_groups_follow_the_topology(topo):
    t = topo()
    assert t.groups["core"] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert t.groups["socket"] == [[0, 1, 4, 5], [2, 3, 6, 7]]
    assert t.groups["numa"] == [[0, 1, 4, 5], [2, 3, 6, 7]]
    assert t.groups["hwthread"] == [[c] for c in range(8)]


def test_bind_to_core_is_round_robin_over_cores(topo):
    t = topo()
    got = [cpus_for(i, "core", 1, "core", t) for i in range(5)]
    assert got == [([0, 4], "core 0"), ([1, 5], "core 1"), ([2, 6], "core 2"),
                   ([3, 7], "core 3"), ([0, 4], "core 0")]          # the fifth wraps


def test_map_by_socket_alternates_sockets(topo):
    t = topo()
    assert [cpus_for(i, "core", 1, "socket", t)[0] for i in range(5)] == \
        [[0, 4], [2, 6], [1, 5], [3, 7], [0, 4]]
    # bound to the socket of the core it is mapped to
    assert [cpus_for(i, "socket", 1, "core", t)[1] for i in range(4)] == \
        ["socket 0", "socket 0", "socket 1", "socket 1"]


def test_hwthreads_and_several_per_rank(topo):
    t = topo()
    assert [cpus_for(i, "hwthread", 1, "hwthread", t)[0] for i in range(3)] == [[0], [1], [2]]
    assert cpus_for(1, "core", 2, "core", t) == ([2, 3, 6, 7], "cores 2, 3")
    assert cpus_for(2, "core", 2, "core", t) == ([0, 1, 4, 5], "cores 0, 1")


def test_only_the_allowed_cpus_count(topo):
    t = topo(allowed=(1, 2, 5))        # e.g. a cpuset: core 1 (both threads) and CPU 2
    assert t.groups["core"] == [[1, 5], [2]]
    assert [cpus_for(i, "core", 1, "slot", t)[0] for i in range(3)] == [[1, 5], [2], [1, 5]]


def test_policy_spelling():
    assert parse_bind("core") == ("core", 1)
    assert parse_bind("PACKAGE:2") == ("socket", 2)
    for bad in ("l3cache", "core:x", "core:0", "none:2"):
        with pytest.raises(BindingError):
            parse_bind(bad)
    assert default_bind_for_map("socket") == "socket"
    assert default_bind_for_map("slot") == "core"


def test_cpu_lists_and_local_index():
    assert parse_cpulist("0-2,5") == [0, 1, 2, 5]
    assert format_cpulist([5, 0, 1, 2]) == "0-2,5"
    assert local_index({"MINIMPI_RANK": "6", "MINIMPI_LOCAL_RANKS": "4-7"}) == 2
    assert local_index({"MINIMPI_RANK": "3"}) == 3
    assert local_index({}) is None


def test_how_many_ranks_share_a_ranks_cpus(topo):
    t = topo()
    # five ranks on four cores: the fifth shares core 0 (2 hardware threads) with the first
    assert [sharing(i, 5, "core", 1, "core", t) for i in range(5)] == \
        [(2, 2), (1, 2), (1, 2), (1, 2), (2, 2)]
    assert sharing(0, 3, "hwthread", 1, "hwthread", t) == (1, 1)
    # bound to a socket: every rank mapped to that socket's cores shares its 4 CPUs
    assert [sharing(i, 4, "socket", 1, "core", t) for i in range(4)] == [(2, 4)] * 4
    # two cores each, overlapping from the third rank on
    assert sharing(1, 5, "core", 2, "core", t) == (2, 4)
    assert sharing(0, 5, "core", 2, "core", t) == (3, 4)
