"""The alpha-beta-gamma cost model that ``auto`` uses to pick a collective algorithm.

A message of n bytes costs ``alpha + n*beta``; reducing n bytes costs ``n*gamma``, and so
does copying them locally (both stream the bytes through memory once). A step in which a
rank posts m messages at once costs one ``alpha`` plus ``m·alpha/4`` of processing (the
latencies overlap, the handling of each message does not). Each algorithm's registration
gives its predicted time as a formula in (p, n) - the same formula its docstring states -
and ``auto`` picks the least. The defaults were measured on the TCP transport over loopback
on a 2-core machine (``minimpi explain --calibrate`` measures them again on yours, and
``--calibrate --save`` keeps them).

**Contention.** The formulas assume every rank has a core and a link of its own, so that
ranks that send at the same time do not slow each other down. When ranks share cores
(more ranks than cores: oversubscribed) or one host's memory bandwidth (loopback TCP,
where "bandwidth" is CPU copying), that is wrong, and algorithms that move more bytes in
all lose. So each registration also states the work of the call summed over all ranks:
``messages`` (messages all ranks send), ``volume`` (bytes all ranks send) and ``local``
(bytes all ranks reduce or copy locally), and the predicted time is ::

    max(formula, contention)
    contention = (messages·α/4 + 2·volume·β + local·γ) / min(p, cores)

- the CPU time the whole call needs, spread over the cores it can use. A byte sent costs
β twice: the sender copies it into the kernel and the receiver copies it out (the
ping-pong that measures β overlaps the two; ranks that share cores cannot). A message
costs α/4 of processing, as in a step that posts several (the rest of α is waiting).
Between equal predictions - within 3% (``registry.TIE``), typically several algorithms at
the same contention bound - ``auto`` takes the smaller formula (the shorter critical path,
fewer steps), then the algorithm registered first.

``cores`` is this host's ``os.cpu_count()`` unless ``MINIMPI_COST_CORES`` (or the
calibration file) says otherwise: the cores *of one host*. A call whose ranks span several
hosts (:class:`Layout`) spreads its work over ``sum over hosts of min(ranks there, cores)``
cores, since each host copies only its own ranks' bytes.
With p <= cores the term rarely decides: it is the average rank's work, which the
formula's critical path mostly covers, except where every rank sends and receives whole
vectors at once (recursive doubling) or copies them.

**Hosts.** Ranks on one host talk through the kernel's loopback (or shared memory); ranks
on different hosts through a network, often much slower. So the model knows two links, each
with its own α and β: ``intra`` (within a host) and ``inter`` (between hosts). Uncalibrated,
both are ``alpha`` and ``beta``, so a job on one host is priced exactly as before; ``minimpi
explain --calibrate --hosts a:2,b:2`` measures both on a multi-host job. Which link a call
pays depends on where its ranks are (:class:`Layout`, the same on every rank):

- a *flat* algorithm does not know where ranks are, and in most of its steps some message
  crosses hosts (every step of a ring; the far steps of a tree), and a step lasts as long as
  its slowest message: it is charged the slower link on every step (:meth:`CostModel.slowest`).
  That overprices a tree over contiguous hosts, whose near steps stay inside a host - where
  the hierarchical algorithm does the same thing and is priced right;
- a *hierarchical* algorithm (``registry.algorithm(..., hierarchical=True)``) prices each of
  its phases - flat algorithms run on groups of ranks - with that flat algorithm's own
  formula over the link the phase uses: intra-host steps on ``intra`` over the most ranks
  any host has, the leaders' step on ``inter`` over one rank per host (where the leaders
  may run whichever of a few flat algorithms is cheapest: ``registry.cheapest``). With one
  host its leaders' step is empty and it costs what its flat phases cost, so a flat
  algorithm (the same or a better one, registered first) wins every tie.

Contention (CPU work) is always priced with the intra-host α and β: copying a byte into
the kernel costs the CPU the same whichever link it leaves on.

Where each input comes from, later sources overriding earlier ones field by field:

1. the built-in defaults below (:class:`CostModel`);
2. a calibration file, JSON ``{"alpha": s, "beta": s/B, "gamma": s/B, "segment": B,
   "cores": N, "alpha_intra": s, "beta_intra": s/B, "alpha_inter": s, "beta_inter": s/B}``
   (any subset; other keys are ignored): ``$MINIMPI_COST_FILE`` if set (empty: none),
   else ``$XDG_CONFIG_HOME/minimpi/cost.json`` (default ``~/.config/minimpi/cost.json``);
3. the environment: ``MINIMPI_COST_ALPHA`` (seconds), ``MINIMPI_COST_BETA`` and
   ``MINIMPI_COST_GAMMA`` (seconds per byte), ``MINIMPI_COST_SEGMENT`` (bytes),
   ``MINIMPI_COST_CORES`` (cores the ranks share), ``MINIMPI_COST_ALPHA_INTRA``,
   ``MINIMPI_COST_BETA_INTRA``, ``MINIMPI_COST_ALPHA_INTER``, ``MINIMPI_COST_BETA_INTER``
   (``auto``, ``None`` or empty: the same as alpha or beta).

Every rank must choose the same algorithm, so every rank must see the same model:
``minimpi run`` exports the launcher's model (the variables above, unless already set; a
link field that is not set travels as ``None``, "the same as alpha or beta") to every
rank, so ranks on other hosts, with other calibration files or core counts, still agree. :func:`model_sources` says where each input came from (``minimpi explain``
prints it).

Segmented (pipelined) algorithms use ``segment`` bytes per message.

**Rendezvous.** A message above the engine's eager limit (``eager``, 64 KiB unless
``MINIMPI_EAGER_LIMIT`` says otherwise - the same variable the engine reads) does not go at
once: the sender sends ``RTS``, the receiver answers ``CTS``, and only then does the data
move. Those are two more frames, each handled at both ends: priced like the frames a step
posts (α/4 of processing each), a rendezvous on the critical path costs 4·α/4 = α more
(:data:`RENDEZVOUS_ALPHAS`), and each one any rank makes adds two frames (2·α/4) to the
work of the contention term. Each registration lists the sizes of the messages its
critical path waits for one after another (``path``); the model counts those above
``eager`` (R, :func:`rendezvous_steps`) and adds ``R·α`` to the formula and ``2·R·p``
messages to the contention term, as if every rank made the critical path's rendezvous
(exact for the ring and recursive doubling, an upper bound for trees). Whether a step's
message is eager depends on p as much as on n: a ring's step moves n/p bytes, so the same
call can be eager at p = 4 and a rendezvous at p = 3.

**Meetings in a segment, oversubscribed.** An algorithm that meets in the communicator's
shared segment (:mod:`minimpi.coll.segment`) moves a large vector in ``c`` slot-sized pieces,
one meeting of every rank each. With more ranks than cores, every meeting after the first
needs the ranks that were descheduled to run again: the segment formulas charge each piece
after the first ``o·α/4`` more, ``o = max(0, p/cores - 1)`` (the ranks per core beyond one:
zero when every rank has a core).
"""
from __future__ import annotations

