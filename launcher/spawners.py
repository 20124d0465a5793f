"""How the launcher starts an agent on a host: directly, over ssh, or with srun.

Each spawner turns (host, the agent's command) into the argv of a local process whose stdin
and stdout are the agent's: the launcher talks to every agent the same way, whatever
carries the bytes.

    LocalSpawner()                  python -m minimpi.launcher.agent          (localhost)
    RshSpawner(["ssh"])             ssh -x -o BatchMode=yes ... HOST 'python -m ...'
    SrunSpawner(cpus={"n1": 4})     srun --nodes=1 --ntasks=1 --nodelist=HOST ... python -m ...

The agent's Python is an absolute path (over ssh, PATH comes from the remote shell's start-up
files and the working directory is $HOME): by default the launcher's own ``sys.executable``,
which is right where hosts share the file system; ``--remote-python``/``MINIMPI_REMOTE_PYTHON``
set another.
"""
from __future__ import annotations

import os
import shlex
import sys
from typing import Mapping, Optional, Sequence

ENV_RSH = "MINIMPI_RSH"
ENV_REMOTE_PYTHON = "MINIMPI_REMOTE_PYTHON"

#: added after the user's own ssh options (ssh takes the first value it sees of each):
#: never prompt, bounded connect, notice a dead peer within ~30 s, no X11
SSH_DEFAULTS = ["-x", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
                "-o", "ServerAliveInterval=10", "-o", "ServerAliveCountMax=3"]


def agent_command(python: str, host: str) -> list[str]:
    return [python, "-m", "minimpi.launcher.agent", "--host", host]


class LocalSpawner:
    """An agent on this host, started directly (``--hosts localhost:4``)."""

    kind = "local"
    ssh_client_first = False

    def argv(self, host: str, python: str) -> list[str]:
        return agent_command(python, host)

    def describe(self, host: str) -> str:
        return f"the agent for {host}"


class RshSpawner:
    """An agent over ssh, or any command that runs ``CMD HOST COMMAND-STRING`` remotely."""

    kind = "ssh"

    def __init__(self, rsh: Sequence[str]):
        if not rsh:
            raise ValueError("--rsh: empty command (expected e.g. ssh or 'ssh -p 2222')")
        self.rsh = list(rsh)
        self.is_ssh = os.path.basename(self.rsh[0]) == "ssh"
        # sshd tells the remote command the launcher's address: the best guess of where the
        # coordinator can be reached from there
        self.ssh_client_first = self.is_ssh

    def argv(self, host: str, python: str) -> list[str]:
        extra = SSH_DEFAULTS if self.is_ssh else []
        return [*self.rsh, *extra, host, shlex.join(agent_command(python, host))]

    def describe(self, host: str) -> str:
        return f"{os.path.basename(self.rsh[0])} to {host}"


class SrunSpawner:
    """An agent as a one-task Slurm step on a node of the allocation.

    ``--overlap`` lets the agent steps share the allocation with each other and with other
    steps; ``--cpus-per-task`` gives each agent (and so its ranks, which run inside its step)
    every CPU the allocation has on that node; ``--kill-on-bad-exit`` and srun's own clean-up
    end the step when the agent or srun dies; ``--unbuffered``, because srun otherwise holds
    a task's output until it sees a newline, and the agent's frames are binary.
    """

    kind = "slurm"
    ssh_client_first = False

    def __init__(self, cpus: Optional[Mapping[str, int]] = None, srun: str = "srun"):
        self.cpus = dict(cpus or {})
        self.srun = srun

    def argv(self, host: str, python: str) -> list[str]:
        cmd = [self.srun, "--nodes=1", "--ntasks=1", f"--nodelist={host}", "--overlap",
               "--kill-on-bad-exit=1", "--mem=0", "--unbuffered"]
        if self.cpus.get(host):
            cmd.append(f"--cpus-per-task={self.cpus[host]}")
        return cmd + agent_command(python, host)

    def describe(self, host: str) -> str:
        return f"srun on {host}"


def rsh_from(option: Optional[str], environ: Mapping[str, str] = os.environ) -> list[str]:
    """--rsh, else MINIMPI_RSH, else plain ssh; split like a shell would."""
    text = option or environ.get(ENV_RSH) or "ssh"
    return shlex.split(text)


def remote_python(option: Optional[str], environ: Mapping[str, str] = os.environ) -> str:
    python = option or environ.get(ENV_REMOTE_PYTHON) or sys.executable
    if not os.path.isabs(python):
        raise ValueError(f"--remote-python {python!r}: give an absolute path (over ssh, PATH "
                         f"comes from the remote shell's start-up files)")
    return python
