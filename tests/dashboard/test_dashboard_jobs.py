"""``minimpi run --dashboard``: real jobs, watched in a real headless browser.

Each test starts a real job with ``--dashboard=0``, reads the URL the launcher prints, opens
it in headless Chromium and checks what a person would see: the ranks' rows and states,
the blocked ranks and the highlighted wait-for cycle with the deadlock report, the message
matrix, the exit summary; and that a request without the URL's token is refused. The
programs wait for a file the test creates, so nothing depends on how fast the machine is.
"""
from __future__ import annotations

import json
import os
import signal
import time
import urllib.request

import pytest
from dashboard_helpers import (
    DashboardJob,
    http_status,
    screenshot,
    start_browser,
    stop_browser,
    wait_for,
)
from jobhelpers import marker_args, run_minimpi

RING = """
import os, time
import numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
ctl = comm.Dup()          # the decision to stop travels on a communicator of its own
r, n = comm.Get_rank(), comm.Get_size()
buf = np.zeros(2)
go = os.environ["GO_FILE"]
deadline = time.monotonic() + 120
i = 0
while True:
    i += 1
    if r == 0:
        comm.Send(buf, dest=1, tag=7)
        comm.Recv(buf, source=n - 1, tag=7)
    else:
        comm.Recv(buf, source=r - 1, tag=7)
        comm.Send(buf, dest=(r + 1) % n, tag=7)
    if i % 20 == 0:
        stop = (os.path.exists(go) or time.monotonic() > deadline) if r == 0 else None
        if ctl.bcast(stop):
            break
    time.sleep(0.002)
print(f"rank {r} done after {i} rounds", flush=True)
"""

DEADLOCK = """
from mpi4py import MPI
comm = MPI.COMM_WORLD
r = comm.Get_rank()
print(f"rank {r} waits for its partner", flush=True)
comm.recv(source=1 - r, tag=1)
comm.send(r, dest=1 - r, tag=1)
"""

CRASH = """
import os, time
from mpi4py import MPI
comm = MPI.COMM_WORLD
r = comm.Get_rank()
if r == 1:
    print("rank 1 reads its input", flush=True)
    deadline = time.monotonic() + 120
    while not os.path.exists(os.environ["GO_FILE"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    raise ValueError("the input file has a negative mass in row 17")
print(f"rank {r} waits for rank 1", flush=True)
comm.recv(source=1)
"""

MANY = """
import os, time
import numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
ctl = comm.Dup()
r, n = comm.Get_rank(), comm.Get_size()
out, into = np.zeros(4), np.empty(4)
go = os.environ["GO_FILE"]
deadline = time.monotonic() + 240
i = 0
while True:
    i += 1
    MPI.Request.Waitall([comm.Isend(out, dest=(r + 1) % n, tag=3),
                         comm.Irecv(into, source=(r - 1) % n, tag=3)])
    if i % 10 == 0:
        stop = (os.path.exists(go) or time.monotonic() > deadline) if r == 0 else None
        if ctl.bcast(stop):
            break
    time.sleep(0.05)      # 64 ranks on a few cores: mostly asleep
print(f"rank {r} done", flush=True)
"""

WAIT = """
import os, time
from mpi4py import MPI
deadline = time.monotonic() + 120
while not os.path.exists(os.environ["GO_FILE"]) and time.monotonic() < deadline:
    time.sleep(0.05)
"""


@pytest.fixture(scope="module")
def browser():
    d = start_browser()
    yield d
    stop_browser(d)


# ---- reading the page as a person would ------------------------------------------------------
ROWS_JS = """
return Array.from(document.querySelectorAll('#ranks tbody tr')).map(tr => ({
  rank: Number(tr.dataset.rank), state: tr.dataset.state, cls: tr.className,
  pid: tr.querySelector('td.pid').innerText, host: tr.querySelector('td.host').innerText,
  text: tr.innerText}));
"""
CELLS_JS = """
return Array.from(document.querySelectorAll('#matrix rect.cell')).map(c => [
  Number(c.dataset.src), Number(c.dataset.dst), Number(c.dataset.messages),
  Number(c.dataset.bytes), c.getAttribute('fill')]);
"""
CYCLE_JS = """
return Array.from(document.querySelectorAll('#waitfor path.edge.cycle')).map(e =>
  [Number(e.dataset.from), Number(e.dataset.to), e.getAttribute('stroke')]);
"""


def rows(d) -> list:
    return d.execute_script(ROWS_JS)


def text_of(d, selector: str) -> str:
    return d.execute_script(
        "const e = document.querySelector(arguments[0]); return e && !e.hidden ? e.innerText : ''",
        selector)


def rows_text(d) -> str:
    return "\n".join(f"{r['rank']}: {r['state']}: {r['text']}" for r in rows(d))


