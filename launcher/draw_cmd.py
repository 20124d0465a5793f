"""``minimpi draw``: the schedule of a real collective algorithm, as text, SVG or PNG.

    minimpi draw --list
    minimpi draw bcast --algorithm binomial -n 8
    minimpi draw allreduce --algorithm ring -n 4 -o ring.svg
    minimpi draw bcast --algorithm ring -n 4 --bytes 1MiB -o pipeline.png
    minimpi draw allreduce --algorithm hierarchical --hosts 2x4     # 2 hosts of 4 ranks
    minimpi draw rma --pattern fence -n 4 -o fence.svg    # one-sided: epochs and operations

See :mod:`minimpi.tools.draw` for how the schedule is recorded, :mod:`minimpi.tools.draw_rma`
for the one-sided patterns.
"""
from __future__ import annotations

import argparse
import sys

from .argtypes import byte_size

EPILOG = """\
The collective runs for real on N threads over the in-process transport; every message,
step boundary and temporary buffer is recorded. Each rank's data is made of N blocks labelled
by origin (rank 0 = A, rank 1 = B, ...; block i of rank 1 is B<i>), so arrows say which
blocks a message carries, and after every step each rank shows everything it holds: the
caller's buffers and the algorithm's temporaries. Sums of blocks read AB2 (block 2 of ranks
0 and 1) or Σ2 (all ranks); the legend says what the labels mean for the collective.

`minimpi draw rma --pattern fence|lock|pscw` runs a small one-sided program instead (each
rank's value is 10*(r+1)): fence - Put into the right neighbour's window, Fence, Get from the
left; lock - Lock/Accumulate(SUM)/Unlock on rank 0's counter; pscw - rank 0 Posts/Waits, the
others Start/Put/Complete. Its window calls are recorded as `minimpi run --trace` records
them; it shows each rank's epochs (fence, lock, exposure, pscw access: the calls opening and
closing them), the Puts/Gets/Accumulates inside (origin -> target, bytes) and every rank's
window after the run.

examples:
  minimpi draw --list
  minimpi draw bcast --algorithm binomial -n 8
  minimpi draw scatter --algorithm binomial -n 4 --root 2 -o scatter.svg
  minimpi draw bcast --algorithm ring -n 4 --bytes 1MiB      # pipelined in segments
  minimpi draw bcast --algorithm hierarchical -n 8 --hosts 2x4   # ranks 0-3, 4-7 per host
  minimpi draw rma --pattern pscw -n 4                       # epochs of one-sided calls
  minimpi draw rma --pattern fence -n 3 -o fence.svg
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.usage = ("minimpi draw COLLECTIVE --algorithm ALG -n P [--root R] [--bytes N] "
               "[-o out.svg|out.png]\n       minimpi draw rma --pattern fence|lock|pscw -n P "
               "[-o out.svg|out.png]\n       minimpi draw --list")
    p.epilog = EPILOG
    p.add_argument("collective", nargs="?",
                   help="e.g. bcast, allreduce, alltoall; or rma (one-sided, with --pattern)")
    p.add_argument("--pattern", metavar="PAT",
                   help="with rma: the one-sided program, fence, lock or pscw (see --list)")
    p.add_argument("--algorithm", "-a", metavar="ALG", help="algorithm name (see --list)")
    p.add_argument("-n", "-np", dest="nprocs", type=int, default=None, metavar="P",
                   help="number of ranks (default 4, or every slot of --hosts)")
    p.add_argument("--hosts", metavar="HOSTS",
                   help="pretend the ranks run on several hosts: NxM (N hosts of M ranks) or "
                        "a:4,b:2, filled in rank order as minimpi run places them")
    p.add_argument("--root", type=int, default=0, help="root rank for rooted collectives")
    p.add_argument("--bytes", type=byte_size, default=None, metavar="N",
                   help="size of each rank's data (default: one float64 per block)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write an SVG (.svg) or PNG (.png); without it print text")
    p.add_argument("--list", action="store_true",
                   help="list collectives and algorithms, and the rma patterns")


def main(args: argparse.Namespace) -> int:
    from minimpi.tools import draw
    if args.list:
        from minimpi.tools import draw_rma
        print(draw.list_text())
        print(draw_rma.list_text())
        return 0
    if not args.collective:
        print("minimpi draw: name a collective (or --list)", file=sys.stderr)
        return 2
    if args.collective.lower() == "rma":
        return _main_rma(args)
    if not args.algorithm:
        from minimpi.coll.registry import algorithms
        try:
            names = ", ".join(algorithms(args.collective.lower()))
        except Exception as exc:
            print(f"minimpi draw: {exc}", file=sys.stderr)
            return 2
        print(f"minimpi draw: choose --algorithm for {args.collective}: {names}", file=sys.stderr)
        return 2
    out = args.output
    if out and not out.lower().endswith((".svg", ".png")):
        print(f"minimpi draw: -o {out}: the file name must end in .svg or .png", file=sys.stderr)
        return 2
    try:
        p, hosts = args.nprocs or 4, None
        if args.hosts:
            from .hosts import parse_hosts_or_layout, place, total_slots
            slots = parse_hosts_or_layout(args.hosts)
            p = args.nprocs or total_slots(slots)
            hosts = place(p, slots)
    except ValueError as exc:
        print(f"minimpi draw: {exc}", file=sys.stderr)
        return 2
    return _show(lambda: draw.record(args.collective, args.algorithm, p, args.root,
                                     args.bytes, hosts=hosts),
                 draw.to_text, draw.to_svg, out)


def _show(record, to_text, to_svg, out: "str | None") -> int:
    """Record a drawing and print it as text, or write it as SVG/PNG to ``out``."""
    from minimpi.tools import draw
    try:
        recorded = record()
        if not out:
            print(to_text(recorded))
            return 0
        svg = to_svg(recorded)
        if out.lower().endswith(".png"):
            draw.svg_to_png(svg, out)
        else:
            with open(out, "w", encoding="utf-8") as f:
                f.write(svg)
    except draw.DrawError as exc:
        print(f"minimpi draw: {exc}", file=sys.stderr)
        return 2
    print(f"{recorded.summary}\nwritten to {out}")
    return 0


def _main_rma(args: argparse.Namespace) -> int:
    """``minimpi draw rma --pattern PAT``: the epochs and operations of a one-sided program."""
    from minimpi.tools import draw_rma
    names = ", ".join(draw_rma.PATTERNS)
    if not args.pattern:
        print(f"minimpi draw rma: choose --pattern: {names}", file=sys.stderr)
        return 2
    out = args.output
    if out and not out.lower().endswith((".svg", ".png")):
        print(f"minimpi draw: -o {out}: the file name must end in .svg or .png", file=sys.stderr)
        return 2
    return _show(lambda: draw_rma.record(args.pattern, args.nprocs or 4),
                 draw_rma.to_text, draw_rma.to_svg, out)
