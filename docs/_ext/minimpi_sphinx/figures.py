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
import re
import shlex
import shutil
from concurrent.futures import ThreadPoolExecutor
from typing import List, Tuple

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util.docutils import SphinxDirective

from . import trace_svg
from .commands import GENERATED_DIR, REPO_DIR, CommandFailed, run_minimpi

#: what each directive runs: the command's extra arguments and the files it writes
KINDS = {"minimpi-figure": "figure", "minimpi-trace": "trace", "minimpi-output": "output"}


def plan(kind: str, argline: str, page_dir: str) -> Tuple[List[str], List[str], List[str]]:
    """(argv of ``minimpi``, the files it writes, the programs it reads) for a directive of
    ``kind`` with the argument ``argline`` on a page in ``page_dir``; ValueError when a
    program it names does not exist."""
    argv, inputs = [], []
    for arg in shlex.split(argline):
        if arg.endswith(".py"):
            for base in (page_dir, REPO_DIR):
                candidate = os.path.join(base, arg)
                if os.path.isfile(candidate):
                    inputs.append(candidate)
                    arg = candidate
                    break
            else:
                raise ValueError(f"no program {arg} beside the page or in the repository")
        argv.append(arg)
    if kind == "figure":
        return argv + ["-o", "figure.svg"], ["figure.svg"], inputs
    if kind == "trace":
        return ["run", "--trace", "trace.json", *argv], ["trace.json"], inputs
    return argv, [], inputs


def prefetch(srcdir: str, workers: int) -> None:
    """Run every command the pages' directives will need, ``workers`` at a time, so that
    the (serial) reading of the pages finds them in the cache. A command that fails here is
    left to its directive, which reports it."""
    jobs = []
    pattern = re.compile(r"^`{3,}\{(" + "|".join(KINDS) + r")\}\s+(.+?)\s*$")
    for root, dirs, files in os.walk(srcdir):
        dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
        for name in files:
            if not name.endswith(".md"):
                continue
            with open(os.path.join(root, name), encoding="utf-8") as f:
                for line in f:
                    m = pattern.match(line)
                    if m:
                        try:
                            jobs.append(plan(KINDS[m.group(1)], m.group(2), root))
                        except ValueError:
                            pass
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for future in [pool.submit(run_minimpi, *job) for job in jobs]:
            try:
                future.result()
            except CommandFailed:
                pass


class _MinimpiDirective(SphinxDirective):
    required_arguments = 1
    final_argument_whitespace = True
    has_content = True

    def _plan(self) -> Tuple[List[str], List[str], List[str]]:
        here = os.path.dirname(self.env.doc2path(self.env.docname))
        try:
            argv, outputs, inputs = plan(KINDS[self.name], self.arguments[0], here)
        except ValueError as exc:
            raise self.error(f"{self.name}: {exc}") from exc
        for path in inputs:
            self.env.note_dependency(path)
        return argv, outputs, inputs

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
        result = self._run(*self._plan())
        return [self._figure(result.files["figure.svg"],
                             f"minimpi {self.arguments[0]} -o figure.svg")]


class MinimpiTrace(_MinimpiDirective):
    """``{minimpi-trace} -n 4 prog.py``: a run's ``--trace`` drawn as a timeline."""

    option_spec = {"alt": directives.unchanged, "title": directives.unchanged}

    def run(self) -> list:
        result = self._run(*self._plan())
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
        result = self._run(*self._plan())
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
