"""``minimpi`` command-line options, read from the argument parsers at build time.

``{minimpi-options} run`` renders a table of every option of ``minimpi run`` (names,
argument, default, help) from the parser ``minimpi run`` itself builds, and
``{minimpi-help} run`` its ``--help`` text; a flag added to the parser appears on the next
build, so the page cannot drift from the command.
"""
from __future__ import annotations

import argparse
import importlib
import io
import os
from contextlib import redirect_stdout

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util.docutils import SphinxDirective


def build_parser(command: str) -> argparse.ArgumentParser:
    """The parser of ``minimpi COMMAND``, made as ``minimpi`` makes it."""
    from minimpi.launcher import cli
    entry = next((e for e in cli.SUBCOMMANDS if e[0] == command), None)
    if entry is None:
        raise ValueError(f"minimpi has no command {command!r} "
                         f"(it has {', '.join(e[0] for e in cli.SUBCOMMANDS)})")
    module = importlib.import_module(entry[1])
    parser = argparse.ArgumentParser(prog=f"minimpi {command}", description=entry[2],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    module.add_arguments(parser)
    return parser


def option_rows(parser: argparse.ArgumentParser) -> list:
    """(group title, options, argument, default, help) for each documented option."""
    rows = []
    for group in parser._action_groups:   # argparse has no public walk over its groups
        for action in group._group_actions:
            if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
                continue
            names = list(action.option_strings) or [action.dest]
            if action.nargs == 0:
                argument = ""
            elif action.choices is not None:
                argument = "{" + ",".join(str(c) for c in action.choices) + "}"
            else:
                argument = action.metavar or action.dest.upper()
                if isinstance(argument, tuple):
                    argument = " ".join(argument)
            default = action.default
            if (action.nargs == 0 or default in (None, [], argparse.SUPPRESS)
                    or not action.option_strings):
                default = ""
            extra = []
            if action.required:
                extra.append("required")
            if (isinstance(action, argparse._AppendAction)
                    and "repeatable" not in (action.help or "")):
                extra.append("repeatable")
            rows.append((group.title, names, argument, str(default), action.help or "", extra))
    return rows


def _literal_list(items) -> list:
    out = []
    for i, item in enumerate(items):
        if i:
            out.append(nodes.Text(", "))
        out.append(nodes.literal(item, item))
    return out


class OptionsTable(SphinxDirective):
    """``{minimpi-options} COMMAND``: a table of every option of ``minimpi COMMAND``."""

    required_arguments = 1
    option_spec = {"group": directives.unchanged}

    def run(self) -> list:
        command = self.arguments[0]
        try:
            parser = build_parser(command)
        except Exception as exc:               # an import error in minimpi is a build error
            raise self.error(f"minimpi-options: {exc}") from exc
        table = nodes.table(classes=["minimpi-options"])
        group = nodes.tgroup(cols=3)
        table += group
        for width in (28, 12, 60):
            group += nodes.colspec(colwidth=width)
        head = nodes.thead()
        group += head
        head += self._row([nodes.Text("option"), nodes.Text("default"), nodes.Text("meaning")])
        body = nodes.tbody()
        group += body
        count = 0
        for _title, names, argument, default, text, extra in option_rows(parser):
            cell = _literal_list(names)
            if argument:
                cell += [nodes.Text(" "), nodes.emphasis(argument, argument)]
            meaning = [nodes.Text(text)]
            if extra:
                meaning.append(nodes.Text(f" ({', '.join(extra)})"))
            default_cell = [nodes.literal(default, default)] if default else []
            body += self._row([cell, default_cell, meaning])
            count += 1
        if not count:
            raise self.error(f"minimpi-options: `minimpi {command}` has no options")
        return [table]

    @staticmethod
    def _row(cells: list) -> nodes.row:
        row = nodes.row()
        for content in cells:
            entry = nodes.entry()
            para = nodes.paragraph()
            if isinstance(content, nodes.Node):
                para += content
            else:
                for node in content:
                    para += node
            entry += para
            row += entry
        return row


class HelpText(SphinxDirective):
    """``{minimpi-help} COMMAND``: what ``minimpi COMMAND --help`` prints."""

    required_arguments = 1

    def run(self) -> list:
        try:
            parser = build_parser(self.arguments[0])
        except Exception as exc:
            raise self.error(f"minimpi-help: {exc}") from exc
        buf = io.StringIO()
        saved = os.environ.get("COLUMNS")
        os.environ["COLUMNS"] = "100"          # argparse wraps to the terminal's width
        try:
            with redirect_stdout(buf):
                parser.print_help()
        finally:
            if saved is None:
                del os.environ["COLUMNS"]
            else:
                os.environ["COLUMNS"] = saved
        text = buf.getvalue().rstrip()
        block = nodes.literal_block(text, text, language="none")
        return [block]
