#!/usr/bin/env bash
# Install what tests/verbs/run-in-guest.sh needs to boot a soft-RoCE QEMU guest (Debian 12 host).
#
#   tests/verbs/install-guest-deps.sh            # as root, or with sudo available
#
# The host kernel needs no RDMA support: the guest boots Debian's stock kernel, which can load
# rdma_rxe. Debian packages give QEMU, that kernel and pyverbs (python3-pyverbs is built for
# /usr/bin/python3, so the guest runs that interpreter); virtme-ng (boots the host's root file
# system in the guest) comes from the package index into its own venv. Idempotent: a second
# run only checks.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=${MINIMPI_VERBS_CACHE:-$HOME/.cache/minimpi-verbs}
PACKAGES=(qemu-system-x86 linux-image-amd64 busybox-static python3-pyverbs ibverbs-providers
          libibverbs-dev rdma-core python3-numpy python3-venv)

SUDO=""
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "install-guest-deps: need root or sudo for apt-get" >&2; exit 2; }
    SUDO=sudo
fi
command -v apt-get >/dev/null || { echo "install-guest-deps: needs a Debian/Ubuntu host (apt-get)" >&2; exit 2; }

start=$(date +%s)
missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "install-guest-deps: apt-get install ${missing[*]}"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
fi

mkdir -p "$CACHE"
if [ ! -x "$CACHE/vng/bin/vng" ]; then
    python3 -m venv "$CACHE/vng"
    "$CACHE/vng/bin/pip" install -q virtme-ng
fi
# The guest's interpreter: Debian's python3 (pyverbs is built for it) plus minimpi's own
# dependencies; numpy and pyverbs come from the system site packages.
if [ ! -x "$CACHE/guest-venv/bin/python" ]; then
    /usr/bin/python3 -m venv --system-site-packages "$CACHE/guest-venv"
fi
"$CACHE/guest-venv/bin/pip" install -q -e "$REPO[test]"
"$CACHE/guest-venv/bin/python" -c "import pyverbs.device, minimpi, zmq, pytest" \
    || { echo "install-guest-deps: the guest venv cannot import its modules" >&2; exit 1; }
echo "install-guest-deps: ready in $(( $(date +%s) - start )) s (cache: $CACHE)"
