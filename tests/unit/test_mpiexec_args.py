"""The mpiexec/mpirun commands: Open MPI's and MPICH's command lines as `minimpi run` arguments,
and the one-line answer to every other option (launcher/mpiexec.py)."""
from __future__ import annotations

import os
import stat
import sys

import pytest
from minimpi.launcher.mpiexec import help_text, main, shadowed_note, translate
from minimpi.launcher.mpiexec_options import OPTIONS, REFUSED, MpiexecUsageError

ENV = {"PATH": os.environ.get("PATH", ""), "HOME": "/home/u", "DISPLAY": ":0"}


def run_args(*argv: str, environ=ENV) -> list[str]:
    return translate(list(argv), "mpirun", environ).run_argv


@pytest.mark.parametrize("argv, expected", [
    (["-n", "4", "python", "lab.py"], ["-n", "4", "--no-prefix", "python", "lab.py"]),
    (["-np", "4", "python", "lab.py", "-n", "2"],
     ["-n", "4", "--no-prefix", "python", "lab.py", "-n", "2"]),
    (["--np=3", "python", "-c", "print(1)"],
     ["-n", "3", "--no-prefix", "python", "-c", "print(1)"]),
    (["-c", "2", "-l", "python", "x.py"], ["-n", "2", "python", "x.py"]),
    (["--tag-output", "-n", "2", "python", "x.py"], ["-n", "2", "python", "x.py"]),
    (["-prepend-rank", "-n", "2", "python", "x.py"], ["-n", "2", "python", "x.py"]),
    # -n omitted: one process (MPICH), or one per slot of the host list (Open MPI)
    (["python", "x.py"], ["-n", "1", "--no-prefix", "python", "x.py"]),
    (["-H", "a:2,b", "python", "x.py"],
     ["-n", "3", "--no-prefix", "--hosts", "a:2,b:1", "python", "x.py"]),
    (["-H", "a,a,b", "-n", "2", "python", "x.py"],
     ["-n", "2", "--no-prefix", "--hosts", "a:2,b:1", "python", "x.py"]),
    (["-hosts", "a,b", "-ppn", "2", "python", "x.py"],
     ["-n", "4", "--no-prefix", "--hosts", "a:2,b:2", "python", "x.py"]),
    (["-N", "3", "python", "x.py"], ["-n", "3", "--no-prefix", "python", "x.py"]),
    (["--map-by", "ppr:2:node", "-H", "a,b", "python", "x.py"],
     ["-n", "4", "--no-prefix", "--hosts", "a:2,b:2", "python", "x.py"]),
    # environment: Open MPI -x VAR exports this shell's value; Hydra -genv VAR VALUE
    (["-x", "DISPLAY", "-x", "A=1=2", "-genv", "B", "two words", "-genv", "C=3", "-n", "1",
      "python", "x.py"],
     ["-n", "1", "--no-prefix", "-x", "DISPLAY=:0", "-x", "A=1=2", "-x", "B=two words",
      "-x", "C=3", "python", "x.py"]),
    (["-genvall", "--allow-run-as-root", "--oversubscribe", "-n", "2", "python", "x.py"],
     ["-n", "2", "--no-prefix", "--oversubscribe", "python", "x.py"]),
    # binding and mapping
    (["--bind-to", "core", "--report-bindings", "-n", "2", "python", "x.py"],
     ["-n", "2", "--no-prefix", "--report-bindings", "--bind-to", "core", "python", "x.py"]),
    (["-bind-to", "core:2", "-n", "2", "python", "x.py"],
     ["-n", "2", "--no-prefix", "--bind-to", "core:2", "python", "x.py"]),
    (["--map-by", "socket", "-n", "2", "python", "x.py"],
     ["-n", "2", "--no-prefix", "--bind-to", "socket", "--map-by", "socket", "python",
      "x.py"]),
    (["--map-by", "core:PE=2", "-n", "2", "python", "x.py"],
     ["-n", "2", "--no-prefix", "--bind-to", "core:2", "--map-by", "core", "python", "x.py"]),
    (["--bind-to", "none", "--map-by", "core", "-n", "2", "python", "x.py"],
     ["-n", "2", "--no-prefix", "python", "x.py"]),
    (["--use-hwthread-cpus", "--bind-to", "core", "-n", "2", "python", "x.py"],
     ["-n", "2", "--no-prefix", "--bind-to", "hwthread", "python", "x.py"]),
    (["--cpus-per-proc", "2", "-n", "2", "python", "x.py"],
     ["-n", "2", "--no-prefix", "--bind-to", "core:2", "python", "x.py"]),
    # MCA parameters with a minimpi meaning
    (["--mca", "plm_rsh_agent", "ssh -p 2222", "-mca", "mpi_yield_when_idle", "1", "-n", "2",
      "python", "x.py"],
     ["-n", "2", "--no-prefix", "--rsh", "ssh -p 2222", "--progress", "yield", "python",
      "x.py"]),
    (["--timeout", "30", "-n", "2", "python", "x.py"],
     ["-n", "2", "--no-prefix", "--timeout", "30", "python", "x.py"]),
])
def test_command_lines(argv, expected):
    assert run_args(*argv) == expected