import functools
import json
import math
import os
import sys
from dataclasses import dataclass, field, replace
from typing import Any, Dict, Iterable, Optional, Sequence, Tuple

from ..data.units import parse_size


@dataclass(frozen=True)
class CostModel:
    # measured by `minimpi explain --calibrate` (3 runs, medians agree within 5%) on the
    # 2-core development machine over TCP loopback, Python 3.11, numpy 2.4
    alpha: float = 46e-6          # per-message latency (s): one-way 8 B ping-pong
    beta: float = 1 / 4.3e9       # per-byte transfer time (s/B): slope, 256 KiB .. 8 MiB
    gamma: float = 1 / 13.5e9     # per-byte reduction time (s/B): float64 SUM in place, 4 MiB
    segment: int = 256 * 1024     # pipeline segment size (B)
    #: the engine's eager limit (B): a larger message is a rendezvous (RTS, CTS, data); the
    #: engine's default, ``p2p.engine.DEFAULT_EAGER_LIMIT``, unless MINIMPI_EAGER_LIMIT is set
    eager: int = 64 * 1024
    #: cores the ranks share (contention term): this host's, unless told otherwise
    cores: int = field(default_factory=lambda: os.cpu_count() or 1)
    # The two links (see "Hosts" above); None: the same as alpha or beta. Measured by
    # `minimpi explain --calibrate --hosts ...` on a job that spans hosts.
    alpha_intra: Optional[float] = None   # latency between two ranks of one host (s)
    beta_intra: Optional[float] = None    # per-byte time between two ranks of one host (s/B)
    alpha_inter: Optional[float] = None   # latency between ranks on different hosts (s)
    beta_inter: Optional[float] = None    # per-byte time between ranks on different hosts (s/B)

    def describe(self) -> str:
        return (f"alpha = {self.alpha * 1e6:.1f} us per message, "
                f"beta = {1 / self.beta / 1e9:.2f} GB/s, gamma = {1 / self.gamma / 1e9:.2f} GB/s "
                f"reduction, segment = {self.segment // 1024} KiB, eager limit = "
                f"{self.eager // 1024} KiB, cores = {self.cores}")

    @property
    def intra(self) -> "Link":
        """The link between two ranks of one host."""
        return Link(_or(self.alpha_intra, self.alpha), _or(self.beta_intra, self.beta))

    @property
    def inter(self) -> "Link":
        """The link between ranks on different hosts."""
        return Link(_or(self.alpha_inter, self.alpha), _or(self.beta_inter, self.beta))

    def slowest(self, layout: "Layout") -> "Link":
        """The link a flat algorithm is charged on every step: within one host the intra-host
        link; across hosts the slower of the two, α and β each (a step waits for its
        slowest message)."""
        if layout.hosts == 1:
            return self.intra
        intra, inter = self.intra, self.inter
        return Link(max(intra.alpha, inter.alpha), max(intra.beta, inter.beta))

    def over(self, link: "Link") -> "CostModel":
        """This model with every message over ``link``: how a flat formula is evaluated for
        a flat algorithm, or for one phase of a hierarchical one."""
        return replace(self, alpha=link.alpha, beta=link.beta, alpha_intra=link.alpha,
                       beta_intra=link.beta, alpha_inter=link.alpha, beta_inter=link.beta)


