#!/usr/bin/env bash
# Boot a QEMU guest with a soft-RoCE (rdma_rxe) device and run the verbs device tests in it.
#
#   tests/verbs/run-in-guest.sh [--bench] [pytest args...]
#
# The host kernel needs no RDMA: the guest boots Debian's stock kernel (which has rdma_rxe) over
# the host's own root file system (virtme-ng, 9p, read-only). Needs what install-guest-deps.sh
# installs; exits 2 (with the reason) when something is missing. Software emulation (TCG):
# results say nothing about RDMA speed.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=${MINIMPI_VERBS_CACHE:-$HOME/.cache/minimpi-verbs}
GUEST_PY=$CACHE/guest-venv/bin/python
missing=()
command -v qemu-system-x86_64 >/dev/null || missing+=("qemu-system-x86_64")
KERNEL=$(ls /boot/vmlinuz-*-amd64 2>/dev/null | sort -V | tail -1 || true)
[ -n "$KERNEL" ] || missing+=("a Debian kernel in /boot (linux-image-amd64)")
[ -x "$CACHE/vng/bin/vng" ] || missing+=("virtme-ng ($CACHE/vng)")
[ -x "$GUEST_PY" ] || missing+=("the guest venv ($CACHE/guest-venv)")
[ -d /usr/lib/python3/dist-packages/pyverbs ] || missing+=("python3-pyverbs")
if [ ${#missing[@]} -gt 0 ]; then
    echo "run-in-guest: missing: ${missing[*]}; run tests/verbs/install-guest-deps.sh" >&2
    exit 2
fi
# The guest venv must import minimpi from this checkout (it may have moved since install).
# Both packages count: an editable install maps minimpi.launcher (launcher/) separately.
if [ "$("$GUEST_PY" -c 'import minimpi, minimpi.launcher, os; d = os.path.dirname; print(d(d(minimpi.__file__)), d(d(minimpi.launcher.__file__)))' 2>/dev/null)" != "$REPO $REPO" ]; then
    "$CACHE/guest-venv/bin/pip" install -q --no-deps -e "$REPO" >/dev/null
fi

args=""
[ $# -eq 0 ] || args=$(printf ' %q' "$@")   # no arguments: none at all, not one empty one
# seconds for boot + tests, then the guest is stopped: MINIMPI_VERBS_GUEST_LIMIT (default 900)
# is for an idle machine, scaled by this machine's load per core (tests/verbs/limits.sh)
source "$REPO/tests/verbs/limits.sh"
LIMIT=$(guest_run_limit "${MINIMPI_VERBS_GUEST_LIMIT:-900}")
echo "run-in-guest: time limit $LIMIT s for boot and tests ($(nproc) cores," \
     "load $(cut -d' ' -f1 /proc/loadavg))"
start=$(date +%s)
log=$(mktemp)
guest=""
watchdog=""

kill_tree() {   # a process and all its descendants (QEMU runs a few levels below vng)
    local child
    for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do kill_tree "$child"; done
    kill "$1" 2>/dev/null || true
}
cleanup() {
    [ -n "$watchdog" ] && kill_tree "$watchdog"
    [ -n "$guest" ] && kill_tree "$guest"
    rm -f "$log"
}
trap cleanup EXIT
trap 'echo "run-in-guest: interrupted, stopping the guest" >&2; exit 130' INT TERM

# 2 vCPUs, 2 GiB; KVM is not usable on these machines, so TCG emulation.
PATH="$CACHE/vng/bin:$PATH" vng -r "$KERNEL" --force-9p --memory 2G --cpus 2 \
    --qemu-opts="-machine accel=tcg -cpu max" \
    --exec "env MINIMPI_VERBS_RUN_LIMIT=$LIMIT bash $REPO/tests/verbs/guest.sh $GUEST_PY$args" \
    > "$log" 2>&1 < /dev/null &
guest=$!
( sleep "$LIMIT"; echo "run-in-guest: no result after $LIMIT s (this machine's time limit:" \
    "raise MINIMPI_VERBS_GUEST_LIMIT, or run a part with -k), stopping the guest" >> "$log"
  kill_tree "$guest" ) &
watchdog=$!
disown "$watchdog"          # stopped at exit: no "Terminated" notice from the shell
tail -n +1 -f --pid="$guest" "$log" &
wait "$guest" || true
sleep 0.5
result=$(grep -a -o 'GUEST-RESULT rc=[0-9]*' "$log" | tail -1 | cut -d= -f2)
echo "run-in-guest: guest finished in $(( $(date +%s) - start )) s (boot included), rc=${result:-none}"
[ -n "$result" ] || { echo "run-in-guest: the guest did not report a result (boot failure?)" >&2; exit 1; }
exit "$result"
