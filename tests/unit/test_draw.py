"""minimpi draw: schedules recorded from the real algorithms, text, SVG, CLI."""
from __future__ import annotations

import subprocess
import sys
import xml.dom.minidom

import pytest

from minimpi.coll.registry import REGISTRY, _load_all
from minimpi.tools import draw


def test_binomial_bcast_p8():
    s = draw.record("bcast", "binomial", 8)
    assert s.steps == 3 and len(s.messages) == 7
    assert [len(s.messages_in(c)) for c in range(3)] == [1, 2, 4]
    assert [(m.src, m.dst) for m in s.messages_in(0)] == [(0, 4)]
    assert all(m.label == "A0-7" for m in s.messages)
    assert all(draw.compress(row[-1]) == "A0-7" for row in s.states)
    assert draw.compress(s.states[4][1]) == "A0-7" and draw.compress(s.states[1][2]) == "·×8"


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
    assert all(row[-1] == ["Σ0", "Σ1", "Σ2", "Σ3"] for row in s.states)


def test_pipelined_ring_bcast_segments():
    s = draw.record("bcast", "ring", 4, nbytes=1 << 20)
    assert len(s.messages) > 3            # several segments per link
    assert any(m.protocol == "rendezvous" for m in s.messages)
    assert all(draw.compress(row[-1]) == "A0-3" for row in s.states)


@pytest.mark.parametrize("collective", ["scatter", "gather", "reduce", "allreduce", "bcast",
                                        "allgather", "alltoall", "alltoallv", "reduce_scatter", "scan",
                                        "exscan", "barrier"])
def test_every_registered_algorithm_draws(collective):
    _load_all()
    if collective not in REGISTRY:
        pytest.skip(f"{collective} is not implemented yet")
    for alg in REGISTRY[collective]:
        for p, root in ((4, 0), (5, 2)):
            s = draw.record(collective, alg, p, root)
            assert s.messages or p == 1 or collective == "barrier"
            for row in s.states:
                for cell in row[-1]:
                    assert "?" not in cell and "*" not in cell, (alg, p, row)
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
