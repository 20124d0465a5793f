"""``minimpi explain``: which collective algorithm ``auto`` picks for a call, and why.

    minimpi explain allreduce --bytes 4MiB -n 8            # every algorithm's predicted time
    minimpi explain allreduce --bytes 64 -n 6 --op noncommutative
    minimpi explain bcast --bytes 1MiB -n 4 --objects      # the lowercase, object call
    minimpi explain allreduce --bytes 64MiB --hosts 2x4     # 2 hosts of 4 ranks: flat or hierarchical
    minimpi explain allreduce --bytes 64 -n 3 --inter      # on an intercommunicator (two groups of 3)
    minimpi explain --list                                  # every collective and algorithm
    minimpi explain io -n 4 --bytes 64MiB --pattern strided --block 4096   # collective I/O
    minimpi explain --calibrate [--save [PATH]]             # measure alpha, beta, gamma here
    minimpi explain --calibrate --hosts a:2,b:2 [--run-args "..."]   # and both links, over hosts

It prints the cost model's inputs (alpha, beta, gamma, segment, cores) with where each
came from (built-in default, this host, calibration file, environment), then every
registered algorithm of the collective with its predicted time - the larger of its
alpha-beta-gamma formula and its contention bound, both shown - or the reason it cannot
serve the call, marking the one ``auto`` picks. Everything comes from the registry (:mod:`minimpi.coll.registry`), so a
newly registered algorithm shows up here without any change to this file.

``--bytes`` is the byte count the call passes to the chooser: the size of the buffer of
the call (for the per-rank meaning of each collective, see its module's docstring).
"""
from __future__ import annotations

import argparse
import os
import sys
import textwrap
from typing import Optional, TextIO

from .argtypes import byte_size, positive_int

#: --op names (case-insensitive) -> attribute of minimpi.data.ops; "noncommutative" is a user op
OP_NAMES = ["sum", "prod", "max", "min", "land", "lor", "lxor", "band", "bor", "bxor",
            "maxloc", "minloc", "replace", "commutative", "noncommutative"]


def make_op(name: Optional[str]):
    """The Op for an --op name (None: no op). ``noncommutative`` is a user-defined op
    created with ``commute=False``; ``commutative`` one with ``commute=True``."""
    if name is None:
        return None
    from minimpi.data import ops
    key = name.lower()
    if key in ("noncommutative", "non-commutative", "noncommute"):
        return ops.Op.Create(noncommutative, commute=False)
    if key == "commutative":
        return ops.Op.Create(commutative, commute=True)
    op = getattr(ops, key.upper(), None)
    if not isinstance(op, ops.Op):
        raise argparse.ArgumentTypeError(f"unknown op {name!r}; known: {', '.join(OP_NAMES)}")
    return op


def summary(alg) -> str:
    """The first sentence of the algorithm's docstring, whole (see ``registry.first_sentence``)."""
    return alg.summary


def noncommutative(a, b, datatype=None):
    return b


def commutative(a, b, datatype=None):
    return b


def _fmt_time(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.1f} us"


def _fmt_bytes(n: int) -> str:
    from minimpi.data.units import format_size
    text = format_size(n)
    return text if text.endswith(" B") else f"{text} ({n} B)"


