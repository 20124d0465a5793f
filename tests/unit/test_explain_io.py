"""`minimpi explain io`: the plan it prints is the one the collective call makes, and the
two-phase schedule it lists (aggregators, rounds, pieces, I/O calls) adds up."""
from __future__ import annotations

import numpy as np
import pytest
from minimpi.launcher import cli
from minimpi.launcher.explain_io import parse_info, plan_for, rank_views

from minimpi import MPI
from minimpi.io import two_phase as tp
from minimpi.runtime.inproc import run_threads


@pytest.fixture(autouse=True)
def no_forcing(monkeypatch):
    monkeypatch.delenv("MINIMPI_IO_COLLECTIVE", raising=False)


def test_strided_write_goes_two_phase_with_one_write_per_domain(capsys):
    assert cli.main(["explain", "io", "--ranks", "5", "--bytes", "5MiB", "--pattern",
                     "strided", "--block", "256"]) == 0
    text = capsys.readouterr().out
    plan, runs, summaries = plan_for(rank_views("strided", 5, 5 << 20, 256), {}, True)
    assert plan.method == "two_phase"
    assert f"chosen: two_phase - {plan.reason}" in text
    assert f"{plan.independent_cost * 1e3:.3f} ms" in text
    rows = tp.schedule(plan, runs)
    assert len(rows) == len(plan.aggregators) * plan.rounds
    # every byte reaches exactly one aggregator; a dense domain is one pwrite
    assert sum(r.nbytes for r in rows) == sum(s.nbytes for s in summaries) == 5 << 20
    assert all(r.io_calls == 1 and r.senders == 5 for r in rows)
    assert all(r.pieces == (r.domain[1] - r.domain[0]) // 256 for r in rows)
    for r in rows:
        assert (f"aggregator rank {r.aggregator}: file bytes [{r.domain[0]}, {r.domain[1]}), "
                f"{r.pieces} pieces") in text
    assert f"in all: {len(rows)} pwrite calls, {3 * plan.rounds} exchanges" in text


def test_the_real_call_makes_the_plan_explain_prints(monkeypatch, capsys, tmp_path):
    """A strided Write_at_all on 3 ranks prints (MINIMPI_IO_EXPLAIN) the plan explain_io
    computes for the same views and hints."""
    p, block, total = 3, 512, 3 * 512 * 64
    hints = {"cb_nodes": "2", "cb_buffer_size": "8192"}
    path = str(tmp_path / "strided.dat")
    monkeypatch.setenv("MINIMPI_IO_EXPLAIN", "1")

    def body(comm):
        rank = comm.Get_rank()
        nblocks = total // (block * p)
        ftype = MPI.BYTE.Create_vector(nblocks, block, block * p).Create_resized(
            0, nblocks * block * p).Commit()
        info = MPI.Info.Create()
        for k, v in hints.items():
            info.Set(k, v)
        fh = MPI.File.Open(comm, path, MPI.MODE_CREATE | MPI.MODE_RDWR, info)
        fh.Set_view(rank * block, MPI.BYTE, ftype, "native")
        fh.Write_at_all(0, np.full(nblocks * block, rank + 1, np.uint8))
        fh.Close()

    run_threads(p, body)
    printed = capsys.readouterr().err
    plan, runs, _ = plan_for(rank_views("strided", p, total, block), hints, True)
    assert plan.method == "two_phase" and plan.rounds > 1
    assert plan.explain() in printed
    data = np.fromfile(path, np.uint8).reshape(-1, block)
    assert (data[:, 0] == np.arange(len(data)) % p + 1).all()
    assert sum(r.io_calls for r in tp.schedule(plan, runs)) == len(plan.aggregators) * plan.rounds


def test_contiguous_and_forced_accesses_stay_independent(capsys):
    assert cli.main(["explain", "io", "-n", "3", "--bytes", "3MiB", "--pattern",
                     "contiguous"]) == 0
    text = capsys.readouterr().out
    assert "chosen: independent - cheaper: accesses do not interleave" in text
    assert "aggregator" not in text
    assert cli.main(["explain", "io", "-n", "3", "--bytes", "3MiB", "--block", "64",
                     "--info", "romio_cb_write=disable"]) == 0
    assert "chosen: independent - forced by hint" in capsys.readouterr().out


def test_subarray_read():
    plan, runs, summaries = plan_for(rank_views("subarray", 6, 8 << 20, 0), {}, False)
    assert sum(s.nbytes for s in summaries) <= 8 << 20
    rows = tp.schedule(plan, runs)
    if plan.method == "two_phase":
        assert sum(r.nbytes for r in rows) == sum(s.nbytes for s in summaries)
    else:
        assert rows == []


def test_schedule_counts_the_gaps_as_separate_calls():
    """Runs that leave a hole in an aggregator's domain cost one I/O call per side."""
    summaries = [tp.Summary(0, 30, 20, 2), tp.Summary(10, 15, 5, 1)]
    plan = tp.plan(summaries, {"romio_cb_write": "enable", "cb_nodes": "1"}, True)
    runs = [(np.array([0, 20]), np.array([10, 10])), (np.array([10]), np.array([5]))]
    (row,) = tp.schedule(plan, runs)
    assert (row.aggregator, row.pieces, row.nbytes, row.senders, row.io_calls) == (0, 3, 25, 2, 2)
    assert tp.summarize(*runs[0]) == summaries[0]


def test_bad_arguments(capsys):
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_info(["cb_nodes"])
    assert cli.main(["explain", "io", "-n", "4", "--bytes", "1KiB", "--block", "4096"]) == 2
    assert "holds no block of 4096 B per rank" in capsys.readouterr().err
    # a hint a job would ignore is ignored here too, and said so
    assert cli.main(["explain", "io", "-n", "3", "--bytes", "3MiB", "--block", "64",
                     "--info", "cb_buffer_size=1MiB"]) == 0
    out = capsys.readouterr().out
    assert "note: hint cb_buffer_size='1MiB' is not a whole number of bytes" in out
    assert "in 1 round " in out or "1 round (" in out


# -- the picture (-o plan.svg) -------------------------------------------------------------

def test_pixel_spans_merge_fine_runs_and_clip_to_the_axis():
    from minimpi.launcher.draw_io import covered_pixels
    offs = np.arange(0, 1000, 10, dtype=np.int64)       # 100 runs of 5 B every 10 B
    lens = np.full(100, 5, np.int64)
    assert covered_pixels(offs, lens, 0, 1000, 10) == [(0, 10)]        # finer than a pixel
    wide = covered_pixels(offs, lens, 0, 1000, 1000)
    assert len(wide) == 100 and wide[0] == (0, 5) and wide[-1] == (990, 995)
    # a zoomed axis shows only the runs on it, clipped to its ends
    assert covered_pixels(offs, lens, 12, 32, 20) == [(0, 3), (8, 13), (18, 20)]
    assert covered_pixels(offs, lens, 2000, 3000, 10) == []


def test_the_drawn_table_counts_every_byte_once(tmp_path, capsys):
    from minimpi.launcher.draw_io import bytes_in
    path = tmp_path / "plan.svg"
    assert cli.main(["explain", "io", "-n", "3", "--bytes", "3MiB", "--block", "256",
                     "--info", "cb_buffer_size=524288", "-o", str(path)]) == 0
    assert f"drawn: {path}" in capsys.readouterr().out
    svg = path.read_text()
    plan, runs, summaries = plan_for(rank_views("strided", 3, 3 << 20, 256),
                                     {"cb_buffer_size": "524288"}, True)
    assert plan.method == "two_phase" and plan.rounds > 1
    R = plan.rounds
    sent = [[bytes_in(np.asarray(o), np.asarray(n), plan.bounds[d * R + k],
                      plan.bounds[d * R + k + 1])
             for d in range(len(plan.aggregators)) for o, n in runs] for k in range(R)]
    assert sum(map(sum, sent)) == 3 << 20
    assert svg.count("aggregators' domains") == R
    assert svg.count("zoom: file bytes") == 1          # 256 B runs are finer than a pixel
    for rank in range(3):
        assert f"rank {rank} (4096 runs)" in svg


def test_independent_access_draws_too_and_a_bad_name_is_refused(tmp_path, capsys):
    path = tmp_path / "plan.svg"
    assert cli.main(["explain", "io", "-n", "4", "--bytes", "4MiB", "--pattern",
                     "contiguous", "-o", str(path)]) == 0
    svg = path.read_text()
    assert "independent: each rank issues one call per run (4 calls in all)" in svg
    assert "aggregators' domains" not in svg
    assert cli.main(["explain", "io", "-n", "4", "--bytes", "4MiB", "-o",
                     str(tmp_path / "plan.txt")]) == 2
    assert "name a .svg or .png file" in capsys.readouterr().err
