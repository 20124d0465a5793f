"""Slurm test clusters are per instance: two run at once on one machine (two test runs, or a
test beside a cluster kept up by hand), and taking one down leaves the other running.
Before, `slurm_cluster.py down` removed every cluster on the machine, also one a concurrent
run was using, and a cluster kept up by hand gave up its lock at once."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import slurm_cluster as slurm_mod

REQUIRED = os.environ.get("MINIMPI_MULTIHOST_REQUIRED", "") not in ("", "0")
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "slurm_cluster.py")


@pytest.fixture
def available():
    reason = slurm_mod.unavailable_reason()
    if reason is not None:
        if REQUIRED:
            pytest.fail(f"Slurm unavailable but MINIMPI_MULTIHOST_REQUIRED is set: {reason}")
        pytest.skip(f"Slurm: {reason}")


def srun_hostname(cluster) -> subprocess.CompletedProcess:
    return cluster.run(["srun", "-n", "2", "hostname"], timeout=60, check=False)


def test_two_clusters_at_once_and_down_removes_only_its_own(available):
    first = slurm_mod.SlurmCluster(cpus=2).up()
    by_hand = None
    try:
        second = slurm_mod.SlurmCluster(cpus=2).up()     # no waiting for the first's lock
        try:
            assert first.name != second.name
            for c in (first, second):
                res = srun_hostname(c)
                assert res.returncode == 0 and len(res.stdout.split()) == 2, \
                    res.stderr + c.logs()
            # a cluster kept up by hand, beside the two
            up = subprocess.run([sys.executable, SCRIPT, "up", "--cpus", "2"],
                                capture_output=True, text=True, timeout=120)
            assert up.returncode == 0, up.stderr
            by_hand = up.stdout.split()[1]
            assert by_hand.startswith("slurm-") and f"down {by_hand}" in up.stdout, up.stdout
            # `down` without a name removes what was kept up by hand, never a test's cluster
            down = subprocess.run([sys.executable, SCRIPT, "down"], capture_output=True,
                                  text=True, timeout=120)
            assert down.returncode == 0 and by_hand in down.stdout, down.stdout + down.stderr
            by_hand = None
            second.down()
            assert os.path.isdir(first.dir)
            res = srun_hostname(first)                   # still working
            assert res.returncode == 0, res.stderr + first.logs()
        finally:
            second.down()
    finally:
        first.down()
        if by_hand:
            subprocess.run([sys.executable, SCRIPT, "down", by_hand], timeout=120)
