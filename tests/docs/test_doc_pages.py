"""The documentation says what the code does: checks that need no job.

Every code block says whether it runs; the generated parts read what they claim to read
(every `minimpi run` option, every subcommand); the hand-written lists stay complete (every
error class on the troubleshooting page, every environment variable minimpi reads on the
environment page); README stays short; the build's link checker and the output matcher work.
"""
from __future__ import annotations

import argparse
import importlib
import os
import re
import sys

import pytest
from doc_blocks import CHECKED, DOCS, REPO, all_blocks, match_output

sys.path.insert(0, os.path.join(DOCS, "_ext"))

BLOCKS = all_blocks()


def test_every_code_block_says_whether_it_runs():
    unmarked = [f"{b.where} ({b.language})" for b in BLOCKS
                if b.language in CHECKED and b.marker is None]
    assert not unmarked, ("blocks without a `% run`, `% file`, `% skip: reason` or "
                          "`% output` marker: " + ", ".join(unmarked))


def test_every_skip_says_why_and_every_marker_fits_its_block():
    for b in BLOCKS:
        if b.marker == "skip":
            assert len(b.argument) >= 10, f"{b.where}: a skip needs a reason, got {b.argument!r}"
        if b.marker == "output":
            assert b.language in ("text", ""), f"{b.where}: an output block is a text block"
        if b.marker == "file":
            assert b.argument.endswith(".py"), f"{b.where}: `% file: NAME.py`"
        if b.marker == "run" and b.language in ("python", "py"):
            assert b.file_name, f"{b.where}: `% run: COMMAND` must name the block's file"
        if b.marker == "run" and b.language not in ("python", "py"):
            assert b.language in ("sh", "bash", "shell"), f"{b.where}: run a python or sh block"
            assert not b.argument, f"{b.where}: a sh block runs as it is (no command)"


def test_the_docs_have_runnable_examples_on_every_guide_and_tutorial_page():
    for folder in ("guide", "tutorial"):
        for name in sorted(os.listdir(os.path.join(DOCS, folder))):
            if name.endswith(".md") and name != "index.md":
                rel = os.path.join("docs", folder, name)
                runs = [b for b in BLOCKS if b.path == rel and b.marker == "run"]
                assert runs, f"{rel} has no runnable example"


def test_tutorial_lessons_have_a_generated_figure():
    for name in sorted(os.listdir(os.path.join(DOCS, "tutorial"))):
        if re.match(r"\d\d-.*\.md$", name):
            with open(os.path.join(DOCS, "tutorial", name)) as f:
                text = f.read()
            assert re.search(r"```\{minimpi-(figure|trace)\}", text), \
                f"tutorial/{name}: no figure made by minimpi draw/explain/--trace"


def test_readme_is_short_and_keeps_its_two_commands():
    with open(os.path.join(REPO, "README.md")) as f:
        text = f.read()
    assert len(text.splitlines()) <= 150
    assert ("python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && "
            ".venv/bin/minimpi run -n 4 examples/hello.py") in text
    assert ".venv/bin/python -m pytest -q -n 2" in text
    with open(os.path.join(REPO, ".ci", "run")) as f:      # CI runs README's test command
        assert "exec .venv/bin/python -m pytest -q -n 2\n" in f.read()


def test_the_options_table_lists_every_option_of_minimpi_run():
    from minimpi_sphinx.cli_options import build_parser, option_rows
    parser = build_parser("run")
    listed = {name for row in option_rows(parser) for name in row[1]}
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
            continue
        for name in action.option_strings:
            assert name in listed, f"{name} is missing from the generated table"
    assert {"-n", "--fault-tolerant", "--transport", "--hosts"} <= listed


def test_the_cli_reference_has_a_section_per_subcommand():
    from minimpi.launcher import cli
    with open(os.path.join(DOCS, "reference", "cli.md")) as f:
        text = f.read()
    for name, _, _ in cli.SUBCOMMANDS:
        assert f"```{{minimpi-options}} {name}\n" in text, f"minimpi {name} is not in cli.md"


def _error_classes():
    import minimpi.launcher.embed  # noqa: F401  (JobFailedError)

    import minimpi.MPI  # noqa: F401  (imports every module that defines an error)
    from minimpi.errors import MinimpiError
    found, todo = set(), [MinimpiError]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__module__.startswith("minimpi") and sub not in found:
                found.add(sub)
                todo.append(sub)
    return sorted(found, key=lambda c: c.__name__)


