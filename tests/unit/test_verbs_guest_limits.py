"""The time limits of the soft-RoCE guest run (tests/verbs/limits.sh), by themselves.

Before, guest.sh gave pytest a fixed 720 s: on a loaded 2-core machine the run ended rc=124
after 48 of 56 tests, and nothing said that a time limit had cut it. Now the host sizes the
run's limit from its cores and load, the guest gives pytest what is left after the boot, and
a run cut by the limit says so (the QEMU run itself is tests/verbs/test_verbs_guest.py)."""
from __future__ import annotations

import os
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
LIMITS = os.path.join(HERE, "..", "verbs", "limits.sh")


def sh(script: str, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("MINIMPI_")}
    full.update(env)
    return subprocess.run(["bash", "-c", f"source {LIMITS}; {script}"], capture_output=True,
                          text=True, timeout=30, env=full)


@pytest.mark.parametrize("load, cores, limit", [
    ("0.00", "2", 900),       # idle: the base
    ("1.00", "2", 900),       # one busy core of two: still the base
    ("3.47", "2", 1980),      # the loaded 2-core machine of the report: 2.2 times
    ("8.20", "2", 3600),      # at most 4 times
    ("3.00", "16", 900),      # many cores: the load does not matter
    ("0.50", "1", 900),       # one core counts as the guest's two
])
def test_the_run_limit_grows_with_the_load_per_core(load, cores, limit):
    res = sh("guest_run_limit 900", MINIMPI_LOADAVG=load, MINIMPI_CORES=cores)
    assert res.returncode == 0 and res.stdout.strip() == str(limit), res.stderr


def test_the_run_limit_of_this_machine_is_read_from_it():
    res = sh("guest_run_limit 900")
    assert res.returncode == 0 and 900 <= int(res.stdout) <= 3600, res.stdout + res.stderr


def test_pytest_gets_what_the_boot_and_the_benchmark_leave():
    assert sh("guest_pytest_limit 1980 45 0").stdout.strip() == str(1980 - 45 - 30)
    assert sh("guest_pytest_limit 1980 45 600").stdout.strip() == str(1980 - 45 - 600 - 30)
    assert sh("guest_pytest_limit 100 90 0").stdout.strip() == "60"      # never less than 60


def test_a_run_cut_by_its_limit_says_so():
    res = sh('timeout 1 sleep 5; rc=$?; say_if_limit_hit $rc 1 "the device tests"; echo rc=$rc')
    lines = res.stdout.splitlines()
    assert lines[-1] == "rc=124"
    assert lines[0].startswith("guest: the device tests stopped at its time limit of 1 s"), res.stdout
    assert "MINIMPI_VERBS_GUEST_LIMIT" in lines[0] and "-k NAME" in lines[0]
    quiet = sh('false; say_if_limit_hit $? 1 "the device tests"')
    assert quiet.stdout == ""


def test_the_guest_scripts_use_the_limits():
    guest = open(os.path.join(HERE, "..", "verbs", "guest.sh")).read()
    host = open(os.path.join(HERE, "..", "verbs", "run-in-guest.sh")).read()
    assert "timeout 720" not in guest
    assert 'timeout "$LIMIT"' in guest and "say_if_limit_hit" in guest
    assert "guest_run_limit" in host and "MINIMPI_VERBS_RUN_LIMIT=$LIMIT" in host
    for script in ("guest.sh", "run-in-guest.sh"):
        res = subprocess.run(["bash", "-n", os.path.join(HERE, "..", "verbs", script)],
                             capture_output=True, text=True, timeout=30)
        assert res.returncode == 0, res.stderr