def running_rows(d, n: int) -> bool:
    rs = rows(d)
    return len(rs) == n and all(r["pid"] and r["state"] in ("computing", "mpi", "blocked")
                                for r in rs)


def select_comm(d, name: str) -> None:
    d.execute_script("""
        const s = document.querySelector('#comm');
        const o = Array.from(s.options).find(o => o.text.startsWith(arguments[0]));
        s.value = o.value; s.dispatchEvent(new Event('change'));""", name)


# ---- the cases ---------------------------------------------------------------------------------
def test_healthy_ring_rows_states_and_message_matrix(browser, tmp_path, write_script,
                                                     job_marker):
    go = tmp_path / "go"
    job = DashboardJob(tmp_path, job_marker, "-n", "5", write_script("ring.py", RING),
                       env={"GO_FILE": str(go)})
    try:
        url = job.wait_url()
        assert url.startswith("http://127.0.0.1:") and "token=" in url, url
        browser.get(url)
        wait_for("a row per rank, running, with its host and pid",
                 lambda: running_rows(browser, 5), 60, describe=lambda: rows_text(browser))
        assert [r["rank"] for r in rows(browser)] == [0, 1, 2, 3, 4]
        assert all(r["host"] for r in rows(browser))
        # the ring on the heat map of COMM_WORLD: rank r sends to r+1 and to no one else
        # (but for the one message of Dup's context agreement: ranks 1.. -> 0 -> the others)
        wait_for("COMM_WORLD in the matrix's communicators",
                 lambda: "COMM_WORLD" in text_of(browser, "#comm"), 10)
        select_comm(browser, "COMM_WORLD")

        def ring_drawn():
            cells = {(s, t): m for s, t, m, _, _ in browser.execute_script(CELLS_JS)}
            ring = {(r, (r + 1) % 5) for r in range(5)}
            return all(cells.get(c, 0) >= 20 for c in ring) and \
                all(m <= 1 for c, m in cells.items() if c not in ring)
        wait_for("the ring's cells (r -> r+1, at least 20 messages each), no other but Dup's",
                 ring_drawn, 30, describe=lambda: repr(browser.execute_script(CELLS_JS)))
        fills = {c[4] for c in browser.execute_script(CELLS_JS)}
        assert all(f.startswith("rgb(") for f in fills)
        note = text_of(browser, "#matrix-note")
        assert "COMM_WORLD" in note and "messages" in note
        assert "live" in text_of(browser, "#conn")
        screenshot(browser, "healthy-ring.png")

        go.touch()
        assert job.wait(60) == 0, job.stderr()
        summary = wait_for("the exit summary", lambda: text_of(browser, "#summary"), 20)
        assert "Job ended: exit code 0" in summary
        assert "5 ranks: exited with code 0" in summary
        wait_for("every row exited",
                 lambda: all(r["state"] == "exited" for r in rows(browser)), 10,
                 describe=lambda: rows_text(browser))
        assert "rank 3 done after" in text_of(browser, "#output")
        assert "ended, exit code 0" in text_of(browser, "#status")
    finally:
        job.close()


def test_deadlocked_pair_blocked_ranks_cycle_and_diagnosis(browser, tmp_path, write_script,
                                                           job_marker):
    job = DashboardJob(tmp_path, job_marker, "-n", "2", "--deadlock-timeout", "8",
                       write_script("pair.py", DEADLOCK))
    try:
        browser.get(job.wait_url())
        wait_for("both ranks blocked",
                 lambda: [r["state"] for r in rows(browser)] == ["blocked", "blocked"], 40,
                 describe=lambda: rows_text(browser))
        for r in rows(browser):
            assert f"blocked in recv(source={1 - r['rank']}, tag=1) on COMM_WORLD" in r["text"]
            assert "in-cycle" in r["cls"]
        cycle = wait_for("the wait-for cycle 0 -> 1 -> 0, highlighted",
                         lambda: browser.execute_script(CYCLE_JS), 10)
        assert sorted((a, b) for a, b, _ in cycle) == [(0, 1), (1, 0)]
        assert {colour for _, _, colour in cycle} == {"#dc2626"}
        assert "Wait-for cycle (deadlock): rank 0 waits for rank 1" in \
            text_of(browser, "#waitfor-note")
        diagnosis = text_of(browser, "#diagnosis")
        assert "rank 0: blocked in recv(source=1, tag=1)" in diagnosis
        assert "wait-for cycle: rank 0 waits for rank 1 in recv(tag=1)" in diagnosis
        screenshot(browser, "deadlocked-pair.png")
        # the launcher's own report, once it declares the deadlock
        final = wait_for("the launcher's deadlock report", lambda: browser.execute_script(
            "const d = document.querySelector('#diagnosis');"
            "return d.dataset.final === '1' ? d.innerText : ''"), 40)
        assert final.startswith("Deadlock")
        assert "minimpi: deadlock: every rank still running is blocked" in final
        assert job.wait(30) == 3
        summary = wait_for("the exit summary", lambda: text_of(browser, "#summary"), 20)
        assert "Job ended: exit code 3" in summary
        # the cycle stays on the page after the ranks were ended
        assert sorted((a, b) for a, b, _ in browser.execute_script(CYCLE_JS)) == [(0, 1), (1, 0)]
    finally:
        job.close()


