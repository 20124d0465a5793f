"""Deadlock detection, launcher side: "every live rank is blocked and nothing moves".

Ranks report their state to the coordinator (:mod:`minimpi.runtime.diagnose`): when a wait has lasted
``block_report_after`` seconds (what it waits for, where in the user's script), again while
that wait is still going on but data moved (an ``io`` counter), and when it ends. The
coordinator keeps the latest report of each rank (``RankState.state``, ``state_time``).

:class:`DeadlockDetector` is polled by the job's loop. It declares a deadlock when

* the address table went out (every rank started), and
* every rank that is still running (process alive, not finalized) reported that it is
  blocked, and
* nothing changed - no state report arrived, no rank exited - for ``timeout`` seconds.

No false alarm for a rank that merely computes for a long time (it never reported being
blocked, or reported the end of its wait), nor for data still in flight (a blocked rank whose
progress moves bytes re-reports, which counts as a change).

:func:`build_report` turns the states into the message the launcher prints: one line per
rank (the call, peer, tag, communicator, file:line; for a large send, the rendezvous
explanation and the fix), the wait-for cycle (or the chain that ends at a rank that already
exited), and, when blocked ranks sit in different collectives of one communicator, that
mismatch.
"""
from __future__ import annotations

import time
from typing import Callable, Dict, List, Optional, Tuple

from minimpi.runtime.states import (
    edge_text,
    format_state,
    wait_targets,
    waiting_text,
    window_stragglers,
)

#: the launcher's exit code for a detected deadlock (see ``minimpi run --help``)
EXIT_DEADLOCK = 3
DEFAULT_TIMEOUT = 5.0


class DeadlockDetector:
    def __init__(self, coord, alive: Callable[[int], bool], timeout: float) -> None:
        self.coord = coord
        self.alive = alive
        self.timeout = float(timeout)
        self._fingerprint: Optional[tuple] = None
        self._since = time.monotonic()

    @property
    def enabled(self) -> bool:
        return self.timeout > 0

    def live_ranks(self) -> List[int]:
        return [st.rank for st in self.coord.ranks if self.alive(st.rank) and not st.finalized]

    def _all_blocked(self) -> bool:
        live = self.live_ranks()
        if not live:
            return False
        for r in live:
            state = self.coord.ranks[r].state
            if not (isinstance(state, dict) and state.get("blocked")):
                return False
        return True

    def check(self, now: float) -> bool:
        """True when the job is deadlocked (call on every turn of the job's loop)."""
        if not self.enabled or not self.coord.table_sent:
            return False
        fp = tuple((st.state_time, st.finalized, self.alive(st.rank)) for st in self.coord.ranks)
        if fp != self._fingerprint:
            self._fingerprint = fp
            self._since = now
            return False
        return now - self._since >= self.timeout and self._all_blocked()

    def restart(self, now: float) -> None:
        """Count "nothing moved" from ``now`` (the launcher itself was stopped until now)."""
        self._since = now

    def next_deadline(self) -> Optional[float]:
        """When :meth:`check` could next say yes (for the loop's poll timeout)."""
        if not self.enabled or not self.coord.table_sent or not self._all_blocked():
            return None
        return self._since + self.timeout


def _gone_text(st) -> str:
    """``already exited normally`` / ``already ended (killed by signal 9 (SIGKILL))``."""
    status = st.exit_status or ""
    if st.finalized and not status:
        # finalize is collective: a rank that finished waits there for the others
        return "already finished its program (it waits in MPI finalize for the others)"
    if st.finalized or status.endswith("code 0"):
        return "already exited normally (finished its program)"
    return f"already ended ({status or 'gone'})"


