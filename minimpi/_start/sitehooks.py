"""Which of this interpreter's site hooks must run in every rank's own process.

When Python starts, ``site`` runs code before the program: the ``import`` lines of the
``.pth`` files in site-packages, then the ``sitecustomize`` and ``usercustomize`` modules.
Job-wide tooling uses exactly these to act per process (read the rank from the environment,
start a profiler or a coverage recorder, open a log). The fork server's template is one
interpreter whose hooks ran once, without any rank's environment; a rank forked from it
would never run them. So the template looks (once, a directory listing and a few small
files) for hooks beyond the ones known to act the same in every process, and when there is
one, every rank starts as a fresh interpreter with its own environment instead (see
``minimpi/_start/forkserver.py``).

Known to act the same in every process (they only install import machinery):
setuptools' editable-install finders and ``distutils-precedence.pth``, virtualenv's
``_virtualenv.pth``, the namespace-package ``*-nspkg.pth`` lines of setuptools, the
bookkeeping lines of ``easy-install.pth``, and Debian's ``sitecustomize`` that installs the
apport exception hook. Anything else counts as per process.
"""
from __future__ import annotations

import os
import re
import site
import sys

_KNOWN_PTH_LINES = tuple(re.compile(p) for p in (
    # setuptools editable installs (PEP 660 finders)
    r"import __editable___[\w.]+_finder; __editable___[\w.]+_finder\.install\(\)",
    # setuptools' distutils-precedence.pth
    r"import os; var = 'SETUPTOOLS_USE_DISTUTILS'; enabled = os\.environ\.get\(var, "
    r"'(local|stdlib)'\) == 'local'; enabled and __import__\('_distutils_hack'\)\.add_shim\(\);?",
    # virtualenv
    r"import _virtualenv",
    # setuptools namespace packages (*-nspkg.pth)
    r"import sys, types, os;(has_mfs|p = os\.path\.join).*",
    # easy-install.pth bookkeeping
    r"import sys; sys\.__plen = len\(sys\.path\)",
    r"import sys; new = sys\.path\[sys\.__plen:\]; del sys\.path\[sys\.__plen:\]; "
    r"p = getattr\(sys, '__egginsert', 0\); sys\.path\[p:p\] = new; "
    r"sys\.__egginsert = p \+ len\(new\)",
))
#: Debian's and Ubuntu's /etc/python3.X/sitecustomize.py, code lines only
_APPORT_SITECUSTOMIZE = ("try:", "import apport_python_hook", "except ImportError:", "pass",
                         "else:", "apport_python_hook.install()")


def per_process_hooks() -> list[str]:
    """The site hooks this interpreter ran at start-up that are not known to act the same
    in every process, each as ``where: what`` (empty: none)."""
    found = []
    for name in ("sitecustomize", "usercustomize"):
        module = sys.modules.get(name)
        if module is not None and not _known_customize(module):
            found.append(f"{name} ({getattr(module, '__file__', None) or 'built in'})")
    for path in _pth_files():
        for line in _code_lines(path):
            if not any(p.fullmatch(line) for p in _KNOWN_PTH_LINES):
                found.append(f"{path}: {line[:60]}")
                break
    return found


def _known_customize(module) -> bool:
    path = getattr(module, "__file__", None)
    if not path:
        return False
    try:
        with open(path) as f:
            lines = [ln.strip() for ln in f]
    except OSError:
        return False
    return tuple(ln for ln in lines if ln and not ln.startswith("#")) == _APPORT_SITECUSTOMIZE


def _site_dirs() -> list[str]:
    """The directories whose .pth files ``site`` processed at start-up."""
    if sys.flags.no_site:
        return []
    dirs = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    seen, out = set(), []
    for d in dirs:
        real = os.path.realpath(d)
        if real not in seen and os.path.isdir(d):
            seen.add(real)
            out.append(d)
    return out


def _pth_files() -> list[str]:
    files = []
    for d in _site_dirs():
        try:
            names = sorted(n for n in os.listdir(d) if n.endswith(".pth") and
                           not n.startswith("."))
        except OSError:
            continue
        files += [os.path.join(d, n) for n in names]
    return files


def _code_lines(path: str) -> list[str]:
    """The lines of a .pth file that ``site`` executes (those that start with ``import``)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    return [ln.rstrip() for ln in lines if ln.startswith(("import ", "import\t"))]
