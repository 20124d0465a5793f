"""minimpi draw: schedules recorded from the real algorithms, text, SVG, CLI."""
from __future__ import annotations

import subprocess
import sys
import xml.dom.minidom

import pytest

from minimpi.coll.cost import Layout
from minimpi.coll.registry import INTRA, REGISTRY, load_all, serving
from minimpi.data.ops import SUM
from minimpi.tools import draw


def test_binomial_bcast_p8():
    s = draw.record("bcast", "binomial", 8)
    assert s.steps == 3 and len(s.messages) == 7
    assert [len(s.messages_in(c)) for c in range(3)] == [1, 2, 4]
    assert [(m.src, m.dst) for m in s.messages_in(0)] == [(0, 4)]
    assert all(m.label == "A0-7" for m in s.messages)
    assert all(draw.compress(row[-1]["buf"]) == "A0-7" for row in s.states)
    assert draw.compress(s.states[4][1]["buf"]) == "A0-7"
    assert draw.compress(s.states[1][2]["buf"]) == "·×8"
    assert s.buffers == [["buf"]] * 8          # a broadcast needs no temporaries


def test_binomial_bcast_other_root():
    s = draw.record("bcast", "binomial", 8, root=3)
    assert s.steps == 3 and [(m.src, m.dst) for m in s.messages_in(0)] == [(3, 7)]
    assert all(m.label == "D0-7" for m in s.messages)


def test_ring_allreduce_p4():
    s = draw.record("allreduce", "ring", 4)
    assert s.steps == 6
    assert [len(s.messages_in(c)) for c in range(6)] == [4] * 6
    assert {(m.src, m.dst) for m in s.messages} == {(0, 1), (1, 2), (2, 3), (3, 0)}
    # reduce-scatter: partial sums grow one rank per step; allgather: only full sums travel
    assert {m.label for m in s.messages_in(0)} == {"A3", "B0", "C1", "D2"}
    assert {len(m.label) for m in s.messages_in(2)} == {4}
    assert all(m.label.startswith("Σ") for c in range(3, 6) for m in s.messages_in(c))
    assert all(row[-1]["recv"] == ["Σ0", "Σ1", "Σ2", "Σ3"] for row in s.states)


@pytest.mark.slow             # records or lays out many schedules: not in the fast tier
def test_pipelined_ring_bcast_segments():
    s = draw.record("bcast", "ring", 4, nbytes=1 << 20, timeout=120)   # slow to label on a loaded machine
    assert len(s.messages) > 3            # several segments per link
    assert any(m.protocol == "rendezvous" for m in s.messages)
    assert all(draw.compress(row[-1]["buf"]) == "A0-3" for row in s.states)


@pytest.mark.slow             # records or lays out many schedules: not in the fast tier
@pytest.mark.parametrize("collective", ["scatter", "gather", "reduce", "allreduce", "bcast",
                                        "allgather", "alltoall", "alltoallv", "reduce_scatter", "scan",
                                        "exscan", "barrier"])
def test_every_registered_algorithm_draws(collective):
    load_all()
    if collective not in REGISTRY:
        pytest.skip(f"{collective} is not implemented yet")
    for alg in serving(REGISTRY[collective], INTRA):
        for p, root in ((4, 0), (5, 2)):
            s = draw.record(collective, alg, p, root)
            # (the segment algorithms meet in shared memory: no message, only states)
            assert s.messages or p == 1 or collective == "barrier" or \
                REGISTRY[collective][alg].segment
            for row in s.states:
                for cells in row[-1].values():
                    assert not any("?" in c or "*" in c for c in cells), (alg, p, row)
            svg = draw.to_svg(s)
            xml.dom.minidom.parseString(svg.encode())
            assert draw.to_text(s).startswith(collective)


def test_svg_is_well_formed():
    svg = draw.to_svg(draw.record("allreduce", "ring", 4))
    dom = xml.dom.minidom.parseString(svg.encode())
    assert dom.documentElement.tagName == "svg"
    assert len(dom.getElementsByTagName("line")) >= 24


