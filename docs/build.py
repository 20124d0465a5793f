"""Build the documentation site: ``python docs/build.py [--out DIR]``.

Runs Sphinx with every warning as an error (``-W --keep-going``), then checks every internal
link and anchor of the built HTML (no network). Exit code 0 when both pass.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "_ext"))

from minimpi_sphinx import links  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(HERE, "_build", "html"),
                        help="where the HTML goes (default docs/_build/html)")
    parser.add_argument("-j", "--jobs", default="1", help="Sphinx's parallel jobs (default 1)")
    args = parser.parse_args(argv)
    build = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
             "-j", args.jobs, HERE, args.out]
    print("+", " ".join(build), flush=True)
    if subprocess.call(build) != 0:
        print("docs: the Sphinx build failed (warnings are errors)", file=sys.stderr)
        return 1
    problems = links.check(args.out)
    for line in problems:
        print(f"docs: broken internal link: {line}", file=sys.stderr)
    if problems:
        return 1
    print(f"docs: built {args.out}/index.html; internal links checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
