"""A short soak in CI: benchmarks/soak.py for ~20 s on 4 ranks must find no wrong result,
no growing file-descriptor count and no runaway memory."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

SOAK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks",
                    "soak.py")


def test_short_soak_finds_nothing_wrong():
    proc = subprocess.Popen([sys.executable, SOAK, "--minutes", "0.33", "-n", "4",
                             "--report", "5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate()
        pytest.fail(f"the soak did not finish\n{out[-2000:]}\n{err[-2000:]}")
    final = re.search(r"SOAK calls=(\d+) distinct_sizes=(\d+) wrong=(\d+) "
                      r"rss_growth_mib=([\d.-]+) fd_growth=(-?\d+)", out)
    assert final, f"{out[-2000:]}\n{err[-3000:]}"
    calls, sizes, wrong, growth, fds = final.groups()
    assert proc.returncode == 0 and wrong == "0", f"{out[-2000:]}\n{err[-3000:]}"
    assert int(calls) > 500 and int(sizes) > 200
    assert int(fds) <= 0 and float(growth) < 64
    assert len(re.findall(r"soak t=", out)) >= 3   # RSS and fds reported over time
