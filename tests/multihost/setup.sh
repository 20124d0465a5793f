#!/usr/bin/env bash
# Install what the multi-host tests need (network-namespace "hosts" with sshd, a one-node
# Slurm cluster).  Idempotent: does nothing when everything is already there.  Needs root.
#
#   tests/multihost/setup.sh          # from CI (.ci/run) or by hand, on Debian 12
#
# Services are never started by the install: the tests start private daemons themselves
# (on their own ports, with their own config files) and stop them afterwards.
set -euo pipefail

PKGS=(slurm-wlm munge openssh-server iproute2)
# programs the fixtures run; a package counts as present only if these exist too
PROGS=(/usr/sbin/sshd /usr/bin/ssh /usr/bin/ssh-keygen /usr/sbin/munged /usr/sbin/slurmctld
       /usr/sbin/slurmd /usr/bin/srun /usr/bin/sinfo /usr/bin/salloc /usr/sbin/ip /usr/sbin/tc
       /usr/bin/unshare /usr/sbin/runuser)

if [ "$(id -u)" != 0 ]; then
    echo "setup.sh: needs root (it runs apt-get install ${PKGS[*]})" >&2
    exit 1
fi
if ! command -v apt-get >/dev/null; then
    echo "setup.sh: no apt-get: install ${PKGS[*]} with this system's package manager" >&2
    exit 1
fi

missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
for prog in "${PROGS[@]}"; do
    [ -x "$prog" ] || { missing+=("(for $prog)"); break; }
done
if [ ${#missing[@]} = 0 ]; then
    echo "setup.sh: ${PKGS[*]} already installed"
    exit 0
fi

start=$(date +%s%N)
# Keep the packages' init scripts from starting system-wide sshd/munge/slurm daemons: a
# temporary policy-rc.d that refuses every start, unless the image already has one.
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod 755 "$policy"; made_policy=1
fi
cleanup() { if [ "$made_policy" = 1 ]; then rm -f "$policy"; fi; }
trap cleanup EXIT

export DEBIAN_FRONTEND=noninteractive
APT=(apt-get -q -o DPkg::Lock::Timeout=300)
# apt's output is kept and shown only on failure
log=$(mktemp)
cleanup() { rm -f "$log"; if [ "$made_policy" = 1 ]; then rm -f "$policy"; fi; }
if ! { "${APT[@]}" update && "${APT[@]}" install -y --no-install-recommends "${PKGS[@]}"; } >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    echo "setup.sh: apt-get install ${PKGS[*]} failed (last lines above)" >&2
    exit 1
fi

for prog in "${PROGS[@]}"; do
    [ -x "$prog" ] || { echo "setup.sh: $prog is still missing after the install" >&2; exit 1; }
done
[ -s /etc/munge/munge.key ] || { echo "setup.sh: /etc/munge/munge.key was not created" >&2; exit 1; }
ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "setup.sh: installed ${PKGS[*]} in $((ms / 1000)).$(( (ms % 1000) / 100 )) s"
