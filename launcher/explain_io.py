"""``minimpi explain io``: how a collective file access (``Write_all``/``Read_all``) runs.

    minimpi explain io -n 4 --bytes 64MiB --pattern strided --block 4096
    minimpi explain io -n 6 --bytes 256MiB --pattern subarray --read
    minimpi explain io -n 4 --bytes 64MiB --pattern strided --block 256 --info cb_nodes=2

Each rank's file view is built with the real datatypes and :class:`~minimpi.io.view.FileView`
(the same patterns as ``benchmarks/io_two_phase.py``), and the choice is made by the very
function the call uses (:func:`minimpi.io.two_phase.plan`), so what is printed is what a job
with these views would do (``MINIMPI_IO_COLLECTIVE`` and the ``romio_cb_*`` hints given with
``--info`` steer it here as they do there). Patterns, for ``p`` ranks and ``--bytes`` in all:

* ``strided``: blocks of ``--block`` bytes dealt round-robin (rank r owns blocks r, r+p...);
* ``subarray``: a square float64 array block-distributed over a 2-D process grid;
* ``contiguous``: rank r owns the r-th of p equal slices.
"""
from __future__ import annotations

import sys
from typing import Optional, Sequence, TextIO

PATTERNS = ("strided", "subarray", "contiguous")


