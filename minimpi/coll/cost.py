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
Between equal predictions (typically several algorithms at the same contention bound),
``auto`` takes the smaller formula - fewer steps - then the algorithm registered first.

``cores`` is this host's ``os.cpu_count()`` unless ``MINIMPI_COST_CORES`` (or the
calibration file) says otherwise; for a job over several hosts it would be cores per host
× hosts (each host copies only its own ranks' bytes) - set ``MINIMPI_COST_CORES`` so.
With p <= cores the term rarely decides: it is the average rank's work, which the
formula's critical path mostly covers, except where every rank sends and receives whole
vectors at once (recursive doubling) or copies them.

Where each input comes from, later sources overriding earlier ones field by field:

1. the built-in defaults below (:class:`CostModel`);
2. a calibration file, JSON ``{"alpha": s, "beta": s/B, "gamma": s/B, "segment": B,
   "cores": N}``
   (any subset; other keys are ignored): ``$MINIMPI_COST_FILE`` if set (empty: none),
   else ``$XDG_CONFIG_HOME/minimpi/cost.json`` (default ``~/.config/minimpi/cost.json``);
3. the environment: ``MINIMPI_COST_ALPHA`` (seconds), ``MINIMPI_COST_BETA`` and
   ``MINIMPI_COST_GAMMA`` (seconds per byte), ``MINIMPI_COST_SEGMENT`` (bytes),
   ``MINIMPI_COST_CORES`` (cores the ranks share).

Every rank must choose the same algorithm, so every rank must see the same model:
``minimpi run`` exports the launcher's model (the five variables above, unless already
set) to every rank, so ranks on other hosts, with other calibration files or core counts,
still agree. :func:`model_sources` says where each input came from (``minimpi explain``
prints it).

Segmented (pipelined) algorithms use ``segment`` bytes per message.
"""
from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import dataclass, field, replace
from typing import Dict, Optional, Tuple


@dataclass(frozen=True)
class CostModel:
    # measured by `minimpi explain --calibrate` (3 runs, medians agree within 5%) on the
    # 2-core development machine over TCP loopback, Python 3.11, numpy 2.4
    alpha: float = 46e-6          # per-message latency (s): one-way 8 B ping-pong
    beta: float = 1 / 4.3e9       # per-byte transfer time (s/B): slope, 256 KiB .. 8 MiB
    gamma: float = 1 / 13.5e9     # per-byte reduction time (s/B): float64 SUM in place, 4 MiB
    segment: int = 256 * 1024     # pipeline segment size (B)
    #: cores the ranks share (contention term): this host's, unless told otherwise
    cores: int = field(default_factory=lambda: os.cpu_count() or 1)

    def describe(self) -> str:
        return (f"alpha = {self.alpha * 1e6:.1f} us per message, "
                f"beta = {1 / self.beta / 1e9:.2f} GB/s, gamma = {1 / self.gamma / 1e9:.2f} GB/s "
                f"reduction, segment = {self.segment // 1024} KiB, cores = {self.cores}")


#: the model's inputs, their environment variables and how a value is read
FIELDS = {"alpha": ("MINIMPI_COST_ALPHA", float), "beta": ("MINIMPI_COST_BETA", float),
          "gamma": ("MINIMPI_COST_GAMMA", float), "segment": ("MINIMPI_COST_SEGMENT", int),
          "cores": ("MINIMPI_COST_CORES", int)}

#: where a field's value comes from when nothing overrides it
DEFAULT_SOURCE = {"cores": "this host: os.cpu_count()"}


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


_cache: Dict[tuple, Tuple[CostModel, Dict[str, str]]] = {}
#: everything the model depends on: where the calibration file is, and the overrides
_KEY_VARS = ("MINIMPI_COST_FILE", "XDG_CONFIG_HOME", "HOME") + tuple(var for var, _ in FIELDS.values())
_warned: set = set()


def model_sources(env=None) -> Tuple[CostModel, Dict[str, str]]:
    """The model and, per field, where its value came from ("built-in default", "file PATH",
    "env NAME"). A calibration file that cannot be used is ignored with one warning."""
    env = os.environ if env is None else env
    # Called for every collective call: key on the raw variables, resolve the path on a miss.
    key = tuple(env.get(var) for var in _KEY_VARS)
    hit = _cache.get(key)
    if hit is not None:
        return hit
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
    _cache[key] = (model, sources)
    return model, sources


def default_model() -> CostModel:
    """The model ``auto`` uses: defaults, then the calibration file, then the environment."""
    return model_sources()[0]


def clear_cache() -> None:
    """Forget files already read (after writing a new calibration file in this process)."""
    _cache.clear()
    _warned.clear()


def contention(model: CostModel, p: int, volume: float, local: float = 0.0,
               messages: float = 0.0) -> float:
    """The least time a call can take when its ranks share ``min(p, cores)`` cores: the CPU
    time of all its work - ``messages`` (α/4 each), ``volume`` bytes sent (β at each
    end), ``local`` bytes reduced or copied (γ) - spread over them. See the module
    docstring."""
    work = messages * model.alpha / 4 + 2 * volume * model.beta + local * model.gamma
    return work / max(1, min(p, model.cores))


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
        "ceil_log2": ceil_log2, "floor_log2": floor_log2, "_ceil": math.ceil,
        "min": min, "max": max, "__builtins__": {}}
    # eval of the registry's own formula strings (never user input), in a namespace with
    # no builtins: the display notation is plain Python arithmetic once translated
    expression, *definitions = [part.strip() for part in formula.split(";")]
    defined: Dict[str, float] = {}
    try:
        for definition in definitions:
            name, _, value = definition.partition("=")
            defined[name.strip()] = names[name.strip()] = eval(_python(value), names)
        return float(eval(_python(expression), names)), defined
    except Exception as exc:   # a typo in a formula string: say which
        raise ValueError(f"cannot evaluate the formula {formula!r}: {exc}") from None


def split_terms(cost, model: CostModel, p: int, n: float) -> Tuple[float, float, float]:
    """The latency (α), bandwidth (β) and reduction (γ) parts of a cost function, in
    seconds: every formula is linear in α, β and γ, so each part is the formula with the
    other two set to zero."""
    only = lambda **kw: float(cost(replace(model, **{"alpha": 0.0, "beta": 0.0, "gamma": 0.0, **kw}),
                                   p, n))
    return only(alpha=model.alpha), only(beta=model.beta), only(gamma=model.gamma)
