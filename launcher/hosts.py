"""Host lists and rank placement for multi-host jobs (pure functions, no I/O but the hostfile
reader's caller).

    parse_hosts("a:4,b:4")            -> [HostSlots("a", 4), HostSlots("b", 4)]
    parse_hosts("a,b")                -> [HostSlots("a", 1), HostSlots("b", 1)]
    parse_layout("2x4")               -> [HostSlots("host0", 4), HostSlots("host1", 4)]
    parse_hostfile(text, "hosts.txt") -> the MPI hostfile syntax:
        # comment                       (also after an entry)
        node1 slots=4                   (max_slots=M also accepted: a cap under oversubscription)
        node2                           (one slot)
        node3:2
    expand_nodelist("node[01-03,07],gpu1") -> ["node01", "node02", "node03", "node07", "gpu1"]
    expand_tasks_per_node("2(x3),1")       -> [2, 2, 2, 1]
    hosts_from_slurm_env(os.environ)       -> the step's (or job's) nodes with their task counts
    place(8, hosts, oversubscribe=False)   -> the host of each rank, e.g. ["a"] * 4 + ["b"] * 4
    group_by_host(placement)               -> {"a": [0, 1, 2, 3], "b": [4, 5, 6, 7]}

A host named twice (in --hosts or a hostfile) gets the sum of its slots, at its first place.
Every error is a HostListError (a ValueError) naming the entry or line and what was expected.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, Iterable, List, Mapping, Optional, Sequence

__all__ = ["HostListError", "HostSlots", "parse_hosts", "parse_layout", "parse_hosts_or_layout",
           "parse_hostfile", "expand_nodelist", "expand_tasks_per_node",
           "hosts_from_slurm_env", "place", "group_by_host", "total_slots"]

# expansions bigger than this are refused: a typo like node[1-99999999] must not eat memory
MAX_EXPANSION = 100_000


class HostListError(ValueError):
    """A host list, hostfile, Slurm node list or placement request that cannot be used."""


@dataclass(frozen=True)
class HostSlots:
    host: str
    slots: int
    max_slots: Optional[int] = None   # hostfile max_slots=: never place more ranks than this

    def __str__(self) -> str:
        return f"{self.host}:{self.slots}"


# a DNS name or IPv4 address (letters, digits, '-', '_', '.'), or an IPv6 address in brackets
_NAME = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?")
_IPV6 = re.compile(r"\[[0-9A-Fa-f:.%A-Za-z]*:[0-9A-Fa-f:.%A-Za-z]*\]")


def _check_host(host: str, where: str) -> str:
    if _NAME.fullmatch(host):
        return host
    if _IPV6.fullmatch(host):
        return host[1:-1]
    if not host:
        raise HostListError(f"{where}: the host name is empty")
    if host.count(":") > 1 and "[" not in host:
        raise HostListError(f"{where}: {host!r} looks like an IPv6 address; "
                            f"write it in brackets, e.g. [{host}] or [{host}]:4")
    raise HostListError(f"{where}: {host!r} is not a host name (expected letters, digits, "
                        f"'.', '-', '_', or an IPv6 address in brackets)")


def _slots(text: str, where: str, what: str = "slots") -> int:
    if not re.fullmatch(r"\s*[0-9]+\s*", text):
        raise HostListError(f"{where}: {what} must be a positive integer, got {text!r}")
    n = int(text)
    if n < 1:
        raise HostListError(f"{where}: {what} must be a positive integer, got {n}")
    return n


def _split_host_count(entry: str, where: str):
    """'host' -> (host, None); 'host:N' -> (host, 'N'); '[v6]:N' -> ('[v6]', 'N')."""
    if entry.startswith("["):
        close = entry.find("]")
        if close < 0:
            raise HostListError(f"{where}: {entry!r} has '[' without ']'")
        host, rest = entry[:close + 1], entry[close + 1:]
        if not rest:
            return host, None
        if not rest.startswith(":"):
            raise HostListError(f"{where}: unexpected {rest!r} after {host!r} "
                                f"(expected {host} or {host}:SLOTS)")
        return host, rest[1:]
    if entry.count(":") > 1:
        return entry, None      # _check_host explains the IPv6 bracket rule
    host, sep, count = entry.partition(":")
    return host, (count if sep else None)


def _merge(entries: Iterable[HostSlots]) -> List[HostSlots]:
    merged: Dict[str, HostSlots] = {}
    for e in entries:
        old = merged.get(e.host)
        if old is None:
            merged[e.host] = e
        else:
            caps = [c for c in (old.max_slots, e.max_slots) if c is not None]
            merged[e.host] = HostSlots(e.host, old.slots + e.slots,
                                       sum(caps) if len(caps) == 2 else None)
    return list(merged.values())


def parse_hosts(text: str, option: str = "--hosts") -> List[HostSlots]:
    """``a:4,b:4`` or ``a,b`` (one slot each); ``[fe80::1]:2`` for IPv6 addresses."""
    if not text or not text.strip():
        raise HostListError(f"{option}: empty host list (expected HOST[:SLOTS],..., "
                            f"e.g. node1:4,node2:4)")
    out = []
    for i, raw in enumerate(text.split(","), 1):
        entry = raw.strip()
        where = f"{option} entry {i} {entry!r}" if entry else f"{option} entry {i}"
        if not entry:
            raise HostListError(f"{where} is empty (expected HOST or HOST:SLOTS between "
                                f"commas, e.g. node1:4,node2:4)")
        host, count = _split_host_count(entry, where)
        host = _check_host(host, where)
        out.append(HostSlots(host, 1 if count is None else _slots(count, where)))
    return _merge(out)


_LAYOUT = re.compile(r"\s*([0-9]+)\s*[xX]\s*([0-9]+)\s*")


def parse_layout(text: str, name: str = "host{}", option: str = "--hosts") -> List[HostSlots]:
    """``NxM``: N hosts of M ranks each, named host0 ... host<N-1> (for drawings)."""
    m = _LAYOUT.fullmatch(text or "")
    if not m:
        raise HostListError(f"{option}: {text!r} is not a layout (expected HOSTSxRANKS, "
                            f"e.g. 2x4 for 2 hosts of 4 ranks)")
    nhosts = _slots(m.group(1), f"{option} {text!r}", "the number of hosts")
    per = _slots(m.group(2), f"{option} {text!r}", "the number of ranks per host")
    if nhosts > MAX_EXPANSION:
        raise HostListError(f"{option} {text!r}: {nhosts} hosts is more than the "
                            f"{MAX_EXPANSION} allowed")
    return [HostSlots(name.format(i), per) for i in range(nhosts)]


def parse_hosts_or_layout(text: str, option: str = "--hosts") -> List[HostSlots]:
    """The layout form when the whole text is NxM, otherwise a host list."""
    if _LAYOUT.fullmatch(text or ""):
        return parse_layout(text, option=option)
    return parse_hosts(text, option=option)


def parse_hostfile(text: str, source: str = "hostfile") -> List[HostSlots]:
    """MPI hostfile lines: ``host``, ``host slots=N [max_slots=M]``, ``host:N``; '#' comments."""
    out = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{source}, line {lineno} {line!r}"
        words = line.split()
        host, count = _split_host_count(words[0], where)
        host = _check_host(host, where)
        slots = None if count is None else _slots(count, where)
        max_slots = None
        for word in words[1:]:
            key, sep, value = word.partition("=")
            key = key.lower()
            if not sep or key not in ("slots", "max_slots", "max-slots"):
                raise HostListError(f"{where}: unexpected {word!r} (expected HOST, "
                                    f"HOST slots=N [max_slots=M], or HOST:N)")
            if key == "slots":
                if slots is not None:
                    raise HostListError(f"{where}: the slots are given twice")
                slots = _slots(value, where)
            else:
                if max_slots is not None:
                    raise HostListError(f"{where}: max_slots is given twice")
                max_slots = _slots(value, where, "max_slots")
        slots = 1 if slots is None else slots
        if max_slots is not None and max_slots < slots:
            raise HostListError(f"{where}: max_slots={max_slots} is less than slots={slots}")
        out.append(HostSlots(host, slots, max_slots))
    if not out:
        raise HostListError(f"{source}: no hosts (every line is blank or a comment; "
                            f"expected lines like 'node1 slots=4')")
    return _merge(out)


# ---- Slurm ---------------------------------------------------------------------------------
def _split_top(text: str, where: str) -> List[str]:
    """Split at commas outside brackets, checking the brackets balance."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            if depth:
                raise HostListError(f"{where}: nested '[' at position {i}")
            depth = 1
        elif ch == "]":
            if not depth:
                raise HostListError(f"{where}: ']' without '[' at position {i}")
            depth = 0
        elif ch == "," and not depth:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise HostListError(f"{where}: '[' without a closing ']'")
    parts.append(text[start:])
    return parts