def test_crash_exit_code_and_summary(browser, tmp_path, write_script, job_marker):
    go = tmp_path / "go"
    job = DashboardJob(tmp_path, job_marker, "-n", "3", write_script("crash.py", CRASH),
                       env={"GO_FILE": str(go)})
    try:
        browser.get(job.wait_url())
        wait_for("three rows of running ranks", lambda: running_rows(browser, 3), 60,
                 describe=lambda: rows_text(browser))
        wait_for("rank 1's output line", lambda: "rank 1 reads its input" in
                 text_of(browser, "#output"), 20)
        go.touch()
        assert job.wait(60) == 1, job.stderr()
        summary = wait_for("the exit summary", lambda: text_of(browser, "#summary"), 20)
        assert "Job ended: exit code 1" in summary
        assert "minimpi: rank 1 exited with code 1: ValueError: the input file has a negative " \
               "mass in row 17" in summary
        assert 'raise ValueError("the input file has a negative mass in row 17")' in summary
        culprit = wait_for("rank 1's row: exited with code 1, the rank that ended the job",
                           lambda: [r for r in rows(browser) if r["rank"] == 1
                                    and r["state"] == "failed" and "culprit" in r["cls"]], 10,
                           describe=lambda: rows_text(browser))
        assert "exited with code 1" in culprit[0]["text"]
        assert "ended the job" in culprit[0]["text"]
        assert "ValueError: the input file has a negative mass" in culprit[0]["text"]
        assert "ended, exit code 1" in text_of(browser, "#status")
        screenshot(browser, "crash.png")
    finally:
        job.close()


@pytest.mark.timeout(240)
def test_64_ranks_every_row_and_two_updates_a_second(browser, tmp_path, write_script,
                                                    job_marker):
    go = tmp_path / "go"
    job = DashboardJob(tmp_path, job_marker, "-n", "64", write_script("many.py", MANY),
                       env={"GO_FILE": str(go)})
    try:
        browser.get(job.wait_url())
        wait_for("64 rows of running ranks", lambda: running_rows(browser, 64), 150,
                 every=0.5, describe=lambda: rows_text(browser)[-3000:])
        before = int(browser.execute_script("return document.body.dataset.updates"))
        time.sleep(4.0)
        after = int(browser.execute_script("return document.body.dataset.updates"))
        assert (after - before) / 4.0 >= 2.0, f"{after - before} updates in 4 s"
        listed = rows(browser)
        assert [r["rank"] for r in listed] == list(range(64))
        assert all(r["pid"] and r["state"] in ("computing", "mpi", "blocked") for r in listed), \
            rows_text(browser)
        cells = {(s, t) for s, t, m, _, _ in browser.execute_script(CELLS_JS) if m > 0}
        assert {(r, (r + 1) % 64) for r in range(64)} <= cells
        screenshot(browser, "64-ranks.png")
        go.touch()
        assert job.wait(120) == 0, job.stderr()[-3000:]
        wait_for("the exit summary", lambda: "exit code 0" in text_of(browser, "#summary"), 20)
    finally:
        job.close()


def test_requests_without_the_token_are_refused(browser, tmp_path, write_script, job_marker):
    go = tmp_path / "go"
    job = DashboardJob(tmp_path, job_marker, "-n", "1", write_script("wait.py", WAIT),
                       env={"GO_FILE": str(go)})
    try:
        job.wait_url()
        base, token = job.base(), job.token()
        wrong = token[:-1] + ("A" if token[-1] != "A" else "B")
        for path in ("", "?token=", f"?token={wrong}", "state", f"state?token={wrong}",
                     "events", "static/app.js", "static/style.css", "meta", "favicon.ico"):
            assert http_status(base + path) == 403, path
        assert http_status(base + "state", "POST") == 403
        assert http_status(base + f"state?token={token}", "POST") == 405
        assert http_status(base + f"?token={token}", "DELETE") == 405
        assert http_status(base + f"static/nothing.js?token={token}") == 404
        with urllib.request.urlopen(base + f"state?token={token}", timeout=10) as r:
            assert r.status == 200
            assert r.headers["Referrer-Policy"] == "no-referrer"
            assert "default-src 'none'" in r.headers["Content-Security-Policy"]
            assert json.loads(r.read())["nprocs"] == 1
        # what a person sees without the token
        browser.get(base)
        assert "403 Forbidden" in browser.find_element("tag name", "body").text
        browser.get(job.url)
        wait_for("the page with the token", lambda: running_rows(browser, 1), 30,
                 describe=lambda: rows_text(browser))
        go.touch()
        assert job.wait(30) == 0
    finally:
        job.close()


