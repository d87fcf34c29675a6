#!/usr/bin/env bash
# bench/service-scaling.sh: one transfer-service job moved by N workers on N source
# hosts into N `hetch serve` destination nodes sharing one directory, on the WAN
# testbed of N pairs (each host's link --rate, --rtt between any two hosts), for each
# N given; TLS and --verify written (the defaults). Source and destination on tmpfs,
# so the links and the CPUs are what is measured. Root only (network namespaces).
#
# Usage: bench/service-scaling.sh [FILES] [FILE_SIZE] (default 800 1M)
#   NS="1 2 4" RATE=500mbit RTT=20ms RUNS=1 BATCH=20 (files per unit)
#   UNITS=4 (units each worker runs at once: `hetch worker --units`)
#   SERVICE_ARGS="--range-size 256M" (more `hetch service` flags: how large files split)
#   WORK_DIR=/dev/shm (where the source and destination trees live; a disk for data
#     larger than memory allows twice)
#   KILL_AT=0.5: besides each undisturbed run of N >= 2, one where worker wN is killed
#     (-9) once the job has moved this share of its bytes (LEASE=10 s leases)
#   CP_TOO=1: for N = 1, also the same copy by `hetch cp` from a1 to b1's server (the
#     service's overhead against the command it runs)
#   HETCH_BIN=target/release/hetch
#   LAB_BIN=target/release/hetch-lab
# Output: per run: N, seconds (the job's submission to its end; for cp its wall time),
# MB/s, ratio to the mean one-pair rate of this run, CPU seconds, and the start:
# seconds from the job's submission until a worker claimed its first unit (the
# service's own stamps; the worker starts reading the unit's first file then). CPU:
# with cgroups (root), the sum over the run's own processes, by role (the service, the
# workers, the destination servers, the job client or `hetch cp`, the link's
# forwarder), so a build next door does not count; the machine's busy time beside it.
# An undisturbed job is waited for with `hetch job wait` (what a user runs); with
# KILL_AT the script looks at it once a second to know when to kill.
set -euo pipefail
BENCH=service-scaling
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
files=${1:-800}; size=${2:-1M}
ns=${NS:-1 2 4}; rate=${RATE:-500mbit}; rtt=${RTT:-20ms}; runs=${RUNS:-1}; batch=${BATCH:-20}
units=${UNITS:-4}
kill_at=${KILL_AT:-}; cp_too=${CP_TOO:-}; lease=${LEASE:-10}
bin=$(realpath "${HETCH_BIN:-target/release/hetch}")
lab=$(realpath "${LAB_BIN:-target/release/hetch-lab}")
max=0; for n in $ns; do [ "$n" -gt "$max" ] && max=$n; done
[ "$max" -ge 2 ] || max=2   # --pairs 1 names its hosts a and b: use a1/b1 of two pairs
work=$(mktemp -d "${WORK_DIR:-/dev/shm}/scaling.XXXXXX")
cleanup() {
    pkill -f "$work" 2>/dev/null || true; "$lab" wan down >/dev/null 2>&1 || true; rm -rf "$work"
    sleep 0.5; roles_done
}
roles_init "hetch-bench.$$" || echo "no cgroups here: CPU is the machine's busy time only" >&2
trap cleanup EXIT
export HETCH_CONFIG_DIR="$work/config"
bytes=$("$bin" --version >/dev/null; python3 -c "import sys;u={'K':1<<10,'M':1<<20,'G':1<<30};s=sys.argv[1];print(int(s[:-1])*u[s[-1]] if s[-1] in u else int(s))" "$size")
mkdir -p "$work/src/run"
for i in $(seq "$files"); do head -c "$bytes" /dev/urandom > "$work/src/run/f$i"; done
(umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/token")
in_role link "$lab" wan up --pairs "$max" --rtt "$rtt" --rate "$rate" >&2
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
roles="service workers destinations client link"
# Every role's CPU-seconds so far, on one line in the order of $roles.
role_cpus() { local r; for r in $roles; do printf '%s ' "$(role_cpu "$r")"; done; }
# cpu_cols B0 B1 "R0" "R1": the machine's CPU-s between two busy() readings, the sum of
# the roles' between two role_cpus() readings, and each role's.
cpu_cols() {
    python3 -c 'import sys
m = (float(sys.argv[2]) - float(sys.argv[1])) / float(sys.argv[3])
d = [float(b) - float(a) for a, b in zip(sys.argv[4].split(), sys.argv[5].split())]
print(f"{m:.2f} {sum(d):.2f}", *(f"{x:.2f}" for x in d))' "$1" "$2" "$tck" "$3" "$4"
}
tck=$(getconf CLK_TCK)
wait_log() { for _ in $(seq 200); do grep -q "$2" "$1" 2>/dev/null && return; sleep 0.1; done; echo "no '$2' in $1" >&2; exit 1; }
job() { HETCH_TOKEN=$tok in_role client "$lab" wan exec a1 -- "$bin" job --service 10.77.0.1:7879 --known-hosts "$d/kh.job" "$@"; }
# The job's state, bytes moved and bytes in all, from its `job --json show`.
progress() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(j['state'], j['bytes_done'] or 0, j['bytes'] or 0)" "$d/job.json"; }
one() {   # one N [kill]: prints "N seconds MB/s CPU-s start-s what"
    local n=$1 kill=${2:-} i b0 b1 t0 killed="" state done all
    d="$work/run$1.$RANDOM"
    mkdir -p "$d/dst"
    for i in $(seq "$n"); do
        in_role destinations "$lab" wan exec "b$i" -- "$bin" serve --root "$d/dst" --listen "10.77.0.$((100 + i)):7878" \
            --state-dir "$d/b$i" --token-file "$work/token" 2>"$d/b$i.log" &
        wait_log "$d/b$i.log" "token in"
        # Workers connect only to servers pinned in their known-hosts file.
        echo "10.77.0.$((100 + i)):7878 $(sed -n 's/.*fingerprint //p' "$d/b$i.log")" >>"$d/kh.workers"
    done
    # shellcheck disable=SC2086
    in_role service "$lab" wan exec a1 -- "$bin" service --root "$work/src" --listen 10.77.0.1:7879 \
        --state-dir "$d/svc" --db "sqlite://$d/jobs.db" --batch-files "$batch" \
        --lease-secs "$lease" ${SERVICE_ARGS:-} 2>"$d/svc.log" &
    wait_log "$d/svc.log" "listening on"
    tok=$(cat "$d/svc/token")
    for i in $(seq "$n"); do
        HETCH_TOKEN=$tok in_role workers "$lab" wan exec "a$i" -- "$bin" worker --service 10.77.0.1:7879 \
            --root "$work/src" --name "w$i" --units "$units" --token-file "$work/token" \
            --known-hosts "$d/kh.workers" 2>"$d/w$i.log" &
    done
    local nodes=""; for i in $(seq 2 "$n"); do nodes="$nodes --dest-node 10.77.0.$((100 + i)):7878"; done
    sleep 1
    b0=$(busy); t0=$(date +%s); r0=$(role_cpus)
    # shellcheck disable=SC2086
    job submit $nodes run hetch://10.77.0.101:7878/in/ >"$d/job.out" 2>/dev/null
    local id; id=$(head -n 1 "$d/job.out")
    [ -n "$kill" ] || job wait "$id" >/dev/null || true
    while :; do
        job --json show "$id" >"$d/job.json"
        read -r state done all < <(progress)
        # Only once the listing is whole (while planning, its bytes are not all known).
        if [ -n "$kill" ] && [ -z "$killed" ] && [ "$state" = running ] && awk -v done="$done" \
            -v at="$kill_at" -v all="$all" 'BEGIN { exit !(all > 0 && done >= at * all) }'; then
            pkill -9 -f -- "--name w$n --units" && killed="$(($(date +%s) - t0)) s" || { echo "N=$n: no worker w$n to kill" >&2; exit 1; }
        fi
        case $state in done) break ;; failed|cancelled) echo "N=$n: job $state" >&2; exit 1 ;; esac
        sleep 1   # a look costs a process, a TLS handshake and a query: keep them rare
    done
    b1=$(busy); r1=$(role_cpus)
    diff -rq "$work/src/run" "$d/dst/in/run" >/dev/null || { echo "N=$n: copy differs" >&2; exit 1; }
    pkill -f "$d" 2>/dev/null || true; sleep 0.5
    python3 - "$d/job.json" "$n" "$(cpu_cols "$b0" "$b1" "$r0" "$r1")" "${kill:+w$n killed at $kill_at of the bytes, after $killed}" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
