"""Write the list of names of mpi4py's ``MPI`` module and of its classes' methods.

Run as ``python tests/unit/data/make_mpi4py_names.py MPI.pyi > tests/unit/data/mpi4py_412_names.txt``
where ``MPI.pyi`` is ``src/mpi4py/MPI.pyi`` of the mpi4py repository at tag 4.1.2 (the type
stub mpi4py generates from its compiled module with ``conf/mpistubgen.py``, so it lists
exactly what ``mpi4py.MPI`` defines). Reads the stub with :mod:`ast`; nothing is imported.

Output, one name a line: ``NAME`` for a module-level name (constants, functions, classes,
the private helpers mpi4py's own submodules use such as ``_typedict``), ``Class.NAME`` for
each public method or attribute of a class, its own and those it inherits from the other
classes of the module (``Intracomm.Send`` as well as ``Comm.Send``).
"""
from __future__ import annotations

import ast
import sys
from typing import Dict, Iterable, List


def names_of(stub: str) -> List[str]:
    module: List[str] = []
    own: Dict[str, List[str]] = {}
    bases: Dict[str, List[str]] = {}

    def walk(body: Iterable[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If):                  # version-dependent blocks
                walk(node.body)
                walk(node.orelse)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                module.append(node.target.id)
            elif isinstance(node, ast.Assign):
                module.extend(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.FunctionDef):
                module.append(node.name)
            elif isinstance(node, ast.ClassDef):
                module.append(node.name)
                bases[node.name] = [b.id for b in node.bases if isinstance(b, ast.Name)]
                own[node.name] = []
                for item in node.body:
                    if isinstance(item, ast.FunctionDef):
                        name = item.name
                    elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        name = item.target.id
                    else:
                        continue
                    if not name.startswith("_"):
                        own[node.name].append(name)

    def public(cls: str) -> List[str]:       # own, then inherited (bases in the stub)
        found = list(own.get(cls, []))
        for base in bases.get(cls, []):
            found.extend(public(base))
        return found

    walk(ast.parse(stub).body)
    keep = [n for n in module if not (n.startswith("__") and n.endswith("__"))]
    members = [f"{cls}.{name}" for cls in own for name in dict.fromkeys(public(cls))]
    return list(dict.fromkeys(keep)) + members


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        print("\n".join(names_of(f.read())))