def test_labels_roundtrip():
    p = 5
    v = draw.encode(1, 3, p) + draw.encode(4, 3, p)
    assert draw.label(draw.decode(v, p), p) == "BE3"
    assert draw.label(draw.decode(sum(draw.encode(r, 2, p) for r in range(p)), p), p) == "Σ2"
    assert draw.compress(["A0", "A1", "A2", "·", "·", "·", "B5"]) == "A0-2 ·×3 B5"


def test_errors():
    with pytest.raises(draw.DrawError, match="has no algorithm"):
        draw.record("bcast", "nonsense", 4)
    with pytest.raises(draw.DrawError, match="unknown collective"):
        draw.record("nonsense", "ring", 4)
    with pytest.raises(draw.DrawError, match="root"):
        draw.record("bcast", "binomial", 4, root=9)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "minimpi", "draw", *args], capture_output=True,
                          text=True, timeout=60)


@pytest.mark.slow             # records or lays out many schedules: not in the fast tier
def test_cli_text_list_svg(tmp_path):
    res = _cli("bcast", "--algorithm", "binomial", "-n", "8")
    assert res.returncode == 0 and "3 steps, 7 messages" in res.stdout
    assert "step 3: 0->1 A0-7" in res.stdout
    res = _cli("--list")
    assert res.returncode == 0 and "bcast" in res.stdout and "binomial" in res.stdout
    out = tmp_path / "b.svg"
    res = _cli("bcast", "-a", "binomial", "-n", "4", "-o", str(out))
    assert res.returncode == 0
    xml.dom.minidom.parse(str(out))
    res = _cli("bcast", "-a", "nope", "-n", "4")
    assert res.returncode == 2 and "binomial" in res.stderr


def test_png_or_clear_error(tmp_path):
    out = tmp_path / "b.png"
    res = _cli("bcast", "-a", "binomial", "-n", "4", "-o", str(out))
    if res.returncode == 0:
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert "cairosvg" in res.stderr


# -- what each rank holds (issue 13) ----------------------------------------------------------
def _drawable():
    load_all()
    for collective in sorted(draw.DRIVERS):
        for alg in serving(REGISTRY.get(collective, {}), INTRA):
            yield collective, alg


#: where the ranks run for the hierarchical algorithms: one host, two, interleaved, uneven
LAYOUTS = [None, [0, 0, 0, 1, 1, 1], [0, 1, 0, 1, 0, 1], [0, 0, 0, 0, 1, 2]]