def test_troubleshooting_lists_every_error_class():
    with open(os.path.join(DOCS, "guide", "troubleshooting.md")) as f:
        text = f.read()
    missing = [c.__name__ for c in _error_classes() if f"| `{c.__name__}`" not in text]
    assert not missing, f"error classes missing from troubleshooting.md's table: {missing}"


def test_every_environment_variable_minimpi_reads_is_documented():
    with open(os.path.join(DOCS, "reference", "environment.md")) as f:
        text = f.read()
    from minimpi.coll.registry import REGISTRY, algorithms
    algorithms("bcast")                           # loads every algorithm module
    collectives = {name.upper() for name in REGISTRY}
    names = set()
    for top in ("minimpi", "launcher"):
        for root, _dirs, files in os.walk(os.path.join(REPO, top)):
            for name in files:
                if name.endswith(".py"):
                    with open(os.path.join(root, name)) as f:
                        names.update(re.findall(r"MINIMPI_[A-Z0-9_]*[A-Z0-9]\b", f.read()))
    missing = sorted(n for n in names
                     if n not in text and n[len("MINIMPI_"):] not in collectives)
    assert not missing, f"environment variables missing from reference/environment.md: {missing}"


def test_the_link_checker_finds_a_broken_link_and_anchor(tmp_path):
    from minimpi_sphinx import links
    (tmp_path / "a.html").write_text('<a href="b.html#here">b</a><a href="c.html">c</a>'
                                     '<a href="b.html#nowhere">x</a><a href="https://x.y">e</a>')
    (tmp_path / "b.html").write_text('<h1 id="here">B</h1>')
    problems = links.check(str(tmp_path))
    assert len(problems) == 2, problems
    assert any("c.html" in p for p in problems) and any("#nowhere" in p for p in problems)


@pytest.mark.parametrize("expected,actual,ok", [
    ("a\nb\n", "a\nb\n", True),
    ("a\n...\nd\n", "a\nb\nc\nd\n", True),
    ("[0] took ... ms\n", "[0] took 12.5 ms\n", True),
    ("a\nb\n", "a\nc\n", False),
    ("a\n", "a\nextra\n", False),
    ("...\n", "", True),
])
def test_output_matching(expected, actual, ok):
    assert (match_output(expected, actual) is None) == ok


def test_sorted_output_matching_ignores_order():
    assert match_output("[0] x\n[1] y\n", "[1] y\n[0] x\n", sort=True) is None
    assert match_output("[0] x\n[1] y\n", "[1] y\n[0] x\n") is not None


def test_benchmark_figures_are_read_from_results_md():
    from minimpi_sphinx import bench
    table, cols, rows = bench.select("minimpi next to Open MPI", 0,
                                     r"^Send/Recv one-way latency, p=2, 8 B", "minimpi shm")
    assert len(rows) == 1 and bench.number(rows[0][cols[0]]) is not None
    with pytest.raises(ValueError):
        bench.select("no such section", 0, "", "")


def test_a_table_under_a_dated_subsection_belongs_to_its_section(tmp_path):
    from minimpi_sphinx import bench
    results = tmp_path / "RESULTS.md"
    results.write_text("# Results\n\n## Small things: `cmd`\n\n### 2026-12-05, today\n\n"
                       "| p | us |\n|---|---|\n| 2 | 16.0 |\n\n## Other\n\n"
                       "| p | us |\n|---|---|\n| 4 | 9.0 |\n")
    tables = bench.read_tables(str(results))
    assert [t.section for t in tables] == ["2026-12-05, today", "Other"]
    assert "Small things" in tables[0].path and "Small things" not in tables[1].path


def test_every_benchmark_figure_on_the_pages_names_a_table_that_exists():
    from minimpi_sphinx import bench
    directive = re.compile(r"```\{benchmark-(?:table|plot)\}\n((?::[a-z]+:.*\n)+)")
    checked = 0
    for root, _, files in os.walk(DOCS):
        for name in files:
            if not name.endswith(".md") or "_build" in root:
                continue
            with open(os.path.join(root, name)) as f:
                text = f.read()
            for found in directive.finditer(text):
                options = dict(re.findall(r":([a-z]+):\s*(.*)", found.group(1)))
                bench.select(options["section"], int(options.get("table", 0)),
                             options.get("rows", ""), options.get("columns", ""))
                checked += 1
    assert checked >= 5


def test_docs_extension_imports_without_sphinx_state():
    for name in ("cli_options", "figures", "bench", "api", "docstrings", "links", "trace_svg"):
        importlib.import_module(f"minimpi_sphinx.{name}")
