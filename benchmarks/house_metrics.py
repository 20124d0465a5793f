"""How the API layer is built, in figures: class depths, Python calls and file moves per small
call, lines of the API layer, and import cycles (type-checking imports included).

    python benchmarks/house_metrics.py            # prints a table (markdown)
    python benchmarks/house_metrics.py --json     # the same figures as JSON

Calls are counted with ``sys.setprofile`` ('call' events: Python functions and generator
resumptions, not C functions) on rank 0 of an in-process world of 2 ranks, per repeated call
after 20 warm-up calls; a "file move" is a 'call' event whose code lives in another file than
the previous event's. Import cycles: the import graph of minimpi/ (imports under ``if
TYPE_CHECKING:`` included, since they tie the modules together for a reader too); every
strongly connected component of more than one module is a cycle.
"""
from __future__ import annotations

import argparse
import ast
import json
import pathlib
import sys
from typing import Callable, Dict, List, Set, Tuple

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]


def class_depths() -> Dict[str, int]:
    """Classes in each public communicator class's hierarchy (its MRO, ``object`` included)."""
    from minimpi import MPI
    return {c.__name__: len(c.__mro__) for c in (
        MPI.Comm, MPI.Intracomm, MPI.Topocomm, MPI.Cartcomm, MPI.Graphcomm, MPI.Distgraphcomm,
        MPI.Intercomm)}


def _profile(op: Callable[[], None], repeats: int) -> Tuple[float, float]:
    calls = [0, 0]
    last = [None]

    def profile(frame, event, arg):
        if event == "call":
            calls[0] += 1
            name = frame.f_code.co_filename
            if name != last[0]:
                calls[1] += 1
                last[0] = name

    sys.setprofile(profile)
    try:
        for _ in range(repeats):
            op()
    finally:
        sys.setprofile(None)
    return calls[0] / repeats, calls[1] / repeats


def per_call(repeats: int = 200) -> Dict[str, Tuple[float, float]]:
    """(Python calls, file moves) per repeated 8 B Allreduce (blocking, and a persistent
    one's Start + Wait), Send and Recv on rank 0 (p = 2,
    in-process transport: what the API, collective and engine layers cost, without a wire)."""
    from minimpi.data import ops
    from minimpi.runtime.inproc import run_threads

    def body(comm):
        a, b = np.ones(1), np.empty(1)
        out = {}
        allreduce = lambda: comm.Allreduce(a, b, op=ops.SUM)  # noqa: E731
        for _ in range(20):
            allreduce()
        comm.Barrier()
        out["Allreduce 8 B"] = _profile(allreduce, repeats)
        comm.Barrier()
        persistent = comm.Allreduce_init(a, b, op=ops.SUM)
        started = lambda: (persistent.Start(), persistent.Wait())  # noqa: E731
        for _ in range(20):
            started()
        comm.Barrier()
        out["Allreduce_init: Start + Wait"] = _profile(started, repeats)
        persistent.Free()
        comm.Barrier()
        # ping-pong: rank 0 counts its Sends, rank 1 its Recvs (each side's own calls)
        peer = 1 - comm.rank
        for _ in range(20):
            if comm.rank == 0:
                comm.Send(a, peer, 1)
                comm.Recv(b, peer, 2)
            else:
                comm.Recv(b, peer, 1)
                comm.Send(a, peer, 2)
        if comm.rank == 0:
            out["Send 8 B"] = _profile(lambda: (comm.Send(a, peer, 1), comm.Recv(b, peer, 2)),
                                       repeats)
        else:
            out["Recv 8 B"] = _profile(lambda: (comm.Recv(b, peer, 1), comm.Send(a, peer, 2)),
                                       repeats)
        return out

    ranks = run_threads(2, body, timeout=120)
    # the ping-pong figures are of a Send + Recv pair: split by the other rank's pair
    return {"Allreduce 8 B": ranks[0]["Allreduce 8 B"],
            "Allreduce_init: Start + Wait": ranks[0]["Allreduce_init: Start + Wait"],
            "Send + Recv pair (rank 0)": ranks[0]["Send 8 B"],
            "Recv + Send pair (rank 1)": ranks[1]["Recv 8 B"]}


def api_lines() -> Dict[str, int]:
    """Lines of the API layer: minimpi/comm/, and of those the intercommunicator front
    (its operations and its collective calls)."""
    def count(paths) -> int:
        return sum(len(p.read_text().splitlines()) for p in paths)
    comm = sorted((ROOT / "minimpi" / "comm").rglob("*.py"))
    inter = [ROOT / "minimpi" / "comm" / "intercomm.py",
             ROOT / "minimpi" / "comm" / "collectives" / "inter_calls.py"]
    return {"minimpi/comm/": count(comm),
            "of which the intercommunicator front (comm/intercomm.py, "
            "comm/collectives/inter_calls.py)": count(inter)}


def names_in_several_layers() -> Dict[str, List[str]]:
    """Module names that modules of more than one folder carry (the layout rule: one
    name, one job - tests/unit/test_layers.py fails on a name in two layers unless both
    modules do one job from two sides)."""
    found: Dict[str, set] = {}
    for folder in ("minimpi", "launcher"):
        for path in (ROOT / folder).rglob("*.py"):
            if path.stem in ("__init__", "__main__"):
                continue
            found.setdefault(path.stem, set()).add(
                str(path.parent.relative_to(ROOT)))
    return {name: sorted(where) for name, where in sorted(found.items()) if len(where) > 1}


def _modules() -> Dict[str, pathlib.Path]:
    found = {}
    for path in (ROOT / "minimpi").rglob("*.py"):
        parts = list(path.relative_to(ROOT / "minimpi").with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(["minimpi"] + parts)] = path
    return found


def import_graph() -> Dict[str, Set[str]]:
    """module -> modules it imports (type-checking imports included)."""
    mods = _modules()
    graph: Dict[str, Set[str]] = {}
    for name, path in mods.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        found: Set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[:len(package) - (node.level - 1)]
                    base_name = ".".join(base + ([node.module] if node.module else []))
                else:
                    base_name = node.module or ""
                for alias in node.names:
                    target = f"{base_name}.{alias.name}"
                    target = target if target in mods else base_name
                    if target in mods and target != name:
                        found.add(target)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in mods and alias.name != name:
                        found.add(alias.name)
        graph[name] = found
    return graph


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on: Set[str] = set()
    out: List[List[str]] = []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    graph = import_graph()
    comps = cycles(graph)
    figures = {
        "class depths (classes in the MRO)": class_depths(),
        "per call (Python calls, file moves)": per_call(),
        "lines of the API layer": api_lines(),
        "module names in several packages": names_in_several_layers(),
        "import cycles (modules in each)": [len(c) for c in comps],
        "import edges inside cycles": sum(len(graph[m] & set(c)) for c in comps for m in c),
        "modules in cycles": comps,
    }
    if args.json:
        print(json.dumps(figures, indent=1))
        return
    for key, value in figures.items():
        if key == "modules in cycles":
            for comp in value:
                print(f"cycle: {', '.join(comp)}")
            continue
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
