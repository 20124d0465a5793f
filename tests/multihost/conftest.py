"""Fixtures for tests that cross a real network or run under Slurm.

    def test_x(netns_hosts):                 # 2 hosts h1, h2 with sshd (see netns_hosts.py)
        netns_hosts.ssh("h1", "hostname")

    @pytest.mark.netns_hosts(n=3, rate="100mbit")   # options: n, rate, burst, latency, port
    def test_y(netns_hosts): ...

    def test_z(slurm_cluster):               # one-node Slurm (see slurm_cluster.py)
        slurm_cluster.run(["srun", "-n", "4", "hostname"])

    @pytest.mark.slurm(cpus=16)

Both skip, with the reason, when not root or when what tests/multihost/setup.sh installs is
missing; with MINIMPI_MULTIHOST_REQUIRED=1 (CI on machines that have it all) they fail
instead, so a broken set-up cannot pass as skipped.  Both always tear down; a teardown that
leaves anything behind (a namespace, a link, a process) is an error of the test.
Set-up and tear-down times are summed up at the end of the pytest run.
"""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netns_hosts as _netns  # noqa: E402
import slurm_cluster as _slurm  # noqa: E402

REQUIRED = os.environ.get("MINIMPI_MULTIHOST_REQUIRED", "") not in ("", "0")
_timings: dict[str, list[float]] = {}


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "netns_hosts(n=2, rate=None, burst='64kb', latency='50ms', port=2222): "
        "options of the netns_hosts fixture")
    config.addinivalue_line("markers", "slurm(cpus=8): options of the slurm_cluster fixture")


def _unavailable(what: str, reason) -> None:
    if reason is None:
        return
    if REQUIRED:
        pytest.fail(f"{what} unavailable but MINIMPI_MULTIHOST_REQUIRED is set: {reason}")
    pytest.skip(f"{what}: {reason}")


def _record(obj) -> None:
    for key, value in obj.timings.items():
        _timings.setdefault(f"{type(obj).__name__} {key}", []).append(value)


@pytest.fixture
def netns_hosts(request):
    _unavailable("network-namespace hosts", _netns.unavailable_reason())
    marker = request.node.get_closest_marker("netns_hosts")
    opts = dict(marker.kwargs) if marker else {}
    rate = opts.pop("rate", None)
    burst = opts.pop("burst", "64kb")
    latency = opts.pop("latency", "50ms")
    hosts = _netns.NetnsHosts(**opts).up()
    try:
        if rate:
            hosts.shape(rate, burst=burst, latency=latency)
        yield hosts
    finally:
        try:
            hosts.down()
        finally:
            _record(hosts)


@pytest.fixture
def slurm_cluster(request):
    _unavailable("Slurm", _slurm.unavailable_reason())
    marker = request.node.get_closest_marker("slurm")
    cluster = _slurm.SlurmCluster(**(marker.kwargs if marker else {})).up()
    try:
        yield cluster
    finally:
        try:
            cluster.down()
        finally:
            _record(cluster)


def pytest_terminal_summary(terminalreporter):
    if not _timings:
        return
    terminalreporter.write_sep("-", "multihost infrastructure timings")
    for key, values in sorted(_timings.items()):
        terminalreporter.write_line(
            f"{key}: n={len(values)} mean={sum(values) / len(values):.2f} s "
            f"max={max(values):.2f} s")
