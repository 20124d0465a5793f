"""What a rank leaves behind at finalize (minimpi.runtime.leftovers), on threads: the marker
exchange, then collective messages never received (a mismatch naming both calls),
point-to-point messages never received, receives never matched, requests never completed."""
from __future__ import annotations

import sys

import numpy as np

from minimpi.comm import ledger
from minimpi.data.ops import SUM
from minimpi.runtime import leftovers
from minimpi.runtime.inproc import run_threads


def finish(comm):
    """What finalize does on a rank: exchange the markers, then check."""
    return leftovers.check(comm._ep.engine, leftovers.exchange_markers(comm._ep.engine))


def test_a_clean_program_leaves_nothing():
    def body(comm):
        x = np.full(4, float(comm.rank))
        comm.Bcast(x, root=1)
        comm.Allreduce(x.copy(), x, op=SUM)
        got = comm.sendrecv(comm.rank, dest=(comm.rank + 1) % comm.size,
                            source=(comm.rank - 1) % comm.size)
        req = comm.isend(got, dest=(comm.rank + 1) % comm.size, tag=4)
        comm.recv(source=(comm.rank - 1) % comm.size, tag=4)
        req.wait()
        return finish(comm)
    assert run_threads(3, body, ledger=True) == [([], [])] * 3


def test_a_wrong_root_on_one_rank_is_a_root_mismatch():
    # Every rank sends, none receives, every Bcast returns: only the leftovers tell
    def body(comm):
        buf = np.arange(4.0) if comm.rank == 0 else np.zeros(4)
        comm.Bcast(buf, root=1 if comm.rank == 1 else 0)
        return finish(comm)
    errors = [e for e, _ in run_threads(2, body, ledger=True)]
    assert "rank 0 called Bcast(root=0) as collective #1 on COMM_WORLD while rank 1 called " \
           "Bcast(root=1)" in errors[0][0]
    assert "rank 1 called Bcast(root=1) as collective #1 on COMM_WORLD while rank 0 called " \
           "Bcast(root=0)" in errors[1][0]


def test_bcast_against_reduce_names_both_calls():
    def body(comm):
        x = np.full(4, comm.rank + 1.0)
        if comm.rank == 0:
            comm.Bcast(x, root=0)
        else:
            comm.Reduce(x, np.zeros(4), op=SUM, root=0)
        return finish(comm)
    results = run_threads(3, body, ledger=True)
    assert "rank 1 called Reduce(root=0, op=SUM) as collective #1 on COMM_WORLD while rank 0 " \
           "called Bcast(root=0)" in results[1][0][0]
    assert all(errors for errors, _ in results)


def test_a_rank_that_made_fewer_collective_calls():
    def body(comm):
        comm.Barrier()
        if comm.rank == 0:
            comm.Bcast(np.zeros(2), root=0)
        return finish(comm)
    errors, warnings = run_threads(2, body, ledger=True)[1]
    # a warning, not an error: the rank may have ended early on purpose (sys.exit(7))
    assert errors == []
    assert "rank 0 called Bcast(root=0) as collective #2 on COMM_WORLD, but rank 1 made only 1 " \
           "collective call there before it finished" in warnings[0]


def test_unreceived_messages_name_source_tag_size_and_line():
    def body(comm):
        if comm.rank == 0:
            comm.send({"x": 1}, dest=1, tag=2)                     # the line reported below
            comm.Send(np.zeros(4), dest=1, tag=5)
            for _ in range(3):
                comm.send(None, dest=1, tag=6)
            comm.Send(np.zeros(1), dest=1, tag=7)
            comm.Send(np.zeros(1), dest=1, tag=7)                # the last of 2: reported
        return finish(comm)
    errors, warnings = run_threads(2, body, ledger=True)[1]
    assert errors == [] and len(warnings) == 1
    text = warnings[0]
    assert text.startswith("7 messages sent to this rank were never received")
    assert "from rank 0: tag 2, a pickled object of " in text
    assert "on COMM_WORLD, sent by send at test_leftovers.py:" in text
    line = int(text.split("sent by send at test_leftovers.py:")[1].split()[0].rstrip(","))
    assert "comm.send({\"x\": 1}, dest=1, tag=2)" in open(__file__).read().splitlines()[line - 1]
    assert "from rank 0: tag 5, 32 B, on COMM_WORLD, sent by Send at test_leftovers.py:" in text
    assert "sent by send (the last of 3 such sends was at test_leftovers.py:" in text
    # the same code sending again to the same key from another line: that line is reported
    line = int(text.split("sent by Send (the last of 2 such sends was at test_leftovers.py:")[1]
               .split(")")[0])
    assert "# the last of 2: reported" in open(__file__).read().splitlines()[line - 1]