def _find_cycle(edges: Dict[int, List[Tuple[int, dict]]], start: int) -> Optional[List[Tuple[int, dict, int]]]:
    """A cycle through blocked ranks reachable from ``start``: [(rank, item, next), ...]."""
    path: List[Tuple[int, dict, int]] = []
    on_path: Dict[int, int] = {}

    def dfs(r: int) -> Optional[List[Tuple[int, dict, int]]]:
        on_path[r] = len(path)
        for target, item in edges.get(r, []):
            path.append((r, item, target))
            if target in on_path:
                return path[on_path[target]:]
            if target in edges and target not in visited:
                found = dfs(target)
                if found:
                    return found
            path.pop()
        del on_path[r]
        visited.add(r)
        return None

    visited: set = set()
    return dfs(start)


def wait_for_edges(blocked: Dict[int, dict]) -> Dict[int, List[Tuple[int, dict]]]:
    """The wait-for graph over world ranks, from the states of the blocked ranks: each
    blocked rank -> [(a rank it waits for, the pending request it waits in), ...]."""
    edges: Dict[int, List[Tuple[int, dict]]] = {}
    for r, state in blocked.items():
        out = []
        for item in state.get("items") or []:
            for t in wait_targets(item):
                if t != r:
                    out.append((t, item))
        edges[r] = out
    return edges


def find_cycle(edges: Dict[int, List[Tuple[int, dict]]]) -> Optional[List[Tuple[int, dict, int]]]:
    """The wait-for cycle through the lowest rank that is on one, as [(rank, item, the rank
    it waits for), ...], or None (what the deadlock report and the dashboard show)."""
    for r in sorted(edges):
        cycle = _find_cycle(edges, r)
        if cycle:
            return cycle
    return None


def build_report(coord, alive: Callable[[int], bool], timeout: float) -> Tuple[str, List[str]]:
    """(summary line, detail lines) of a detected deadlock."""
    ranks = coord.ranks
    blocked = {st.rank: st.state for st in ranks
               if alive(st.rank) and not st.finalized and isinstance(st.state, dict)
               and st.state.get("blocked")}
    summary = (f"minimpi: deadlock: every rank still running is blocked in minimpi and nothing "
               f"has moved for {timeout:g} s (--deadlock-timeout); what each rank is doing:")
    lines: List[str] = []
    stragglers = window_stragglers(blocked)
    for st in ranks:
        if st.rank in blocked:
            lines.append(f"  rank {st.rank}: "
                         f"{format_state(blocked[st.rank], stragglers.get(st.rank))}")
        else:
            lines.append(f"  rank {st.rank}: {_gone_text(st)}")

    edges = wait_for_edges(blocked)
    lock_lines = _lock_waits(blocked, edges, ranks, alive)

    shown_cycle = False
    cycle = find_cycle(edges)
    if cycle:
        hops = [edge_text(a, blocked[a], item, b) for a, item, b in cycle]
        lines.append("  wait-for cycle: " + " -> ".join(hops) + f" -> rank {cycle[0][0]}")
        shown_cycle = True
    # waits on ranks that are gone
    for r in sorted(blocked):
        gone_by_item: List[Tuple[dict, List[int]]] = []
        for t, item in edges[r]:
            if t not in blocked and 0 <= t < len(ranks) and not (alive(t) and not ranks[t].finalized):
                for entry in gone_by_item:
                    if entry[0] is item:
                        entry[1].append(t)
                        break
                else:
                    gone_by_item.append((item, [t]))
        for item, targets in gone_by_item:
            if len(targets) == 1:
                t = targets[0]
                never = ("that lock can never be given back" if item.get("lock")
                         else "that message can never come")
                lines.append(f"  {edge_text(r, blocked[r], item, t)} -> rank {t} "
                             f"{_gone_text(ranks[t])}; {never}")
            else:
                who = ", ".join(str(t) for t in targets)
                text = edge_text(r, blocked[r], item, targets[0]).replace(
                    f"waits for rank {targets[0]}", f"waits for any of ranks {who}", 1)
                lines.append(f"  {text} -> ranks {who} already finished; that message can never "
                             f"come from them")
            shown_cycle = True
    if not shown_cycle and blocked:
        lines.append("  (no wait-for cycle through specific ranks: the blocked calls wait for "
                     "messages that no running rank will send)")
    lines.extend(lock_lines)
    for r in sorted(blocked):         # messages that wait unreceived beside the blocked receive
        lines.extend(f"  {text}" for text in waiting_text(r, blocked[r]))
    lines.extend(_collective_mismatches(blocked))
    if any(i.get("proto") == "rndv" for s in blocked.values() for i in s.get("items") or []):
        lines.append("  note: a blocking Send of a message above the eager limit completes only "
                     "when the receiver posts its receive; two ranks that both Send first wait "
                     "for each other forever")
    return summary, lines


