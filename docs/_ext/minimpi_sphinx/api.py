"""API reference under public import paths.

minimpi's classes are assembled from private mixins (``minimpi.MPI.Intracomm`` gets its
collectives from one module per collective), and autodoc's ``:members:`` would document only
what a class defines itself. ``{api-class} minimpi.MPI.Intracomm`` lists every public member
the class has that its public parent (``:parent: minimpi.MPI.Comm``) does not have or
overrides, and has autodoc document exactly those, under the public path: where a method is
defined inside minimpi is an implementation detail that moves.

``{api-functions} minimpi.MPI`` documents a module's public functions the same way.
"""
from __future__ import annotations

import importlib
import inspect

from docutils.parsers.rst import directives
from sphinx.util.docutils import SphinxDirective


def resolve(path: str):
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def own_members(cls, parent) -> list:
    names = []
    for name in sorted(dir(cls)):
        if name.startswith("_"):
            continue
        try:
            value = inspect.getattr_static(cls, name)
        except AttributeError:
            continue
        if parent is not None:
            try:
                if inspect.getattr_static(parent, name) is value:
                    continue
            except AttributeError:
                pass
        names.append(name)
    return names


class ApiClass(SphinxDirective):
    required_arguments = 1
    option_spec = {"parent": directives.unchanged, "exclude": directives.unchanged}
    has_content = False

    def run(self) -> list:
        path = self.arguments[0]
        try:
            cls = resolve(path)
            parent = resolve(self.options["parent"]) if "parent" in self.options else None
        except (ImportError, AttributeError) as exc:
            raise self.error(f"api-class: {exc}") from exc
        exclude = {n.strip() for n in self.options.get("exclude", "").split(",") if n.strip()}
        members = [m for m in own_members(cls, parent) if m not in exclude]
        # autodoc writes reStructuredText: parse it as such (eval-rst), not as Markdown
        lines = ["```{eval-rst}", f".. autoclass:: {path}"]
        if members:
            lines += [f"   :members: {', '.join(members)}", "   :undoc-members:"]
            if any(m not in vars(cls) for m in members):      # defined in a private mixin
                lines.append("   :inherited-members:")
        lines += ["   :no-show-inheritance:", "```"]
        return self.parse_text_to_nodes("\n".join(lines))


class ApiFunctions(SphinxDirective):
    required_arguments = 1
    option_spec = {"exclude": directives.unchanged}

    def run(self) -> list:
        module = importlib.import_module(self.arguments[0])
        exclude = {n.strip() for n in self.options.get("exclude", "").split(",") if n.strip()}
        names = [n for n, v in sorted(vars(module).items())
                 if not n.startswith("_") and n not in exclude
                 and (inspect.isfunction(v) or inspect.isbuiltin(v)) and not inspect.isclass(v)]
        lines = ["```{eval-rst}"]
        for name in names:
            lines += [f".. autofunction:: {self.arguments[0]}.{name}", ""]
        lines.append("```")
        return self.parse_text_to_nodes("\n".join(lines))
