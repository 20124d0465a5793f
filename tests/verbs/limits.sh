# Time limits of the soft-RoCE guest run, sourced by run-in-guest.sh (host) and guest.sh
# (guest); tests/unit/test_verbs_guest_limits.py checks them by themselves.
#
# Under TCG emulation the device tests take about 10 min of both cores on an idle 2-core
# machine, and proportionally longer when other work shares the cores: a fixed limit cut a
# run on a loaded machine after 48 of 56 tests. So the host sizes the whole run's limit from
# its cores and load average, and the guest gives pytest what is left of it after the boot.

# guest_run_limit BASE: seconds for boot + tests (+ benchmark) on this machine. BASE is the
# limit of an idle machine; it grows with the load per core (the guest's 2 vCPUs need 2):
#   BASE * (load average of the last minute + 1) / max(2, cores), between 1 and 4 times BASE
# computed in integers (tenths of the load). MINIMPI_LOADAVG and MINIMPI_CORES stand in for
# /proc/loadavg and nproc (for tests).
guest_run_limit() {
    local base=$1 load cores tenths fraction factor10
    load=${MINIMPI_LOADAVG:-$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo 0)}
    cores=${MINIMPI_CORES:-$(nproc 2>/dev/null || echo 1)}
    [ "$cores" -ge 1 ] 2>/dev/null || cores=1
    # the load in tenths: 3.47 -> 34
    tenths=$(( 10#${load%%.*} * 10 ))
    case $load in *.*) fraction=${load#*.}; tenths=$(( tenths + 10#${fraction:0:1} ));; esac
    [ "$cores" -gt 2 ] || cores=2
    factor10=$(( (tenths + 10) / cores ))          # (load + 1) / cores, in tenths
    [ "$factor10" -ge 10 ] || factor10=10
    [ "$factor10" -le 40 ] || factor10=40
    echo $(( base * factor10 / 10 ))
}

# guest_pytest_limit TOTAL UPTIME RESERVE: what the guest gives pytest out of the run's TOTAL
# seconds, UPTIME seconds after its boot began (the boot is part of the run), keeping RESERVE
# seconds for what follows (the benchmark) and 30 s to report and shut down; at least 60.
guest_pytest_limit() {
    local left=$(( $1 - $2 - $3 - 30 ))
    [ "$left" -ge 60 ] || left=60
    echo "$left"
}

# say_if_limit_hit RC LIMIT WHAT: a clear line when `timeout` ended WHAT (rc 124).
say_if_limit_hit() {
    if [ "$1" = 124 ]; then
        echo "guest: $3 stopped at its time limit of $2 s (sized from the host's cores and" \
             "load); the results above are partial. Run again on a quieter machine, raise" \
             "MINIMPI_VERBS_GUEST_LIMIT (seconds for an idle machine), or run a part:" \
             "tests/verbs/run-in-guest.sh -k NAME"
    fi
}