def describe_model(model, sources, out: TextIO) -> None:
    """The cost model's inputs and where each came from."""
    from minimpi.coll.cost import SYMBOLS
    rows = [
        ("alpha", f"{model.alpha * 1e6:.2f} us per message", sources["alpha"]),
        ("beta", f"{model.beta * 1e9:.4f} ns per byte ({1 / model.beta / 1e9:.2f} GB/s)",
         sources["beta"]),
        ("gamma", f"{model.gamma * 1e9:.4f} ns per byte ({1 / model.gamma / 1e9:.2f} GB/s "
                  f"reduction)", sources["gamma"]),
        ("segment", _fmt_bytes(model.segment), sources["segment"]),
        ("eager", f"{_fmt_bytes(model.eager)} (a larger message is a rendezvous: RTS, CTS, data)",
         sources["eager"]),
        ("cores", f"{model.cores} (the ranks share min(p, cores))", sources["cores"]),
    ]
    print("cost model: a message of n bytes costs α + n·β (alpha: latency, beta: time per "
          "byte sent); reducing or copying n bytes costs n·γ (gamma)", file=out)
    for name, value, source in rows:
        print(f"  {name:<8} = {value:<40} [{source}]", file=out)
    print("  predicted = max(formula, contention); contention = (messages·α/4 + "
          "2·volume·β + local·γ) / min(p, cores)", file=out)
    print("  symbols: " + "; ".join(f"{k} = {v}" for k, v in SYMBOLS.items()), file=out)


#: why the contention term exists, printed once under the details
CONTENTION_WHY = (
    "Why contention: each formula is the critical path when every rank has a core and a "
    "link of its own. Ranks that share cores (more ranks than cores, as on a laptop) take "
    "turns: every message's handling (α/4), every byte copied into and out of the kernel "
    "(2·β) and every byte reduced or copied (γ) needs CPU time, and only min(p, cores) "
    "cores do it all. So an algorithm that moves more bytes in all loses there, whatever "
    "its critical path; with a core per rank (a cluster) the formula decides.")


def _fmt_coef(x: float) -> str:
    return f"{x:.4g}"


