"""Benchmark figures read from ``benchmarks/RESULTS.md`` at build time.

``{benchmark-table}`` shows chosen rows and columns of one of RESULTS.md's tables, and
``{benchmark-plot}`` draws them as grouped bars (SVG, log scale): the pages never copy a
number by hand, and each says which section of RESULTS.md it comes from.
"""
from __future__ import annotations

import hashlib
import html
import math
import os
import re
from typing import List, Optional

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util.docutils import SphinxDirective

from .commands import GENERATED_DIR, REPO_DIR

RESULTS = os.path.join(REPO_DIR, "benchmarks", "RESULTS.md")
PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
           "#9c755f"]


class Table:
    """One table: the heading it sits under, every heading above it, its header and rows."""

    def __init__(self, section: str, path: str, header: List[str],
                 rows: List[List[str]]) -> None:
        self.section, self.path, self.header, self.rows = section, path, header, rows


def _cells(line: str) -> List[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def read_tables(path: str = RESULTS) -> List[Table]:
    """Every markdown table of RESULTS.md with the headings of the sections it sits in.

    A table under a dated subsection still belongs to its section: a page naming the
    section finds the subsection's tables, the first of them first.
    """
    with open(path) as f:
        lines = f.read().splitlines()
    tables, headings, i = [], [], 0
    while i < len(lines):
        line = lines[i]
        heading = re.match(r"^(#{1,6})\s+(.*)$", line)
        if heading:
            level = len(heading.group(1))
            headings = [(lv, text) for lv, text in headings if lv < level]
            headings.append((level, heading.group(2).strip()))
        if (line.startswith("|") and i + 1 < len(lines)
                and re.match(r"^\|[\s:|-]+\|$", lines[i + 1].strip())):
            header = _cells(line)
            rows, i = [], i + 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            tables.append(Table(headings[-1][1] if headings else "",
                                " / ".join(text for _, text in headings), header, rows))
            continue
        i += 1
    return tables


def number(cell: str) -> Optional[float]:
    """The figure a cell starts with (``**4.39 [3.91, 4.42]**`` -> 4.39), or None."""
    m = re.match(r"^\**\s*([0-9][0-9,]*\.?[0-9]*)", cell.strip())
    if not m:
        return None
    return float(m.group(1).replace(",", ""))


def select(section: str, index: int, rows: str, columns: str):
    """(table, chosen header indexes, chosen rows) of RESULTS.md, or ValueError."""
    found = [t for t in read_tables() if section.lower() in t.path.lower()]
    if len(found) <= index:
        raise ValueError(f"benchmarks/RESULTS.md has no table {index} in a section named like "
                         f"{section!r}")
    table = found[index]
    pattern = re.compile(rows) if rows else None
    chosen_rows = [r for r in table.rows if pattern is None or pattern.search(r[0])]
    if not chosen_rows:
        raise ValueError(f"no row of the table in {table.section!r} matches {rows!r}")
    if columns:
        names = [c.strip() for c in columns.split(",")]
        missing = [n for n in names if n not in table.header]
        if missing:
            raise ValueError(f"the table in {table.section!r} has no column(s) {missing}; "
                             f"it has {table.header}")
        cols = [table.header.index(n) for n in names]
    else:
        cols = list(range(1, len(table.header)))
    return table, cols, chosen_rows


class _Base(SphinxDirective):
    option_spec = {
        "section": directives.unchanged_required,
        "table": directives.nonnegative_int,
        "rows": directives.unchanged,
        "columns": directives.unchanged,
        "title": directives.unchanged,
        "unit": directives.unchanged,
    }

    def _select(self):
        self.env.note_dependency(RESULTS)
        try:
            return select(self.options["section"], self.options.get("table", 0),
                          self.options.get("rows", ""), self.options.get("columns", ""))
        except (ValueError, re.error) as exc:
            raise self.error(f"{self.name}: {exc}") from exc

    def _source_note(self, table: Table) -> nodes.paragraph:
        para = nodes.paragraph(classes=["benchmark-source"])
        para += nodes.Text("From benchmarks/RESULTS.md, section ")
        section = re.sub(r"`", "", table.section)
        para += nodes.literal(section, section)
        para += nodes.Text(".")
        return para


class BenchmarkTable(_Base):
    def run(self) -> list:
        table, cols, rows = self._select()
        tnode = nodes.table(classes=["benchmark"])
        group = nodes.tgroup(cols=1 + len(cols))
        tnode += group
        for _ in range(1 + len(cols)):
            group += nodes.colspec(colwidth=10)
        head = nodes.thead()
        group += head
        head += _row([table.header[0]] + [table.header[c] for c in cols])
        body = nodes.tbody()
        group += body
        for r in rows:
            body += _row([r[0]] + [r[c].replace("**", "") if c < len(r) else "" for c in cols])
        return [tnode, self._source_note(table)]


def _row(texts: List[str]) -> nodes.row:
    row = nodes.row()
    for text in texts:
        entry = nodes.entry()
        entry += nodes.paragraph(text=text.replace("`", ""))
        row += entry
    return row


class BenchmarkPlot(_Base):
    def run(self) -> list:
        table, cols, rows = self._select()
        series = [table.header[c] for c in cols]
        groups = [(r[0].replace("`", ""), [number(r[c]) if c < len(r) else None for c in cols])
                  for r in rows]
        svg = bars_svg(groups, series, self.options.get("title", ""),
                       self.options.get("unit", ""))
        name = hashlib.sha256(svg.encode()).hexdigest()[:16] + ".svg"
        folder = os.path.join(GENERATED_DIR, "bench")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, name), "w") as f:
            f.write(svg)
        image = nodes.image(uri=f"/_generated/bench/{name}",
                            alt=self.options.get("title", "benchmark plot"))
        figure = nodes.figure(classes=["benchmark-plot"])
        figure += image
        caption = nodes.caption()
        caption += nodes.Text("From benchmarks/RESULTS.md, section ")
        section = re.sub("`", "", table.section)
        caption += nodes.literal(section, section)
        caption += nodes.Text(".")
        figure += caption
        return [figure]


