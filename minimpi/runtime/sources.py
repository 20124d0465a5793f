"""Starting without ``minimpi run``: Slurm's ``srun`` and environment rendezvous.

Where no minimpi launcher started the ranks, they learn rank, size and the coordinator's
address from variables another launcher set, and rank 0 hosts the coordinator (a helper
process it starts, ``python -m minimpi.launcher.rendezvous``). :func:`find` recognises, in
this order:

1. explicit environment rendezvous: ``MINIMPI_COORDINATOR=host:port`` with rank and size from
   the first pair that is set of ``MINIMPI_RANK``/``MINIMPI_SIZE``, ``RANK``/``WORLD_SIZE``,
   ``OMPI_COMM_WORLD_RANK``/``OMPI_COMM_WORLD_SIZE``, ``PMI_RANK``/``PMI_SIZE``,
   ``SLURM_PROCID``/``SLURM_NTASKS``;
2. a Slurm job step (``srun``: ``SLURM_STEP_ID`` and ``SLURM_PROCID``): rank and size from
   Slurm; the coordinator on the first node of the step, on a port every task derives from
   the job and step ids without talking to the others (or the first of
   ``SLURM_STEP_RESV_PORTS`` where Slurm reserves ports);
3. torchrun-style variables: ``MASTER_ADDR``/``MASTER_PORT`` with ``RANK``/``WORLD_SIZE``
   (under torchrun itself, whose agent holds ``MASTER_PORT``, the coordinator takes the next
   port);
4. Open MPI's or PMI's rank variables without ``MINIMPI_COORDINATOR``: an error saying what to
   set, rather than N separate worlds of size 1.

The job secret (:func:`job_secret`): no launcher can hand one out here, so it comes from
``MINIMPI_SECRET``, ``MINIMPI_SECRET_FILE`` or the per-user key file ``~/.minimpi/secret``
(mode 0600, on the home directory the nodes share; ``minimpi keygen`` writes it). Without
any of them start-up stops with a message listing them, unless ``MINIMPI_INSECURE=1``.
The key every rank uses is HMAC(user secret, job id), so messages of one job never
authenticate in another.

This module decides and checks; ``bootstrap.py`` builds the :class:`BootInfo` from the
:class:`Rendezvous` it returns.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import select
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Mapping, Optional

from ..errors import MinimpiError
from . import netaddr

ENV_COORDINATOR = "MINIMPI_COORDINATOR"      # host:port of the coordinator rank 0 hosts
ENV_SECRET = "MINIMPI_SECRET"
ENV_SECRET_FILE = "MINIMPI_SECRET_FILE"
ENV_INSECURE = "MINIMPI_INSECURE"
ENV_IFACE = "MINIMPI_IFACE"
MIN_SECRET_CHARS = 16

#: (rank variable, size variable, who sets them) in the order they are looked for
RANK_VARIABLES = [
    ("MINIMPI_RANK", "MINIMPI_SIZE", "MINIMPI_RANK/MINIMPI_SIZE"),
    ("RANK", "WORLD_SIZE", "RANK/WORLD_SIZE"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "Open MPI's mpirun"),
    ("PMI_RANK", "PMI_SIZE", "a PMI launcher (Hydra mpiexec, srun --mpi=pmi2)"),
    ("SLURM_PROCID", "SLURM_NTASKS", "Slurm's srun"),
]

# ports derived from Slurm ids lie below Linux's ephemeral range (32768-60999), so that no
# outgoing connection happens to hold them
SLURM_PORT_BASE = 20000
SLURM_PORT_SPAN = 10000


@dataclass
class Rendezvous:
    """What a launcher-less rank learned from its environment."""

    source: str              # "env" | "slurm" | "torchrun"
    rank: int
    size: int
    coord_host: str
    coord_port: int
    job_id: str
    origin: str              # where rank, size and address came from, for messages

    @property
    def coordinator(self) -> str:
        host = f"[{self.coord_host}]" if ":" in self.coord_host else self.coord_host
        return f"{host}:{self.coord_port}"


def _int(environ: Mapping[str, str], name: str) -> int:
    try:
        return int(environ[name])
    except ValueError:
        raise MinimpiError(f"minimpi bootstrap: {name}={environ[name]!r} is not an integer") \
            from None


def _rank_size(environ: Mapping[str, str], pairs=RANK_VARIABLES):
    for rank_var, size_var, who in pairs:
        if rank_var in environ and size_var in environ:
            rank, size = _int(environ, rank_var), _int(environ, size_var)
            if size < 1 or not 0 <= rank < size:
                raise MinimpiError(f"minimpi bootstrap: {rank_var}={rank} is outside "
                                   f"0..{size - 1} ({size_var}={size})")
            return rank, size, f"{rank_var}/{size_var} ({who})"
    return None


def _split_host_port(text: str, var: str):
    text = text.strip()
    if text.startswith("tcp://"):
        text = text[len("tcp://"):]
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise MinimpiError(f"minimpi bootstrap: {var}={text!r} is not HOST:PORT "
                           f"(e.g. node1:29500 or [fe80::1]:29500)")
    return host.strip("[]"), int(port)


def in_slurm_step(environ: Mapping[str, str]) -> bool:
    """Inside a task that srun started (a batch script has SLURM_PROCID but no step id)."""
    return "SLURM_PROCID" in environ and environ.get("SLURM_STEP_ID", "").isdigit()


def first_node(nodelist: str) -> str:
    """The first name of Slurm's compressed node list: ``node[07-09,02],gpu1`` -> node07.

    (The launcher expands whole lists, launcher/hosts.py; a rank only needs the first.)
    """
    text = nodelist.strip()
    out, i = "", 0
    while i < len(text) and text[i] != ",":
        if text[i] == "[":
            close = text.find("]", i)
            if close < 0:
                out = ""
                break
            out += text[i + 1:close].split(",")[0].split("-")[0]
            i = close + 1
        else:
            out += text[i]
            i += 1
    if not out or "[" in out or "]" in out:
        raise MinimpiError(f"minimpi bootstrap: cannot tell the first node of the Slurm node "
                           f"list {nodelist!r}; set {ENV_COORDINATOR}=HOST:PORT")
    return out


def slurm_port(environ: Mapping[str, str]) -> tuple[int, str]:
    """(port, how it was chosen) for the coordinator of this Slurm step."""
    resv = environ.get("SLURM_STEP_RESV_PORTS", "").strip()
    if resv:
        first = resv.split(",")[0].split("-")[0]
        if first.isdigit():
            return int(first), f"the first of SLURM_STEP_RESV_PORTS={resv}"
    job, step = _int(environ, "SLURM_JOB_ID"), _int(environ, "SLURM_STEP_ID")
    port = SLURM_PORT_BASE + (job * 97 + step) % SLURM_PORT_SPAN
    return port, f"derived from SLURM_JOB_ID={job} and SLURM_STEP_ID={step}"


def _slurm(environ: Mapping[str, str]) -> Rendezvous:
    rank, size, _ = _rank_size(environ, [RANK_VARIABLES[-1]])
    if "SLURM_STEP_NUM_TASKS" in environ:   # the step's own count, if srun -n < allocation
        size = _int(environ, "SLURM_STEP_NUM_TASKS")
    nodelist = environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_JOB_NODELIST", "")
    first = first_node(nodelist)
    port, how = slurm_port(environ)
    if rank == 0 and environ.get("SLURMD_NODENAME", first) != first:
        raise MinimpiError(
            f"minimpi bootstrap: rank 0 runs on {environ['SLURMD_NODENAME']}, but every rank "
            f"expects the coordinator on the step's first node {first}; use srun's block or "
            f"cyclic distribution, or set {ENV_COORDINATOR}=HOST:PORT (HOST = rank 0's node)")
    job_id = f"slurm-{environ.get('SLURM_JOB_ID')}.{environ.get('SLURM_STEP_ID')}"
    return Rendezvous("slurm", rank, size, first, port, job_id,
                      f"Slurm (SLURM_PROCID/SLURM_NTASKS; coordinator on {first}, port {how})")


def find(environ: Mapping[str, str]) -> Optional[Rendezvous]:
    """The launcher-less start-up that applies here, or None (then: a singleton)."""
    if "MINIMPI_COORD" in environ:          # started by `minimpi run`: not ours
        return None
    if environ.get(ENV_COORDINATOR):
        host, port = _split_host_port(environ[ENV_COORDINATOR], ENV_COORDINATOR)
        found = _rank_size(environ, [p for p in RANK_VARIABLES
                                     if p[0] != "SLURM_PROCID" or in_slurm_step(environ)])
        if found is None:
            raise MinimpiError(
                f"minimpi bootstrap: {ENV_COORDINATOR} is set but no rank and size are: set "
                f"MINIMPI_RANK and MINIMPI_SIZE (or RANK/WORLD_SIZE, OMPI_COMM_WORLD_RANK/"
                f"OMPI_COMM_WORLD_SIZE, PMI_RANK/PMI_SIZE) for every process")
        rank, size, origin = found
        if ":" in host:
            raise MinimpiError(f"minimpi bootstrap: {ENV_COORDINATOR}={host!r}: the coordinator "
                               f"needs an IPv4 address or a host name")
        job_id = environ.get("MINIMPI_JOBID") or f"env-{host}:{port}"
        return Rendezvous("env", rank, size, host, port, job_id,
                          f"{origin}, coordinator {ENV_COORDINATOR}={host}:{port}")
    if "MINIMPI_RANK" in environ and "MINIMPI_SIZE" in environ:
        raise MinimpiError(
            "minimpi bootstrap: MINIMPI_RANK is set but neither MINIMPI_COORD (set by "
            f"`minimpi run`) nor {ENV_COORDINATOR}=HOST:PORT (environment rendezvous: rank 0 "
            "hosts the coordinator there) is; start the program with `minimpi run`, set "
            f"{ENV_COORDINATOR}, or unset MINIMPI_RANK for a singleton")
    if in_slurm_step(environ):
        return _slurm(environ)
    if environ.get("MASTER_ADDR") and environ.get("MASTER_PORT"):
        found = _rank_size(environ, [RANK_VARIABLES[1]])
        if found is not None:
            rank, size, origin = found
            port = _int(environ, "MASTER_PORT")
            how = "MASTER_PORT"
            if environ.get("TORCHELASTIC_RUN_ID") or environ.get("TORCHELASTIC_USE_AGENT_STORE"):
                port, how = port + 1, "MASTER_PORT+1 (torchrun's agent holds MASTER_PORT)"
            host = environ["MASTER_ADDR"]
            job_id = environ.get("MINIMPI_JOBID") or environ.get("TORCHELASTIC_RUN_ID") \
                or f"torchrun-{host}:{port}"
            return Rendezvous("torchrun", rank, size, host, port, job_id,
                              f"{origin}, coordinator MASTER_ADDR={host} port {port} ({how})")
    for rank_var, size_var, who in RANK_VARIABLES[2:4]:
        if environ.get(size_var, "1").strip() not in ("", "0", "1"):
            raise MinimpiError(
                f"minimpi bootstrap: started by {who} ({size_var}={environ[size_var]}), which "
                f"tells no coordinator address; set {ENV_COORDINATOR}=HOST:PORT for every "
                f"process (HOST: where rank 0 runs, PORT: a free port there), or start the "
                f"job with `minimpi run`")
    return None


# ---- the secret ----------------------------------------------------------------------------
def _read_key_file(path: str, what: str) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise MinimpiError(f"minimpi bootstrap: cannot read {what} {path}: {exc.strerror}") \
            from None
    try:
        st = os.fstat(fd)
        if stat.S_IMODE(st.st_mode) & 0o077:
            raise MinimpiError(
                f"minimpi bootstrap: {what} {path} is readable or writable by others (mode "
                f"{stat.S_IMODE(st.st_mode):04o}); anyone who can read it can join or disturb "
                f"your jobs: `chmod 600 {path}`")
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            raise MinimpiError(f"minimpi bootstrap: {what} {path} belongs to uid {st.st_uid}, "
                               f"not to you (uid {os.getuid()})")
        data = os.read(fd, 65536).strip()
    finally:
        os.close(fd)
    if len(data) < MIN_SECRET_CHARS:
        raise MinimpiError(f"minimpi bootstrap: {what} {path} holds {len(data)} characters; "
                           f"a secret needs at least {MIN_SECRET_CHARS} (`minimpi keygen` "
                           f"writes a good one)")
    return data


def insecure(environ: Mapping[str, str]) -> bool:
    return environ.get(ENV_INSECURE, "").strip().lower() in ("1", "yes", "true", "on")


def key_file_path(environ: Mapping[str, str] = os.environ) -> str:
    """The per-user key file: ~/.minimpi/secret of the HOME in ``environ``."""
    home = environ.get("HOME") or os.path.expanduser("~")
    return os.path.join(home, ".minimpi", "secret")


def user_secret(environ: Mapping[str, str]) -> tuple[bytes, str]:
    """(the user's secret, where it came from); MinimpiError naming the options if none."""
    if environ.get(ENV_SECRET):
        value = environ[ENV_SECRET].strip().encode()
        if len(value) < MIN_SECRET_CHARS:
            raise MinimpiError(f"minimpi bootstrap: {ENV_SECRET} has {len(value)} characters; "
                               f"use at least {MIN_SECRET_CHARS}, e.g. "
                               f"export {ENV_SECRET}=$(openssl rand -hex 32)")
        return value, ENV_SECRET
    if environ.get(ENV_SECRET_FILE):
        path = environ[ENV_SECRET_FILE]
        return _read_key_file(path, ENV_SECRET_FILE), f"{ENV_SECRET_FILE}={path}"
    home_key = key_file_path(environ)
    if os.path.exists(home_key):
        return _read_key_file(home_key, "the key file"), home_key
    if insecure(environ):
        return b"", f"{ENV_INSECURE}=1 (no authentication)"
    raise MinimpiError(
        "minimpi bootstrap: no job secret. Started without `minimpi run`, the ranks must share "
        "a secret that authenticates the coordinator and every connection between them; none "
        f"was found. Give every rank the same one: export {ENV_SECRET}=$(openssl rand -hex 32) "
        f"(srun passes your environment on), or {ENV_SECRET_FILE}=PATH (a file of mode 0600), "
        f"or run `minimpi keygen` once to write {home_key} (mode 0600) on the shared home "
        f"directory. {ENV_INSECURE}=1 runs without authentication: anyone who can reach the "
        f"ports can then join the job or inject messages.")


def job_secret(environ: Mapping[str, str], rdv: Rendezvous) -> bytes:
    """The 32-byte key of this job, derived from the user's secret and the job id."""
    raw, _ = user_secret(environ)
    return hmac.new(raw, f"minimpi job {rdv.job_id}".encode(), hashlib.sha256).digest()


def data_plane_address(environ: Mapping[str, str], rdv: Rendezvous) -> str:
    """Where this rank listens: MINIMPI_BIND, else MINIMPI_IFACE, else the route to rank 0."""
    try:
        return netaddr.data_plane_address(rdv.coord_host, environ.get(ENV_IFACE),
                                          environ.get("MINIMPI_BIND"))
    except netaddr.AddressError as exc:
        raise MinimpiError(f"minimpi bootstrap: rank {rdv.rank}: {exc} (the data-plane address "
                           f"is the local end of the route to the coordinator host "
                           f"{rdv.coord_host}; set {ENV_IFACE}=NAME|CIDR to choose it)") from None


# ---- rank 0 hosts the coordinator ----------------------------------------------------------
#: the helper of this process, kept so that its stdin pipe stays open until we exit
_helper: Optional[subprocess.Popen] = None
HELPER_READY_S = 30.0


def host_coordinator(rdv: Rendezvous, secret: bytes, startup_timeout: float) -> str:
    """Start the coordinator for this job next to rank 0; returns the address to connect to.

    The helper reads its settings (with the secret: never argv) from stdin and ends when
    stdin reaches EOF, i.e. when this process exits however it exits.
    """
    global _helper
    bind = "0.0.0.0"   # every interface: the other ranks come from wherever they are
    config = {"secret": secret.hex(), "size": rdv.size, "job_id": rdv.job_id, "host": bind,
              "port": rdv.coord_port, "startup_timeout": startup_timeout,
              "origin": rdv.origin}
    proc = subprocess.Popen([sys.executable, "-m", "minimpi.launcher.rendezvous"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True)
    proc.stdin.write(json.dumps(config).encode() + b"\n")
    proc.stdin.flush()
    line = _read_line(proc.stdout, HELPER_READY_S)
    if not line.startswith(b"ready"):
        exited = proc.poll() is not None
        proc.kill()
        proc.wait()
        why = line.decode(errors="replace").strip() or (
            f"the helper exited with code {proc.returncode} (its error is above)" if exited
            else f"the helper did not answer within {HELPER_READY_S:g} s")
        if why.startswith("error "):
            why = why[len("error "):]
        raise MinimpiError(f"minimpi bootstrap: rank 0 could not start the coordinator on port "
                           f"{rdv.coord_port}: {why} (from {rdv.origin}; set "
                           f"{ENV_COORDINATOR}=HOST:PORT to choose another port)")
    _helper = proc
    return f"tcp://127.0.0.1:{rdv.coord_port}"


def _read_line(pipe, timeout: float) -> bytes:
    deadline = time.monotonic() + timeout
    data = b""
    fd = pipe.fileno()
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    return data
