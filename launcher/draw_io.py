"""The picture of a collective file access: ``minimpi explain io ... -o plan.svg`` (or .png).

One row per rank shows the file bytes its view touches (its file runs, in its colour) along
the file; for two-phase, one row per round shows each aggregator's part of its file domain
(in the aggregator's colour), labelled with the pieces it gathers and the I/O calls they join
into, and a table gives the bytes each rank sends to each aggregator in that round (the data
``Alltoallv``). For independent access the rank rows are the whole story: one call per run.
"""
from __future__ import annotations

from typing import List, Sequence

import numpy as np

from minimpi.data.units import format_size
from minimpi.tools.draw import PALETTE, svg_escape

WIDTH = 1000
LEFT = 150            # room for the row labels
ROW = 22


def covered_pixels(offs: np.ndarray, lens: np.ndarray, lo: int, hi: int, width: int
                   ) -> List[tuple]:
    """The runs as [x0, x1) pixel spans of a ``width``-pixel axis over file bytes [lo, hi):
    runs closer than a pixel merge, so a million runs draw as a few hundred rectangles."""
    keep = (offs < hi) & (offs + lens > lo)       # only what falls on the axis, clipped
    offs, lens = offs[keep], lens[keep]
    if not len(offs) or hi <= lo:
        return []
    ends = np.minimum(offs + lens, hi)
    offs = np.maximum(offs, lo)
    lens = ends - offs
    scale = width / (hi - lo)
    x0 = np.floor((offs - lo) * scale).astype(np.int64)
    x1 = np.maximum(np.ceil((offs + lens - lo) * scale).astype(np.int64), x0 + 1)
    spans: List[tuple] = []
    for a, b in zip(x0.tolist(), x1.tolist()):
        if spans and a <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], b))
        else:
            spans.append((a, b))
    return spans


def bytes_in(offs: np.ndarray, lens: np.ndarray, lo: int, hi: int) -> int:
    """How many of the runs' bytes fall in file bytes [lo, hi)."""
    if not len(offs):
        return 0
    return int(np.clip(np.minimum(offs + lens, hi) - np.maximum(offs, lo), 0, None).sum())


def io_plan_svg(title: str, plan, rank_runs: Sequence[tuple], rows: Sequence) -> str:
    """SVG of ``plan`` (minimpi.io.two_phase.Plan) for ranks' runs ``(offsets, lengths)``
    and its schedule ``rows`` (two_phase.schedule)."""
    runs = [(np.asarray(o, np.int64), np.asarray(n, np.int64)) for o, n in rank_runs]
    nonempty = [(o, n) for o, n in runs if len(o)]
    lo = min((int(o[0]) for o, _ in nonempty), default=0)
    hi = max((int(o[-1] + n[-1]) for o, n in nonempty), default=1)
    axis = WIDTH - LEFT - 20
    out: List[str] = []
    y = 24

    def text(x, yy, s, size=12, anchor="start", weight="normal"):
        out.append(f'<text x="{x}" y="{yy}" font-size="{size}" text-anchor="{anchor}" '
                   f'font-weight="{weight}" font-family="sans-serif">{svg_escape(s)}</text>')

    def bar(yy, spans, color, height=ROW - 6):
        for a, b in spans:
            out.append(f'<rect x="{LEFT + a}" y="{yy}" width="{b - a}" height="{height}" '
                       f'fill="{color}"/>')

    text(10, y, title, 14, weight="bold")
    y += 20
    text(10, y, f"chosen: {plan.method} - {plan.reason}", 12)
    y += 16
    text(10, y, f"cost model: independent {plan.independent_cost * 1e3:.3f} ms, "
         f"two-phase {plan.two_phase_cost * 1e3:.3f} ms", 12)
    y += 22
    text(LEFT, y, f"file bytes {lo}", 11)
    text(LEFT + axis, y, f"{hi}", 11, anchor="end")
    y += 8
    text(10, y + 12, "what each rank's view touches", 11, weight="bold")
    y += 18

    def rank_rows(a, b):
        nonlocal y
        for rank, (o, n) in enumerate(runs):
            color = PALETTE[rank % len(PALETTE)]
            text(10, y + 12, f"rank {rank} ({len(o)} runs)", 11)
            out.append(f'<rect x="{LEFT}" y="{y}" width="{axis}" height="{ROW - 6}" '
                       f'fill="#f2f2f2"/>')
            bar(y, covered_pixels(o, n, a, b, axis), color)
            y += ROW

    rank_rows(lo, hi)
    # runs finer than a pixel draw as solid bars: show the first few of every rank closer
    zoom_hi = max((int(o[min(3, len(o) - 1)] + n[min(3, len(o) - 1)]) for o, n in nonempty),
                  default=hi)
    if len(nonempty) > 1 and zoom_hi - lo < (hi - lo) / 8:
        y += 6
        text(10, y + 12, f"zoom: file bytes [{lo}, {zoom_hi})", 11, weight="bold")
        y += 18
        rank_rows(lo, zoom_hi)
    if plan.method == "two_phase":
        R = plan.rounds
        for k in range(R):
            y += 10
            text(10, y + 12, f"round {k}: aggregators' domains", 11, weight="bold")
            y += 18
            # each aggregator's part of its domain in this round: [dlo, dhi)
            parts = [(agg, plan.bounds[d * R + k], plan.bounds[d * R + k + 1])
                     for d, agg in enumerate(plan.aggregators)]
            for agg, dlo, dhi in parts:
                a = int((dlo - lo) * axis / max(1, hi - lo))
                b = max(a + 1, int((dhi - lo) * axis / max(1, hi - lo)))
                row = next((r for r in rows if r.round == k and r.aggregator == agg), None)
                color = PALETTE[agg % len(PALETTE)]
                out.append(f'<rect x="{LEFT + a}" y="{y}" width="{b - a}" height="{ROW - 6}" '
                           f'fill="{color}" stroke="#333" stroke-width="0.5"/>')
                if row is not None:
                    label = f"{row.pieces} pieces -> {row.io_calls} call" \
                            + ("s" if row.io_calls != 1 else "")
                    if 6 * len(label) < b - a:
                        text(LEFT + (a + b) / 2, y + 12, label, 10, anchor="middle")
            y += ROW
            # the data Alltoallv of this round: bytes from each rank to each aggregator
            text(10, y + 12, "bytes sent (rows: ranks; columns: aggregators)", 11)
            y += 18
            col = min(110, (WIDTH - LEFT) // max(1, len(plan.aggregators)))
            for d, agg in enumerate(plan.aggregators):
                text(LEFT + d * col, y + 10, f"to rank {agg}", 10, weight="bold")
            y += 14
            for rank, (o, n) in enumerate(runs):
                text(10, y + 10, f"rank {rank}", 10)
                for d, (_agg, dlo, dhi) in enumerate(parts):
                    text(LEFT + d * col, y + 10, format_size(bytes_in(o, n, dlo, dhi)), 10)
                y += 14
    else:
        y += 10
        text(10, y + 12, f"independent: each rank issues one call per run "
             f"({sum(len(o) for o, _ in runs)} calls in all)", 11)
        y += ROW
    y += 10
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{y}" '
            f'viewBox="0 0 {WIDTH} {y}"><rect width="100%" height="100%" fill="white"/>'
            + "".join(out) + "</svg>\n")
