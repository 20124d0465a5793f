"""CPU binding of a rank: ``minimpi run --bind-to``, ``--map-by`` and ``--report-bindings``
(mpirun's options of the same names).

The launcher puts the policy in every rank's environment; each rank computes its own CPUs,
from its place among the ranks of its host (``MINIMPI_LOCAL_RANKS``), the CPUs it was allowed
to run on when it started (the launcher's, or its agent's on another host) and this host's
topology (``/sys/devices/system/cpu``), then pins itself before it starts any thread, so that
every thread it starts later (numpy's BLAS pool, minimpi's own) inherits the binding.

    MINIMPI_BIND_TO    none | core | hwthread | socket | package | numa, with ":N" for N of
                       them per rank (core:2)
    MINIMPI_MAP_BY     slot | core | hwthread | socket | package | numa | node: how consecutive
                       ranks of a host are spread (slot, core, node: core after core;
                       socket: one socket after the other)
    MINIMPI_REPORT_BINDINGS=1   each rank says where it is bound, one line on its stderr

Placement is round-robin: with more ranks than cores, rank ``cores`` shares core 0 again
(minimpi never refuses to oversubscribe). Processes started by ``Spawn`` are not bound.

A bound rank also says how crowded its CPUs are (:func:`sharing`: how many of its host's
ranks are bound to CPUs it has, and how many CPUs it has) to the progress policy
(:func:`minimpi.p2p.progress.set_binding`), which decides from that how its waits spin,
yield or sleep - not from the CPUs it may run on after the binding: one core per rank would
read as "two ranks, one core" at p = 2 (yielding where each rank has a core of its own) and
as "32 ranks on one core" at p = 32 on 2 cores (sleeping through every wait: 8 B
``Allreduce`` 1.7-2.1 ms a call against 0.6-0.8 unbound).

This module is imported by the rank start script before numpy and minimpi: it must import
nothing heavy.
"""
from __future__ import annotations

import os
from typing import Mapping, Optional

ENV_BIND = "MINIMPI_BIND_TO"
ENV_MAP = "MINIMPI_MAP_BY"
ENV_REPORT = "MINIMPI_REPORT_BINDINGS"
#: minimpi.transports.shm.ENV_LOCAL_RANKS, minimpi.runtime.bootstrap.ENV_RANK / ENV_PARENT
ENV_LOCAL_RANKS = "MINIMPI_LOCAL_RANKS"
ENV_RANK = "MINIMPI_RANK"
ENV_PARENT = "MINIMPI_PARENT"

#: what each level is called in --bind-to/--map-by (package is socket's other name)
BIND_LEVELS = ("none", "core", "hwthread", "socket", "package", "numa")
MAP_LEVELS = ("slot", "core", "hwthread", "socket", "package", "numa", "node")
_SYS_CPU = "/sys/devices/system/cpu"
_SYS_NODE = "/sys/devices/system/node"


class BindingError(ValueError):
    """A binding policy that cannot be read (the message names the variable and value)."""


def parse_bind(text: str) -> tuple[str, int]:
    """``core`` -> ("core", 1); ``core:2`` -> ("core", 2); raises BindingError."""
    level, _, count = text.strip().lower().partition(":")
    if level == "package":
        level = "socket"
    if level not in BIND_LEVELS:
        raise BindingError(f"--bind-to {text}: expected one of {', '.join(BIND_LEVELS)} "
                           f"(optionally :N, e.g. core:2)")
    n = 1
    if count:
        try:
            n = int(count)
        except ValueError:
            n = 0
        if n < 1:
            raise BindingError(f"--bind-to {text}: the count after ':' must be a whole number "
                               f">= 1")
        if level == "none":
            raise BindingError(f"--bind-to {text}: none takes no count")
    return level, n


def parse_map(text: str) -> str:
    level = text.strip().lower()
    if level == "package":
        level = "socket"
    if level not in MAP_LEVELS:
        raise BindingError(f"--map-by {text}: expected one of {', '.join(MAP_LEVELS)}")
    return level


def default_bind_for_map(level: str) -> str:
    """The binding ``--map-by LEVEL`` implies when no ``--bind-to`` is given (as Open MPI
    binds to the object it maps by)."""
    return {"hwthread": "hwthread", "socket": "socket", "numa": "numa"}.get(level, "core")


# ---- topology ---------------------------------------------------------------------------
class Topology:
    """The CPUs this process may use, grouped by core, socket and NUMA node (each group
    ordered by its lowest CPU, CPUs in increasing order)."""

    def __init__(self, allowed: set[int], sys_cpu: str = _SYS_CPU,
                 sys_node: str = _SYS_NODE) -> None:
        self.cpus = sorted(allowed)
        core_of: dict[int, tuple[int, int]] = {}
        package_of: dict[int, int] = {}
        for cpu in self.cpus:
            package = _read_int(f"{sys_cpu}/cpu{cpu}/topology/physical_package_id", 0)
            core = _read_int(f"{sys_cpu}/cpu{cpu}/topology/core_id", cpu)
            package_of[cpu] = package
            core_of[cpu] = (package, core)
        node_of = {cpu: 0 for cpu in self.cpus}
        try:
            nodes = [n for n in os.listdir(sys_node) if n.startswith("node") and n[4:].isdigit()]
        except OSError:
            nodes = []
        for name in nodes:
            for cpu in _read_cpulist(f"{sys_node}/{name}/cpulist"):
                if cpu in node_of:
                    node_of[cpu] = int(name[4:])
        self.groups = {
            "hwthread": [[cpu] for cpu in self.cpus],
            "core": _group(self.cpus, core_of),
            "socket": _group(self.cpus, package_of),
            "numa": _group(self.cpus, node_of),
        }

    def containing(self, level: str, cpu: int) -> tuple[int, list[int]]:
        """(index, CPUs) of the ``level`` group that holds ``cpu``."""
        for index, group in enumerate(self.groups[level]):
            if cpu in group:
                return index, group
        raise ValueError(f"CPU {cpu} is not one of {self.cpus}")


