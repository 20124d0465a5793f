#!/usr/bin/env bash
# Runs INSIDE the soft-RoCE guest started by run-in-guest.sh (do not run it on a host).
#   guest.sh PYTHON [--bench] [pytest args...]
# Creates the RDMA device, then runs the device tests (and the benchmark with --bench).
# The last line is always "GUEST-RESULT rc=N" for the host side to read.
set -u
PYTHON=$1; shift
BENCH=0
if [ "${1:-}" = "--bench" ]; then BENCH=1; shift; fi
cd "$(dirname "$0")/../.."
source tests/verbs/limits.sh
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
rc=0
t0=$(date +%s)
{
    modprobe rdma_rxe &&
    ip link add dummy0 type dummy && ip link set dummy0 up &&
    rdma link add rxe0 type rxe netdev dummy0
} || { echo "guest: could not create the soft-RoCE device"; echo "GUEST-RESULT rc=3"; exit 3; }
# localhost resolution and the job's own sockets need a loopback interface
ip link set lo up
echo "guest: soft-RoCE device ready: $(rdma link show | head -1)"
# numpy's AVX2/FMA3 kernels (tanh among them) return NaN under QEMU's TCG emulation of those
# instructions: the examples' serial references fail over TCP just the same. Use the SSE/AVX ones.
export NPY_DISABLE_CPU_FEATURES="AVX2,FMA3"
# The launcher's ranks and the coordinator must find the tree read-only: keep caches in /tmp.
export TMPDIR=/tmp HOME=/tmp
t1=$(date +%s)
# what is left of the host's limit for the whole run (sized from its load) after the boot
RESERVE=0; [ $BENCH = 0 ] || RESERVE=600
LIMIT=$(guest_pytest_limit "${MINIMPI_VERBS_RUN_LIMIT:-900}" "$(cut -d. -f1 /proc/uptime)" $RESERVE)
echo "guest: the device tests may take $LIMIT s"
timeout "$LIMIT" "$PYTHON" -m pytest -p no:cacheprovider -q -o addopts="" -rs \
    --timeout 300 tests/verbs/test_verbs_device.py "$@" || rc=$?
t2=$(date +%s)
echo "guest: device tests took $((t2 - t1)) s (rc=$rc)"
say_if_limit_hit "$rc" "$LIMIT" "the device tests"
if [ $BENCH = 1 ]; then
    timeout 600 "$PYTHON" tests/verbs/bench.py || { brc=$?; rc=$((rc ? rc : 4))
        say_if_limit_hit "$brc" 600 "the benchmark"; }
    echo "guest: benchmark took $(( $(date +%s) - t2 )) s"
fi
echo "GUEST-RESULT rc=$rc"
exit $rc
