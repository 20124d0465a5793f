"""Every rank starts through minimpi's start script; on another host it is that host's copy."""
import os

from minimpi.launcher.agent import local_start_script

import minimpi._start

HERE = os.path.join(os.path.dirname(os.path.abspath(minimpi._start.__file__)), "minimpi_rank.py")


def test_the_launchers_start_script_becomes_this_hosts():
    theirs = "/opt/other-venv/lib/python3.12/site-packages/minimpi/_start/minimpi_rank.py"
    assert local_start_script([theirs, "prog.py", "-v"]) == [HERE, "prog.py", "-v"]
    assert local_start_script([theirs, "-m", "pkg.mod"]) == [HERE, "-m", "pkg.mod"]
    assert os.path.isfile(HERE)


def test_other_commands_are_left_alone():
    assert local_start_script(["prog.py", "x"]) == ["prog.py", "x"]
    assert local_start_script([]) == []