def _details(alg, model, p: int, nbytes: int, layout, out: TextIO) -> None:
    """One algorithm's prediction taken apart: the formula, its α, β and γ terms with the
    numbers plugged in, and the contention bound."""
    from minimpi.coll import cost
    from minimpi.data.units import format_size
    predicted, formula, crowd = alg.predict(model, p, nbytes, layout)
    layout = layout or cost.Layout.one_host(p)
    pad = " " * 6
    print(f"  {alg.name}: {summary(alg)}", file=out)
    if alg.hierarchical:
        # priced step by step, each on its own link (and each step picks its own algorithm
        # by its formula), so it is its steps' sum rather than one formula in α, β, γ
        steps = alg.phases(model, p, nbytes, layout) if alg.phases is not None else []
        print(f"{pad}time       = the sum of its steps: "
              + (" + ".join(_fmt_time(t) for _, t in steps) or "?")
              + f" = {_fmt_time(formula)}"
              + ("" if layout.hosts > 1 else " (on one host its steps are flat algorithms "
                 "over all the ranks; --hosts shows them between hosts)"), file=out)
        if layout.hosts > 1:
            for k, (what, seconds) in enumerate(steps, 1):
                print(f"{pad}  {k}. {_fmt_time(seconds):>11}  {what}", file=out)
    else:
        # a flat algorithm pays the slower link on every step when the ranks span hosts
        flat = model.over(model.slowest(layout))
        if alg.formula:
            shown, *defs = [part.strip() for part in alg.formula.split(";")]
            _, values = cost.formula_values(alg.formula, flat, p, nbytes)
            where = ", ".join(f"{d} = {_fmt_coef(values[d.split('=')[0].strip()])}" for d in defs)
            print(f"{pad}time       = {shown}" + (f"   ({where})" if where else ""), file=out)
        else:
            print(f"{pad}time       = (no formula registered for this algorithm)", file=out)
        a, b, g = cost.split_terms(alg.cost, flat, p, nbytes)
        # each term's coefficient: how many α, how many bytes at β, how many bytes at γ
        ka = a / flat.alpha if flat.alpha else 0.0
        kb = b / flat.beta if flat.beta else 0.0
        kg = g / flat.gamma if flat.gamma else 0.0
        parts = [f"{_fmt_coef(ka)}·α"]
        plugged = [f"{_fmt_coef(ka)} × {flat.alpha * 1e6:.2f} us"]
        named = [f"{_fmt_time(a)} latency (α)"]
        if kb:
            parts.append(f"{format_size(int(round(kb)))}·β")
            plugged.append(f"{format_size(int(round(kb)))} × {flat.beta * 1e9:.4f} ns/B")
            named.append(f"{_fmt_time(b)} bandwidth (β)")
        if kg:
            parts.append(f"{format_size(int(round(kg)))}·γ")
            plugged.append(f"{format_size(int(round(kg)))} × {flat.gamma * 1e9:.4f} ns/B")
            named.append(f"{_fmt_time(g)} reduction (γ)")
        print(f"{pad}           = {' + '.join(parts)}", file=out)
        print(f"{pad}           = {' + '.join(plugged)}", file=out)
        print(f"{pad}           = {' + '.join(named)} = {_fmt_time(a + b + g)}", file=out)
        rendezvous = alg.rendezvous(model, p, nbytes)
        if rendezvous:
            extra_time = formula - (a + b + g)
            print(f"{pad}rendezvous = {rendezvous} messages above the eager limit "
                  f"({format_size(model.eager)}) on the critical path × "
                  f"{_fmt_coef(cost.RENDEZVOUS_ALPHAS)}·α (the RTS and CTS frames before the data, "
                  f"α/4 at each end) = "
                  f"{_fmt_time(extra_time)}", file=out)
            print(f"{pad}formula    = {_fmt_time(a + b + g)} + {_fmt_time(extra_time)} = "
                  f"{_fmt_time(formula)}", file=out)
    messages, volume, local = alg.work(model, p, nbytes, layout)
    cpu = model.over(model.intra)         # CPU work: priced with the intra-host link
    if layout.hosts > 1:
        share = max(1, sum(min(c, model.cores) for c in layout.counts))
        shared = f"sum over hosts of min(ranks, cores={model.cores})"
    else:
        share = max(1, min(p, model.cores))
        shared = f"min(p={p}, cores={model.cores})"
    print(f"{pad}contention = ({_fmt_coef(messages)} messages × α/4 + 2 × "
          f"{format_size(int(round(volume)))} sent × β + {format_size(int(round(local)))} "
          f"reduced or copied × γ) / {shared}", file=out)
    print(f"{pad}           = ({_fmt_time(messages * cpu.alpha / 4)} + "
          f"{_fmt_time(2 * volume * cpu.beta)} + {_fmt_time(local * cpu.gamma)}) / {share}"
          f" = {_fmt_time(crowd)}", file=out)
    frames = 2 * p * alg.rendezvous(model, p, nbytes)
    if frames:
        print(f"{pad}             (the messages include {_fmt_coef(frames)} RTS and CTS frames: 2 "
              f"per rendezvous, as if each of the {p} ranks made the critical path's)", file=out)
    decides = "contention decides" if crowd > formula else "the formula decides"
    print(f"{pad}predicted  = max({_fmt_time(formula)}, {_fmt_time(crowd)}) = "
          f"{_fmt_time(predicted)}: {decides}", file=out)


def _cores_comparison(collective: str, model, p: int, nbytes: int, op, objects: bool,
                      layout, out: TextIO, kind: str = "intra", segment_bytes: int = 0) -> None:
    """auto's pick as the cores the ranks share go from one to a core per rank."""
    from dataclasses import replace

    from minimpi.coll import registry
    from minimpi.errors import AlgorithmError
    counts = sorted({1, model.cores, p} | {1 << k for k in range(1, 16) if 1 << k < p})
    picks = []
    for cores in counts:
        try:
            name = registry.choose(collective, p, nbytes, op, "auto", objects=objects,
                                   layout=layout, model=replace(model, cores=cores),
                                   segment_bytes=segment_bytes, kind=kind).name
        except AlgorithmError:
            name = "(none)"
        note = " (this model)" if cores == model.cores else ""
        note += " - a core per rank, as on a cluster" if cores == p else ""
        picks.append(f"{cores} core{'s' if cores != 1 else ''}{note}: {name}")
    print(f"auto's pick by the cores the {p} ranks share (--cores N, or MINIMPI_COST_CORES "
          f"in a job):", file=out)
    for line in picks:
        print(f"  {line}", file=out)


