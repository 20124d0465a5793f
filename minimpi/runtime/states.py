"""What a blocked rank's state says, as text: the lines of the launcher's deadlock report
and of ``--timeout``'s "what each rank was doing".

The states are the plain dicts a rank reports (:mod:`minimpi.runtime.diagnose` describes
them and sends them). This module reads nothing but those dicts, so the launcher imports it
without the engine, the collectives or numpy (``minimpi run`` starts faster for it).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from ..data.units import format_size

ENV_DEADLOCK_TIMEOUT = "MINIMPI_DEADLOCK_TIMEOUT"


def _peer_text(item: Dict[str, Any], word: str = "rank") -> str:
    peer, world = item.get("peer"), item.get("world")
    if isinstance(peer, int) and peer < 0:
        return f"any {word} of {item.get('comm')}"
    text = f"{word} {peer}"
    if world is not None and world != peer:
        text += f" (world rank {world})"
    return text


def rendezvous_text(item: Dict[str, Any], eager_limit: int) -> str:
    call = item.get("call") or "Send"
    return (f"{call}(dest={item.get('peer')}) of {format_size(int(item.get('nbytes') or 0))} "
            f"waits for its matching receive (messages above the eager limit of "
            f"{format_size(int(eager_limit))} use rendezvous, as in MPI); fix: use Sendrecv, or "
            f"Isend/Irecv + Waitall")


def item_text(item: Dict[str, Any], eager_limit: int = 65536) -> str:
    """``recv(source=1, tag=7) on COMM_WORLD`` plus what the protocol says about it."""
    if item.get("dir") == "coll":
        return _coll_text(item.get("coll") or {}, item.get("step_items") or [])
    call = item.get("call")
    if item.get("dir") in ("send", "recv"):
        name = "dest" if item["dir"] == "send" else "source"
        peer = item.get("peer")
        peer_s = "ANY_SOURCE" if isinstance(peer, int) and peer < 0 and item["dir"] == "recv" else peer
        tag = item.get("tag")
        tag_s = "ANY_TAG" if tag == -1 and item["dir"] == "recv" else tag
        text = f"{call}({name}={peer_s}, tag={tag_s}) on {item.get('comm')}"
    else:
        text = str(call)
    proto = item.get("proto")
    if proto == "rndv":
        text += ": " + rendezvous_text(item, eager_limit)
    elif proto == "sync":
        text += ": a synchronous send waits for its matching receive"
    return text


def _coll_text(coll: Dict[str, Any], items: List[Dict[str, Any]]) -> str:
    peers = []
    for it in items:
        p = _peer_text(it)
        if p not in peers:
            peers.append(p)
    step = coll.get("step")
    waiting = f"waiting for {', '.join(peers)}" if peers else "waiting"
    text = f"{coll.get('call')} on {coll.get('comm')} (step {step}: {waiting})"
    if coll.get("seq") is not None:
        text += f" - collective #{coll['seq']}: {coll.get('sig')}"
    return text


def _ranks_text(ranks: List[int]) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(str(r) for r in ranks)}"


def epoch_text(epoch: Dict[str, Any], missing: Optional[List[int]] = None) -> str:
    """``Win.Fence on window 'w0' (COMM_WORLD), fence epoch`` plus, for a collective window
    call, the ranks of the window that have not reached it (``missing``, world ranks), or
    for a targeted one the ranks it waits for."""
    text = (f"{epoch.get('call')} on window {epoch.get('win')!r} ({epoch.get('comm')}), "
            f"{epoch.get('epoch')} epoch")
    if missing:
        text += f", {_ranks_text(missing)} {'have' if len(missing) > 1 else 'has'} not reached it"
    elif epoch.get("peers") and not epoch.get("collective"):
        text += f", waiting for {_ranks_text(epoch['peers'])}"
    return text


def format_state(state: Dict[str, Any], missing: Optional[List[int]] = None) -> str:
    """One line: what a rank is doing, from its latest report (``missing``: for a rank in a
    collective window call, the window's ranks that are not in it, see :func:`epoch_text`)."""
    if state.get("error"):
        return f"failed with {state['error']}"
    if not state.get("blocked"):
        return "running (not blocked in minimpi)"
    items = state.get("items") or []
    limit = state.get("eager_limit") or 65536
    coll = state.get("coll")
    epoch = state.get("epoch")
    if epoch:
        what = epoch_text(epoch, missing)
    elif coll:
        what = _coll_text(coll, items)
    elif items:
        what = "; ".join(item_text(i, limit) for i in items)
    else:
        what = "a wait"
    text = f"blocked in {what}"
    if state.get("where"):
        text += f" at {state['where']}"
        if state.get("code"):
            text += f" ({state['code']})"
    threads = state.get("threads")
    if threads:     # several threads of the program: each one's part
        text = "; ".join(thread_text({**t, "blocked": "idle" not in t}) for t in threads)
    return text


def edge_text(rank: int, state: Dict[str, Any], item: Dict[str, Any], target: int) -> str:
    """``rank 0 waits for rank 1 in recv(tag=7) at ring.py:12`` (world ranks)."""
    if item.get("lock"):
        epoch = state.get("epoch") or {}
        what = (f"{epoch.get('call')} on window {item.get('lock_win')!r} (for the "
                f"{item.get('lock_mode')} lock on rank {item.get('lock_target')}, which rank "
                f"{target} holds)")
    elif state.get("epoch"):
        epoch = state["epoch"]
        what = f"{epoch.get('call')} on window {epoch.get('win')!r}"
    elif item.get("dir") == "coll" or state.get("coll"):
        coll = item.get("coll") if item.get("dir") == "coll" else state.get("coll")
        what = f"{coll.get('call')} on {coll.get('comm')} (step {coll.get('step')})"
    elif item.get("proto") == "rndv":
        what = (f"{item.get('call')}(dest={item.get('peer')}, tag={item.get('tag')}) of "
                f"{format_size(int(item.get('nbytes') or 0))}, which waits for its matching receive")
    else:
        tag = item.get("tag")
        tag_s = "ANY_TAG" if tag == -1 and item.get("dir") == "recv" else tag
        what = f"{item.get('call')}(tag={tag_s})"
        if item.get("comm") not in (None, "COMM_WORLD"):
            what += f" on {item.get('comm')}"
    text = f"rank {rank} waits for rank {target} in {what}"
    if state.get("where"):
        text += f" at {state['where']}"
    return text


def waiting_text(rank: int, state: Dict[str, Any]) -> List[str]:
    """What waits unreceived at a blocked rank, beside what it waits for: ``rank 1 waits for
    tag 1 from rank 0 in recv at x.py:5; waiting unreceived at rank 1: a message with tag 2
    from rank 0 (16 B) on COMM_WORLD``: a tag or source mix-up, or collectives out of step."""
    waiting = state.get("waiting") or []
    if not waiting:
        return []
    wants = []
    for item in state.get("items") or []:
        if item.get("dir") == "recv":
            tag = item.get("tag")
            tag_s = "any tag" if tag == -1 else f"tag {tag}"
            wants.append(f"{tag_s} from {_peer_text(item)} in {item.get('call')}")
    coll = state.get("coll")
    if coll:
        wants = [f"step {coll.get('step')} of {coll.get('call')} (collective #{coll.get('seq')})"]
    where = f" at {state['where']}" if state.get("where") else ""
    head = f"rank {rank} waits for {' or '.join(wants) or 'a message'}{where}"
    found = []
    for w in waiting:
        src = f"rank {w.get('source')}" + (f" (world rank {w['world']})"
                                           if w.get("world") not in (None, w.get("source")) else "")
        if w.get("coll"):
            found.append(f"a message of {w['coll']} (collective #{w.get('seq')}) from {src}")
        else:
            found.append(f"a message with tag {w.get('tag')} from {src} "
                         f"({format_size(int(w.get('nbytes') or 0))}) on {w.get('comm')}")
    return [f"{head}; waiting unreceived at rank {rank}: {'; '.join(found)}"]


def window_stragglers(blocked: Dict[int, Dict[str, Any]]) -> Dict[int, List[int]]:
    """For each blocked rank inside a collective window call (``Win.Fence``, ``Win.Free``):
    the world ranks of that window that are not blocked in the same call on it."""
    out: Dict[int, List[int]] = {}
    for r, state in blocked.items():
        epoch = state.get("epoch")
        if not epoch or not epoch.get("collective"):
            continue
        there = {q for q, other in blocked.items()
                 if (other.get("epoch") or {}).get("label") == epoch.get("label")
                 and (other.get("epoch") or {}).get("call") == epoch.get("call")}
        out[r] = [w for w in epoch.get("group") or [] if w not in there]
    return out


def wait_targets(item: Dict[str, Any]) -> List[int]:
    """World ranks an item waits for (several for ANY_SOURCE or a collective step)."""
    if item.get("dir") == "coll":
        out: List[int] = []
        for sub in item.get("step_items") or []:
            for t in wait_targets(sub):
                if t not in out:
                    out.append(t)
        return out
    if item.get("world") is not None:
        return [int(item["world"])]
    return [int(w) for w in (item.get("any") or [])]


def thread_text(entry: Dict[str, Any]) -> str:
    """``thread 'reader': blocked in recv(...) at x.py:5`` / ``thread 'MainThread' waits for
    another thread at x.py:20 (t.join())`` (an entry of a state's ``threads``)."""
    where = f" at {entry['where']}" if entry.get("where") else ""
    if entry.get("where") and entry.get("code"):
        where += f" ({entry['code']})"
    if entry.get("idle"):
        return f"thread {entry.get('thread')!r} waits for another thread{where}"
    if entry.get("blocked"):
        return f"thread {entry.get('thread')!r}: {format_state(entry)}"
    return f"thread {entry.get('thread')!r} is running{where}"
