"""``minimpi keygen``: write the per-user key file that launcher-less jobs authenticate with.

Jobs started by ``srun`` or by environment rendezvous have no launcher to hand out a fresh
secret; each rank then reads ``~/.minimpi/secret`` (see ``minimpi/runtime/sources.py``). On a
cluster whose nodes share the home directory, running this once makes every later
``srun -n 8 python prog.py`` authenticated with no further set-up.
"""
from __future__ import annotations

import argparse
import os
import secrets
import sys

from minimpi.runtime.sources import key_file_path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true",
                   help="replace an existing key file (running jobs keep the old key)")
    p.add_argument("--file", metavar="PATH",
                   help="where to write it (default ~/.minimpi/secret; point MINIMPI_SECRET_FILE "
                        "at another path)")


def write_key(path: str, force: bool = False) -> None:
    """A fresh 256-bit secret in ``path``, mode 0600 (its directory 0700 if we make it)."""
    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if force else os.O_EXCL)
    fd = os.open(path, flags, 0o600)
    try:
        os.fchmod(fd, 0o600)   # an existing file keeps its mode on O_TRUNC
        os.write(fd, (secrets.token_hex(32) + "\n").encode())
    finally:
        os.close(fd)


def main(args: argparse.Namespace) -> int:
    path = args.file or key_file_path()
    try:
        write_key(path, args.force)
    except FileExistsError:
        print(f"minimpi keygen: {path} already exists (--force replaces it)", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"minimpi keygen: cannot write {path}: {exc.strerror}", file=sys.stderr)
        return 1
    print(f"wrote {path} (mode 0600): jobs started by srun or environment rendezvous now "
          f"authenticate with it on every host that shares this home directory")
    return 0