def test_mpiexec_timeout_variable_is_the_timeout():
    assert run_args("-n", "2", "python", "x.py", environ={**ENV, "MPIEXEC_TIMEOUT": "9"}) == \
        ["-n", "2", "--no-prefix", "--timeout", "9", "python", "x.py"]


def test_paths_are_made_absolute_and_wdir_checked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "w").mkdir()
    (tmp_path / "hosts").write_text("h1 slots=2\nh2:2\n")
    assert run_args("-wdir", "w", "--output-filename", "out", "-f", "hosts", "python",
                    "x.py") == [
        "-n", "4", "--no-prefix", "--hosts", "h1:2,h2:2", "--output-dir",
        str(tmp_path / "out"), "--wdir", str(tmp_path / "w"), "python", "x.py"]
    with pytest.raises(MpiexecUsageError, match="-d nowhere: not a directory"):
        run_args("-d", "nowhere", "python", "x.py")


def test_colon_separated_programs(tmp_path):
    argv = ["-genv", "G", "1", "-n", "1", "python", "m.py", ":", "-n", "2", "-env", "E", "2",
            "-wdir", str(tmp_path), "python", "-O", "w.py", "a", ":", "--np", "1", "-x",
            "X=3", "python", "-c", "pass"]
    assert run_args(*argv) == [
        "-n", "1", "--no-prefix", "-x", "G=1", "python", "m.py",
        ":", "-n", "2", "-x", "E=2", "--wdir", str(tmp_path), "python", "-O", "w.py", "a",
        ":", "-n", "1", "-x", "X=3", "python", "-c", "pass"]


@pytest.mark.parametrize("argv, words", [
    (["--timestamp-output", "-n", "2", "python", "x.py"],
     ["mpirun option --timestamp-output is not supported"]),
    (["-genvlist", "A,B", "python", "x.py"], ["-genvlist is not supported", "-x VAR"]),
    (["-outfile-pattern", "o.%r", "python", "x.py"], ["--output-dir"]),
    (["--enable-recovery", "python", "x.py"], ["--fault-tolerant"]),
    (["--frobnicate", "python", "x.py"], ["--frobnicate is not supported", "--help"]),
    (["--mca", "orte_abort_on_non_zero_status", "0", "python", "x.py"],
     ["--mca orte_abort_on_non_zero_status is not supported"]),
    (["--bind-to", "l3cache", "python", "x.py"], ["--bind-to l3cache is not supported"]),
    (["--map-by", "ppr:2:socket", "python", "x.py"], ["ppr:N:node"]),
    (["--map-by", "node", "-H", "a,b", "-n", "2", "python", "x.py"], ["--map-by node"]),
    (["-x", "SURELY_NOT_SET_ANYWHERE", "python", "x.py"], ["is not set here"]),
    (["-n", "0", "python", "x.py"], ["-n 0"]),
    (["-n"], ["needs a value"]),
    (["-n", "2"], ["no program"]),
    (["-n", "1", "python", "a.py", ":", "-H", "b", "python", "c.py"], ["hosts per program"]),
    (["--stdin", "all", "python", "x.py"], ["rank 0"]),
])
def test_what_minimpi_cannot_honour_is_one_line(argv, words):
    with pytest.raises(MpiexecUsageError) as info:
        translate(argv, "mpirun", ENV)
    message = str(info.value)
    assert "\n" not in message
    for word in words:
        assert word in message