def _expand_brackets(body: str, where: str) -> List[str]:
    """'01-03,07' -> ['01', '02', '03', '07'] (widths kept from each range's start)."""
    out: List[str] = []
    for item in body.split(","):
        m = re.fullmatch(r"([0-9]+)(?:-([0-9]+))?", item.strip())
        if not m:
            raise HostListError(f"{where}: {item!r} in [{body}] is not a number or a range "
                                f"(expected e.g. [1-4,7] or [01-10])")
        lo_text, hi_text = m.group(1), m.group(2)
        lo = int(lo_text)
        hi = lo if hi_text is None else int(hi_text)
        if hi < lo:
            raise HostListError(f"{where}: the range {item!r} runs backwards")
        if len(out) + hi - lo + 1 > MAX_EXPANSION:
            raise HostListError(f"{where}: expands to more than {MAX_EXPANSION} names")
        width = len(lo_text)
        out.extend(str(v).zfill(width) for v in range(lo, hi + 1))
    return out


def expand_nodelist(text: str) -> List[str]:
    """Slurm's compressed node list (SLURM_JOB_NODELIST): ``node[01-04,07],gpu1``,
    also several bracket groups in one name (``r[1-2]n[1-2]`` -> r1n1 r1n2 r2n1 r2n2)."""
    where = f"Slurm node list {text!r}"
    if not text or not text.strip():
        raise HostListError(f"{where}: empty (expected e.g. node[01-04],gpu1)")
    out: List[str] = []
    for part in _split_top(text.strip(), where):
        part = part.strip()
        if not part:
            raise HostListError(f"{where}: empty entry between commas")
        names = [""]
        for literal, body in re.findall(r"([^\[\]]*)(?:\[([^\]]*)\])?", part):
            if body:
                expanded = _expand_brackets(body, where)
                if len(names) * len(expanded) > MAX_EXPANSION:
                    raise HostListError(f"{where}: expands to more than {MAX_EXPANSION} names")
                names = [n + literal + e for n in names for e in expanded]
            else:
                names = [n + literal for n in names]
        if "[]" in part:
            raise HostListError(f"{where}: empty brackets in {part!r}")
        for name in names:
            _check_host(name, where)
        out.extend(names)
        if len(out) > MAX_EXPANSION:
            raise HostListError(f"{where}: expands to more than {MAX_EXPANSION} names")
    return out


