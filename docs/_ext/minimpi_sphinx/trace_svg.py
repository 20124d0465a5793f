"""A Chrome/Perfetto trace (``minimpi run --trace``) drawn as an SVG timeline.

One lane per rank, a box per MPI call (nested boxes for a collective's steps, lower and
thinner), an arrow from every send to the receive that matched it, a time axis in
milliseconds and a legend of the calls. It draws what the trace holds and nothing more:
the figure of a page is a real run of the page's program.
"""
from __future__ import annotations

import html
import json
from typing import Dict, List, Tuple

PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac"]
LANE = 46          # px per rank
LEFT = 78          # px for the lane labels
WIDTH = 940


def _kind(name: str) -> str:
    """The call a slice is (``Allreduce[ring] 64 B`` -> ``Allreduce``)."""
    word = name.split(" ", 1)[0]
    return word.split("[", 1)[0]


def load(path: str) -> Tuple[Dict[Tuple, str], list, list]:
    with open(path) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    lanes: Dict[Tuple, str] = {}
    slices, flows = [], {}
    for e in events:
        key = (e.get("pid", 0), e.get("tid", 0))
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            lanes[key] = e["args"]["name"]
        elif e.get("ph") == "X":
            slices.append((key, float(e["ts"]), float(e.get("dur", 0.0)), e["name"]))
            lanes.setdefault(key, f"{key[0]}:{key[1]}")
        elif e.get("ph") in ("s", "f"):
            flows.setdefault(e["id"], {})[e["ph"]] = (key, float(e["ts"]))
    arrows = [(v["s"], v["f"]) for v in flows.values() if "s" in v and "f" in v]
    return lanes, slices, arrows


def _depths(slices: list) -> List[int]:
    """Nesting depth of each slice within its lane (a step inside its collective)."""
    order = sorted(range(len(slices)), key=lambda i: (slices[i][0], slices[i][1], -slices[i][2]))
    depth = [0] * len(slices)
    stacks: Dict[Tuple, List[float]] = {}
    for i in order:
        key, start, dur, _ = slices[i]
        stack = stacks.setdefault(key, [])
        while stack and stack[-1] <= start:
            stack.pop()
        depth[i] = len(stack)
        stack.append(start + dur)
    return depth


def to_svg(path: str, title: str = "") -> str:
    lanes, slices, arrows = load(path)
    if not slices:
        raise ValueError(f"{path}: the trace holds no MPI call")
    keys = sorted(lanes, key=lambda k: (k[0], k[1]))
    lane_of = {k: i for i, k in enumerate(keys)}
    t0 = min(s[1] for s in slices)
    t1 = max(s[1] + s[2] for s in slices)
    span = max(t1 - t0, 1.0)
    plot = WIDTH - LEFT - 20
    top = 44 if title else 20

    def x(ts: float) -> float:
        return LEFT + (ts - t0) / span * plot

    kinds: List[str] = []
    for s in slices:
        if _kind(s[3]) not in kinds:
            kinds.append(_kind(s[3]))
    colour = {k: PALETTE[i % len(PALETTE)] for i, k in enumerate(kinds)}
    depth = _depths(slices)
    height = top + LANE * len(keys) + 40 + 18 * ((len(kinds) + 5) // 6) + 10
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           f'viewBox="0 0 {WIDTH} {height}" font-family="DejaVu Sans, sans-serif" font-size="11">',
           '<defs><marker id="arr" markerWidth="8" markerHeight="8" refX="7" refY="4" '
           'orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#333"/></marker></defs>',
           f'<rect width="{WIDTH}" height="{height}" fill="white"/>']
    if title:
        out.append(f'<text x="{LEFT}" y="22" font-size="14" font-weight="bold">'
                   f'{html.escape(title)}</text>')
    for k, i in lane_of.items():
        y = top + i * LANE
        out.append(f'<rect x="{LEFT}" y="{y}" width="{plot}" height="{LANE - 6}" '
                   f'fill="#f4f4f4"/>')
        out.append(f'<text x="{LEFT - 8}" y="{y + LANE / 2}" text-anchor="end">'
                   f'{html.escape(lanes[k])}</text>')
    for i, (key, start, dur, name) in enumerate(slices):
        d = min(depth[i], 3)
        y = top + lane_of[key] * LANE + 2 + d * 8
        h = LANE - 10 - d * 8
        w = max(dur / span * plot, 1.0)
        out.append(f'<rect x="{x(start):.1f}" y="{y}" width="{w:.1f}" height="{h}" '
                   f'fill="{colour[_kind(name)]}" fill-opacity="{0.9 - 0.2 * d:.1f}" '
                   f'stroke="white" stroke-width="0.5"><title>{html.escape(name)} '
                   f'({dur / 1000:.3f} ms)</title></rect>')
        if w > 7 * len(name) and d == 0:
            out.append(f'<text x="{x(start) + 3:.1f}" y="{y + 13}" fill="white">'
                       f'{html.escape(name)}</text>')
    for (skey, sts), (fkey, fts) in arrows:
        y1 = top + lane_of[skey] * LANE + LANE / 2 - 3
        y2 = top + lane_of[fkey] * LANE + LANE / 2 - 3
        out.append(f'<line x1="{x(sts):.1f}" y1="{y1}" x2="{x(fts):.1f}" y2="{y2}" '
                   f'stroke="#333" stroke-width="0.8" marker-end="url(#arr)"/>')
    axis = top + LANE * len(keys) + 4
    out.append(f'<line x1="{LEFT}" y1="{axis}" x2="{LEFT + plot}" y2="{axis}" stroke="#333"/>')
    step = _tick(span / 1000.0)
    t = 0.0
    while t <= span / 1000.0 + 1e-9:
        px = LEFT + t * 1000.0 / span * plot
        out.append(f'<line x1="{px:.1f}" y1="{axis}" x2="{px:.1f}" y2="{axis + 4}" '
                   f'stroke="#333"/><text x="{px:.1f}" y="{axis + 16}" '
                   f'text-anchor="middle">{t:g}</text>')
        t += step
    out.append(f'<text x="{LEFT + plot}" y="{axis + 30}" text-anchor="end">time (ms) since the '
               f'first call</text>')
    ly = axis + 48
    for i, k in enumerate(kinds):
        lx = LEFT + (i % 6) * 140
        yy = ly + (i // 6) * 18
        out.append(f'<rect x="{lx}" y="{yy - 10}" width="12" height="12" fill="{colour[k]}"/>'
                   f'<text x="{lx + 16}" y="{yy}">{html.escape(k)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _tick(total_ms: float) -> float:
    """A round tick step giving 5 to 10 ticks over ``total_ms``."""
    step = 10 ** int(f"{total_ms / 5:e}".split("e")[1])
    for factor in (1, 2, 5, 10):
        if total_ms / (step * factor) <= 10:
            return step * factor
    return step * 10