def test_exit_code_2_with_one_line(capsys):
    assert main(["--timestamp-output", "-n", "2", "python", "x.py"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("minimpi: ")


def test_mca_component_tuning_is_noted_and_ignored():
    t = translate(["--mca", "btl", "^openib", "-q", "-n", "2", "python", "x.py"], "mpirun", ENV)
    assert t.run_argv == ["-n", "2", "--no-prefix", "python", "x.py"]
    assert len(t.notes) == 1 and "btl ^openib ignored" in t.notes[0]


def test_programs_that_are_not_python_are_refused_with_the_reason(tmp_path):
    elf = tmp_path / "a.out"
    elf.write_bytes(b"\x7fELF\x02\x01\x01" + bytes(40))
    shell = tmp_path / "run.sh"
    shell.write_text("#!/bin/sh\necho hi\n")
    py = tmp_path / "tool"
    py.write_text(f"#!{sys.executable}\nprint('hi')\n")
    for f in (elf, shell, py):
        f.chmod(f.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(MpiexecUsageError, match="a compiled program; minimpi runs Python"):
        run_args("-n", "2", str(elf))
    with pytest.raises(MpiexecUsageError, match="a script for /bin/sh"):
        run_args("-n", "2", str(shell))
    with pytest.raises(MpiexecUsageError, match="program no-such-command-here not found"):
        run_args("-n", "2", "no-such-command-here")
    # a Python command on PATH runs by its path
    env = {**ENV, "PATH": str(tmp_path)}
    assert translate(["-n", "2", "tool", "x"], "mpirun", env).run_argv[-2:] == [str(py), "x"]


def test_help_and_version(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for names, _, _, _ in OPTIONS:
        assert names[0] in out
    assert translate(["-V"], "mpirun", ENV).text.startswith("mpirun (minimpi ")
    assert help_text("mpiexec").startswith("usage: mpiexec")


def test_every_refused_option_is_answered_and_none_is_both():
    accepted = {n for names, _, _, _ in OPTIONS for n in names}
    assert not accepted & set(REFUSED)
    for option, why in REFUSED.items():
        with pytest.raises(MpiexecUsageError) as info:
            translate([f"--{option}", "v", "python", "x.py"], "mpiexec", ENV)
        assert why in str(info.value)


def test_a_later_mpiexec_on_path_is_named(tmp_path, monkeypatch):
    ours, theirs = tmp_path / "venv" / "bin", tmp_path / "usr" / "bin"
    for d in (ours, theirs):
        d.mkdir(parents=True)
        (d / "mpiexec").write_text("#!/bin/sh\n")
        (d / "mpiexec").chmod(0o755)
    monkeypatch.setattr(sys, "argv", [str(ours / "mpiexec")])
    note = shadowed_note("mpiexec", {"PATH": f"{ours}:{theirs}"})
    assert note is not None and str(theirs / "mpiexec") in note and str(ours) in note
    # run by its path while another comes first on PATH: nothing is shadowed by this one
    assert shadowed_note("mpiexec", {"PATH": f"{theirs}:{ours}"}) is None
    assert shadowed_note("mpiexec", {"PATH": f"{ours}"}) is None
    t = translate(["-q", "-n", "1", "python", "x.py"], "mpiexec", {"PATH": f"{ours}:{theirs}"})
    assert t.notes == []