@pytest.mark.slow             # records or lays out many schedules: not in the fast tier
@pytest.mark.parametrize("collective,alg", list(_drawable()))
def test_no_arrow_carries_a_block_its_sender_is_not_drawn_with(collective, alg):
    rooted = draw.DRIVERS[collective].rooted
    hierarchical = REGISTRY[collective][alg].hierarchical
    cases = [(p, None) for p in (2, 3, 4, 5, 6, 8)]
    if hierarchical:
        cases += [(6, hosts) for hosts in LAYOUTS[1:]]
    for p, hosts in cases:
        for root in ({0, p - 1, p // 2} if rooted else {0}):
            op = SUM if draw.DRIVERS[collective].reduces else None
            layout = None if hosts is None else Layout.of(hosts)
            if REGISTRY[collective][alg].refusal(p, 8 * p, op, False, layout):
                continue
            s = draw.record(collective, alg, p, root, hosts=hosts)
            for m in s.messages:
                held = {c.rstrip("*") for c in s.held(m.src, m.column)}
                assert "?" not in m.carries, (p, root, m)
                assert m.carries <= held, (
                    f"{collective} {alg} p={p} root={root} step {m.column + 1}: "
                    f"{m.src}->{m.dst} carries {sorted(m.carries - held)} but rank {m.src} "
                    f"is drawn with {s.states[m.src][m.column]}")


def test_ring_allreduce_keeps_its_own_blocks():
    # The input stays in the send buffer while partial sums build up in recv: rank 0 holds
    # A0-3 *and* AD2 after step 1 (it used to be drawn as "· · AD2 ·").
    s = draw.record("allreduce", "ring", 4)
    assert s.states[0][1] == {"send": ["A0", "A1", "A2", "A3"], "recv": ["·", "·", "AD2", "·"]}
    assert [m.label for m in s.messages_in(1) if m.src == 0] == ["AD2"]


def test_temporaries_appear_and_disappear():
    # recursive halving works in a copy of its input (acc) and a receive slot (tmp); rank 0
    # sends AC1 in step 2, which it holds in acc after step 1; no temporary outlives the call
    s = draw.record("reduce_scatter", "recursive_halving", 4)
    assert s.states[0][1]["acc"] == ["AC0", "AC1", "A2", "A3"]
    assert s.states[0][1]["tmp"] == ["C0", "C1", "·", "·"]
    assert [m.label for m in s.messages_in(1) if m.src == 0] == ["AC1"]
    assert all(set(row[-1]) == {"send", "recv"} for row in s.states)
    assert s.user_buffers[0] == ["send", "recv"] and s.buffers[0] == ["send", "recv", "acc", "tmp"]


def test_binomial_scatter_draws_the_subtree_a_rank_forwards():
    s = draw.record("scatter", "binomial", 8, root=3)
    forward = [m for m in s.messages if m.src == 7]       # rank 7 = relative rank 4
    assert [m.label for m in forward] == ["D1-2", "D0"]
    assert s.states[7][1]["subtree"] == ["D7", "D0", "D1", "D2"]
    assert all(m.src_buffer == "subtree" for m in forward)


def test_bruck_alltoall_shows_the_forwarded_blocks():
    s = draw.record("alltoall", "bruck", 5)
    assert s.phase_spans() == [("rotate", 0, 0), ("exchange", 1, 3), ("rotate back", 4, 4)]
    assert not s.messages_in(0) and not s.messages_in(4)     # the rotations are local work
    assert s.states[0][1]["work"] == ["A0", "A1", "A2", "A3", "A4"]
    assert s.states[0][2]["work"] == ["A0", "E0", "A2", "E2", "A4"]    # E2 goes on to rank 2
    assert [m.label for m in s.messages_in(2) if m.src == 0] == ["A2 E2"]
    assert s.states[0][5]["recv"] == ["A0", "B0", "C0", "D0", "E0"]
    text = draw.to_text(s)
    assert "phases: rotate (step 1), exchange (steps 2-4), rotate back (step 5)" in text
    assert "step 1: (local work only)" in text


@pytest.mark.parametrize("collective,alg,phases", [
    ("allreduce", "ring", ["reduce-scatter", "allgather"]),
    ("allreduce", "rabenseifner", ["reduce-scatter (recursive halving)",
                                   "allgather (recursive doubling)"]),
    ("allreduce", "binomial", ["reduce to rank 0", "broadcast from rank 0"]),
    ("bcast", "scatter_allgather", ["binomial scatter", "ring allgather"]),
])
def test_phases_are_named(collective, alg, phases):
    s = draw.record(collective, alg, 4)
    assert [name for name, _, _ in s.phase_spans()] == phases
    text = draw.to_text(s)
    assert all(f"\n{name}:\nstep " in text for name in phases)


def test_phases_of_a_folding_algorithm():
    s = draw.record("allreduce", "rabenseifner", 6)
    names = [name for name, _, _ in s.phase_spans()]
    # ranks 4 and 5 take no part in the fold and start halving at once
    assert names[0] == "fold / reduce-scatter (recursive halving)" and names[-1] == "unfold"


def test_legend_speaks_of_sums_only_where_there_are_sums():
    for collective in ("bcast", "scatter", "gather", "allgather", "alltoall", "barrier"):
        assert "sum" not in draw.legend_text(draw.record(collective, list(REGISTRY[collective])[0], 4))
    for collective in ("reduce", "allreduce", "reduce_scatter", "scan"):
        assert "sum" in draw.legend_text(draw.record(collective, "ring", 4))
    assert "meant for rank 2" in draw.legend_text(draw.record("alltoall", "bruck", 4))
    assert "root is rank 2 = C" in draw.legend_text(draw.record("bcast", "binomial", 4, root=2))


# -- layout ------------------------------------------------------------------------------------
def _text_boxes(svg):
    """(x0, y0, x1, y1, text) of every <text>, from the same character width the layout uses."""
    dom = xml.dom.minidom.parseString(svg.encode())
    root = dom.documentElement
    default = float(root.getAttribute("font-size"))
    boxes = []
    for node in dom.getElementsByTagName("text"):
        text = "".join(c.data for c in node.childNodes if c.nodeType == c.TEXT_NODE)
        size = float(node.getAttribute("font-size") or default)
        w = len(text) * draw.CHAR * size
        x, y = float(node.getAttribute("x")), float(node.getAttribute("y"))
        anchor = node.getAttribute("text-anchor") or "start"
        x0 = {"start": x, "middle": x - w / 2, "end": x - w}[anchor]
        boxes.append((x0, y - size * 0.8, x0 + w, y + size * 0.2, text))
    return float(root.getAttribute("width")), float(root.getAttribute("height")), boxes


def _layout_problems(svg):
    width, height, boxes = _text_boxes(svg)
    problems = [f"outside the {width}x{height} canvas: {b[4]!r}" for b in boxes
                if b[0] < 0 or b[1] < 0 or b[2] > width or b[3] > height]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            if a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]:
                problems.append(f"{a[4]!r} at ({a[0]:.0f}, {a[1]:.0f}) overlaps {b[4]!r}")
    return problems


@pytest.mark.slow             # records or lays out many schedules: not in the fast tier
@pytest.mark.parametrize("collective,alg", list(_drawable()))
def test_svg_texts_never_overlap_or_leave_the_page(collective, alg):
    for p in (5, 8):
        s = draw.record(collective, alg, p, 1)
        svg = draw.to_svg(s)
        assert not _layout_problems(svg), (p, _layout_problems(svg)[:5])
        assert float(xml.dom.minidom.parseString(svg.encode()).documentElement
                     .getAttribute("width")) <= draw.MAX_WIDTH


def test_the_overlaps_reported_in_issue_13_are_gone():
    for args in (("allreduce", "recursive_doubling", 8), ("alltoall", "bruck", 5)):
        assert not _layout_problems(draw.to_svg(draw.record(*args)))


@pytest.mark.slow             # records or lays out many schedules: not in the fast tier
def test_long_schedules_wrap_onto_several_rows():
    s = draw.record("allreduce", "ring", 8)                 # 14 steps
    svg = draw.to_svg(s)
    width, _, boxes = _text_boxes(svg)
    assert width <= draw.MAX_WIDTH
    starts = [b for b in boxes if b[4] == "rank 0 (A)"]
    assert len(starts) >= 2                                  # one per row of steps
    titles = [b[4] for b in boxes if b[4].startswith("step ")]
    assert titles == [f"step {c}" for c in range(1, 15)]     # every step once, in order
    text = draw.to_text(s)
    assert max(len(line) for line in text.splitlines()) <= draw.TEXT_WIDTH
    assert "step 6: 0->1 ADEFGH2," in text and "\n        6->7 BCDEFG0" in text


def test_layout_check_can_fail():
    svg = ('<svg xmlns="http://www.w3.org/2000/svg" width="100" height="50" font-size="11">'
           '<text x="10" y="20">overlapping</text><text x="20" y="21">labels</text>'
           '<text x="90" y="40">clipped</text></svg>')
    problems = _layout_problems(svg)
    assert any("overlaps" in p for p in problems) and any("outside" in p for p in problems)


def test_an_intercommunicator_algorithm_is_refused_clearly():
    """The registry holds the two-group algorithms too; draw names what it cannot draw and
    where to look instead, rather than failing inside the run."""
    load_all()
    with pytest.raises(draw.DrawError, match=r"allreduce leaders_swap serves intercommunicators"
                                             r".*minimpi explain allreduce --inter"):
        draw.record("allreduce", "leaders_swap", 4)
    assert "leaders_swap" in draw.list_text()