def test_receives_never_matched_and_requests_never_completed():
    def body(comm):
        kept = []
        if comm.rank == 0:
            kept.append(comm.isend("never waited", dest=1, tag=9))
            comm.Irecv(np.zeros(2), source=1, tag=3)        # the engine keeps it (posted)
            done = comm.isend("waited", dest=1, tag=10)
            done.wait()
        else:
            comm.recv(source=0, tag=9)
            comm.recv(source=0, tag=10)
        return finish(comm)
    (_, warnings0), (errors1, warnings1) = run_threads(2, body, ledger=True)
    assert errors1 == [] and warnings1 == []
    text = "\n".join(warnings0)
    assert "1 receive never matched a message" in text
    assert "Irecv(source=1, tag=3) on COMM_WORLD, posted at test_leftovers.py:" in text
    assert "1 nonblocking request never completed with wait() or test()" in text
    assert "isend(dest=1, tag=9) on COMM_WORLD, started at test_leftovers.py:" in text
    assert "tag=10" not in text


def test_messages_waiting_beside_a_blocked_receive():
    def body(comm):
        engine = comm._ep.engine
        if comm.rank == 0:
            comm.send("hello", dest=1, tag=2)
            comm.Barrier()
            return None
        req = comm.irecv(source=0, tag=1)
        comm.Barrier()                         # tag 2 has arrived by now
        waiting = leftovers.waiting_messages(engine, [req])
        req.Cancel()
        return waiting
    waiting = run_threads(2, body)[1]
    assert waiting == [{"source": 0, "world": 0, "tag": 2, "comm": "COMM_WORLD",
                        "nbytes": waiting[0]["nbytes"], "coll": None, "seq": None}]


def test_a_rank_that_skipped_the_bcast():
    def body(comm):
        buf = np.zeros(4)
        if comm.rank != 1:
            comm.Bcast(buf, root=0)
        return finish(comm)
    errors, warnings = run_threads(3, body, ledger=True)[1]
    assert errors == [] and warnings == [
        "1 collective message of calls this rank never made was never received:\n"
        "  rank 0 called Bcast(root=0) as collective #1 on COMM_WORLD, but rank 1 made no "
        "collective call there before it finished; every rank of a communicator must call the "
        "same collectives in the same order"]


def test_thousands_of_requests_in_flight_leave_no_false_warning():
    # More nonblocking requests open at once than the ledger once kept lines for (1,000),
    # all completed by Waitall: nothing may be reported as never completed.
    n = 1600

    def body(comm):
        peer = 1 - comm.rank
        bufs = [np.zeros(1) for _ in range(n)]
        recvs = [comm.Irecv(bufs[i], source=peer, tag=i) for i in range(n)]
        sends = [comm.Isend(np.full(1, float(i)), dest=peer, tag=i) for i in range(n)]
        from minimpi.MPI import Request
        Request.Waitall(recvs + sends)
        assert [b[0] for b in bufs] == [float(i) for i in range(n)]
        return finish(comm)
    assert run_threads(2, body, ledger=True, timeout=120) == [([], [])] * 2


class _Req:
    """Stands for a request: truthy until completed, weakly referenceable."""

    def __init__(self) -> None:
        self.open = True

    def __bool__(self) -> bool:
        return self.open


def test_the_ledger_names_every_open_request_and_stays_bounded():
    from minimpi.comm.ledger import Ledger
    ledger = Ledger()
    reqs = [_Req() for _ in range(3000)]
    for i, r in enumerate(reqs):
        ledger.started(r, (None, i))
    for r in reqs[:-1007]:               # complete all but the newest 1007
        r.open = False
    left = ledger.never_completed()
    assert len(left) == 1007 and {id(req) for req, _ in left} == {id(r) for r in reqs[-1007:]}
    for r in reqs:
        r.open = False
    assert ledger.never_completed() == []
    # a long run of short-lived requests keeps the table small; open ones keep it at most
    # twice what the program holds open (plus 64)
    for _ in range(20_000):
        r = _Req()
        ledger.started(r, (None, 2))
        r.open = False
    assert len(ledger.open) <= 64
    held = [_Req() for _ in range(5000)]
    for i, r in enumerate(held):
        ledger.started(r, (None, 3))
        assert len(ledger.open) <= 2 * (i + 1) + 64
    assert len(ledger.never_completed()) == 5000


def _site_here(*args):
    """The ledger's site of the caller's call, and the line Python says that frame is at."""
    f = sys._getframe(1)
    return (f.f_code, f.f_lasti), f.f_lineno


def test_a_site_is_reported_at_the_line_python_gives_its_frame():
    # the ledger keeps the calling instruction's offset and finds its line only to report
    # it: for a call written across lines too, that is the line Python itself names
    one = _site_here(1)
    spread = _site_here(
        "a",
        "b",
    )
    nested = [_site_here(i,
                         i + 1) for i in range(1)][0]
    for site, line in (one, spread, nested):
        assert ledger.line_of(*site) == line
        assert ledger.line_text(site) == f"test_leftovers.py:{line}"
    assert ledger.line_text((None, 0)) == "?"
