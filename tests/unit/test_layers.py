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

Layers also talk only through public names: no module reads or writes a private attribute
(``x._name``, ``x`` not ``self``/``cls``) that only another layer defines, imports another
layer's private name, or replaces another layer's methods on an object
(``engine.isend = wrapper``); the bus (minimpi.bus) exists for that.
"""
from __future__ import annotations

import ast
import functools
import pathlib
from typing import Dict, Iterable, List, Set, Tuple

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
    ("minimpi.errors", 0), ("minimpi.constants", 0), ("minimpi.bus", 0), ("minimpi.front", 0),
    ("minimpi.handles", 0),
]


@functools.lru_cache(maxsize=None)
def _parse(path: pathlib.Path) -> ast.AST:
    """Each source file is parsed once per test run: the checks below share the trees."""
    return ast.parse(path.read_text(), str(path))


@functools.lru_cache(maxsize=None)
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


@functools.lru_cache(maxsize=None)
def import_graph() -> Dict[str, List[Tuple[str, int]]]:
    mods = modules()
    graph = {}
    for name, path in mods.items():
        visitor = _Imports(name, path.name == "__init__.py", set(mods))
        visitor.visit(_parse(path))
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


# ----------------------------------------------------------------------------------------
# private names stay inside their layer
# ----------------------------------------------------------------------------------------
#: (module, private name) uses allowed across layers: none (the last four went with the
#: engine interface); keep it empty
KNOWN_PRIVATE_USES: Set[Tuple[str, str]] = set()


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


class _Definitions(ast.NodeVisitor):
    """Private names a module defines: functions, classes, module and class variables,
    ``__slots__`` entries, ``self._x`` attributes; and the methods of its classes."""

    def __init__(self) -> None:
        self.private: Set[str] = set()
        self.methods: Set[str] = set()      # plain methods (not properties)
        self.data: Set[str] = set()         # instance attributes (self.x = ..., __slots__)
        self.depth = 0          # 0: module level; inside a class body: its nesting

    def _function(self, node: ast.AST) -> None:
        self.private.add(node.name)
        if self.depth and not node.decorator_list:
            self.methods.add(node.name)
        depth, self.depth = self.depth, 0
        self.generic_visit(node)
        self.depth = depth

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.private.add(node.name)
        self.depth += 1
        for child in node.body:
            self.visit(child)
        self.depth -= 1

    def _target(self, target: ast.AST) -> None:
        if isinstance(target, ast.Attribute) and _is_self(target.value):
            self.private.add(target.attr)
            self.data.add(target.attr)
        elif isinstance(target, ast.Name):
            self.private.add(target.id)
            if self.depth:                  # a class attribute or dataclass field
                self.data.add(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self._target(t)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._target(target)
            if isinstance(target, ast.Name) and target.id == "__slots__":
                for elt in getattr(node.value, "elts", []):
                    if isinstance(elt, ast.Constant) and isinstance(elt.value, str):
                        self.private.add(elt.value)
                        self.data.add(elt.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._target(node.target)
        self.generic_visit(node)


@functools.lru_cache(maxsize=None)
def _layer_names() -> Tuple[Dict[int, Set[str]], Dict[int, Set[str]], Dict[str, ast.AST]]:
    """(private names by layer, method names by layer, parsed module by name)."""
    private: Dict[int, Set[str]] = {}
    methods: Dict[int, Set[str]] = {}
    data: Set[str] = set()
    trees: Dict[str, ast.AST] = {}
    for name, path in modules().items():
        if name == "minimpi":
            continue
        tree = trees[name] = _parse(path)
        found = _Definitions()
        found.visit(tree)
        private.setdefault(layer_of(name), set()).update(found.private)
        methods.setdefault(layer_of(name), set()).update(found.methods)
        data |= found.data
    for names in methods.values():      # a name some class keeps data in is not a method
        names -= data
    return private, methods, trees


def _owners(name: str, by_layer: Dict[int, Set[str]]) -> Set[int]:
    return {layer for layer, names in by_layer.items() if name in names}


def test_no_layer_touches_another_layers_private_names():
    private, _, trees = _layer_names()
    known = set(modules())
    found = []
    for module, tree in trees.items():
        mine = layer_of(module)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _is_private(node.attr) \
                    and not _is_self(node.value):
                name = node.attr
            elif isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    target = f"{node.module}.{alias.name}"
                    if _is_private(alias.name) and not any(
                            k == target or k.endswith("." + target) for k in known) \
                            and (module, alias.name) not in KNOWN_PRIVATE_USES:
                        owners = _owners(alias.name, private)
                        if owners and mine not in owners:
                            found.append(f"{module}:{node.lineno} imports {alias.name}")
                continue
            else:
                continue
            owners = _owners(name, private)
            if owners and mine not in owners and (module, name) not in KNOWN_PRIVATE_USES:
                found.append(f"{module}:{node.lineno} uses {ast.unparse(node)} (private to "
                             f"{', '.join(_layer_name(o) for o in sorted(owners))})")
    assert not found, ("layers talk through public methods, never another layer's private "
                       "names (give the owner a public operation):\n" + "\n".join(found))


def test_no_layer_replaces_another_layers_methods():
    _, methods, trees = _layer_names()
    found = []
    for module, tree in trees.items():
        mine = layer_of(module)
        imported = {alias.asname or alias.name.split(".")[0] for node in ast.walk(tree)
                    if isinstance(node, ast.Import) for alias in node.names}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Assign) or not isinstance(
                    node.value, (ast.Name, ast.Attribute, ast.Lambda)):   # (a function)
                continue
            for target in node.targets:
                if isinstance(target, ast.Attribute) and not _is_self(target.value) and not (
                        isinstance(target.value, ast.Name) and target.value.id in imported):
                    owners = _owners(target.attr, methods)
                    if owners and mine not in owners:
                        found.append(f"{module}:{node.lineno} replaces {ast.unparse(target)}")
    assert not found, ("no layer replaces another layer's methods at run time (subscribe "
                       "a bus subscriber, minimpi.bus):\n" + "\n".join(found))


#: the names a module outside the point-to-point layer calls an engine by
_ENGINE_NAMES = {"engine"}


def _names_an_engine(node: ast.AST) -> bool:
    """``engine``, ``x.engine``, ``self._ep.engine``... (how the layers reach an engine)."""
    return (isinstance(node, ast.Name) and node.id in _ENGINE_NAMES) or (
        isinstance(node, ast.Attribute) and node.attr in _ENGINE_NAMES)


def _configuration_writes(trees: Dict[str, ast.AST]) -> List[str]:
    """Assignments to an engine's attributes outside ``minimpi.p2p`` (the engine is
    configured at construction and through its methods), and ``setattr`` on a class or
    object another module defined (the runtime's old tracing replaced methods so)."""
    p2p = layer_of("minimpi.p2p.engine")
    found = []
    for module, tree in trees.items():
        if layer_of(module) == p2p:
            continue
        own_classes = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
        imported = {alias.asname or alias.name for n in ast.walk(tree)
                    if isinstance(n, ast.ImportFrom) and (n.module or "").startswith(
                        ("minimpi", "launcher")) or isinstance(n, ast.ImportFrom) and n.level
                    for alias in n.names}
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            for target in targets:
                if isinstance(target, ast.Attribute) and _names_an_engine(target.value):
                    found.append(f"{module}:{node.lineno} sets {ast.unparse(target)}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id == "setattr" and node.args:
                first = node.args[0]
                if _names_an_engine(first) or (isinstance(first, ast.Name) and first.id
                                               in imported and first.id not in own_classes):
                    found.append(f"{module}:{node.lineno} {ast.unparse(node)[:60]}")
    return found


def test_no_layer_configures_the_engine_or_patches_another_modules_objects():
    found = _configuration_writes(_layer_names()[2])
    assert not found, ("the engine gets its configuration at construction (and from its "
                       "set_* methods); no module sets attributes on another module's "
                       "classes:\n" + "\n".join(found))


def test_the_configuration_check_sees_a_violation():
    tree = ast.parse("from minimpi.comm.communicator import Intracomm\n"
                     "def f(comm):\n"
                     "    comm._ep.engine.fault_tolerant = True\n"
                     "    setattr(Intracomm, 'Send', None)\n")
    found = _configuration_writes({"minimpi.runtime.example": tree})
    assert len(found) == 2, found


def test_the_private_name_check_sees_a_violation():
    """The checks above would see the couplings they exist to prevent."""
    private, methods, _ = _layer_names()
    assert layer_of("minimpi.p2p.engine") in _owners("_rndv_sends", private)
    assert layer_of("minimpi.runtime.trace") not in _owners("_rndv_sends", private)
    # (an engine-only method: the mpi4py shim's pkl5 classes define isend of their own)
    assert layer_of("minimpi.p2p.engine") in _owners("take_message", methods)
    assert layer_of("minimpi.tools.draw") not in _owners("take_message", methods)


def _layer_name(level: int) -> str:
    return "/".join(p.split(".", 1)[-1] for p, lv in LAYERS if lv == level)


# -- one name, one job -------------------------------------------------------------------
#: module names two layers share because the two modules do one job, each from its side;
#: any other module name found in two layers fails the test below (rename one of them by
#: what it holds: comm/collectives/allreduce_calls.py beside coll/allreduce.py)
SHARED_NAMES = {
    "__main__": "Python's name for `python -m`",
    "MPI": "mpi4py's module: minimpi.MPI, and the _shim's mpi4py.MPI, which is that module",
    "errors": "error classes: minimpi's, and one-sided communication's own (rma/errors.py)",
    "forkserver": "the fork server's two ends: the template process (_start/) and the "
                  "launcher's end",
    "inproc": "worlds of threads of one process: running one (runtime/) and the transport "
              "between its threads (transports/)",
    "dashboard": "the live page's two ends: each rank's sampler (runtime/) and the "
                 "launcher's page (launcher/dashboard/)",
    "dynamic": "dynamic processes' two ends: Spawn, ports and Join in the ranks (dynamic/) "
               "and the launcher's half (launcher/dynamic.py)",
}


def names_in_several_layers(names: Iterable[str]) -> Dict[str, List[str]]:
    """Module (or package) names - the last part of the dotted name - that modules of more
    than one layer carry, with those modules; ``__init__`` files name their package."""
    found: Dict[str, Dict[int, List[str]]] = {}
    for module in names:
        if module == "minimpi":
            continue
        found.setdefault(module.rsplit(".", 1)[-1], {}).setdefault(
            layer_of(module), []).append(module)
    return {name: sorted(m for mods in levels.values() for m in mods)
            for name, levels in found.items() if len(levels) > 1}


def test_no_two_layers_use_one_name_for_two_jobs():
    """A newcomer finds a module by its path: ``allreduce`` is the allreduce algorithms
    (coll/), not also the Allreduce method's argument handling (comm/). A name in two
    layers is allowed only where both modules do one job (SHARED_NAMES says which)."""
    clashes = {name: mods for name, mods in names_in_several_layers(modules()).items()
               if name not in SHARED_NAMES}
    assert not clashes, (
        "module names in more than one layer (rename one by what it holds, or - if both "
        "do one job from two sides - add the name to SHARED_NAMES with the reason):\n" +
        "\n".join(f"  {name}: {', '.join(mods)}" for name, mods in sorted(clashes.items())))
    unused = set(SHARED_NAMES) - set(names_in_several_layers(modules()))
    assert not unused, f"SHARED_NAMES lists names no longer shared: {sorted(unused)}"


def test_the_name_check_sees_a_planted_duplicate():
    """The check above would see two layers' modules of one name (the layout it replaced:
    coll/allreduce.py and comm/collectives/allreduce.py), and not a name inside one layer."""
    planted = list(modules()) + ["minimpi.comm.collectives.allreduce",
                                 "minimpi.coll.segment_copy", "minimpi.coll.extra.segment_copy"]
    clashes = names_in_several_layers(planted)
    assert clashes["allreduce"] == ["minimpi.coll.allreduce",
                                    "minimpi.comm.collectives.allreduce"]
    assert "segment_copy" not in clashes


# ----------------------------------------------------------------------------------------
# requests: the layers above give a request a Completion, never override its private hooks
# ----------------------------------------------------------------------------------------
#: the classes of the point-to-point layer other layers build requests from (and where)
_REQUEST_ROOTS = {"Request": "minimpi.p2p.request", "Completion": "minimpi.p2p.completion"}


def _base_names(node: ast.ClassDef) -> Set[str]:
    return {b.id if isinstance(b, ast.Name) else b.attr for b in node.bases
            if isinstance(b, (ast.Name, ast.Attribute))}


def _request_family(trees: Dict[str, ast.AST]) -> Set[str]:
    """The names of the classes that derive from Request or Completion (by base name,
    followed through every module at or above the point-to-point layer)."""
    p2p = layer_of("minimpi.p2p.request")
    family = set(_REQUEST_ROOTS)
    classes = [node for module, tree in trees.items() if layer_of(module) >= p2p
               for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    grown = True
    while grown:
        grown = False
        for node in classes:
            if node.name not in family and _base_names(node) & family:
                family.add(node.name)
                grown = True
    return family


def _class_names(node: ast.ClassDef) -> Set[str]:
    """Private names a class defines: methods, properties, class variables, ``__slots__``
    entries and ``self._x`` attributes its methods set."""
    found = _Definitions()
    for child in node.body:
        found.visit(child)
    return {n for n in found.private if _is_private(n)}


def _request_hook_uses(trees: Dict[str, ast.AST]) -> List[str]:
    """Outside the point-to-point layer: a Request or Completion subclass that defines a
    private name of those classes (overriding a hook, or shadowing its state), ``self._x``
    of such a name inside one (calling an inherited hook), and ``x._x`` of such a name on
    anything else (``req._collect(None)``, ``super()._wait()``) - unless the module's layer
    defines that name itself on a class of its own (a ``Group``'s ``_engine``)."""
    p2p = layer_of("minimpi.p2p.request")
    family = _request_family(trees)
    hooks: Set[str] = set()
    for module, tree in trees.items():
        if layer_of(module) == p2p:
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and node.name in family:
                    hooks |= _class_names(node)
    own: Dict[int, Set[str]] = {}       # per layer: private names of its other classes
    for module, tree in trees.items():
        names = own.setdefault(layer_of(module), set())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name not in family:
                names |= _class_names(node)
        names |= {node.name for node in tree.body      # (its module-level functions)
                  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    found = []
    for module, tree in trees.items():
        layer = layer_of(module)
        if layer == p2p:
            continue
        inside: Set[int] = set()        # nodes within a request class's body
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name in family:
                for name in sorted(_class_names(node) & hooks):
                    found.append(f"{module}:{node.lineno} class {node.name} defines {name}")
                inside |= {id(n) for n in ast.walk(node)}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or node.attr not in hooks:
                continue
            if _is_self(node.value):
                if id(node) in inside:
                    found.append(f"{module}:{node.lineno} uses {ast.unparse(node)}")
            elif node.attr not in own.get(layer, set()):
                found.append(f"{module}:{node.lineno} uses {ast.unparse(node)}")
    return found


def test_no_layer_overrides_or_calls_a_requests_private_hooks():
    found = _request_hook_uses(_layer_names()[2])
    assert not found, ("a request kind of another layer holds a Completion (minimpi.p2p."
                       "completion) and uses its public methods; it never overrides or "
                       "calls Request's private hooks:\n" + "\n".join(found))


def test_the_request_hook_check_sees_a_violation():
    trees = dict(_layer_names()[2])
    trees["minimpi.comm.example"] = ast.parse(
        "from ..p2p.request import Request\n"
        "from .persistent import Prequest\n"
        "class Mine(Prequest):\n"
        "    __slots__ = ('_pending',)\n"
        "    def _collect(self, status):\n"
        "        return self._wait(status)\n"
        "    def Wait(self, status=None):\n"
        "        return True\n"
        "def finish(req):\n"
        "    req._complete()\n")
    found = _request_hook_uses(trees)
    planted = [f for f in found if f.startswith("minimpi.comm.example:")]
    assert sorted(planted) == sorted([
        "minimpi.comm.example:3 class Mine defines _collect",
        "minimpi.comm.example:3 class Mine defines _pending",
        "minimpi.comm.example:6 uses self._wait",
        "minimpi.comm.example:10 uses req._complete"]), planted
    assert planted == found, found     # and the project itself has none