def _lock_waits(blocked: Dict[int, dict], edges: Dict[int, List[Tuple[int, dict]]], ranks,
                alive: Callable[[int], bool]) -> List[str]:
    """A rank whose window call waits for a lock that another rank holds waits for that
    holder, not for the target (which serves requests whenever it is inside any MPI call).
    Each blocked target reports its windows' lock tables (``state["locks"]``: holders and
    the queue, world ranks); the edges of a rank queued there are turned towards the
    holders, and a line says who holds what. Returns those lines."""
    tables: Dict[Tuple[str, int], dict] = {}
    for state in blocked.values():
        for table in state.get("locks") or []:
            tables[(table.get("label"), table.get("target"))] = table
    lines: List[str] = []
    if not tables:
        return lines
    for r, state in sorted(blocked.items()):
        epoch = state.get("epoch") or {}
        label = epoch.get("label")
        if label is None:
            continue
        turned: List[Tuple[int, dict]] = []
        for t, item in edges.get(r, []):
            table = tables.get((label, t))
            queued = table is not None and any(w == r for w, _ in table.get("waiting") or [])
            holders = [h for h in (table or {}).get("holders") or [] if h != r] if queued else []
            if not holders:
                turned.append((t, item))
                continue
            for h in holders:
                turned.append((h, dict(item, lock=True, lock_target=t, lock_mode=table["mode"],
                                       lock_win=table.get("win"))))
            mode = table["mode"]
            who = ", ".join(str(h) for h in holders)
            held = (f"the {mode} lock on rank {t} of window {table.get('win')!r}, which rank"
                    f"{'s' if len(holders) > 1 else ''} {who} hold{'' if len(holders) > 1 else 's'}")
            where = f" at {state['where']}" if state.get("where") else ""
            text = f"  rank {r} waits in {epoch.get('call')}{where} for {held}"
            for h in holders:
                if h in blocked:
                    text += f"; rank {h} is {format_state(blocked[h])}"
                elif 0 <= h < len(ranks):
                    text += f"; rank {h} {_gone_text(ranks[h])}"
            if text not in lines:
                lines.append(text)
        edges[r] = turned
    return lines


def _collective_mismatches(blocked: Dict[int, dict]) -> List[str]:
    """Blocked ranks of one communicator inside different collectives."""
    by_comm: Dict[str, List[Tuple[int, dict]]] = {}
    for r, state in sorted(blocked.items()):
        coll = state.get("coll")
        if not coll:
            for item in state.get("items") or []:
                if item.get("dir") == "coll":
                    coll = item.get("coll")
                    break
        if coll and coll.get("seq") is not None:
            by_comm.setdefault(coll.get("comm"), []).append((r, coll))
    out = []
    for comm, entries in by_comm.items():
        first_rank, first = entries[0]
        for r, coll in entries[1:]:
            if (coll.get("seq"), coll.get("sig")) != (first.get("seq"), first.get("sig")):
                out.append(f"  collective mismatch on {comm}: rank {r} is in {coll.get('sig')} as "
                           f"collective #{coll.get('seq')} while rank {first_rank} is in "
                           f"{first.get('sig')} as collective #{first.get('seq')}; every rank "
                           f"must call the same collectives in the same order")
                break
    return out
