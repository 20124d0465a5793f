"""What ``minimpi explain --hosts`` adds for ranks on several hosts: the two links, how flat
and hierarchical algorithms are charged for them, and the steps of each hierarchical one.

    minimpi explain allreduce --bytes 64MiB --hosts 2x4        # 2 hosts of 4 ranks (-n 8)
    minimpi explain bcast --bytes 1MiB -n 6 --hosts a:4,b:2    # named hosts, 4 + 2 ranks

The ranks are placed as ``minimpi run`` places them: the first host's slots first, then the
next host's (:func:`minimpi.launcher.hosts.place`). Nothing is printed for one host, so the
single-host output of ``minimpi explain`` is unchanged.
"""
from __future__ import annotations

from typing import Optional, TextIO, Tuple

from .hosts import parse_hosts_or_layout, place, total_slots


def layout_option(text: Optional[str], nprocs: Optional[int], default_p: int = 4):
    """(p, Layout or None) from ``--hosts`` and ``-n``: without -n, every slot of the hosts
    gets a rank. Raises HostListError (a ValueError) for a bad host list or too many ranks."""
    from minimpi.coll.cost import Layout
    if not text:
        return nprocs or default_p, None
    hosts = parse_hosts_or_layout(text)
    p = nprocs or total_slots(hosts)
    return p, Layout.of(place(p, hosts))


def _time(seconds: float) -> str:
    """As the table of ``minimpi explain`` writes times (its module imports this one)."""
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.1f} us"


def _link(link, sources: dict, names: Tuple[str, str]) -> str:
    where = "; ".join(sources[name] for name in names)
    value = f"{_time(link.alpha)} per message, {1 / link.beta / 1e9:.3g} GB/s"
    return f"{value:<40} [{where}]"


def describe_links(model, sources: dict, layout, out: TextIO) -> None:
    """The layout and the two links (only when the ranks span several hosts)."""
    if layout is None or layout.hosts == 1:
        return
    slow = model.slowest(layout)
    print(f"hosts: {layout}; H = {layout.hosts} hosts, L = {layout.widest} ranks on the "
          f"widest host", file=out)
    print(f"  intra    = {_link(model.intra, sources, ('alpha_intra', 'beta_intra'))}", file=out)
    print(f"  inter    = {_link(model.inter, sources, ('alpha_inter', 'beta_inter'))}", file=out)
    cores = sum(min(c, model.cores) for c in layout.counts)
    print(f"  flat algorithms: every step over the slower link ({_time(slow.alpha)}, "
          f"{1 / slow.beta / 1e9:.3g} GB/s); hierarchical ones: each step over its own link",
          file=out)
    print(f"  contention: with intra's alpha and beta (CPU work), / sum over hosts of "
          f"min(ranks there, cores) = {cores}", file=out)


def describe_steps(table, model, p: int, nbytes: int, layout, op, objects: bool,
                   out: TextIO) -> None:
    """Each hierarchical algorithm's steps with their predicted times, next to the best
    flat algorithm (only when the ranks span several hosts)."""
    if layout is None or layout.hosts == 1:
        return
    usable = [alg for alg in table.values() if alg.refusal(p, nbytes, op, objects, layout) is None]
    flat = [alg for alg in usable if not alg.hierarchical]
    print("\nwhy, step by step:", file=out)
    if flat:
        best = min(flat, key=lambda alg: alg.predict(model, p, nbytes, layout)[0])
        print(f"  best flat: {best.name} {_time(best.predict(model, p, nbytes, layout)[0])}, "
              f"every step over the slower link", file=out)
    for alg in usable:
        if alg.hierarchical and alg.phases is not None:
            predicted, formula, crowd = alg.predict(model, p, nbytes, layout)
            steps = alg.phases(model, p, nbytes, layout)
            print(f"  {alg.name}: {_time(formula)} = "
                  + " + ".join(_time(t) for _, t in steps)
                  + ("" if predicted == formula else
                     f" (contention {_time(crowd)} decides)"), file=out)
            for k, (what, seconds) in enumerate(steps, 1):
                print(f"    {k}. {_time(seconds):>11}  {what}", file=out)
