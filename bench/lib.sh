# bench/lib.sh: helpers shared by the benchmark scripts (sourced, not run). The caller
# sets BENCH (its name, for log lines) before sourcing, and META (the metadata file) and
# IDLE_WAIT (seconds, 0 = never wait) before calling meta / wait_idle.

# The script's own header comment, as its --help.
usage() { sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; }

log() { printf '[%s %s] %s\n' "$BENCH" "$(date +%T)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

meta() {   # meta KEY VALUE: one line of metadata for the report (newlines escaped)
    local k=$1 v=$2
    v=${v//\\/\\\\}; v=${v//$'\t'/\\t}; v=${v//$'\n'/\\n}
    printf '%s\t%s\n' "$k" "$v" >>"$META"
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_port() {   # wait_port PORT PID: until something listens on 127.0.0.1:PORT
    local port=$1 pid=$2 i
    for i in $(seq 1 200); do
        if ss -Hltn "sport = :$port" | grep -q .; then return 0; fi
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.05
    done
    return 1
}

CAN_DROP=1
[ -w /proc/sys/vm/drop_caches ] || CAN_DROP=0
drop_caches() {
    sync
    if [ "$CAN_DROP" = 1 ]; then echo 3 >/proc/sys/vm/drop_caches; fi
}

# What a starting `hetch serve` printed on stderr (its log): the server's fingerprint,
# and the token it wrote to the file it names.
serve_fingerprint() { sed -n 's/.*fingerprint \(sha256:[0-9a-f]*\).*/\1/p' "$1" | head -n 1; }
serve_token() { cat "$(sed -n 's/.*token in \(.*\)$/\1/p' "$1" | head -n 1)"; }

count_tree() {   # prints "FILES BYTES" of regular files under a path ("0 0" if missing)
    { find "$1" -type f -printf '%s\n' 2>/dev/null || true; } | awk '{n++; s+=$1} END {printf "%.0f %.0f\n", n, s}'
}

now() { printf '%s' "$EPOCHREALTIME"; }

cpu_busy() {   # percent of all CPUs busy (not idle, not iowait) over the next 0.5 s
    local a b
    a=$(head -n 1 /proc/stat)
    sleep 0.5
    b=$(head -n 1 /proc/stat)
    printf '%s\n%s\n' "$a" "$b" | awk '{ t = 0; for (i = 2; i <= NF; i++) t += $i; idle = $5 + $6;
        if (NR == 1) { t1 = t; i1 = idle } else { dt = t - t1; printf "%d\n", (dt > 0 ? 100 * (dt - (idle - i1)) / dt : 0) } }'
}

BUSY_RUNS=0
IDLE_WAITED=0
LAST_BUSY=""   # CPU busy % (all processes) just before the last timed run started
wait_idle() {   # let other users' bursts (builds) pass before a timed run
    local start=$SECONDS busy
    while :; do
        busy=$(cpu_busy)
        LAST_BUSY=$busy
        [ "$IDLE_WAIT" -gt 0 ] || break
        [ "$busy" -lt 25 ] && break
        if [ $((SECONDS - start)) -ge "$IDLE_WAIT" ]; then
            log "machine still busy (${busy}% CPU) after ${IDLE_WAIT}s: running anyway"
            BUSY_RUNS=$((BUSY_RUNS + 1))
            break
        fi
        sleep 1.5
    done
    IDLE_WAITED=$((IDLE_WAITED + SECONDS - start))
}

# push_once WHERE DST STATE OUT CP_ARGS...: one push (CP_ARGS end with the source) to a
# fresh `hetch serve` of DST, on the testbed (WHERE=wan: client in host a, server in host
# b) or on loopback; the cp's --json summary goes to OUT; prints the machine's CPU-seconds
# (both ends and everything else) over the push. Needs HETCH.
push_once() {
    local where=$1 dst=$2 state=$3 out=$4; shift 4
    local addr=127.0.0.1 spre="" cpre="" port pid fp tok c0 c1 slog
    if [ "$where" = wan ]; then addr=10.77.0.2 spre="ip netns exec hetch-b" cpre="ip netns exec hetch-a"; fi
    rm -rf "$dst" "$state"
    mkdir -p "$dst" "$state"
    slog=$state.serve.log
    port=$(free_port)
    # shellcheck disable=SC2086
    $spre "$HETCH" serve --root "$dst" --listen "$addr:$port" --state-dir "$state" 2>"$slog" &
    pid=$!
    for _ in $(seq 200); do grep -q 'token in' "$slog" && break; sleep 0.05; done
    grep -q 'token in' "$slog" || { cat "$slog" >&2; kill "$pid" 2>/dev/null; die "hetch serve did not start"; }
    fp=$(serve_fingerprint "$slog")
    tok=$(serve_token "$slog")
    c0=$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat)
    # shellcheck disable=SC2086
    if ! HETCH_TOKEN=$tok $cpre "$HETCH" cp -q --json --fingerprint "$fp" "$@" "hetch://$addr:$port/x" >"$out"; then
        kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
        die "hetch cp $* failed"
    fi
    c1=$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat)
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    awk -v a="$c0" -v b="$c1" 'BEGIN { printf "%.1f\n", (b - a) / 100 }'
}

# CPU per role: each role's processes (and everything they start) run in a cgroup of
# their own, so a run's CPU-seconds are told apart by role and are not mixed with other
# users' work on a shared machine (a build next door). cgroup v2, else v1's cpuacct;
# without either (no root, no cgroup fs) roles_init returns 1 and the callers fall back
# to the machine's busy time. roles_init DIR-NAME, then: in_role ROLE CMD..,
# role_cpu ROLE (CPU-seconds so far, also of its exited processes), roles_done.
roles_init() {
    if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
        ROLES_DIR=/sys/fs/cgroup/$1 ROLES_V=2
    elif [ -d /sys/fs/cgroup/cpuacct ]; then
        ROLES_DIR=/sys/fs/cgroup/cpuacct/$1 ROLES_V=1
    else
        return 1
    fi
    mkdir -p "$ROLES_DIR" 2>/dev/null || { ROLES_DIR=; return 1; }
}
in_role() {   # in_role ROLE CMD..: runs CMD in ROLE's cgroup (made on first use)
    local r=$1; shift
    [ -n "${ROLES_DIR:-}" ] || { "$@"; return; }
    mkdir -p "$ROLES_DIR/$r"
    sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$ROLES_DIR/$r" "$@"
}
role_cpu() {   # role_cpu ROLE: its CPU-seconds so far (0 for a role never used)
    local f=$ROLES_DIR/$1
    [ -n "${ROLES_DIR:-}" ] && [ -d "$f" ] || { echo 0; return; }
    if [ "$ROLES_V" = 2 ]; then
        awk '/^usage_usec/ { printf "%.2f\n", $2 / 1e6 }' "$f/cpu.stat"
    else
        awk '{ printf "%.2f\n", $1 / 1e9 }' "$f/cpuacct.usage"
    fi
}
roles_done() {   # removes the cgroups (their processes must have ended)
    [ -n "${ROLES_DIR:-}" ] || return 0
    local d
    for d in "$ROLES_DIR"/*/ "$ROLES_DIR"; do rmdir "$d" 2>/dev/null || true; done
}