def expand_tasks_per_node(text: str) -> List[int]:
    """SLURM_TASKS_PER_NODE / SLURM_STEP_TASKS_PER_NODE: ``2(x3),1`` -> [2, 2, 2, 1]."""
    where = f"Slurm tasks per node {text!r}"
    if not text or not text.strip():
        raise HostListError(f"{where}: empty (expected e.g. 4 or 2(x3),1)")
    out: List[int] = []
    for item in text.split(","):
        m = re.fullmatch(r"\s*([0-9]+)(?:\(x([0-9]+)\))?\s*", item)
        if not m:
            raise HostListError(f"{where}: {item!r} is not N or N(xREPEAT)")
        repeat = int(m.group(2)) if m.group(2) else 1
        if repeat < 1:
            raise HostListError(f"{where}: {item!r} repeats 0 times")
        if len(out) + repeat > MAX_EXPANSION:
            raise HostListError(f"{where}: more than {MAX_EXPANSION} nodes")
        out.extend([int(m.group(1))] * repeat)
    return out


def hosts_from_slurm_env(env: Mapping[str, str]) -> List[HostSlots]:
    """The nodes of this Slurm step (inside srun) or allocation (salloc/sbatch) with the
    number of tasks Slurm gives each, from SLURM_[STEP_|JOB_]NODELIST and *_TASKS_PER_NODE."""
    for nodes_var, tasks_var in (("SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE"),
                                 ("SLURM_JOB_NODELIST", "SLURM_TASKS_PER_NODE"),
                                 ("SLURM_NODELIST", "SLURM_TASKS_PER_NODE")):
        if env.get(nodes_var):
            break
    else:
        raise HostListError("not inside a Slurm job: none of SLURM_STEP_NODELIST, "
                            "SLURM_JOB_NODELIST, SLURM_NODELIST is set")
    nodes = expand_nodelist(env[nodes_var])
    if not env.get(tasks_var):
        raise HostListError(f"{nodes_var} is set but {tasks_var} is not")
    tasks = expand_tasks_per_node(env[tasks_var])
    if len(tasks) != len(nodes):
        raise HostListError(f"{nodes_var}={env[nodes_var]!r} names {len(nodes)} nodes but "
                            f"{tasks_var}={env[tasks_var]!r} gives {len(tasks)} counts")
    return [HostSlots(n, t) for n, t in zip(nodes, tasks) if t > 0]


