"""The architecture as a test: imports run downward only, and no module imports itself back.

Layers, top to bottom (docs/architecture.md draws them):

    launcher/                  minimpi run, draw, explain; coordinator; spawning
    minimpi/tools/             draw, calibrate (run algorithms in a world); _shim, _start
    minimpi/MPI.py, rc.py      the mpi4py face
    minimpi/runtime/           a process's world: bootstrap, COMM_WORLD, trace, diagnosis
    minimpi/comm/              Comm, Intracomm, Group, topology, collective methods
    minimpi/dynamic/           intercommunicators (beside comm/, which never imports it)
    minimpi/coll/              collective algorithms, schedule, registry, cost, mismatch
    minimpi/p2p/               engine, matching, requests, endpoint
    minimpi/transports/        frames, tcp, inproc
    minimpi/data/, errors.py, constants.py    the ground floor

Imports guarded by ``if TYPE_CHECKING:`` are type hints, not dependencies, and are ignored.
"""
from __future__ import annotations

import ast
import pathlib
from typing import Dict, List, Set, Tuple

ROOT = pathlib.Path(__file__).resolve().parents[2]

LAYERS = [
    ("minimpi.launcher", 9), ("minimpi.__main__", 9),
    ("minimpi.tools", 8), ("minimpi._shim", 8), ("minimpi._start", 8),
    ("minimpi.MPI", 7), ("minimpi.rc", 7),
    ("minimpi.runtime", 6),
    ("minimpi.comm", 5), ("minimpi.dynamic", 5), ("minimpi.io", 5), ("minimpi.rma", 5),
    ("minimpi.coll", 4),
    ("minimpi.p2p", 3),
    ("minimpi.transports", 2),
    ("minimpi.data", 1),
    ("minimpi.errors", 0), ("minimpi.constants", 0),
]


def modules() -> Dict[str, pathlib.Path]:
    found = {}
    for folder, package in (("minimpi", "minimpi"), ("launcher", "minimpi.launcher")):
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package] + parts)] = path
    return found


class _Imports(ast.NodeVisitor):
    def __init__(self, module: str, is_package: bool, known: Set[str]) -> None:
        self.package = module.split(".") if is_package else module.split(".")[:-1]
        self.known = known
        self.found: List[Tuple[str, int]] = []

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
        if name == "TYPE_CHECKING":
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package[:len(self.package) - (node.level - 1)]
            base_name = ".".join(base + ([node.module] if node.module else []))
        else:
            base_name = node.module or ""
        for alias in node.names:
            target = f"{base_name}.{alias.name}"
            target = target if target in self.known else base_name
            if target in self.known:
                self.found.append((target, node.lineno))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name in self.known:
                self.found.append((alias.name, node.lineno))


def import_graph() -> Dict[str, List[Tuple[str, int]]]:
    mods = modules()
    graph = {}
    for name, path in mods.items():
        visitor = _Imports(name, path.name == "__init__.py", set(mods))
        visitor.visit(ast.parse(path.read_text(), str(path)))
        graph[name] = visitor.found
    return graph


def layer_of(module: str) -> int:
    matches = [(len(prefix), level) for prefix, level in LAYERS
               if module == prefix or module.startswith(prefix + ".")]
    assert matches, f"{module} belongs to no layer: add it to LAYERS and docs/architecture.md"
    return max(matches)[1]


def test_every_module_has_a_layer():
    for module in modules():
        if module != "minimpi":
            layer_of(module)


def test_no_import_goes_up_a_layer():
    upward = []
    for module, imports in import_graph().items():
        if module == "minimpi":      # the package root: ground-floor names and lazy faces
            continue
        for target, line in imports:
            if target != "minimpi" and layer_of(target) > layer_of(module):
                upward.append(f"{module}:{line} imports {target}")
    assert not upward, "lower layers must not import higher ones:\n" + "\n".join(upward)


def test_no_import_circle():
    graph = {m: {t for t, _ in imports} for m, imports in import_graph().items()}
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    circles: List[List[str]] = []

    def strongly_connected(v: str) -> None:   # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                strongly_connected(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in graph:
        if module not in index:
            strongly_connected(module)
    assert not circles, "import circles: " + "; ".join(" <-> ".join(c) for c in circles)


def test_algorithms_never_see_the_communicator():
    """coll/ talks to the p2p layer through an endpoint only (the API layer calls coll)."""
    for module, imports in import_graph().items():
        if module.startswith("minimpi.coll"):
            assert not [t for t, _ in imports if t.startswith("minimpi.comm")], module
