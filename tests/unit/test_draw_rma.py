"""``minimpi draw rma``: epochs and one-sided operations recorded from a real run."""
from __future__ import annotations

import subprocess
import sys
import xml.dom.minidom

import pytest

from minimpi.tools import draw_rma
from minimpi.tools.draw import DrawError

pytestmark = pytest.mark.fast

SIZES = [3, 4]


def value(r):
    return 10 * (r + 1)


def kinds(rec, r):
    return [(e.kind, e.opened_by, e.closed_by) for e in rec.epochs[r]]


@pytest.mark.parametrize("p", SIZES)
def test_fence(p):
    rec = draw_rma.record("fence", p)
    for r in range(p):
        assert kinds(rec, r) == [("fence", "Fence", "Fence")] * 2
        first, second = rec.epochs[r]
        assert [(o.call, o.origin, o.target) for o in first.ops] == [("Put", r, (r + 1) % p)]
        assert [(o.call, o.origin, o.target) for o in second.ops] == [("Get", r, (r - 1) % p)]
        assert all(o.nbytes == "8 B" for o in first.ops + second.ops)
        # the Put of the left neighbour lands in this rank's first fence epoch
        assert [(o.call, o.origin) for o in first.incoming] == [("Put", (r - 1) % p)]
        assert [(o.call, o.origin) for o in second.incoming] == [("Get", (r + 1) % p)]
        assert rec.windows[r] == [value((r - 1) % p)]
        assert rec.locals_[r] == {"got": [value((r - 2) % p)]}
    assert len(rec.operations) == 2 * p


@pytest.mark.parametrize("p", SIZES)
def test_lock(p):
    rec = draw_rma.record("lock", p)
    for r in range(p):
        assert kinds(rec, r) == [("lock", "Lock(0)", "Unlock(0)")]
        assert [(o.call, o.origin, o.target, o.epoch) for o in rec.epochs[r][0].ops] == [
            ("Accumulate", r, 0, 0)]
    assert sorted(o.origin for o in rec.passive[0]) == list(range(p))
    assert set(rec.passive) == {0}
    assert rec.windows[0] == [sum(value(r) for r in range(p))]
    assert all(rec.windows[r] == [0] for r in range(1, p))
    text = draw_rma.to_text(rec)
    assert f"rank 0: window = [{sum(value(r) for r in range(p))}]" in text


@pytest.mark.parametrize("p", SIZES)
def test_pscw(p):
    rec = draw_rma.record("pscw", p)
    assert kinds(rec, 0) == [("exposure", "Post", "Wait")]
    assert sorted(o.origin for o in rec.epochs[0][0].incoming) == list(range(1, p))
    assert rec.epochs[0][0].ops == []
    for r in range(1, p):
        assert kinds(rec, r) == [("pscw access", "Start", "Complete")]
        assert [(o.call, o.origin, o.target) for o in rec.epochs[r][0].ops] == [("Put", r, 0)]
        assert rec.windows[r] == [0] * p
    assert rec.windows[0] == [0] + [value(r) for r in range(1, p)]


def test_epochs_are_ordered_and_operations_inside_them():
    rec = draw_rma.record("fence", 3)
    for r in range(3):
        eps = rec.epochs[r]
        assert all(a.end <= b.start for a, b in zip(eps, eps[1:]))
        for e in eps:
            assert all(e.start < o.order < e.end for o in e.ops)


@pytest.mark.parametrize("pattern", list(draw_rma.PATTERNS))
def test_svg_one_lane_per_rank(pattern):
    p = 4
    rec = draw_rma.record(pattern, p)
    doc = xml.dom.minidom.parseString(draw_rma.to_svg(rec))
    lanes = [g for g in doc.getElementsByTagName("g") if g.getAttribute("class") == "lane"]
    assert [g.getAttribute("data-rank") for g in lanes] == [str(r) for r in range(p)]
    arrows = [ln for ln in doc.getElementsByTagName("line") if ln.getAttribute("class") == "op"]
    assert len(arrows) == len(rec.operations)
    bands = [b for b in doc.getElementsByTagName("rect") if b.getAttribute("class") == "epoch"]
    assert len(bands) == sum(len(e) for e in rec.epochs)
    texts = " ".join(t.firstChild.data for t in doc.getElementsByTagName("text") if t.firstChild)
    for r in range(p):      # the real window contents are in the drawing
        assert f"[{' '.join(str(v) for v in rec.windows[r])}]" in texts


def test_bad_pattern_lists_the_patterns():
    with pytest.raises(DrawError) as info:
        draw_rma.record("ring", 3)
    for name in draw_rma.PATTERNS:
        assert name in str(info.value)
    with pytest.raises(DrawError):
        draw_rma.record("fence", 1)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "minimpi", "draw", *args], capture_output=True,
                          text=True, timeout=60)


def test_cli_text_and_errors(tmp_path):
    out = _cli("rma", "--pattern", "pscw", "-n", "3")
    assert out.returncode == 0, out.stderr
    assert "epoch 1: exposure, opened by Post, closed by Wait" in out.stdout
    assert "rank 0: window = [0, 20, 30]" in out.stdout
    bad = _cli("rma", "--pattern", "nope", "-n", "3")
    assert bad.returncode == 2 and "fence, lock, pscw" in bad.stderr
    svg = tmp_path / "f.svg"
    ok = _cli("rma", "--pattern", "fence", "-n", "3", "-o", str(svg))
    assert ok.returncode == 0, ok.stderr
    xml.dom.minidom.parse(str(svg))
    listed = _cli("--list")
    assert all(name in listed.stdout for name in draw_rma.PATTERNS)


@pytest.mark.parametrize("p", SIZES)
def test_columns_follow_the_synchronisation(p):
    fence = draw_rma.record("fence", p)
    for k in range(3):
        cols = {fence.column[[o for o, t in row if t == "Fence"][k]] for row in fence.calls}
        assert len(cols) == 1, f"fence {k} drawn in columns {cols}"
    pscw = draw_rma.record("pscw", p)
    exposure = pscw.epochs[0][0]
    for r in range(1, p):
        access = pscw.epochs[r][0]
        assert pscw.column[access.start] > pscw.column[exposure.start]
        assert pscw.column[access.end] < pscw.column[exposure.end]
    lock = draw_rma.record("lock", p)
    held = sorted((lock.epochs[r][0] for r in range(p)), key=lambda e: e.end)
    for prev, nxt in zip(held, held[1:]):   # exclusive: one holder at a time
        assert lock.column[nxt.ops[0].order] > lock.column[prev.end]
