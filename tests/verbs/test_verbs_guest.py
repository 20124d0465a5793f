"""Layer 2 of the verbs tests: the real transport on a soft-RoCE device, in a QEMU guest.

Runs tests/verbs/run-in-guest.sh (boot ~30-60 s, tests a few minutes, all software-emulated) when
QEMU, a Debian kernel, virtme-ng and python3-pyverbs are installed (tests/verbs/install-guest-deps.sh
installs them), and skips, saying what is missing, where they are not.
``MINIMPI_VERBS_GUEST=skip`` skips it on purpose; ``MINIMPI_VERBS_GUEST=require`` (for CI, after
the install step) turns a missing tool into a failure, so a broken install cannot pass as a skip.
"""
from __future__ import annotations

import os
import pathlib
import re
import subprocess

import pytest

HERE = pathlib.Path(__file__).resolve().parent
MODE = os.environ.get("MINIMPI_VERBS_GUEST", "auto")


def _run_limit() -> int:
    """The limit run-in-guest.sh sets for this machine (limits.sh: its cores and load)."""
    base = os.environ.get("MINIMPI_VERBS_GUEST_LIMIT", "900")
    res = subprocess.run(["bash", "-c", f'source "{HERE / "limits.sh"}"; guest_run_limit {base}'],
                         capture_output=True, text=True, timeout=30)
    return int(res.stdout) if res.returncode == 0 and res.stdout.strip().isdigit() else 900


LIMIT = _run_limit()


@pytest.mark.timeout(LIMIT + 120)
def test_transport_on_soft_roce_in_a_qemu_guest():
    if MODE == "skip":
        pytest.skip("MINIMPI_VERBS_GUEST=skip")
    proc = subprocess.Popen(["bash", str(HERE / "run-in-guest.sh")], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=LIMIT + 60)
    except subprocess.TimeoutExpired:
        proc.terminate()        # the script's trap stops QEMU and everything below it
        out, _ = proc.communicate(timeout=30)
        pytest.fail(f"the soft-RoCE guest run did not finish within {LIMIT + 60} s:\n"
                    + out[-8000:])
    if proc.returncode == 2 and "run-in-guest: missing:" in out:
        reason = out.strip().splitlines()[-1]
        if MODE == "require":
            pytest.fail(reason)
        pytest.skip(reason)
    assert proc.returncode == 0, out[-8000:]
    summary = re.search(r"(\d+) passed", out)
    assert summary and int(summary.group(1)) >= 50 and " failed" not in out, out[-8000:]
