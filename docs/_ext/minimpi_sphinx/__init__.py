"""The Sphinx extension of minimpi's documentation: what the site generates from the code.

* ``{minimpi-options} run`` / ``{minimpi-help} run``: the options of a ``minimpi`` command,
  read from its argument parser (:mod:`.cli_options`);
* ``{minimpi-figure}``, ``{minimpi-trace}``, ``{minimpi-output}``: figures and outputs made by
  running ``minimpi draw``/``explain``/``run --trace`` during the build (:mod:`.figures`);
* ``{benchmark-table}``, ``{benchmark-plot}``: figures of benchmarks/RESULTS.md
  (:mod:`.bench`);
* ``{api-class}``, ``{api-functions}``: the API reference under public import paths
  (:mod:`.api`);
* docstrings that are not clean reStructuredText shown as preformatted text
  (:mod:`.docstrings`).
"""
from __future__ import annotations

import os

from . import api, bench, cli_options, docstrings, figures


def _prefetch(app) -> None:
    # the figures' commands are independent jobs: run them side by side before the pages
    # are read one by one (figures.prefetch)
    figures.prefetch(app.srcdir, os.cpu_count() or 2)


def setup(app):
    app.add_directive("minimpi-options", cli_options.OptionsTable)
    app.add_directive("minimpi-help", cli_options.HelpText)
    app.add_directive("minimpi-figure", figures.MinimpiFigure)
    app.add_directive("minimpi-trace", figures.MinimpiTrace)
    app.add_directive("minimpi-output", figures.MinimpiOutput)
    app.add_directive("benchmark-table", bench.BenchmarkTable)
    app.add_directive("benchmark-plot", bench.BenchmarkPlot)
    app.add_directive("api-class", api.ApiClass)
    app.add_directive("api-functions", api.ApiFunctions)
    app.connect("autodoc-process-docstring", docstrings.process_docstring)
    app.connect("builder-inited", _prefetch)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