def test_view_replays_a_trace(browser, tmp_path, write_script, job_marker):
    trace = tmp_path / "ring.json"
    go = tmp_path / "go"
    go.touch()              # the ring ends at its first check (20 rounds)
    result = run_minimpi("-n", "3", *marker_args(job_marker), "--trace", str(trace),
                         write_script("ring.py", RING), env={"GO_FILE": str(go)}, timeout=60)
    assert result.returncode == 0, result.stderr
    view = DashboardJob(tmp_path, "", str(trace), command="view")
    try:
        url = view.wait_url()
        assert "replay of" in view.stderr()
        assert http_status(view.base() + "frame?t=0") == 403
        browser.get(url)
        wait_for("the replay's slider", lambda: browser.execute_script(
            "return !document.querySelector('#replay').hidden"), 20)
        # the middle of the run: ranks inside their calls, messages on the heat map
        browser.execute_script("""const s = document.querySelector('#slider');
            s.value = '500'; s.dispatchEvent(new Event('input'));""")
        wait_for("the middle of the trace", lambda: "/" in text_of(browser, "#replay-time")
                 and browser.execute_script(CELLS_JS), 20)
        assert [r["rank"] for r in rows(browser)] == [0, 1, 2]
        assert "3 ranks" in text_of(browser, "#summary")
        # the end: every message of the ring counted
        browser.execute_script("""const s = document.querySelector('#slider');
            s.value = '1000'; s.dispatchEvent(new Event('input'));""")

        def ring_counted():
            cells = {(s, t): m for s, t, m, _, _ in browser.execute_script(CELLS_JS)}
            return all(cells.get((r, (r + 1) % 3), 0) >= 20 for r in range(3))
        wait_for("the ring's 20 rounds on the heat map", ring_counted, 20,
                 describe=lambda: repr(browser.execute_script(CELLS_JS)))
        view.proc.send_signal(signal.SIGINT)
        assert view.wait(10) == 0
    finally:
        view.close()


def test_ranks_on_agents_report_to_the_launchers_dashboard(tmp_path, write_script, job_marker):
    """``--hosts localhost:3``: the ranks run under an agent, and their snapshots reach the
    launcher's coordinator over the same authenticated connection as their state reports."""
    go = tmp_path / "go"
    job = DashboardJob(tmp_path, job_marker, "-n", "3", "--hosts", "localhost:3",
                       write_script("ring.py", RING), env={"GO_FILE": str(go)})
    try:
        job.wait_url()
        state = job.base() + f"state?token={job.token()}"

        def reported():
            with urllib.request.urlopen(state, timeout=10) as r:
                doc = json.loads(r.read())
            ok = all(row["pid"] and row["state"] in ("computing", "mpi") for row in doc["ranks"])
            return doc if ok and doc["matrix"]["comms"][0]["messages"] > 0 else None
        doc = wait_for("three ranks reporting through their agent", reported, 60)
        pids = {row["pid"] for row in doc["ranks"]}
        assert len(pids) == 3 and all(os.path.exists(f"/proc/{p}") for p in pids)
        go.touch()
        assert job.wait(60) == 0, job.stderr()
    finally:
        job.close()


THREADS = """
import threading
from mpi4py import MPI
MPI.COMM_WORLD.Barrier()
names = sorted(t.name for t in threading.enumerate() if t.name.startswith("minimpi"))
print(f"rank {MPI.COMM_WORLD.rank} threads: {names}", flush=True)
"""


def test_without_the_dashboard_no_rank_counts_or_samples(tmp_path, write_script, job_marker):
    """Off (the default), a rank has no reporter thread and no message counter; on, it has."""
    script = write_script("threads.py", THREADS)
    off = run_minimpi("-n", "2", *marker_args(job_marker), script, timeout=60,
                      env={"MINIMPI_DASHBOARD": ""})
    assert off.returncode == 0, off.stderr
    assert "dashboard at" not in off.stderr
    assert off.stdout.count("threads: [") == 2 and "minimpi-live" not in off.stdout
    on = run_minimpi("-n", "2", *marker_args(job_marker), "--dashboard=0", script, timeout=60)
    assert on.returncode == 0, on.stderr
    assert on.stdout.count("'minimpi-live'") == 2, on.stdout