def _or(value: Optional[float], default: float) -> float:
    return default if value is None else value


@dataclass(frozen=True)
class Link:
    """One kind of link: a message of n bytes over it costs ``alpha + n*beta``."""
    alpha: float
    beta: float

    def time(self, n: float) -> float:
        """Seconds for one message of n bytes."""
        return self.alpha + n * self.beta


@dataclass(frozen=True)
class Layout:
    """Where the ranks of a call run, as far as the cost model cares: how many ranks each
    host has (hosts in order of their lowest rank) and whether each host's ranks are
    contiguous in rank order. Every rank computes the same one from the rendezvous
    (``Endpoint.hosts``), so every rank makes the same choice.

    ``hosts`` (H) and ``widest`` (L, the most ranks on one host: the intra-host steps'
    critical path) are what the hierarchical formulas use.
    """
    counts: Tuple[int, ...]
    contiguous: bool = True

    @property
    def p(self) -> int:
        return sum(self.counts)

    @property
    def hosts(self) -> int:
        return len(self.counts)

    @property
    def widest(self) -> int:
        return max(self.counts)

    @staticmethod
    def one_host(p: int) -> "Layout":
        return Layout((p,))

    @staticmethod
    def of(hosts: Sequence) -> "Layout":
        """The layout of ranks whose host labels (any hashable, one per rank) are ``hosts``
        (a communicator's plan computes it once, at creation)."""
        counts: Dict = {}
        changes = 0                   # how often the host changes walking the ranks in order
        for i, h in enumerate(hosts):
            counts[h] = counts.get(h, 0) + 1
            changes += i > 0 and h != hosts[i - 1]
        return Layout(tuple(counts.values()), contiguous=changes == len(counts) - 1)

    @staticmethod
    def of_group(world_hosts: Tuple[int, ...], group: Tuple[int, ...]) -> "Layout":
        """The layout of a communicator: ``group`` (its world ranks, in its rank order) on
        ``world_hosts`` (the host of each world rank, ``Engine.hosts``)."""
        return Layout.of([world_hosts[w] for w in group])

    def __str__(self) -> str:
        if len(set(self.counts)) == 1:
            text = f"{self.hosts} host{'s' if self.hosts > 1 else ''} x {self.counts[0]} ranks"
        else:
            text = f"{self.hosts} hosts of {'+'.join(map(str, self.counts))} ranks"
        return text if self.contiguous else text + " (hosts interleaved in rank order)"