def _group(cpus: list[int], key_of: dict) -> list[list[int]]:
    groups: dict = {}
    for cpu in cpus:                      # in CPU order: groups ordered by their lowest CPU
        groups.setdefault(key_of[cpu], []).append(cpu)
    return list(groups.values())


def _read_int(path: str, default: int) -> int:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return default


def _read_cpulist(path: str) -> list[int]:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return []
    return parse_cpulist(text)


def parse_cpulist(text: str) -> list[int]:
    """``0-3,8`` -> [0, 1, 2, 3, 8] (the kernel's CPU list format)."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        low, _, high = part.partition("-")
        out.extend(range(int(low), int(high or low) + 1))
    return out


def format_cpulist(cpus) -> str:
    """[0, 1, 2, 5] -> ``0-2,5``."""
    ordered = sorted(set(cpus))
    parts, i = [], 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


# ---- placement --------------------------------------------------------------------------
def cpus_for(index: int, bind: str, count: int, mapping: str, topo: Topology
             ) -> tuple[list[int], str]:
    """The CPUs of the ``index``-th rank of a host under ``--bind-to bind[:count]`` and
    ``--map-by mapping``, and how to name them (``core 1``). Round-robin past the last."""
    if count > 1:
        units = topo.groups[bind]
        first = (index * count) % len(units)
        picked = [(first + k) % len(units) for k in range(min(count, len(units)))]
        cpus = sorted({cpu for u in picked for cpu in units[u]})
        name = f"{bind} {picked[0]}" if len(picked) == 1 else \
            f"{bind}s {', '.join(str(u) for u in picked)}"
        return cpus, name
    location = _location(index, mapping, topo)
    unit, cpus = topo.containing(bind, location)
    return list(cpus), f"{bind} {unit}"


def _location(index: int, mapping: str, topo: Topology) -> int:
    """The CPU the ``index``-th rank is mapped to (its binding is what contains it)."""
    if mapping == "hwthread":
        return topo.cpus[index % len(topo.cpus)]
    if mapping in ("socket", "numa"):
        groups = topo.groups[mapping]
        group = groups[index % len(groups)]
        cores = [c for c in topo.groups["core"] if c[0] in group]
        return cores[(index // len(groups)) % len(cores)][0]
    cores = topo.groups["core"]                       # slot, core, node: core after core
    return cores[index % len(cores)][0]


def _local_ranks(environ: Mapping[str, str]) -> list[int]:
    """The job's ranks on this host, sorted (empty: not said, or not readable)."""
    try:
        return sorted(parse_cpulist(environ.get(ENV_LOCAL_RANKS) or ""))  # "0-3,5" format
    except ValueError:
        return []


def local_index(environ: Mapping[str, str]) -> Optional[int]:
    """This rank's place among the ranks of its host (None: not a rank of a job)."""
    try:
        rank = int(environ[ENV_RANK])
    except (KeyError, ValueError):
        return None
    ranks = _local_ranks(environ)
    return ranks.index(rank) if rank in ranks else rank


def sharing(index: int, local: int, bind: str, count: int, mapping: str, topo: Topology
            ) -> tuple[int, int]:
    """(ranks, CPUs) for the ``index``-th of a host's ``local`` ranks placed by
    :func:`cpus_for`: how many of them (itself included) are bound to a CPU of its own CPU
    set, and how many CPUs that set has."""
    mine = set(cpus_for(index, bind, count, mapping, topo)[0])
    ranks = sum(1 for j in range(local)
                if j == index or mine.intersection(cpus_for(j, bind, count, mapping, topo)[0]))
    return ranks, len(mine)


def bind_this_process(environ: Mapping[str, str] = os.environ) -> Optional[str]:
    """Pin this process (every thread it has) as ``MINIMPI_BIND_TO`` says; returns the
    ``--report-bindings`` line when that is asked for (None otherwise). Call it before the
    process starts threads. Processes started by Spawn, and processes that are not ranks,
    are left as they are."""
    bind_text = environ.get(ENV_BIND)
    report = environ.get(ENV_REPORT) == "1"
    if (not bind_text and not report) or environ.get(ENV_PARENT):
        return None
    index = local_index(environ)
    if index is None:
        return None
    rank = environ.get(ENV_RANK)
    bind, count = parse_bind(bind_text or "none")
    allowed = os.sched_getaffinity(0)
    if bind == "none":
        return (f"minimpi: rank {rank} not bound (CPUs {format_cpulist(allowed)})"
                if report else None)
    topo = Topology(allowed)
    mapping = parse_map(environ.get(ENV_MAP) or "core")
    cpus, name = cpus_for(index, bind, count, mapping, topo)
    local = len(set(_local_ranks(environ)))
    if index < local:
        # (imported here: this module is imported before minimpi is, and must stay light)
        from minimpi.p2p.progress import set_binding
        set_binding(sharing(index, local, bind, count, mapping, topo))
    for tid in _threads():
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError:               # a thread that ended meanwhile
            pass
    if not report:
        return None
    now = os.sched_getaffinity(0)
    return f"minimpi: rank {rank} bound to {name} (CPUs {format_cpulist(now)})"


def _threads() -> list[int]:
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return [0]