def _segment_bytes(layout, wire: str) -> int:
    """The shared segment a job's communicator has: on one host over shared memory (what
    ``minimpi run`` gives ranks of one host by default), ranks meet in memory."""
    from minimpi.coll.segment import SLOT_BYTES
    return SLOT_BYTES if wire == "shm" and (layout is None or layout.hosts == 1) else 0


def intra_wire(transport: str) -> str:
    """The transport between two ranks of one host under ``minimpi run --transport
    TRANSPORT``: ``auto`` takes shared memory where this host can (as a job does)."""
    if transport != "auto":
        return transport
    from minimpi.transports.shm import available
    return "shm" if available() is None else "tcp"


def describe_wire(plain, priced, wire: str, transport: str, out: TextIO) -> None:
    """Which transport the prices are for, and what it changes in the model."""
    how = "minimpi run's default here" if transport == "auto" else "--transport"
    names = {"shm": "shared memory", "tcp": "TCP"}
    line = f"  within a host: {names.get(wire, wire)} ({how})"
    if priced.beta_intra != plain.beta_intra and priced.beta_intra is not None:
        line += (f": beta = {priced.beta_intra * 1e9:.4f} ns per byte "
                 f"({1 / priced.beta_intra / 1e9:.2f} GB/s), built in for {wire}")
    if wire != "shm":
        line += "; no shared segment to meet in (that needs shared memory)"
    print(line, file=out)


