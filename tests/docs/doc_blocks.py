"""The code blocks of the documentation, and what each page says to do with them.

A marker on the line just before a fenced block (a MyST comment, ``% ...``, in docs/; an HTML
comment, ``<!-- ... -->``, in README.md, where GitHub hides it) says how the tests use it:

    % run                         a sh block: run it with bash, it must exit 0
    % run: minimpi run -n 3 x.py  a python block: save it as x.py, run the command
    % run[exit=3, timeout=90]: .. the same, expecting exit code 3, with a 90 s limit
    % output                      a text block: the stdout of the run block before it
    % output: sorted, stderr      ... its lines sorted / its stderr
    % file: x.py                  a block saved as x.py for the page's other blocks, not run
    % skip: REASON                not run here (needs ssh hosts, Slurm, ...): say why

Blocks in the languages of :data:`CHECKED` must carry one of these markers.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import List, Optional

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = os.path.join(REPO, "docs")
#: languages whose blocks must say whether they run
CHECKED = {"python", "py", "sh", "bash", "shell", "console", "yaml"}

_FENCE = re.compile(r"^(`{3,}|~{3,})\s*([^\s`]*)(.*)$")
_MARKER = re.compile(r"^(?:%\s*|<!--\s*)(run|output|skip|file)(\[[^\]]*\])?\s*(?::\s*(.*?))?\s*(?:-->)?\s*$")


@dataclass
class Block:
    path: str                    # the page, relative to the repository
    line: int                    # 1-based line of the opening fence
    language: str
    text: str
    marker: Optional[str] = None          # run / output / file / skip / None
    options: dict = field(default_factory=dict)
    argument: str = ""                    # the command, the output modes, or the reason
    outputs: List["Block"] = field(default_factory=list)   # for run blocks

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def file_name(self) -> Optional[str]:
        """The file a block is saved as: a file block's name, else the first ``*.py`` word of
        a python run block's command."""
        if self.marker == "file":
            return self.argument or None
        for word in self.argument.split():
            if word.endswith(".py"):
                return os.path.basename(word)
        return None


def pages() -> List[str]:
    """Every Markdown page of the site, and README.md."""
    found = [os.path.join(REPO, "README.md")]
    for root, dirs, files in os.walk(DOCS):
        dirs[:] = sorted(d for d in dirs if not d.startswith(("_", ".")))
        found += [os.path.join(root, f) for f in sorted(files) if f.endswith(".md")]
    return found


def _options(raw: Optional[str]) -> dict:
    out = {}
    for item in (raw or "").strip("[]").split(","):
        if item.strip():
            key, _, value = item.partition("=")
            out[key.strip()] = value.strip()
    return out


def parse(path: str) -> List[Block]:
    """The fenced blocks of a page with their markers; output blocks are attached to the run
    block before them (a marker of ``output`` without a run block before it is an error)."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    rel = os.path.relpath(path, REPO)
    blocks: List[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, language = m.group(1), m.group(2).lower()
        start = i
        i += 1
        body = []
        while i < len(lines) and not (lines[i].startswith(fence[0] * len(fence))
                                      and lines[i].strip() == fence[0] * len(lines[i].strip())
                                      and len(lines[i].strip()) >= len(fence)):
            body.append(lines[i])
            i += 1
        i += 1
        block = Block(rel, start + 1, language, "\n".join(body) + "\n")
        prev = lines[start - 1] if start > 0 else ""
        mk = _MARKER.match(prev.strip())
        if mk:
            block.marker, block.options = mk.group(1), _options(mk.group(2))
            block.argument = (mk.group(3) or "").strip()
        blocks.append(block)
    last_run = None
    for block in blocks:
        if block.marker == "run":
            last_run = block
        elif block.marker == "output":
            if last_run is None:
                raise ValueError(f"{block.where}: an output block with no run block before it")
            last_run.outputs.append(block)
    return blocks


def all_blocks() -> List[Block]:
    return [b for page in pages() for b in parse(page)]


def match_output(expected: str, actual: str, sort: bool = False) -> Optional[str]:
    """None when ``actual`` matches ``expected``, else what differs. A line ``...`` matches
    any number of lines, and ``...`` inside a line any text; trailing blanks are ignored."""
    exp = [line.rstrip() for line in expected.rstrip("\n").split("\n")]
    act = [line.rstrip() for line in actual.rstrip("\n").split("\n")] if actual.strip() else []
    if sort:
        exp, act = sorted(exp), sorted(act)
    if _match(exp, act):
        return None
    return ("expected:\n" + "\n".join(exp) + "\n--- got:\n" + "\n".join(act))


def _line_pattern(line: str) -> re.Pattern:
    return re.compile("^" + ".*".join(re.escape(part) for part in line.split("...")) + "$",
                      re.DOTALL)


def _match(exp: List[str], act: List[str]) -> bool:
    # small inputs: a direct recursive match with memo
    memo = {}

    def go(i: int, j: int) -> bool:
        if (i, j) in memo:
            return memo[(i, j)]
        if i == len(exp):
            result = j == len(act)
        elif exp[i] == "...":
            result = any(go(i + 1, k) for k in range(j, len(act) + 1))
        else:
            result = j < len(act) and bool(_line_pattern(exp[i]).match(act[j])) and go(i + 1, j + 1)
        memo[(i, j)] = result
        return result
    return go(0, 0)
