"""Figures and outputs made by ``minimpi`` itself during the build.

* ``{minimpi-figure} draw allreduce --algorithm ring -n 4`` runs the command with
  ``-o figure.svg`` (``minimpi draw`` or ``minimpi explain io``) and shows the SVG;
* ``{minimpi-trace} -n 4 ring.py`` runs the program under ``minimpi run --trace`` and shows
  the trace as a timeline (:mod:`.trace_svg`);
* ``{minimpi-output} explain allreduce --bytes 4MiB -n 8 --cores 2`` shows what the command
  prints.

The directive's body is the figure's caption. A program named in the command is looked up
beside the page, then from the repository's root (``examples/...``), and its text joins
the cache key, so editing a lesson's program remakes its figure.
"""
from __future__ import annotations

import os
import shlex
import shutil
from typing import List, Tuple

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util.docutils import SphinxDirective

from . import trace_svg
from .commands import GENERATED_DIR, REPO_DIR, CommandFailed, run_minimpi


class _MinimpiDirective(SphinxDirective):
    required_arguments = 1
    final_argument_whitespace = True
    has_content = True

    def _argv(self) -> Tuple[List[str], List[str]]:
        """(argv with programs made absolute, the programs' paths)."""
        here = os.path.dirname(self.env.doc2path(self.env.docname))
        argv, inputs = [], []
        for arg in shlex.split(self.arguments[0]):
            if arg.endswith(".py"):
                for base in (here, REPO_DIR):
                    candidate = os.path.join(base, arg)
                    if os.path.isfile(candidate):
                        self.env.note_dependency(candidate)
                        inputs.append(candidate)
                        arg = candidate
                        break
                else:
                    raise self.error(f"{self.name}: no program {arg} beside the page or in "
                                     f"the repository")
            argv.append(arg)
        return argv, inputs

    def _run(self, argv, outputs=(), inputs=()):
        try:
            return run_minimpi(argv, outputs, inputs)
        except CommandFailed as exc:
            raise self.error(f"{self.name}: {exc}") from exc

    def _figure(self, path: str, command: str) -> nodes.figure:
        # A name of its own (the cache folder's), so that the HTML build copies it to
        # _images/ under that name and the "full size" link below can name it.
        name = os.path.basename(os.path.dirname(path)) + os.path.splitext(path)[1]
        unique = os.path.join(os.path.dirname(path), name)
        if not os.path.exists(unique):
            shutil.copyfile(path, unique)
        rel = os.path.relpath(unique, os.path.dirname(GENERATED_DIR)).replace(os.sep, "/")
        figure = nodes.figure(classes=["minimpi-figure"])
        figure += nodes.image(uri=f"/{rel}", alt=self.options.get("alt", command))
        caption = nodes.caption()
        if self.content:
            text = " ".join(line.strip() for line in self.content)
            inline, messages = self.state.inline_text(text, self.lineno)
            caption += inline
            caption += nodes.Text(" ")
        caption += nodes.Text("Made by ")
        caption += nodes.literal(command, command)
        caption += nodes.Text(". ")
        up = "../" * self.env.docname.count("/")
        caption += nodes.raw("", f'<a class="figure-full-size" href="{up}_images/{name}">'
                                 f'Open it full size.</a>', format="html")
        figure += caption
        return figure


class MinimpiFigure(_MinimpiDirective):
    """``{minimpi-figure} draw ...``: the SVG a ``minimpi`` command writes with ``-o``."""

    option_spec = {"alt": directives.unchanged}

    def run(self) -> list:
        argv, inputs = self._argv()
        result = self._run(argv + ["-o", "figure.svg"], ["figure.svg"], inputs)
        return [self._figure(result.files["figure.svg"],
                             f"minimpi {self.arguments[0]} -o figure.svg")]


class MinimpiTrace(_MinimpiDirective):
    """``{minimpi-trace} -n 4 prog.py``: a run's ``--trace`` drawn as a timeline."""

    option_spec = {"alt": directives.unchanged, "title": directives.unchanged}

    def run(self) -> list:
        argv, inputs = self._argv()
        result = self._run(["run", "--trace", "trace.json", *argv], ["trace.json"], inputs)
        svg_path = os.path.join(os.path.dirname(result.files["trace.json"]), "trace.svg")
        try:
            svg = trace_svg.to_svg(result.files["trace.json"], self.options.get("title", ""))
        except (ValueError, KeyError) as exc:
            raise self.error(f"minimpi-trace: {exc}") from exc
        with open(svg_path, "w") as f:
            f.write(svg)
        return [self._figure(svg_path, f"minimpi run --trace trace.json {self.arguments[0]}")]


class MinimpiOutput(_MinimpiDirective):
    """``{minimpi-output} explain ...``: what a ``minimpi`` command prints (run at build)."""

    option_spec = {"lines": directives.unchanged, "language": directives.unchanged,
                   "stderr": directives.flag}

    def run(self) -> list:
        argv, inputs = self._argv()
        result = self._run(argv, (), inputs)
        text = result.stdout
        if "stderr" in self.options:       # a job's --stats tables: after the ranks' output
            text += result.stderr
        text = text.rstrip("\n")
        if "lines" in self.options:
            first, _, last = self.options["lines"].partition("-")
            lines = text.splitlines()
            text = "\n".join(lines[int(first) - 1:int(last) if last else None])
        command = f"$ minimpi {self.arguments[0]}"
        block = nodes.literal_block(f"{command}\n{text}", f"{command}\n{text}",
                                    language=self.options.get("language", "none"),
                                    classes=["minimpi-output"])
        out: list = [block]
        if self.content:
            para = nodes.paragraph(classes=["minimpi-output-caption"])
            inline, _ = self.state.inline_text(" ".join(self.content), self.lineno)
            para += inline
            out.append(para)
        return out
