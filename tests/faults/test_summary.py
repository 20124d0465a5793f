"""The failure summary (issue 13's item, the same code as the culprit): one summary first,
the culprit's exception and the user's own file:line, then how many ranks stopped because
of it - without their PeerLostError tracebacks, which stay in --output-dir."""
from __future__ import annotations

import io
import re
import sys

import pytest
from jobhelpers import run_minimpi
from minimpi.launcher.coordinator import RankState
from minimpi.launcher.job import Job, JobSpec, user_traceback
from minimpi.launcher.processes import RankProcess

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

SKIP_BCAST = """\
from mpi4py import MPI
import numpy as np
comm = MPI.COMM_WORLD
buf = np.arange(100, dtype="d") if comm.rank == 0 else np.empty(100)
for step in range(3):
    if not (comm.rank == 2 and step == 1):
        comm.Bcast(buf, root=0)
comm.Barrier()
"""


def test_one_rank_skipping_a_bcast_gives_one_short_summary_with_the_users_line(
        tmp_path, job_marker):
    script = tmp_path / "skip_bcast.py"
    script.write_text(SKIP_BCAST)
    outdir = tmp_path / "out"
    res = run_minimpi("-n", 4, "-x", f"MINIMPI_TEST_MARKER={job_marker}", "--output-dir",
                      outdir, script, timeout=60)
    err = res.stderr.splitlines()
    assert res.returncode == 1, res.stderr
    # the summary comes first and names the culprit with its exception ...
    m = re.match(r"minimpi: rank (\d) exited with code 1: CollectiveMismatchError: ", err[0])
    assert m, res.stderr
    culprit = int(m.group(1))
    # ... (rank 2 skipped the Bcast; rank 3, its partner in the tree, may notice first) ...
    assert culprit in (2, 3), res.stderr
    # ... and the user's own line, not a minimpi frame
    line = {2: "skip_bcast.py:8: comm.Barrier()", 3: "skip_bcast.py:7: comm.Bcast(buf, root=0)"}
    assert err[1] == f"minimpi:   at {line[culprit]}", res.stderr
    assert "minimpi/" not in res.stderr.replace(str(outdir), "")
    others = [ln for ln in err if re.match(r"minimpi: 3 other rank\(s\) stopped because of it: ",
                                           ln)]
    assert others, res.stderr
    # no PeerLostError traceback on the terminal, and short (was 90+ lines)
    assert "PeerLostError: " not in res.stderr
    assert res.stderr.count("Traceback (most recent call last):") == 1   # the culprit's
    assert len(err) <= 15, res.stderr
    # every rank's full output is still in --output-dir: the culprit's traceback, and that of
    # each rank the summary says lost a peer (the others the launcher ended before they
    # noticed, which is a race the summary reports as it happened)
    stderr = {r: (outdir / f"rank.{r}.stderr").read_text() for r in range(4)}
    assert "CollectiveMismatchError" in stderr[culprit]
    lost = re.search(r"rank\(s\) ([0-9, -]+) lost a peer \(PeerLostError\)", others[0])
    named = _listed(lost.group(1)) if lost else []
    for r in named:
        assert "Traceback (most recent call last):" in stderr[r], (r, stderr[r], res.stderr)
        assert "PeerLostError" in stderr[r], (r, stderr[r], res.stderr)


def _listed(text: str) -> list[int]:
    """The ranks of the launcher's ``0, 2-5`` notation."""
    ranks: list[int] = []
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        ranks.extend(range(int(first), int(last or first) + 1))
    return ranks


def test_user_traceback_leaves_out_minimpis_frames():
    own = __import__("minimpi").__file__.rsplit("/", 1)[0]
    tb = ["Traceback (most recent call last):",
          '  File "/home/me/lab.py", line 8, in <module>',
          "    comm.Barrier()",
          f'  File "{own}/comm/collectives/common.py", line 49, in execute',
          "    result = run(ch, schedule)",
          "             ^^^^^^^^^^^^^^^^^",
          "minimpi.errors.CollectiveMismatchError: boom"]
    assert user_traceback(tb) == [tb[0], tb[1], tb[2], tb[6]]
    only_ours = [tb[0], tb[3], tb[4], tb[6]]
    assert user_traceback(only_ours) == only_ours   # nothing of the user's: keep it all


# -- the culprit decision, without processes -------------------------------------------
class _Popen:
    def __init__(self, pid: int) -> None:
        self.pid = pid


class _Coord:
    def __init__(self, n: int) -> None:
        self.ranks = [RankState(r) for r in range(n)]
        self.table_sent = True


def _job(n: int = 4) -> Job:
    job = Job(JobSpec(nprocs=n, program="x.py", settle=3.0), io.BytesIO(), io.BytesIO())
    job.coord = _Coord(n)
    job.ranks = [RankProcess(r, _Popen(10_000 + r)) for r in range(n)]
    job.terminate_all = lambda sig: None
    return job


def _ends(job: Job, rank: int, rc: int, failure=None, lost=()) -> None:
    st = job.coord.ranks[rank]
    if failure is not None:
        st.failure = failure
    st.lost = list(lost)
    job.ranks[rank].returncode = rc
    job.reap_order.append(rank)
    job._judge(100.0)


def _peer_lost(lost):
    return {"error": "PeerLostError: gone", "type": "PeerLostError", "consequence": True,
            "lost": list(lost)}


def test_a_peer_that_failed_first_is_not_blamed_the_rank_it_lost_is():
    job = _job()
    _ends(job, 1, 1, _peer_lost([2]), lost=[2])     # reaped before the culprit
    assert job.failure is None and job._suspect_until == 103.0   # waits for rank 2
    _ends(job, 2, 7)                                # sys.exit(7), no report
    assert (job.failure.rank, job.failure.exit_code) == (2, 7)
    assert job.failure.summary == "minimpi: rank 2 exited with code 7"


def test_a_chain_of_lost_peers_leads_to_the_first_rank():
    job = _job()
    _ends(job, 0, 1, _peer_lost([1]), lost=[1])
    job.coord.ranks[1].failure = _peer_lost([3])
    job.coord.ranks[1].lost = [3]
    _ends(job, 3, -9)                               # kill -9
    assert (job.failure.rank, job.failure.exit_code) == (3, 137)


def test_a_clean_exit_while_others_wait_is_blamed_with_a_failing_code():
    job = _job()
    _ends(job, 2, 0)                                # exits 0 early
    assert job.failure is None
    _ends(job, 0, 1, _peer_lost([2]), lost=[2])
    # a peer that merely finished is "lost" too: believed only after 1 s without any rank
    # reporting an error of its own
    assert job.failure is None and job._suspect_until == 101.0
    job._judge(101.0)
    assert (job.failure.rank, job.failure.exit_code) == (2, 1)
    assert "exited with code 0 while rank(s) 0 still expected messages" in job.failure.summary


def test_an_own_error_wins_over_consequences_and_the_wait_is_bounded():
    job = _job()
    _ends(job, 1, 1, _peer_lost([0]), lost=[0])
    assert job.failure is None
    job._judge(103.5, give_up=True)                 # rank 0 never ends: blame it anyway
    assert job.failure.rank == 0 and job.failure.exit_code == 1
    job = _job()
    _ends(job, 3, 1, {"error": "ValueError: x", "type": "ValueError", "consequence": False})
    assert (job.failure.rank, job.failure.exit_code) == (3, 1)
    assert job.failure.summary == "minimpi: rank 3 exited with code 1: ValueError: x"