# ---- placement -----------------------------------------------------------------------------
def total_slots(hosts: Sequence[HostSlots]) -> int:
    return sum(h.slots for h in hosts)


def _describe(hosts: Sequence[HostSlots], limit: int = 8) -> str:
    shown = ", ".join(str(h) for h in hosts[:limit])
    return shown + (f", ... ({len(hosts)} hosts)" if len(hosts) > limit else "")


def place(n: int, hosts: Sequence[HostSlots], oversubscribe: bool = False) -> List[str]:
    """The host of each of n ranks, in blocks: the first host's slots fill first, then the
    next host's, and so on (ranks on one host are consecutive).  More ranks than slots is an
    error unless oversubscribe; then each host gets ranks in proportion to its slots (still
    in blocks), never more than a hostfile's max_slots."""
    if n < 1:
        raise HostListError(f"the number of ranks must be at least 1, got {n}")
    if not hosts:
        raise HostListError("no hosts to place ranks on")
    if len({h.host for h in hosts}) != len(hosts):
        hosts = _merge(hosts)
    total = total_slots(hosts)
    counts: List[int]
    if n <= total:
        counts, left = [], n
        for h in hosts:
            take = min(h.slots, left)
            counts.append(take)
            left -= take
    else:
        if not oversubscribe:
            raise HostListError(
                f"{n} ranks do not fit in the {total} slots of {_describe(hosts)}; "
                f"add hosts or slots, or pass --oversubscribe to run more ranks than slots")
        caps = [h.max_slots if h.max_slots is not None else n for h in hosts]
        if sum(caps) < n:
            raise HostListError(
                f"{n} ranks exceed the max_slots of {_describe(hosts)} "
                f"({sum(caps)} in all), even with --oversubscribe")
        counts = _proportional(n, [h.slots for h in hosts], caps)
    return [h.host for h, c in zip(hosts, counts) for _ in range(c)]


def _proportional(n: int, weights: List[int], caps: List[int]) -> List[int]:
    """Split n into integer shares proportional to weights (largest remainders first, ties
    to the earlier host), each share capped; what a cap cuts goes to the others."""
    counts = [0] * len(weights)
    open_ = [i for i in range(len(weights))]
    left = n
    while left > 0:
        wsum = sum(weights[i] for i in open_)
        exact = {i: left * weights[i] / wsum for i in open_}
        share = {i: int(exact[i]) for i in open_}
        rest = left - sum(share.values())
        for i in sorted(open_, key=lambda i: (-(exact[i] - share[i]), i))[:rest]:
            share[i] += 1
        for i in open_:
            share[i] = min(share[i], caps[i] - counts[i])
            counts[i] += share[i]
        left = n - sum(counts)
        open_ = [i for i in open_ if counts[i] < caps[i]]
    return counts


def group_by_host(placement: Sequence[str]) -> Dict[str, List[int]]:
    """{host: [ranks on it]} in order of each host's first rank."""
    out: Dict[str, List[int]] = {}
    for rank, host in enumerate(placement):
        out.setdefault(host, []).append(rank)
    return out
