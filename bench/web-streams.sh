#!/usr/bin/env bash
# bench/web-streams.sh: what open browser tabs cost the transfer service. A service on
# loopback holding JOBS queued jobs and one running job (96 MB at 1 MB/s, run by one
# worker that takes one unit at a time, so the live snapshot changes every second
# throughout), then the service's CPU-seconds over SECONDS_EACH with no tab open and
# with TABS event streams (`GET /api/events`, as each tab of the web interface holds
# one), and what each stream received. The database is read once a second whatever
# the number of tabs; each stream costs its own serialization of what its caller may
# see.
#
# Usage: bench/web-streams.sh    (env: JOBS=100 TABS=8 SECONDS_EACH=30
#                                 NO_BUILD=1 to skip the build)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=web-streams
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
case "${1:-}" in -h|--help) usage; exit 0 ;; esac
JOBS=${JOBS:-100}
TABS=${TABS:-8}
SECONDS_EACH=${SECONDS_EACH:-30}
HETCH=$ROOT/target/release/hetch
[ -n "${NO_BUILD:-}" ] || (cd "$ROOT" && cargo build --release --quiet)

WORK=$(mktemp -d /tmp/hetch-web-streams.XXXX)
PIDS=()
cleanup() { kill "${PIDS[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

mkdir -p "$WORK/root/run"
for i in $(seq 1 50); do head -c 100000 /dev/urandom >"$WORK/root/run/f$i"; done
PORT=$(free_port)
"$HETCH" service --root "$WORK/root" --listen "127.0.0.1:$PORT" --state-dir "$WORK/state" \
    2>"$WORK/service.log" &
SERVICE=$!
PIDS+=("$SERVICE")
wait_port "$PORT" "$SERVICE" || die "the service did not start: $(cat "$WORK/service.log")"
TOKEN=$(cat "$WORK/state/token")
export HETCH_CONFIG_DIR=$WORK/config HETCH_TOKEN=$TOKEN HETCH_SERVICE=127.0.0.1:$PORT
mkdir -p "$WORK/root/big"
head -c 96000000 /dev/urandom >"$WORK/root/big/f"
for i in $(seq 1 "$JOBS"); do "$HETCH" job submit run "out$i" >/dev/null; done
"$HETCH" job submit --priority 100 --rate-limit 1M big outbig >/dev/null
"$HETCH" worker --root "$WORK/root" --name w1 --units 1 2>"$WORK/worker.log" &
PIDS+=("$!")
COOKIE=$(curl -sk -D - -o /dev/null -X POST -H "Sec-Fetch-Site: same-origin" \
    --data-urlencode "token=$TOKEN" "https://127.0.0.1:$PORT/login" |
    sed -n 's/^set-cookie: \([^;]*\).*/\1/p')
[ -n "$COOKIE" ] || die "no session cookie from /login"

ticks() { awk '{print $14 + $15}' "/proc/$SERVICE/stat"; }
measure() {   # measure LABEL: the service's CPU-seconds over SECONDS_EACH
    local a b
    a=$(ticks); sleep "$SECONDS_EACH"; b=$(ticks)
    printf '%-22s %6.2f CPU-s in %s s\n' "$1" "$(echo "($b - $a) / $(getconf CLK_TCK)" | bc -l)" \
        "$SECONDS_EACH"
}
log "$JOBS queued jobs and one running; $TABS tabs; $SECONDS_EACH s each"
sleep 3
measure "0 tabs"
for i in $(seq 1 "$TABS"); do
    curl -sk -N -H "Cookie: $COOKIE" "https://127.0.0.1:$PORT/api/events" >"$WORK/tab$i" 2>/dev/null &
    PIDS+=("$!")
done
sleep 2
measure "$TABS tabs"
printf 'per tab: %d snapshots, %d bytes\n' "$(grep -c '^event: snapshot' "$WORK/tab1")" \
    "$(stat -c %s "$WORK/tab1")"
"$HETCH" job ls --state running