s = (j["finished"] - j["created"]) / 1000
start = (j["started"] - j["created"]) / 1000
note = f"{sys.argv[4]} ({j['units']['retried']} units run again)" if sys.argv[4] else ""
print(sys.argv[2], f"{s:.2f}", f"{j['bytes_done'] / s / 1e6:.1f}", f"{start:.2f}", "service", sys.argv[3], note)
PY
    rm -rf "$d"
}
cp_one() {   # the same copy by hetch cp from a1 into b1's server
    local b0 b1 t0 t1 total r0 r1
    d="$work/cp.$RANDOM"
    mkdir -p "$d/dst"
    in_role destinations "$lab" wan exec b1 -- "$bin" serve --root "$d/dst" --listen 10.77.0.101:7878 \
        --state-dir "$d/b1" --token-file "$work/token" 2>"$d/b1.log" &
    wait_log "$d/b1.log" "token in"
    echo "10.77.0.101:7878 $(sed -n 's/.*fingerprint //p' "$d/b1.log")" >"$d/kh"
    b0=$(busy); t0=$(date +%s.%N); r0=$(role_cpus)
    in_role client "$lab" wan exec a1 -- "$bin" cp -q --token-file "$work/token" --known-hosts "$d/kh" \
        "$work/src/run" hetch://10.77.0.101:7878/in/
    t1=$(date +%s.%N); b1=$(busy); r1=$(role_cpus)
    diff -rq "$work/src/run" "$d/dst/in/run" >/dev/null || { echo "cp: copy differs" >&2; exit 1; }
    pkill -f "$d" 2>/dev/null || true; sleep 0.5
    total=$(du -sb "$work/src/run" | cut -f1)
    python3 -c "import sys; s=float(sys.argv[2])-float(sys.argv[1]); print(1, f'{s:.2f}', f'{int(sys.argv[3])/s/1e6:.1f}', '-', 'cp', sys.argv[4])" \
        "$t0" "$t1" "$total" "$(cpu_cols "$b0" "$b1" "$r0" "$r1")"
    rm -rf "$d"
}
echo "hetch service scaling: $files x $size in units of $batch files ($units at once per worker), link $rate per host, RTT $rtt, $(nproc) CPUs"
results=()
for _ in $(seq "$runs"); do
    for n in $ns; do
        results+=("$(one "$n")")
        if [ -n "$kill_at" ] && [ "$n" -ge 2 ]; then results+=("$(one "$n" kill)"); fi
        if [ -n "$cp_too" ] && [ "$n" = 1 ]; then results+=("$(cp_one)"); fi
    done
done
[ -n "${ROLES_DIR:-}" ] && echo "CPU-s: the machine's busy time; ours: this run's processes (service + workers + destinations + job client or cp + link)"
printf '%s\n' "${results[@]}" | awk '
    { n[NR]=$1; s[NR]=$2; r[NR]=$3; f[NR]=$4; w[NR]=$5; m[NR]=$6; o[NR]=$7
      y[NR]=sprintf("svc %s wrk %s dst %s cli %s link %s", $8, $9, $10, $11, $12); x[NR]=""
      for (i = 13; i <= NF; i++) x[NR] = x[NR] " " $i
      if ($1 == 1 && $5 == "service") { one += $3; k++ } }
    END { base = k ? one / k : 0
          for (i = 1; i <= NR; i++)
              printf "N=%s %-7s %7.2f s  %7.1f MB/s  %5.2f x one pair (%4.2f of N x)  CPU-s machine %6.2f ours %6.2f (%s)  started after %s s%s\n",
                     n[i], w[i], s[i], r[i], base ? r[i] / base : 0, base ? r[i] / base / n[i] : 0, m[i], o[i], y[i], f[i], x[i] }'
