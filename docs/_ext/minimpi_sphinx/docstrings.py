"""Docstrings as the API reference shows them.

minimpi's docstrings are written for ``help()`` first: mostly reStructuredText, but some
use layouts (indented examples without ``::``, ASCII tables) that docutils reads as broken
markup. A docstring that does not parse cleanly is shown as preformatted text instead of
failing the build, so every docstring reaches the page in a readable form.
"""
from __future__ import annotations

import io

from docutils.frontend import get_default_settings
from docutils.parsers.rst import Parser
from docutils.utils import SystemMessage, new_document

# roles of Sphinx that plain docutils does not know, but that render fine
_SPHINX_ROLES = (":func:", ":class:", ":meth:", ":mod:", ":data:", ":attr:", ":exc:",
                 ":obj:", ":ref:", ":doc:", ":term:", ":const:", ":py:")
_PARSER = Parser()
_SETTINGS = None


def _settings():
    global _SETTINGS
    if _SETTINGS is None:          # building docutils' settings is slow: once
        _SETTINGS = get_default_settings(Parser)
        _SETTINGS.report_level = 2
        _SETTINGS.halt_level = 2
        _SETTINGS.warning_stream = io.StringIO()
        _SETTINGS.file_insertion_enabled = False
        _SETTINGS.raw_enabled = False
    return _SETTINGS


def parses_cleanly(lines: list) -> bool:
    text = "\n".join(lines)
    for role in _SPHINX_ROLES:
        text = text.replace(role, "")
    document = new_document("<docstring>", _settings())
    try:
        _PARSER.parse(text, document)
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