def explain(collective: str, nbytes: int, p: int, op=None, objects: bool = False,
            out: Optional[TextIO] = None, layout=None, cores: Optional[int] = None,
            inter: bool = False, transport: str = "auto") -> int:
    """Print the model, every algorithm's prediction or refusal, each prediction taken apart
    and auto's pick as the cores change. Returns an exit code. ``layout``: where the ranks
    run (a :class:`~minimpi.coll.cost.Layout`; None: one host); ``cores``: the cores the
    ranks share, instead of the model's; ``inter``: the call on an intercommunicator (two
    groups of p ranks), which chooses among the algorithms that serve two groups;
    ``transport``: ``minimpi run --transport``'s (auto, shm, tcp), which sets the price of
    the link between ranks of one host and whether they have a shared segment."""
    out = out or sys.stdout
    from dataclasses import replace

    from minimpi.coll import cost, registry
    from minimpi.errors import AlgorithmError

    from . import explain_hosts
    kind = registry.INTER if inter else registry.INTRA
    try:
        table = registry.algorithms(collective)
    except AlgorithmError as e:
        print(f"minimpi explain: {e}", file=sys.stderr)
        return 2
    # the algorithms of the communicator's kind: the others are never candidates
    table = {name: alg for name, alg in table.items() if kind in alg.kinds}
    if not table:
        print(f"minimpi explain: {collective} has no algorithm for "
              f"{registry.KIND_NAMES[kind]}", file=sys.stderr)
        return 2
    model, sources = cost.model_sources()
    if cores is not None:
        model, sources = replace(model, cores=cores), {**sources, "cores": "--cores"}
    describe_model(model, sources, out)
    from minimpi.coll.plan import priced_model
    wire = intra_wire(transport)
    plain, model = model, priced_model(model, wire)
    describe_wire(plain, model, wire, transport, out)
    for field in ("alpha_intra", "beta_intra"):
        if getattr(model, field) != getattr(plain, field):
            sources = {**sources, field: f"built in for {wire}"}
    segment_bytes = _segment_bytes(layout, wire)
    explain_hosts.describe_links(model, sources, layout, out)
    op_text = ""
    if op is not None:
        op_text = (f", op {getattr(op, 'name', op)} "
                   f"({'commutative' if op.Is_commutative() else 'non-commutative'})")
    where = (f"an intercommunicator of two groups of {p} rank{'s' if p != 1 else ''}" if inter
             else f"{p} rank{'s' if p != 1 else ''}")
    print(f"\n{collective} of {_fmt_bytes(nbytes)} on {where}"
          f"{op_text}, {'Python objects' if objects else 'buffers'}:", file=out)
    rows = []
    terms = {}
    for alg in table.values():
        why = alg.refusal(p, nbytes, op, objects, layout, segment_bytes, kind)
        predicted = None
        if why is None:
            try:
                predicted, formula, crowd = alg.predict(model, p, nbytes, layout)
                terms[alg.name] = (formula, crowd)
            except Exception as e:  # a broken formula is reported, not fatal
                why = f"cost formula failed: {type(e).__name__}: {e}"
        rows.append((alg, predicted, why))
    env_var = f"MINIMPI_{collective.upper()}"
    forced = os.environ.get(env_var)
    picked, pick_error = None, None
    try:
        picked = registry.choose(collective, p, nbytes, op, None, objects=objects,
                                 layout=layout, model=model,
                                 segment_bytes=segment_bytes, kind=kind).name
    except AlgorithmError as e:
        pick_error = str(e)
    rows.sort(key=lambda r: (r[1] is None, r[1] if r[1] is not None else 0.0))
    width = max(len(a.name) for a, _, _ in rows)
    best = min((t for _, t, _ in rows if t is not None), default=None)
    print(f"    {'algorithm'.ljust(width)}  {'predicted':>11}  {'vs best':>7}  "
          f"{'formula':>11}  {'contention':>11}  summary", file=out)
    for alg, predicted, why in rows:
        mark = "*" if alg.name == picked else " "
        if predicted is None:
            print(f"  {mark} {alg.name.ljust(width)}  {'refused':>11}  {'':>7}  {why}", file=out)
        else:
            ratio = predicted / best if best else 1.0
            formula, crowd = terms[alg.name]
            print(f"  {mark} {alg.name.ljust(width)}  {_fmt_time(predicted):>11}  "
                  f"{ratio:6.2f}x  {_fmt_time(formula):>11}  {_fmt_time(crowd):>11}  "
                  f"{summary(alg)}", file=out)
    if not inter:           # (the two-group algorithms have no per-host steps)
        explain_hosts.describe_steps(table, model, p, nbytes, layout, op, objects, out)
    if pick_error:
        print(f"\nauto cannot pick: {pick_error}", file=out)
    elif forced and forced != "auto":
        print(f"\n* {picked}: forced by {env_var}={forced} (auto is overridden)", file=out)
    else:
        among = f" for {registry.KIND_NAMES[kind]}" if inter else ""
        print(f"\n* {picked}: what auto picks (least predicted time among the algorithms"
              f"{among} that can serve the call - within {registry.TIE:.0%} of it, the least "
              f"formula; {env_var} is not set)", file=out)
    print(f"\nhow each prediction is made (n = {nbytes} B, p = {p}):", file=out)
    for alg, predicted, why in rows:
        if predicted is not None:
            _details(alg, model, p, nbytes, layout, out)
    print("", file=out)
    for line in textwrap.wrap(CONTENTION_WHY, 100):
        print(line, file=out)
    print("", file=out)
    _cores_comparison(collective, model, p, nbytes, op, objects, layout, out, kind,
                      segment_bytes)
    return 0 if pick_error is None else 1


def list_all(out: Optional[TextIO] = None) -> int:
    """Every registered collective and algorithm, with its restrictions."""
    out = out or sys.stdout
    from minimpi.coll import registry
    registry.algorithms("bcast")        # load every algorithm module
    for collective in sorted(registry.REGISTRY):
        table = registry.REGISTRY[collective]
        print(f"{collective}:", file=out)
        width = max(len(n) for n in table)
        for name, alg in table.items():
            notes = []
            if alg.commutative_only:
                notes.append("commutative ops only")
            if not alg.objects:
                notes.append("buffers only")
            if registry.INTRA not in alg.kinds:
                notes.append("intercommunicators: explain with --inter")
            note = f" [{'; '.join(notes)}]" if notes else ""
            print(f"  {name.ljust(width)}  {summary(alg)}{note}", file=out)
    return 0


