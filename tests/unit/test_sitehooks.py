"""Which site hooks make the fork server start every rank fresh (minimpi/_start/sitehooks.py)."""
from __future__ import annotations

import sys
import types

import pytest

from minimpi._start import sitehooks

EDITABLE = "import __editable___minimpi_0_1_0_finder; __editable___minimpi_0_1_0_finder.install()"
DISTUTILS = ("import os; var = 'SETUPTOOLS_USE_DISTUTILS'; enabled = os.environ.get(var, "
             "'local') == 'local'; enabled and __import__('_distutils_hack').add_shim(); ")
NSPKG = ("import sys, types, os;has_mfs = sys.version_info > (3, 5);p = os.path.join("
         "sys._getframe(1).f_locals['sitedir'], *('google',));importlib = has_mfs and "
         "__import__('importlib.util')")
APPORT = ("# install the apport exception handler if available\ntry:\n    import "
          "apport_python_hook\nexcept ImportError:\n    pass\nelse:\n    "
          "apport_python_hook.install()\n")


@pytest.fixture
def site_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(sitehooks, "_site_dirs", lambda: [str(tmp_path)])
    for name in ("sitecustomize", "usercustomize"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return tmp_path


def test_the_usual_venv_lines_act_alike_in_every_process(site_dir):
    (site_dir / "__editable__.minimpi-0.1.0.pth").write_text(EDITABLE)
    (site_dir / "distutils-precedence.pth").write_text(DISTUTILS)
    (site_dir / "_virtualenv.pth").write_text("import _virtualenv\n")
    (site_dir / "google-nspkg.pth").write_text(NSPKG + "\n")
    (site_dir / "paths.pth").write_text("/opt/lib\n# a comment\n")
    assert sitehooks.per_process_hooks() == []


def test_a_pth_line_that_runs_other_code_is_a_hook(site_dir):
    (site_dir / "a.pth").write_text(EDITABLE + "\n")
    (site_dir / "cov.pth").write_text("/opt/lib\nimport coverage; coverage.process_startup()\n")
    (site_dir / "z.pth").write_text("import\tmytool\n")
    hooks = sitehooks.per_process_hooks()
    assert len(hooks) == 2
    assert hooks[0].endswith("cov.pth: import coverage; coverage.process_startup()")
    assert hooks[1].endswith("z.pth: import\tmytool")


def test_customize_modules_are_hooks_except_debians_apport_one(site_dir, monkeypatch):
    apport = site_dir / "apport_sitecustomize.py"
    apport.write_text(APPORT)
    mine = site_dir / "sitecustomize.py"
    mine.write_text("import os\nRANK = os.environ.get('MINIMPI_RANK')\n")
    monkeypatch.setitem(sys.modules, "sitecustomize", types.SimpleNamespace(__file__=str(apport)))
    assert sitehooks.per_process_hooks() == []
    monkeypatch.setitem(sys.modules, "sitecustomize", types.SimpleNamespace(__file__=str(mine)))
    assert sitehooks.per_process_hooks() == [f"sitecustomize ({mine})"]
    monkeypatch.setitem(sys.modules, "usercustomize", types.SimpleNamespace(__file__=None))
    assert sitehooks.per_process_hooks()[-1] == "usercustomize (built in)"
