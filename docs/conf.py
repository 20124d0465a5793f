"""Sphinx configuration of minimpi's documentation site.

Build it with ``python -m sphinx -W --keep-going -b html docs docs/_build/html`` (after
``pip install -e '.[docs]'``); ``python docs/build.py`` does that and checks internal links.
Everything generated (the ``minimpi run`` option tables, the tutorial's figures, the
benchmark plots) is made during the build by ``docs/_ext/minimpi_sphinx``.
"""
from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "_ext"))

# Importing minimpi.MPI for the API reference must not start a world of size 1: the mpi4py
# shim's ``rc.initialize = False`` delays that, as it does for any mpi4py program.
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "minimpi", "_shim"))
import mpi4py  # noqa: E402  (the shim: minimpi's forwarding package)

mpi4py.rc.initialize = False

import minimpi  # noqa: E402

project = "minimpi"
author = "the minimpi authors"
copyright = "the minimpi authors"
release = version = minimpi.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx_copybutton",
    "minimpi_sphinx",
]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_generated", "**/_generated", "Thumbs.db", ".DS_Store"]

# MyST: heading anchors for [text](page.md#anchor) links; fenced directives ({literalinclude})
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist"]

# Every cross-reference must resolve (-W turns a dangling one into an error), except the
# Python built-ins and third-party types that appear in signatures.
nitpicky = False
suppress_warnings: list[str] = []

# autodoc: public import paths only (minimpi.MPI.Intracomm, minimpi.launch, ...): where a
# class is defined inside minimpi is an implementation detail that moves.
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}
autodoc_member_order = "alphabetical"
# signatures without type hints: each one would be a cross-reference to resolve, which made
# the build several times slower (the API is mpi4py's, whose types the docstrings say)
autodoc_typehints = "none"
autodoc_preserve_defaults = True
# a member without a docstring of its own stays without one (numpy's docstrings are written
# for numpy's documentation, not ours)
autodoc_inherit_docstrings = False
add_module_names = False
# "--hosts" must stay two hyphens (option names in help texts and captions)
smartquotes = False

html_theme = "furo"
html_title = f"minimpi {release}"
html_static_path = ["_static"]
html_css_files = ["minimpi.css"]
html_show_sourcelink = False
html_theme_options = {
    "sidebar_hide_name": False,
    "navigation_with_keys": True,
}
pygments_style = "friendly"
pygments_dark_style = "monokai"
copybutton_prompt_text = r"\$ "
copybutton_prompt_is_regexp = True