def calibrate(save_to: Optional[str], quick: bool, out: Optional[TextIO] = None,
              hosts: Optional[str] = None, run_args: str = "") -> int:
    """Measure alpha, beta, gamma with a 2-rank job - or, with ``hosts``, the intra- and
    inter-host links too with a job over those hosts; optionally save them."""
    out = out or sys.stdout
    import shlex

    from minimpi.coll import cost
    from minimpi.tools import calibrate as cal

    from .hosts import parse_hosts, parse_layout, total_slots
    nprocs = 2
    if hosts:
        try:
            parse_layout(hosts)
        except ValueError:              # not NxM: a real host list, as it should be
            pass
        else:
            print(f"minimpi explain --calibrate: --hosts {hosts} is a pretend layout; "
                  f"measuring needs real hosts, e.g. --hosts node1:2,node2:2", file=sys.stderr)
            return 2
        try:
            nprocs = total_slots(parse_hosts(hosts))
        except ValueError as e:
            print(f"minimpi explain --calibrate: {e}", file=sys.stderr)
            return 2
    print(f"measuring with a {nprocs}-rank job (python -m minimpi run -n {nprocs}"
          + (f" --hosts {hosts}" if hosts else "") + ") ...", file=out)
    out.flush()
    try:
        result = cal.measure(quick=quick, hosts=hosts, nprocs=nprocs,
                             run_args=shlex.split(run_args or ""))
    except Exception as e:
        print(f"minimpi explain --calibrate: {e}", file=sys.stderr)
        return 1
    model, sources = cost.model_sources()
    for name in cost.FIELDS:
        if name in result and name not in ("segment", "cores"):
            print(_measured(name, result[name], model, sources), file=out)
    if save_to is None:
        print("not saved (add --save to keep them for auto on this machine)", file=out)
        return 0
    path = cal.save(result, save_to or None)
    print(f"saved to {path}", file=out)
    overridden = [v for v, _ in cost.FIELDS.values() if v in os.environ]
    if overridden:
        print(f"note: {', '.join(overridden)} set in the environment still override the file",
              file=out)
    return 0