def rank_views(pattern: str, p: int, total: int, block: int):
    """Per rank ``(FileView, data bytes)`` of the pattern (see the module docstring)."""
    from minimpi.comm.topology import compute_dims
    from minimpi.data.datatypes import BYTE, DOUBLE
    from minimpi.io.view import FileView
    views = []
    if pattern == "strided":
        nblocks = total // (block * p)
        if nblocks == 0:
            raise ValueError(f"--bytes {total} holds no block of {block} B per rank "
                             f"(needs at least {block * p} B)")
        ftype = BYTE.Create_vector(nblocks, block, block * p).Create_resized(
            0, nblocks * block * p)
        for rank in range(p):
            views.append((FileView(rank * block, BYTE, ftype, "native"), nblocks * block))
    elif pattern == "subarray":
        n = int((total // 8) ** 0.5)
        dims = compute_dims(p, [0, 0])
        sub = [n // dims[0], n // dims[1]]
        if 0 in sub:
            raise ValueError(f"--bytes {total} is too small for a {dims[0]}x{dims[1]} grid")
        for rank in range(p):
            coords = (rank // dims[1], rank % dims[1])
            ftype = DOUBLE.Create_subarray([n, n], sub, [coords[0] * sub[0],
                                                         coords[1] * sub[1]])
            views.append((FileView(0, DOUBLE, ftype, "native"), sub[0] * sub[1] * 8))
    elif pattern == "contiguous":
        share = total // p
        for rank in range(p):
            views.append((FileView(rank * share, BYTE, BYTE, "native"), share))
    else:
        raise ValueError(f"unknown pattern {pattern!r}; known: {', '.join(PATTERNS)}")
    return views


def plan_for(views, hints: dict, write: bool):
    """The plan a collective access through ``views`` (per rank ``(FileView, bytes)``, from
    view position 0) gets - made by the call's own planner - with each rank's file runs
    and summary."""
    from minimpi.io import two_phase as tp
    rank_runs = [view.runs(0, nbytes) for view, nbytes in views]
    summaries = [tp.summarize(offs, lens) for offs, lens in rank_runs]
    return tp.plan(summaries, hints, write), rank_runs, summaries


def _independent_calls(summaries, write: bool) -> int:
    from minimpi.io import two_phase as tp
    if write:
        return sum(s.nruns for s in summaries)
    return sum(tp.independent_read_calls(s) for s in summaries if s.nbytes)


def _fmt_time(seconds: float) -> str:
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.1f} us"


def explain_io(p: int, total: int, pattern: str, block: int, write: bool = True,
               hints: Optional[dict] = None, out: Optional[TextIO] = None,
               picture: Optional[str] = None) -> int:
    """Print the plan a collective write (or read) of this pattern gets, with the cost
    model's figures and, for two-phase, every aggregator's rounds; with ``picture`` (a .svg
    or .png path), draw it there too (launcher/draw_io.py). Returns an exit code."""
    out = out or sys.stdout
    from minimpi.io import two_phase as tp
    hints = dict(hints or {})
    try:
        views = rank_views(pattern, p, total, block)
    except ValueError as e:
        print(f"minimpi explain io: {e}", file=sys.stderr)
        return 2
    for key in ("cb_nodes", "cb_buffer_size"):
        if key in hints and not hints[key].lstrip("-").isdigit():
            print(f"note: hint {key}={hints[key]!r} is not a whole number of "
                  f"{'aggregators' if key == 'cb_nodes' else 'bytes'}: ignored, as a job "
                  f"ignores it", file=out)
    plan, rank_runs, summaries = plan_for(views, hints, write)
    call = "Write_all" if write else "Read_all"
    what = f"{block} B blocks" if pattern == "strided" else pattern
    print(f"{call} on {p} rank{'s' if p != 1 else ''}, {pattern} view ({what}), "
          f"{sum(s.nbytes for s in summaries)} B in all"
          + (f", hints {hints}" if hints else "") + ":", file=out)
    for rank, s in enumerate(summaries):
        print(f"  rank {rank}: {s.nbytes} B in {s.nruns} file runs, bytes [{s.lo}, {s.hi})",
              file=out)
    kind = "pwrite" if write else "preadv"
    print(f"\ncost model (seconds; minimpi/io/two_phase.py): {kind} call "
          f"{_fmt_time(tp.WRITE_CALL if write else tp.READ_CALL)}, file byte "
          f"{tp.IO_BYTE * 1e9:.3f} ns, byte between ranks {tp.NET_BYTE * 1e9:.3f} ns, "
          f"message {_fmt_time(tp.MESSAGE)}, byte copied {tp.COPY_BYTE * 1e9:.3f} ns",
          file=out)
    print(f"  independent: {_fmt_time(plan.independent_cost)} "
          f"({'sum over the ranks: writes to one file take turns' if write else 'the slowest rank'}"
          f"; {_independent_calls(summaries, write)} {kind} calls in all)", file=out)
    print(f"  two-phase:   {_fmt_time(plan.two_phase_cost)}", file=out)
    print(f"\nchosen: {plan.method} - {plan.reason}", file=out)
    rows = tp.schedule(plan, rank_runs)
    title = (f"{call} on {p} rank{'s' if p != 1 else ''}, {pattern} view ({what}), "
             f"{sum(s.nbytes for s in summaries)} B")
    if plan.method != "two_phase":
        return _draw(picture, title, plan, rank_runs, rows, out) if picture else 0
    print(f"  {len(plan.aggregators)} aggregators, {plan.rounds} round"
          f"{'s' if plan.rounds != 1 else ''} (cb_buffer_size bounds a round); per round "
          f"3 exchanges (piece counts Alltoall, piece list Alltoallv, data Alltoallv)",
          file=out)
    for row in rows:
        print(f"  round {row.round}, aggregator rank {row.aggregator}: file bytes "
              f"[{row.domain[0]}, {row.domain[1]}), {row.pieces} pieces ({row.nbytes} B) "
              f"from {row.senders} rank{'s' if row.senders != 1 else ''}, joined into "
              f"{row.io_calls} {kind} call{'s' if row.io_calls != 1 else ''}", file=out)
    print(f"  in all: {sum(r.io_calls for r in rows)} {kind} calls, "
          f"{3 * plan.rounds} exchanges (besides the summaries' allgather before and the "
          f"error agreement after, which every collective access has)", file=out)
    return _draw(picture, title, plan, rank_runs, rows, out) if picture else 0


def _draw(path: str, title: str, plan, rank_runs, rows, out: TextIO) -> int:
    from minimpi.tools.draw import DrawError, svg_to_png

    from .draw_io import io_plan_svg
    svg = io_plan_svg(title, plan, rank_runs, rows)
    try:
        if path.lower().endswith(".png"):
            svg_to_png(svg, path)
        elif path.lower().endswith(".svg"):
            with open(path, "w") as f:
                f.write(svg)
        else:
            raise DrawError(f"-o {path!r}: name a .svg or .png file")
    except (DrawError, OSError) as e:
        print(f"minimpi explain io: {e}", file=sys.stderr)
        return 2
    print(f"drawn: {path}", file=out)
    return 0


def parse_info(items: Sequence[str]) -> dict:
    """``KEY=VALUE`` strings as a hints dict."""
    hints = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--info {item!r}: expected KEY=VALUE, e.g. cb_nodes=2")
        hints[key.strip()] = value.strip()
    return hints
