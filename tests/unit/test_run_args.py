"""`minimpi run` argument handling that mpiexec users rely on."""
from __future__ import annotations

import argparse

import pytest
from minimpi.launcher.pycmd import (
    PythonArgsError,
    PythonCommand,
    needs_fresh_interpreter,
    parse_python_command,
    split_program,
)
from minimpi.launcher.run import App, UsageError, add_arguments, parse_apps, start_args


@pytest.mark.parametrize("argv, expected", [
    (["script.py", "a"], None),
    (["python", "script.py", "a"], PythonCommand((), "script", "script.py", ("a",))),
    (["python3", "-u", "script.py"], PythonCommand((), "script", "script.py")),
    (["/usr/bin/python3.11", "-B", "-u", "script.py", "-v"],
     PythonCommand(("-B",), "script", "script.py", ("-v",))),
    (["python", "-m", "mpi4py", "lab.py"], PythonCommand((), "module", "mpi4py", ("lab.py",))),
    (["python", "-u", "-m", "pkg.mod", "--flag"],
     PythonCommand((), "module", "pkg.mod", ("--flag",))),
    (["pythonista.py"], None),
])
def test_leading_python_is_the_interpreter(argv, expected):
    assert split_program(argv) == expected


@pytest.mark.parametrize("argv, expected", [
    # python -c CODE ARGS: the code is the program, ARGS its sys.argv[1:]
    (["-c", "print(1)", "a", "-n"], PythonCommand((), "code", "print(1)", ("a", "-n"))),
    (["-cprint(2)"], PythonCommand((), "code", "print(2)")),
    (["-uc", "x=1"], PythonCommand((), "code", "x=1")),
    # options one per word, values attached or not
    (["-OO", "-Xdev", "-W", "error", "s.py"],
     PythonCommand(("-O", "-O", "-X", "dev", "-W", "error"), "script", "s.py")),
    (["-Wignore::DeprecationWarning", "-bb", "-mpkg"],
     PythonCommand(("-W", "ignore::DeprecationWarning", "-b", "-b"), "module", "pkg")),
    (["--check-hash-based-pycs", "always", "-s", "s.py"],
     PythonCommand(("--check-hash-based-pycs", "always", "-s"), "script", "s.py")),
    (["--check-hash-based-pycs=never", "s.py"],
     PythonCommand(("--check-hash-based-pycs", "never"), "script", "s.py")),
    # -- ends the options; what follows is the script, even if it starts with '-'
    (["-O", "--", "-odd.py", "x"], PythonCommand(("-O",), "script", "-odd.py", ("x",))),
    # the program's own options are not the interpreter's
    (["s.py", "-c", "x"], PythonCommand((), "script", "s.py", ("-c", "x"))),
])
def test_python_command_line(argv, expected):
    assert parse_python_command(argv) == expected


@pytest.mark.parametrize("argv, words", [
    (["-i", "s.py"], ["-i", "interactive"]),
    (["-E", "s.py"], ["-E", "PYTHONPATH"]),
    (["-I", "s.py"], ["-I", "PYTHONPATH"]),
    (["-S", "s.py"], ["-S", "site"]),
    (["-uS", "s.py"], ["-S"]),
    (["-"], ["stdin"]),
    (["-O"], ["no program"]),
    (["-c"], ["-c", "needs a value"]),
    (["-Z", "s.py"], ["-Z", "unknown"]),
    (["--version"], ["--version", "version"]),
])
def test_python_options_a_rank_cannot_honour_are_refused(argv, words):
    with pytest.raises(PythonArgsError) as info:
        parse_python_command(argv)
    for word in words:
        assert word in str(info.value)


def test_a_script_file_named_python_is_still_a_script(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "python").write_text("print('I am a script')\n")  # not executable
    assert split_program(["python", "x"]) is None


def test_options_that_report_on_each_process_need_fresh_interpreters():
    assert needs_fresh_interpreter(["-O", "-W", "error"]) is None
    assert "-v" in needs_fresh_interpreter(["-v"])
    assert "importtime" in needs_fresh_interpreter(["-O", "-X", "importtime"])


def test_program_words_become_the_start_script_arguments():
    one = parse_apps(3, None, ["python", "-O", "-c", "print(1)", "a"])
    assert one == [App(3, PythonCommand(("-O",), "code", "print(1)", ("a",)))]
    assert start_args(one) == ['--python-flags=["-O"]', "-c", "print(1)", "a"]
    plain = parse_apps(2, None, ["s.py", "x"])
    assert start_args(plain) == ["s.py", "x"]
    module = parse_apps(2, "pkg.tool", ["--flag"])
    assert start_args(module) == ["-m", "pkg.tool", "--flag"]


def test_colon_separates_programs_with_their_own_options(tmp_path):
    apps = parse_apps(1, None, ["a.py", "1", ":", "-n", "2", "-x", "K=V", "--wdir",
                                str(tmp_path), "python", "-O", "b.py", ":", "-np=3", "-m",
                                "pkg", "z"])
    assert apps == [
        App(1, PythonCommand((), "script", "a.py", ("1",))),
        App(2, PythonCommand(("-O",), "script", "b.py"), {"K": "V"}, str(tmp_path)),
        App(3, PythonCommand((), "module", "pkg", ("z",))),
    ]
    (entry,) = [a for a in __import__("json").loads(start_args(apps)[0][len("--apps="):])
                if a["n"] == 2]
    assert entry == {"n": 2, "flags": ["-O"], "program": ["b.py"], "env": {"K": "V"},
                     "wdir": str(tmp_path)}


@pytest.mark.parametrize("words, message", [
    ([":", "b.py"], "no program given"),
    (["a.py", ":", "b.py"], "program 2 (after ':'): give its number of processes"),
    (["a.py", ":", "-n", "0", "b.py"], "at least 1"),
    (["a.py", ":", "-n", "2", "--timeout", "3", "b.py"], "unknown option --timeout"),
    (["a.py", ":", "-n"], "-n needs a value"),
])
def test_bad_program_sections_are_usage_errors(words, message):
    with pytest.raises(UsageError) as info:
        parse_apps(1, None, words)
    assert message in str(info.value)


def test_binding_options_are_checked_by_the_parser():
    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args(["-n", "2", "--bind-to", "Core:2", "--map-by", "package"])
    assert (args.bind_to, args.map_by) == ("core:2", "socket")
    for bad in (["--bind-to", "l3cache"], ["--bind-to", "core:0"], ["--map-by", "board"]):
        with pytest.raises(SystemExit):
            p.parse_args(["-n", "2", *bad])