def short_labels(labels: List[str]) -> List[str]:
    """Row labels without the part they all share (``Allreduce, p=4, 8 B`` -> ``8 B``), cut
    at a ``, `` so that what is left reads on its own."""
    if len(labels) < 2:
        return labels
    common = os.path.commonprefix(labels)
    cut = common.rfind(", ")
    if cut < 0:
        return labels
    return [label[cut + 2:] for label in labels]


def bars_svg(groups, series: List[str], title: str, unit: str) -> str:
    """Horizontal grouped bars on a log axis: one group per row, one bar per series."""
    groups = list(zip(short_labels([g[0] for g in groups]), [g[1] for g in groups]))
    values = [v for _, vs in groups for v in vs if v]
    if not values:
        raise ValueError("no figure to plot")
    lo = 10 ** math.floor(math.log10(min(values)))
    hi = 10 ** math.ceil(math.log10(max(values)))
    if hi <= lo:
        hi = lo * 10
    left, width, bar = 40 + 7 * max(len(g[0]) for g in groups), 880, 12
    plot = width - left - 30
    group_h = bar * len(series) + 14
    top = 40
    height = top + group_h * len(groups) + 40 + 18 * ((len(series) + 3) // 4) + 10

    def x(v: float) -> float:
        return left + (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)) * plot

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans, sans-serif" '
           f'font-size="11"><rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left}" y="22" font-size="14" font-weight="bold">'
           f'{html.escape(title)}</text>']
    decade = lo
    axis = top + group_h * len(groups)
    while decade <= hi * 1.0001:
        px = x(decade)
        out.append(f'<line x1="{px:.1f}" y1="{top - 4}" x2="{px:.1f}" y2="{axis}" '
                   f'stroke="#ddd"/><text x="{px:.1f}" y="{axis + 14}" text-anchor="middle">'
                   f'{decade:g}</text>')
        decade *= 10
    out.append(f'<text x="{left + plot}" y="{axis + 30}" text-anchor="end">'
               f'{html.escape(unit)} (log scale)</text>')
    for g, (label, vs) in enumerate(groups):
        y0 = top + g * group_h
        out.append(f'<text x="{left - 8}" y="{y0 + group_h / 2}" text-anchor="end">'
                   f'{html.escape(label)}</text>')
        for s, v in enumerate(vs):
            y = y0 + 4 + s * bar
            if v:
                out.append(f'<rect x="{left}" y="{y}" width="{max(x(v) - left, 1):.1f}" '
                           f'height="{bar - 2}" fill="{PALETTE[s % len(PALETTE)]}">'
                           f'<title>{html.escape(series[s])}: {v:g}</title></rect>'
                           f'<text x="{max(x(v), left) + 3:.1f}" y="{y + bar - 3}" '
                           f'font-size="9">{v:g}</text>')
    ly = axis + 48
    for s, name in enumerate(series):
        lx = left + (s % 4) * 160
        yy = ly + (s // 4) * 18
        out.append(f'<rect x="{lx}" y="{yy - 10}" width="12" height="12" '
                   f'fill="{PALETTE[s % len(PALETTE)]}"/><text x="{lx + 16}" y="{yy}">'
                   f'{html.escape(name)}</text>')
    out.append("</svg>")
    return "\n".join(out)
