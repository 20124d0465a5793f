"""`minimpi run` argument handling that mpiexec users rely on."""
from __future__ import annotations

import pytest
from minimpi.launcher.run import strip_interpreter


@pytest.mark.parametrize("argv, expected", [
    (["script.py", "a"], (None, ["script.py", "a"])),
    (["python", "script.py", "a"], (None, ["script.py", "a"])),
    (["python3", "-u", "script.py"], (None, ["script.py"])),
    (["/usr/bin/python3.11", "-B", "-u", "script.py", "-v"], (None, ["script.py", "-v"])),
    (["python", "-m", "mpi4py", "lab.py"], ("mpi4py", ["lab.py"])),
    (["python", "-u", "-m", "pkg.mod", "--flag"], ("pkg.mod", ["--flag"])),
    (["pythonista.py"], (None, ["pythonista.py"])),
])
def test_leading_python_is_the_interpreter(argv, expected):
    assert strip_interpreter(argv) == expected


def test_a_script_file_named_python_is_still_a_script(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "python").write_text("print('I am a script')\n")  # not executable
    assert strip_interpreter(["python", "x"]) == (None, ["python", "x"])