def _measured(name: str, value: float, model, sources: dict) -> str:
    """One measured input of the model next to the value in use now."""
    from minimpi.coll import cost
    now = getattr(model, name)
    if now is None:                   # a link field that is not set: alpha's or beta's
        now = getattr(model, cost.LINK_FIELDS[name])
    if name.startswith("alpha"):
        return (f"  {name:<5} = {value * 1e6:8.2f} us per message     "
                f"(in use now: {now * 1e6:.2f} us, {sources[name]})")
    return (f"  {name:<5} = {value * 1e9:8.4f} ns per byte      = {1 / value / 1e9:.2f} GB/s "
            f"(in use now: {1 / now / 1e9:.2f} GB/s, {sources[name]})")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = __doc__.split("\n\n")[1]
    p.add_argument("collective", nargs="?",
                   help="e.g. allreduce, bcast (see --list), or io for collective file access")
    p.add_argument("--bytes", "-b", type=byte_size, default=1 << 20, metavar="SIZE",
                   help="bytes of the call: 8, 64KiB, 4MiB, ... (default 1MiB)")
    p.add_argument("-n", "--np", "--ranks", dest="nprocs", type=positive_int, default=None, metavar="P",
                   help="number of ranks (default 4, or every slot of --hosts)")
    p.add_argument("--hosts", metavar="HOSTS",
                   help="ranks on several hosts: NxM (N hosts of M ranks) or a:4,b:4; with "
                        "--calibrate, the hosts of the multi-host calibration job")
    p.add_argument("--run-args", default="", metavar="ARGS",
                   help="with --calibrate: more options for `minimpi run` (e.g. how to reach "
                        "the hosts), as one string")
    p.add_argument("--op", type=make_op, default=None, metavar="OP",
                   help=f"reduction op: {', '.join(OP_NAMES)} (default: sum for reductions)")
    p.add_argument("--transport", choices=("auto", "shm", "tcp"), default="auto",
                   help="the transport between ranks of one host, as minimpi run --transport "
                        "(default auto: shared memory where this host has it, as a job): it "
                        "prices that link and decides whether the segment algorithms serve")
    p.add_argument("--cores", type=positive_int, default=None, metavar="N",
                   help="cores the ranks share (default: MINIMPI_COST_CORES, the calibration "
                        "file or this host's): compare a laptop (2) with a cluster (-n P)")
    p.add_argument("--inter", action="store_true",
                   help="the call on an intercommunicator: two groups of P ranks (-n), the "
                        "algorithms that serve two groups")
    p.add_argument("--objects", action="store_true",
                   help="the lowercase call on Python objects (some algorithms take buffers only)")
    p.add_argument("--pattern", choices=["strided", "subarray", "contiguous"],
                   default="strided",
                   help="with `io`: each rank's file view (see launcher/explain_io.py)")
    p.add_argument("--block", type=byte_size, default=4096, metavar="SIZE",
                   help="with `io --pattern strided`: bytes of each rank's block (default 4096)")
    p.add_argument("--read", action="store_true",
                   help="with `io`: explain Read_all (default: Write_all)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="with `io`: also draw the plan (file runs, aggregators' domains, bytes "
                        "each rank sends each aggregator) as .svg or .png")
    p.add_argument("--info", action="append", default=[], metavar="KEY=VALUE",
                   help="with `io`: a file hint (cb_nodes, cb_buffer_size, romio_cb_write, "
                        "romio_cb_read); repeatable")
    p.add_argument("--list", action="store_true", help="list every collective and algorithm")
    p.add_argument("--calibrate", action="store_true",
                   help="measure alpha, beta and gamma on this machine (a 2-rank job over the "
                        "default transport: shared memory on one host)")
    p.add_argument("--save", nargs="?", const="", default=None, metavar="PATH",
                   help="with --calibrate: write the measurements where auto reads them "
                        "(default $MINIMPI_COST_FILE or ~/.config/minimpi/cost.json)")
    p.add_argument("--quick", action="store_true", help="with --calibrate: fewer repetitions")


def main(args: argparse.Namespace) -> int:
    if args.list:
        return list_all()
    if args.calibrate:
        return calibrate(args.save, args.quick, hosts=args.hosts, run_args=args.run_args)
    if args.save is not None:
        print("minimpi explain: --save needs --calibrate", file=sys.stderr)
        return 2
    if not args.collective:
        print("minimpi explain: name a collective (e.g. `minimpi explain allreduce --bytes 4MiB "
              "-n 8`), or use --list or --calibrate", file=sys.stderr)
        return 2
    op = args.op
    name = args.collective.lower()
    if name == "io":
        from .explain_io import explain_io, parse_info
        try:
            hints = parse_info(args.info)
        except ValueError as e:
            print(f"minimpi explain io: {e}", file=sys.stderr)
            return 2
        return explain_io(args.nprocs or 4, args.bytes, args.pattern, args.block,
                          write=not args.read, hints=hints, picture=args.output)
    if op is None and ("reduce" in name or "scan" in name):
        from minimpi.data import ops
        op = ops.SUM
    from .explain_hosts import layout_option
    try:
        p, layout = layout_option(args.hosts, args.nprocs)
    except ValueError as e:
        print(f"minimpi explain: {e}", file=sys.stderr)
        return 2
    return explain(name, args.bytes, p, op, args.objects, layout=layout, cores=args.cores,
                   inter=args.inter, transport=args.transport)