def link_value(value) -> Optional[float]:
    """A link field's value: a number, or ``auto``/``None``/empty: the same as alpha or beta
    (``minimpi run`` exports a field that is not set as ``None``)."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none", "auto")):
        return None
    return float(value)


def size_value(value) -> int:
    """A byte count: a number, or text such as ``64KiB`` (as ``MINIMPI_EAGER_LIMIT`` is read)."""
    if isinstance(value, (int, float)):
        return int(value)
    return parse_size(value)


#: the model's inputs, their environment variables and how a value is read (``eager`` is
#: the engine's own variable: the model assumes the limit the engine applies)
FIELDS = {"alpha": ("MINIMPI_COST_ALPHA", float), "beta": ("MINIMPI_COST_BETA", float),
          "gamma": ("MINIMPI_COST_GAMMA", float), "segment": ("MINIMPI_COST_SEGMENT", int),
          "eager": ("MINIMPI_EAGER_LIMIT", size_value),
          "cores": ("MINIMPI_COST_CORES", int),
          "alpha_intra": ("MINIMPI_COST_ALPHA_INTRA", link_value),
          "beta_intra": ("MINIMPI_COST_BETA_INTRA", link_value),
          "alpha_inter": ("MINIMPI_COST_ALPHA_INTER", link_value),
          "beta_inter": ("MINIMPI_COST_BETA_INTER", link_value)}

#: the link fields (None: the same as the field named here)
LINK_FIELDS = {"alpha_intra": "alpha", "beta_intra": "beta", "alpha_inter": "alpha",
               "beta_inter": "beta"}

#: where a field's value comes from when nothing overrides it
DEFAULT_SOURCE = {"cores": "this host: os.cpu_count()",
                  **{name: f"= {base} (not calibrated)" for name, base in LINK_FIELDS.items()}}


def config_path(env=None) -> Optional[str]:
    """The calibration file that would be read (it need not exist), or None (``MINIMPI_COST_FILE=``)."""
    env = os.environ if env is None else env
    if "MINIMPI_COST_FILE" in env:
        return env["MINIMPI_COST_FILE"] or None
    base = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "minimpi", "cost.json")


def read_config(path: str) -> Dict[str, float]:
    """The model fields a calibration file sets. Raises ValueError saying what is wrong."""
    try:
        with open(path) as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object such as "
                         f'{{"alpha": 6e-05, "beta": 6.7e-10, "gamma": 3.3e-10}}')
    out: Dict[str, float] = {}
    for name, (_, kind) in FIELDS.items():
        if name not in data:
            continue
        value = data[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"{path}: {name} must be a positive number, got {value!r}")
        out[name] = kind(value)
    return out


#: calibration files already warned about (one warning per file and process)
_warned: set = set()


def model_sources(env=None) -> Tuple[CostModel, Dict[str, str]]:
    """The model and, per field, where its value came from ("built-in default", "file PATH",
    "env NAME"), read now from ``env`` (default: this process's environment). A calibration
    file that cannot be used is ignored with one warning. Collective calls never call this:
    their communicator's plan read it once (:mod:`minimpi.coll.plan`)."""
    env = os.environ if env is None else env
    path = config_path(env)
    model = CostModel()
    sources = {name: DEFAULT_SOURCE.get(name, "built-in default") for name in FIELDS}
    if path and os.path.exists(path):
        try:
            values = read_config(path)
        except (OSError, ValueError) as e:
            if path not in _warned:
                _warned.add(path)
                print(f"minimpi: ignoring the cost-model file: {e}", file=sys.stderr)
        else:
            model = replace(model, **values)
            sources.update({name: f"file {path}" for name in values})
    for name, (var, kind) in FIELDS.items():
        if var in env:
            try:
                value = kind(env[var])
            except ValueError:
                raise ValueError(f"{var}={env[var]!r} is not a number") from None
            model = replace(model, **{name: value})
            sources[name] = f"env {var}"
    return model, sources


def default_model() -> CostModel:
    """The model of this process's environment now: defaults, then the calibration file,
    then the environment (what ``minimpi explain`` and a channel without a plan use)."""
    return model_sources()[0]


def clear_cache() -> None:
    """Warn again about a calibration file that cannot be used (the model itself is read
    afresh by every :func:`model_sources`; communicators read it once, at creation)."""
    _warned.clear()


def contention(model: CostModel, p: int, volume: float, local: float = 0.0,
               messages: float = 0.0, layout: Optional[Layout] = None) -> float:
    """The least time a call can take when its ranks share ``min(p, cores)`` cores: the CPU
    time of all its work - ``messages`` (α/4 each), ``volume`` bytes sent (β at each
    end), ``local`` bytes reduced or copied (γ) - spread over them. See the module
    docstring. Ranks on several hosts (``layout``) use ``min(ranks, cores)`` on each."""
    work = messages * model.alpha / 4 + 2 * volume * model.beta + local * model.gamma
    if layout is not None and layout.hosts > 1:
        return work / max(1, sum(min(c, model.cores) for c in layout.counts))
    return work / max(1, min(p, model.cores))


#: the α a rendezvous adds to a critical path: the RTS and CTS frames before the data, each
#: handled at both ends, α/4 each (see "Rendezvous" in the module docstring)
RENDEZVOUS_ALPHAS = 1


def rendezvous_steps(model: CostModel, sizes: Iterable[float]) -> int:
    """R: how many of the messages ``sizes`` (a critical path's, one after another) are
    above the eager limit, each a rendezvous (see "Rendezvous" in the module docstring)."""
    eager = model.eager
    return sum(1 for size in sizes if size > eager)


def predict(model: CostModel, p: int, formula: float, volume: float = 0.0,
            local: float = 0.0, messages: float = 0.0) -> float:
    """The predicted time: ``max(formula, contention)``."""
    return max(formula, contention(model, p, volume, local, messages))


def tree_volume(p: int) -> int:
    """Blocks a binomial scatter (or gather) of one block per rank moves in all: each
    non-root rank receives (sends) the blocks of its whole subtree - ``p/2·log2 p`` for a
    power of two, p-1 for a flat tree."""
    return sum(min(r & -r, p - r) for r in range(1, p))


def xor_exchanges(p: int) -> int:
    """(rank, step) pairs of a recursive doubling over p ranks without folding (step k:
    rank r exchanges with r XOR 2^k if that rank exists): p·log2 p for a power of two."""
    return sum(1 for k in range(ceil_log2(p)) for r in range(p) if r ^ (1 << k) < p)


def doubling_blocks(block: float, p: int) -> list:
    """The bytes of each step of a binomial gather's root (or scatter's) or Bruck's
    allgather, ``block`` bytes per rank: step k = 0 .. ⌈log2 p⌉-1 moves min(2^k, p-2^k)
    blocks. A critical ``path`` (:mod:`.registry`)."""
    return [block * min(1 << k, p - (1 << k)) for k in range(ceil_log2(p))]


def halves(n: float, steps: int) -> list:
    """n/2, n/4, ... : the bytes of each of ``steps`` halving steps. A critical ``path``'s
    part (:mod:`.registry`)."""
    return [n / (2 << k) for k in range(steps)]


def halving_path(p: int, n: float) -> list:
    """The critical path of recursive halving then doubling (Rabenseifner) over the
    q = 2^⌊log2 p⌋ ranks left after the fold: n/2, n/4, ... down, the same sizes back up,
    and the fold's two whole vectors when p is not a power of two."""
    down = halves(n, floor_log2(p))
    return down + down[::-1] + [n] * 2 * not_pow2(p)


def ceil_log2(p: int) -> int:
    return max(0, math.ceil(math.log2(p))) if p > 1 else 0


def floor_log2(p: int) -> int:
    return p.bit_length() - 1 if p > 0 else 0


def not_pow2(p: int) -> int:
    """1 when p is not a power of two (the fold of recursive doubling/halving costs extra
    steps), else 0."""
    return 0 if p & (p - 1) == 0 else 1


def segments(n: int, segment: int) -> int:
    return max(1, math.ceil(n / segment))


# ----------------------------------------------------------------------------------------
# Formulas as a reader sees them (``minimpi explain``)
# ----------------------------------------------------------------------------------------
#: What the symbols of a registered ``formula`` stand for, besides p (ranks), n (bytes),
#: α, β, γ and ``segment`` (the model's). A formula may end with definitions of its own
#: (``...; S = min(8, max(1, ⌈n/p/segment⌉))``).
SYMBOLS = {
    "f": "1 when p is not a power of two (the fold costs extra steps), else 0",
    "q": "2^⌊log2 p⌋, the ranks left after the fold",
    "o": "max(0, p/cores - 1), the ranks per core beyond one (0 when every rank has a core)",
}

#: display notation -> Python, in this order
_NOTATION = [("⌈log2 p⌉", "ceil_log2(p)"), ("⌊log2 p⌋", "floor_log2(p)"), ("⌈", "_ceil("),
             ("⌉", ")"), ("·", "*"), ("α", "alpha"), ("β", "beta"), ("γ", "gamma")]


def _python(expression: str) -> str:
    for shown, code in _NOTATION:
        expression = expression.replace(shown, code)
    return expression


def formula_values(formula: str, model: CostModel, p: int, n: float) -> Tuple[float, Dict[str, float]]:
    """Evaluate a registered formula for p ranks and n bytes: (seconds, the values of the
    symbols it defines itself). Raises ValueError for a formula it cannot read."""
    names: Dict[str, object] = {
        "p": p, "n": n, "alpha": model.alpha, "beta": model.beta, "gamma": model.gamma,
        "segment": model.segment, "f": not_pow2(p), "q": 1 << floor_log2(p),
        "o": max(0.0, p / max(1, model.cores) - 1),
        "ceil_log2": ceil_log2, "floor_log2": floor_log2, "_ceil": math.ceil,
        "min": min, "max": max, "__builtins__": {}}
    defined: Dict[str, float] = {}
    try:
        expression, definitions = _compiled(formula)
        for name, value in definitions:
            defined[name] = names[name] = eval(value, names)
        return float(eval(expression, names)), defined
    except Exception as exc:   # a typo in a formula string: say which
        raise ValueError(f"cannot evaluate the formula {formula!r}: {exc}") from None


@functools.lru_cache(maxsize=None)
def _compiled(formula: str) -> Tuple[Any, Tuple[Tuple[str, Any], ...]]:
    """A formula's expression and definitions as code (translated and compiled once: the
    plan prices every algorithm of each new call signature with them)."""
    # eval of the registry's own formula strings (never user input), in a namespace with
    # no builtins: the display notation is plain Python arithmetic once translated
    expression, *definitions = [part.strip() for part in formula.split(";")]
    defs = []
    for definition in definitions:
        name, _, value = definition.partition("=")
        defs.append((name.strip(), compile(_python(value).strip(), "<formula>", "eval")))
    return compile(_python(expression).strip(), "<formula>", "eval"), tuple(defs)


def split_terms(cost, model: CostModel, p: int, n: float) -> Tuple[float, float, float]:
    """The latency (α), bandwidth (β) and reduction (γ) parts of a cost function, in
    seconds: every formula is linear in α, β and γ, so each part is the formula with the
    other two set to zero."""
    # (the links of both kinds follow alpha and beta: a flat formula reads only those)
    links = {"alpha_intra": None, "alpha_inter": None, "beta_intra": None, "beta_inter": None}
    only = lambda **kw: float(cost(replace(model, **{"alpha": 0.0, "beta": 0.0, "gamma": 0.0,
                                                     **links, **kw}), p, n))
    return only(alpha=model.alpha), only(beta=model.beta), only(gamma=model.gamma)
