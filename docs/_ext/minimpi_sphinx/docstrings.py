"""Docstrings as the API reference shows them.

minimpi's docstrings are written for ``help()`` first: mostly reStructuredText, but some
use layouts (indented examples without ``::``, ASCII tables) that docutils reads as broken
markup. A docstring that does not parse cleanly is shown as preformatted text instead of
failing the build, so every docstring reaches the page in a readable form.
"""
from __future__ import annotations

import io

from docutils.core import publish_doctree
from docutils.utils import SystemMessage

_SETTINGS = {"report_level": 2, "halt_level": 2, "warning_stream": io.StringIO(),
             "file_insertion_enabled": False, "raw_enabled": False}
# roles and directives of Sphinx that plain docutils does not know, but that render fine
_SPHINX_ROLES = (":func:", ":class:", ":meth:", ":mod:", ":data:", ":attr:", ":exc:",
                 ":obj:", ":ref:", ":doc:", ":term:", ":const:", ":py:")


def parses_cleanly(lines: list) -> bool:
    text = "\n".join(lines)
    for role in _SPHINX_ROLES:
        text = text.replace(role, "")
    try:
        publish_doctree(text, settings_overrides=dict(_SETTINGS, warning_stream=io.StringIO()))
    except SystemMessage:
        return False
    except Exception:
        return False
    return True


def process_docstring(app, what, name, obj, options, lines: list) -> None:
    if not lines or parses_cleanly(lines):
        return
    body = ["    " + line if line.strip() else "" for line in lines]
    lines[:] = ["::", ""] + body + [""]
