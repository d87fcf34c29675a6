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
